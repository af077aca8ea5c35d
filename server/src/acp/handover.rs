//! Handing a session to another process (the running side of a cross-process take-over): a
//! client of another `talaria serve` on the same store asked for control of a session running
//! here (`take_over.rs` writes the ask into the store and renews it while it waits). One
//! watcher per process reads the fresh asks for its sessions every [`POLL`]; for each, the
//! session starts no new turn here, its clients are told who asked, the running turn (if any)
//! ends as usual, then — only if the asker renewed its ask just now, so is alive — the session
//! closes here (committed, its record read, its claim released), its clients are told it moved
//! and each goes on following it in the other process from that record, as an observer. An ask
//! that lapses first (withdrawn, or its asker gone) leaves the session here.

use std::time::Duration;

use serde_json::Value;
use talaria_engine::Journal;

use super::audience::roster_update;
use super::state::{Agent, EdgePayload, EdgeUpdates, Followed, LiveSession};
use crate::sessions::{Closing, LiveSessions};

/// How often a process reads the asks for its sessions.
const POLL: Duration = Duration::from_millis(500);

/// An ask renewed this recently has a living asker (it renews every 250 ms): the session
/// closes here only for one.
const JUST_RENEWED_MS: i64 = 750;

/// Starts the process's watcher with its first session, in a process serving many
/// connections (a stdio process keeps its session: an ask for it is never answered).
pub(super) fn watch_once(agent: &Agent) {
    if agent.room.transport().is_some() && agent.room.live().first_watch() {
        tokio::spawn(watch(agent.room.live().clone()));
    }
}

async fn watch(live: LiveSessions) {
    loop {
        tokio::time::sleep(POLL).await;
        let running = live.all::<LiveSession>();
        let Some(journal) = running.iter().find_map(|(_, s)| s.journal.clone()) else {
            continue;
        };
        let ids: Vec<String> = running.iter().map(|(id, _)| id.clone()).collect();
        let asked = match journal
            .call(move |store| store.asked_for(&ids, talaria_store::ASK_FRESH_MS))
            .await
        {
            Ok(asked) => asked,
            Err(error) => {
                tracing::debug!("the asks for this process's sessions: {error}");
                continue;
            }
        };
        for (id, by) in asked {
            let Some((_, session)) = running.iter().find(|(running, _)| *running == id) else {
                continue;
            };
            // One handover at a time per session (`begin_move`); a later ask after one
            // was withdrawn starts another.
            if session.audience.begin_move() {
                let handover = Handover {
                    live: live.clone(),
                    session: (**session).clone(),
                    journal: journal.clone(),
                    id,
                    by,
                };
                tokio::spawn(handover.run());
            }
        }
    }
}

struct Handover {
    live: LiveSessions,
    session: LiveSession,
    journal: Journal,
    id: String,
    by: String,
}

impl Handover {
    async fn run(self) {
        // Counted as a client of this process following it (a delete here is refused) from
        // the ask until its clients follow it there, or it stays.
        let _handing_over = self.live.mark_client(&self.id);
        self.tell(Some("moving"));
        // Its asker must be alive when the session closes: an ask renewed just now.
        if !self.idle_while_asked().await || !self.still_asked(JUST_RENEWED_MS).await {
            self.session.audience.cancel_move();
            self.tell(None);
            tracing::info!(session = %self.id, "the ask lapsed: the session stays here");
            return;
        }
        self.live.withdraw(&self.id);
        // Everything it recorded committed, read while it is still held here: the point
        // its clients follow on from (what the other process writes comes after it).
        self.session.handle.close_and_wait().await;
        let so_far = crate::sessions::record_of_open(self.journal.clone(), &self.id).await;
        Closing {
            handle: self.session.handle.clone(),
            journal: Some(self.journal.clone()),
            id: self.id.clone(),
        }
        .run()
        .await;
        self.session.audience.moved();
        tracing::info!(session = %self.id, to = %self.by, "session handed to another process");
        self.tell_moved().await;
        match so_far {
            Ok(so_far) => self.follow_there(&so_far),
            Err(error) => {
                tracing::warn!(session = %self.id, "cannot follow it after the handover: {error}");
            }
        }
    }

    /// Waits for the running turn to end; `false` when the ask lapses first (withdrawn, or
    /// its asker stopped renewing it).
    async fn idle_while_asked(&self) -> bool {
        let (told, mut idle) = tokio::sync::oneshot::channel();
        let _ = self.session.updates.send(EdgeUpdates {
            updates: EdgePayload::WhenIdle(told),
            written: None,
            outcome: None,
        });
        loop {
            tokio::select! {
                ended = &mut idle => return ended.is_ok(),
                () = tokio::time::sleep(POLL) => {}
            }
            if !self.still_asked(talaria_store::ASK_FRESH_MS).await {
                return false;
            }
        }
    }

    /// Whether the ask still stands, by the same asker, renewed within `within_ms`.
    async fn still_asked(&self, within_ms: i64) -> bool {
        let ids = vec![self.id.clone()];
        let asked = self
            .journal
            .call(move |store| store.asked_for(&ids, within_ms))
            .await;
        asked.is_ok_and(|asked| asked.iter().any(|(_, by)| *by == self.by))
    }

    /// The roster with where the handover stands (`None`: the session stays here).
    fn roster(&self, state: Option<&str>) -> Value {
        let mut roster = self.session.audience.roster();
        if let Some(state) = state {
            let to =
                serde_json::from_str::<Value>(&self.by).unwrap_or_else(|_| self.by.clone().into());
            roster["handover"] = serde_json::json!({"state": state, "to": to});
            roster["elsewhere"] = Value::Bool(state == "moved");
            if state == "moved" {
                roster["controller"] = Value::Null;
                for client in roster["clients"].as_array_mut().into_iter().flatten() {
                    client["role"] = "observer".into();
                }
            }
        }
        roster
    }

    /// Tells every client, through the session's writer, that it is being handed over, or
    /// (`None`) that it stays here after all.
    fn tell(&self, state: Option<&str>) {
        self.session.write_later(roster_update(self.roster(state)));
    }

    /// Tells every client it was handed over (its writer has ended with it: told directly).
    async fn tell_moved(&self) {
        let update = roster_update(self.roster(Some("moved")));
        let session_id = talaria_protocol::acp::SessionId::new(self.id.clone());
        let told = talaria_protocol::acp::SessionNotification::new(session_id, update);
        for member in self.session.audience.members() {
            member.peer.notify("session/update", &told).await;
        }
    }

    /// Each client still attached follows the session where it now runs, from `so_far`.
    fn follow_there(&self, so_far: &talaria_record::Transcript) {
        let audience = &self.session.audience;
        for member in audience.members() {
            let (shown, _) = tokio::sync::oneshot::channel();
            let journal = self.journal.clone();
            let counted = self.live.mark_client(&self.id);
            let place = (self.id.as_str(), counted);
            let followed = Followed::start(&member, place, journal, so_far.clone(), false, shown);
            audience.follow_elsewhere(member.id, followed);
        }
    }
}
