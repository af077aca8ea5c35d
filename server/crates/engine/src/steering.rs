//! Steering: messages a client sends into a running turn (`_session/steering` at the edge).
//! The session's actor puts each one in the turn's inbox as it arrives; the turn takes them
//! at its next safe boundary — before its next model request (after the calls already
//! running finish, never cutting one), or at once while the model streams text, whose
//! request is then ended with what streamed kept.
//!
//! Invariants:
//! - A steer the inbox accepted is never lost: it enters a model request of the turn, or,
//!   when the turn ends first (cancelled, out of requests), the record, in order.
//! - A steer is answered `injected` only once it is in the record and that is committed or
//!   spooled (as a prompt's answer is): entered as a user message at a safe step, or, while
//!   the turn cannot take it (calls run, a permission question waits), recorded at once as
//!   waiting (`EntryBody::SteerWaiting`), which a load after a kill enters. The turn never
//!   waits for the store for it: the answer is sent by a task of its own.
//! - A model request is cut for a steer only while no tool call of its answer has started.

use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::settings::UserInput;

/// What a client asked for when no turn is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdleSteer {
    /// The message runs as a prompt of its own (the contract's default).
    #[default]
    StartTurn,
    /// The client sends a prompt itself; the steer is refused.
    PromptRequired,
}

/// What became of a steer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerOutcome {
    /// The running turn took it.
    Injected,
    /// No turn was running: it started one.
    StartedNewTurn,
    /// No turn was running and the client wanted to be told so.
    PromptRequired,
    /// The session ended before it could take it.
    SessionEnded,
    /// The session holds its most turns queued or running already
    /// ([`crate::MAX_QUEUED_TURNS`]).
    Full,
}

/// The running turn's inbox of steers (the actor fills it, the turn empties it).
#[derive(Debug, Default)]
pub(crate) struct SteerInbox {
    inner: Mutex<Inbox>,
    /// Told when a steer arrives (the turn records it while its calls run).
    arrived: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Inbox {
    pending: Vec<Steer>,
    /// Ends the model request in flight when a steer arrives (`None`: nothing may be cut).
    cut: Option<CancellationToken>,
}

/// A steer the turn has not taken yet.
#[derive(Debug)]
pub(crate) struct Steer {
    pub input: UserInput,
    /// Its `SteerWaiting` marker in the record, once it was recorded so.
    pub marker: Option<talaria_record::EntryId>,
    /// Answered once it is in the record and that is saved (or spooled).
    pub reply: Option<tokio::sync::oneshot::Sender<SteerOutcome>>,
}

impl SteerInbox {
    fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a steer, answered once it is recorded; a model request that may be cut is
    /// ended.
    pub(crate) fn push(
        &self,
        input: UserInput,
        reply: Option<tokio::sync::oneshot::Sender<SteerOutcome>>,
    ) {
        let mut inbox = self.inbox();
        inbox.pending.push(Steer {
            input,
            marker: None,
            reply,
        });
        if let Some(cut) = inbox.cut.take() {
            cut.cancel();
        }
        drop(inbox);
        self.arrived.notify_one();
    }

    /// The steers waiting, oldest first; the inbox is empty after.
    pub(crate) fn take(&self) -> Vec<Steer> {
        std::mem::take(&mut self.inbox().pending)
    }

    /// Resolves when a steer arrives (at once if one arrived since the last time).
    pub(crate) async fn arrived(&self) {
        self.arrived.notified().await;
    }

    /// Records each waiting steer that has no marker yet with `record` (its marker's id);
    /// the answers now due, taken out.
    pub(crate) fn mark(
        &self,
        mut record: impl FnMut(&UserInput) -> talaria_record::EntryId,
    ) -> Vec<tokio::sync::oneshot::Sender<SteerOutcome>> {
        let mut inbox = self.inbox();
        let mut replies = Vec::new();
        for steer in inbox.pending.iter_mut().filter(|s| s.marker.is_none()) {
            steer.marker = Some(record(&steer.input));
            replies.extend(steer.reply.take());
        }
        replies
    }

    /// Whether a steer waits.
    pub(crate) fn has_pending(&self) -> bool {
        !self.inbox().pending.is_empty()
    }

    /// A token the next steer cancels (a child of the turn's, so a cancel ends it too).
    pub(crate) fn arm(&self, turn: &CancellationToken) -> CancellationToken {
        let cut = turn.child_token();
        let mut inbox = self.inbox();
        if inbox.pending.is_empty() {
            inbox.cut = Some(cut.clone());
        } else {
            cut.cancel();
        }
        cut
    }

    /// Nothing may be cut any more (the request ended).
    pub(crate) fn disarm(&self) {
        self.inbox().cut = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steer_cuts_the_armed_request_once_and_waits_in_order() {
        let inbox = SteerInbox::default();
        let turn = CancellationToken::new();
        let cut = inbox.arm(&turn);
        assert!(!cut.is_cancelled());
        inbox.push(UserInput::text("one"), None);
        assert!(cut.is_cancelled(), "the request in flight is ended");
        inbox.push(UserInput::text("two"), None);
        assert!(inbox.has_pending());
        let taken: Vec<String> = inbox
            .take()
            .iter()
            .map(|steer| format!("{:?}", steer.input.model_view))
            .collect();
        assert_eq!(taken.len(), 2);
        assert!(taken[0].contains("one") && taken[1].contains("two"));
        assert!(!inbox.has_pending());
        inbox.disarm();
        let next = inbox.arm(&turn);
        inbox.disarm();
        inbox.push(UserInput::text("three"), None);
        assert!(!next.is_cancelled(), "a disarmed request is never cut");
        assert!(!turn.is_cancelled(), "a cut is not a cancel");
    }

    #[test]
    fn arming_with_a_steer_waiting_cuts_at_once_and_a_cancel_reaches_the_cut() {
        let inbox = SteerInbox::default();
        let turn = CancellationToken::new();
        inbox.push(UserInput::text("early"), None);
        assert!(inbox.arm(&turn).is_cancelled());
        inbox.take();
        let cut = inbox.arm(&turn);
        turn.cancel();
        assert!(cut.is_cancelled());
    }
}
