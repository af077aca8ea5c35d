//! Handing a session to another process (the running side of a cross-process take-over): a
//! client of another `talaria serve` on the same store asked for control of a session running
//! here (`take_over.rs` writes the ask into the store). One watcher per process reads the asks
//! for its sessions every [`POLL`]; for each, the session stops taking prompts here, its clients
//! are told who asked, the running turn (if any) ends as usual, then the session closes here
//! (saved, its claim released) and each of its clients goes on following it in the other
//! process, as an observer. An ask withdrawn before the turn ends leaves the session here.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use talaria_engine::Journal;

use super::audience::roster_update;
use super::state::{Agent, EdgePayload, EdgeUpdates, Followed, LiveSession};
use crate::sessions::{Closing, LiveSessions};

/// How often a process reads the asks for its sessions.
const POLL: Duration = Duration::from_millis(500);

/// Starts the process's watcher with its first session, in a process serving many
/// connections (a stdio process keeps its session: an ask for it is never answered).
pub(super) fn watch_once(agent: &Agent) {
    if agent.room.transport().is_some() && agent.room.live().first_watch() {
        tokio::spawn(watch(agent.room.live().clone()));
    }
}

async fn watch(live: LiveSessions) {
    let mut handing: HashSet<String> = HashSet::new();
    loop {
        tokio::time::sleep(POLL).await;
        let running = live.all::<LiveSession>();
        let Some(journal) = running.iter().find_map(|(_, s)| s.journal.clone()) else {
            continue;
        };
        let ids: Vec<String> = running.iter().map(|(id, _)| id.clone()).collect();
        handing.retain(|id| ids.contains(id));
        let asked = match journal.call(move |store| store.asked_for(&ids)).await {
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
            if handing.insert(id.clone()) {
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
        let audience = &self.session.audience;
        if !audience.begin_move() {
            return;
        }
        self.tell(Some("moving"));
        if !self.idle_while_asked().await {
            audience.cancel_move();
            self.tell(None);
            tracing::info!(session = %self.id, "the ask was withdrawn: the session stays here");
            return;
        }
        self.tell(Some("moved"));
        self.live.withdraw(&self.id);
        Closing {
            handle: self.session.handle.clone(),
            journal: Some(self.journal.clone()),
            id: self.id.clone(),
        }
        .run()
        .await;
        self.session.audience.moved();
        tracing::info!(session = %self.id, to = %self.by, "session handed to another process");
        self.follow_there().await;
    }

    /// Waits for the running turn to end; `false` when the ask is withdrawn first.
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
            let ids = vec![self.id.clone()];
            let still = self.journal.call(move |store| store.asked_for(&ids)).await;
            if still.is_ok_and(|asked| asked.is_empty()) {
                return false;
            }
        }
    }

    /// Tells every client where the session stands: being handed over, handed over (to
    /// whom), or (`None`) staying here after all.
    fn tell(&self, state: Option<&str>) {
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
        self.session.write_later(roster_update(roster));
    }

    /// Each client still attached follows the session where it now runs, from what it saw.
    async fn follow_there(&self) {
        let read = crate::sessions::record_in_store(Some(self.journal.clone()), self.id.clone());
        let so_far = match read.await {
            Ok((_, transcript)) => transcript,
            Err(error) => {
                tracing::warn!(session = %self.id, "cannot follow it after the handover: {error}");
                return;
            }
        };
        let audience = &self.session.audience;
        for member in audience.members() {
            let (shown, _) = tokio::sync::oneshot::channel();
            let journal = self.journal.clone();
            let followed =
                Followed::start(&member, &self.id, journal, so_far.clone(), false, shown);
            audience.follow_elsewhere(member.id, followed);
        }
    }
}
