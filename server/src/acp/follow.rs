//! Following a session another process runs on the same store (`_session/attach` as an
//! observer of a session not running in this one): the client is shown its record, then
//! each entry the store gets after it, as a load shows entries, read again every
//! [`POLL`]. Entry by entry (an answer appears once its entry is stored, not delta by delta),
//! without its questions (asked of the clients of the process that runs it) and without
//! control: control moves between processes as claims do (close it there, load it here).

use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Value, json};
use talaria_engine::Journal;
use talaria_protocol::acp::{self, RequestId, SessionNotification};
use talaria_protocol::{Peer, errors};
use talaria_record::{EntryId, Transcript};
use tokio_util::sync::CancellationToken;

use super::audience::{ATTACH_METHOD, ROSTER_KEY};
use super::state::{Agent, ClientCaps, Followed, Member, Reply, to_value};

/// How often the store is asked for a followed session's new entries.
const POLL: Duration = Duration::from_millis(250);

/// Every how many polls that found nothing new the store is asked whether the session was
/// deleted (about once a second: an idle follower's reads stay one per poll, mostly).
const DELETED_EVERY: u32 = 4;

/// The most entries read in one call.
const PAGE: usize = 256;

/// Follows session `id` of another process; answered once the record so far (with
/// `history`) is shown.
pub(super) fn follow(
    agent: &mut Agent,
    request: RequestId,
    id: String,
    history: bool,
) -> Option<Reply> {
    let known = agent.room.store().cloned();
    let slow = async move {
        let (opened, transcript) = crate::sessions::record_in_store(known, id.clone()).await?;
        Ok((id, history, opened, transcript))
    };
    agent.defer(
        request,
        ATTACH_METHOD,
        slow,
        |agent, (id, history, opened, transcript)| {
            if let Some(journal) = &opened {
                agent.room.adopt_store(journal);
            }
            let reply = start(agent, id, history, transcript);
            async move { reply }.boxed_local()
        },
    );
    None
}

fn start(agent: &mut Agent, id: String, history: bool, transcript: Transcript) -> Reply {
    let Some(journal) = agent.room.store().cloned() else {
        return Err(errors::unavailable("the session store is not open"));
    };
    let (shown, shown_rx) = tokio::sync::oneshot::channel();
    let member = super::state::member_of(agent);
    let counted = agent.room.live().mark_client(&id);
    let followed = Followed::start(&member, (&id, counted), journal, transcript, history, shown);
    agent.following.insert(id.clone(), followed);
    // The answer follows the record shown.
    agent.answer_after = Some(shown_rx);
    let mut meta = acp::Meta::new();
    meta.insert(
        ROSTER_KEY.into(),
        json!({"elsewhere": true, "controller": Value::Null}),
    );
    to_value(json!({
        "sessionId": id,
        "role": "observer",
        "clientId": format!("client-{}", agent.member),
        "_meta": meta,
    }))
}

impl Followed {
    /// Follows session `id` for `member` from the end of `so_far` (shown first when
    /// `history`; `shown` is told once it is), counted among its followers by `counted`.
    pub(super) fn start(
        member: &Member,
        (id, counted): (&str, crate::sessions::ClientMark),
        journal: Journal,
        so_far: Transcript,
        history: bool,
        shown: tokio::sync::oneshot::Sender<()>,
    ) -> Self {
        let stop = CancellationToken::new();
        let catch_up = CancellationToken::new();
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (caught, caught_up) = tokio::sync::oneshot::channel();
        let follower = Follower {
            peer: member.peer.clone(),
            caps: member.caps,
            session_id: acp::SessionId::new(id),
            journal,
            ended: ended.clone(),
            connection_told: member.followings_ended.clone(),
        };
        let ends = Ends {
            stop: stop.clone(),
            catch_up: catch_up.clone(),
            caught,
        };
        tokio::spawn(follower.run(so_far, history, shown, ends));
        Self {
            _stop: stop.drop_guard(),
            _counted: counted,
            catch_up,
            caught_up,
            ended,
        }
    }
}

/// Forgets what this client followed that turned out deleted (it was told): a session of
/// another process it followed, and a session handed from here that it followed there. Its
/// requests about the session then find none, as a fresh client's would.
#[cold]
#[inline(never)]
pub(super) fn forget_deleted(agent: &mut Agent) {
    agent.following.retain(|_, followed| !followed.has_ended());
    let member = agent.member;
    let deleted: Vec<String> = agent
        .sessions
        .iter()
        .filter(|(_, session)| session.audience.follows_a_deleted(member))
        .map(|(id, _)| id.clone())
        .collect();
    for id in deleted {
        drop(super::audience::left_behind(agent, &id));
    }
}

/// How a follower ends: stopped, or after one last read.
struct Ends {
    stop: CancellationToken,
    catch_up: CancellationToken,
    caught: tokio::sync::oneshot::Sender<Option<EntryId>>,
}

/// What follows one session for one client.
struct Follower {
    peer: Peer,
    caps: ClientCaps,
    session_id: acp::SessionId,
    journal: Journal,
    /// Set once the client is told the session was deleted.
    ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Its connection's flag: something it followed ended (`Member::followings_ended`).
    connection_told: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Follower {
    async fn run(
        self,
        so_far: Transcript,
        history: bool,
        shown: tokio::sync::oneshot::Sender<()>,
        ends: Ends,
    ) {
        if history {
            self.show_after(&so_far, None).await;
        }
        let _ = shown.send(());
        let mut last = so_far.entries().last().map(|e| e.id);
        let mut quiet_polls = 0u32;
        let gone = self.peer.closed();
        loop {
            let last_read = tokio::select! {
                () = ends.stop.cancelled() => return,
                // Its client's connection ended.
                () = gone.cancelled() => return,
                () = ends.catch_up.cancelled() => true,
                () = tokio::time::sleep(POLL) => false,
            };
            match self.entries_after(last).await {
                Ok(entries) if entries.is_empty() && !last_read => {
                    quiet_polls = quiet_polls.wrapping_add(1);
                    if quiet_polls.is_multiple_of(DELETED_EVERY) && self.was_deleted().await {
                        // Before the notice: any request the client sends once told finds
                        // no session.
                        self.ended.store(true, std::sync::atomic::Ordering::Release);
                        self.connection_told
                            .store(true, std::sync::atomic::Ordering::Release);
                        self.tell_deleted().await;
                        return;
                    }
                }
                Ok(entries) => {
                    quiet_polls = 0;
                    self.show(&entries).await;
                    last = entries.last().map(|e| e.id).or(last);
                }
                Err(error) => {
                    tracing::debug!(session = %self.session_id, "a followed session's record: {error}");
                }
            }
            if last_read {
                let _ = ends.caught.send(last);
                return;
            }
        }
    }

    /// Whether the session was deleted meanwhile (by the process running it, or by another
    /// once it was closed there); a store that cannot say now is asked again a second later.
    async fn was_deleted(&self) -> bool {
        let id = self.session_id.0.to_string();
        let asked = self.journal.call(move |store| store.was_deleted(&id)).await;
        asked.unwrap_or_else(|error| {
            tracing::debug!(session = %self.session_id, "is a followed session deleted: {error}");
            false
        })
    }

    /// Tells the client the session it followed was deleted and is followed no more:
    /// `_meta["talaria/attachment"].ended`.
    async fn tell_deleted(&self) {
        let roster = json!({
            "elsewhere": true,
            "controller": Value::Null,
            "clients": [],
            "ended": {
                "reason": "deleted",
                "message": "this session was deleted in the process that ran it, or after it \
                            was closed there: it is followed no more",
            },
        });
        let update = super::audience::roster_update(roster);
        let notification = SessionNotification::new(self.session_id.clone(), update);
        self.peer.notify("session/update", &notification).await;
    }

    /// The entries the store has after `last` (read a page at a time: a poll reads what is
    /// new, never the whole record again).
    async fn entries_after(
        &self,
        last: Option<EntryId>,
    ) -> Result<Vec<talaria_record::Entry>, talaria_store::StoreError> {
        let mut entries = Vec::new();
        let mut from = last.map_or(0, |last| last + 1);
        loop {
            let id = self.session_id.0.to_string();
            let page = self
                .journal
                .call(move |store| store.entries_around(&id, from, 0, PAGE - 1))
                .await?;
            let full = page.len() >= PAGE;
            if let Some(newest) = page.last() {
                from = newest.id + 1;
            }
            entries.extend(page);
            if !full {
                return Ok(entries);
            }
        }
    }

    /// Shows the entries of `transcript` after `last`.
    async fn show_after(&self, transcript: &Transcript, last: Option<EntryId>) {
        let newer: Vec<&talaria_record::Entry> = transcript
            .entries()
            .iter()
            .filter(|entry| last.is_none_or(|last| entry.id > last))
            .collect();
        self.show(newer).await;
    }

    /// Shows `entries`, in order.
    async fn show<'a>(&self, entries: impl IntoIterator<Item = &'a talaria_record::Entry>) {
        let (compaction, subagents) = (self.caps.compaction, self.caps.subagents);
        for entry in entries {
            for update in super::replay::entry_updates(entry, compaction, subagents) {
                let update = super::plan_updates::for_client(update, self.caps.plans);
                let notification = SessionNotification::new(self.session_id.clone(), update);
                self.peer.notify("session/update", &notification).await;
            }
        }
    }
}
