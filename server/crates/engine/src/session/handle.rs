//! A handle to a running session: how the edge queues prompts, cancels, switches mode and
//! model, and closes it.

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

#[cfg(test)]
use super::ops::SessionSnapshot;
use super::ops::{MAX_PENDING_SETS, MAX_QUEUED_TURNS, Op, Ticket, TurnSlot};
use crate::approval::Mode;
use crate::events::TurnId;
use crate::session_state::{CancelEpochs, SessionView};
use crate::slash::PromptInput;

/// A handle to a running session. Dropping every handle ends the session after its queue.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    pub(super) ops: mpsc::UnboundedSender<Op>,
    pub(super) epochs: CancelEpochs,
    pub(super) view: watch::Receiver<SessionView>,
    /// Turns queued or running (see [`MAX_QUEUED_TURNS`]).
    pub(super) turns: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Sets sent and not yet read by the actor (see [`MAX_PENDING_SETS`]).
    pub(super) sets: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A turn slot held for a prompt about to be queued ([`SessionHandle::reserve`]).
#[derive(Debug)]
pub struct Room(TurnSlot);

/// Why a turn was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotQueued {
    /// The session has ended.
    #[error("the session has ended")]
    Ended(TurnId),
    /// [`MAX_QUEUED_TURNS`] are queued or running already.
    #[error(
        "the session already has {MAX_QUEUED_TURNS} prompts waiting or running; send more as \
         they end"
    )]
    Full(TurnId),
}

impl SessionHandle {
    /// Queues a prompt; it runs after every prompt queued before it. `cancel` cancels this
    /// prompt alone (its request was withdrawn).
    pub fn prompt(
        &self,
        turn: TurnId,
        cancel: CancellationToken,
        input: impl Into<PromptInput>,
    ) -> Result<(), NotQueued> {
        let room = self.reserve(&turn)?;
        self.prompt_in(room, turn, cancel, input)
    }

    /// One of the session's turn slots, taken before anything else of a prompt is done (a
    /// `/plan` switches the mode first, the prompt is shown to the other clients): so a
    /// refused prompt changes nothing. Given back if dropped unused.
    pub fn reserve(&self, turn: &TurnId) -> Result<Room, NotQueued> {
        TurnSlot::take(&self.turns)
            .map(Room)
            .ok_or_else(|| NotQueued::Full(turn.clone()))
    }

    /// Queues a prompt in the slot `room` holds (see [`Self::prompt`]).
    pub fn prompt_in(
        &self,
        room: Room,
        turn: TurnId,
        cancel: CancellationToken,
        input: impl Into<PromptInput>,
    ) -> Result<(), NotQueued> {
        self.queue_in(room, turn, cancel, |turn, ticket| Op::Prompt {
            turn,
            input: input.into(),
            ticket,
        })
    }

    /// Queues a turn's op in the slot `room` holds, with a ticket for the current cancel
    /// generation; `Err` when the session ended.
    fn queue_in(
        &self,
        Room(slot): Room,
        turn: TurnId,
        cancel: CancellationToken,
        op: impl FnOnce(TurnId, Ticket) -> Op,
    ) -> Result<(), NotQueued> {
        let ticket = Ticket::new(self.epochs.current(), cancel, slot);
        self.ops
            .send(op(turn.clone(), ticket))
            .map_err(|_| NotQueued::Ended(turn))
    }

    /// Steers `input` into the running turn; with none running it starts a turn tagged
    /// `turn` (answered by `TurnFinished` like a prompt's), or is refused when `idle` asks.
    pub async fn steer(
        &self,
        turn: TurnId,
        input: crate::session::UserInput,
        idle: crate::steering::IdleSteer,
    ) -> crate::steering::SteerOutcome {
        let (reply, outcome) = oneshot::channel();
        let queued = self.reserve(&turn).and_then(|room| {
            self.queue_in(room, turn, CancellationToken::new(), |turn, ticket| {
                Op::Steer {
                    turn,
                    input,
                    idle,
                    ticket,
                    reply,
                }
            })
        });
        match queued {
            Ok(()) => {}
            Err(NotQueued::Ended(_)) => return crate::steering::SteerOutcome::SessionEnded,
            Err(NotQueued::Full(_)) => return crate::steering::SteerOutcome::Full,
        }
        outcome
            .await
            .unwrap_or(crate::steering::SteerOutcome::SessionEnded)
    }

    /// Queues a compaction of the context (`/compact`) in the slot `room` holds, answered
    /// with `TurnFinished` like a prompt, in order with the prompts.
    pub fn compact(
        &self,
        room: Room,
        turn: TurnId,
        cancel: CancellationToken,
        focus: Option<String>,
    ) -> Result<(), NotQueued> {
        self.queue_in(room, turn, cancel, |turn, ticket| Op::Compact {
            turn,
            focus,
            ticket,
        })
    }

    /// Rewinds the conversation (and, on request, the files) to a message the client names.
    pub async fn rewind(
        &self,
        request: crate::rewind::RewindRequest,
    ) -> crate::rewind::RewindOutcome {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        if self.ops.send(Op::Rewind { request, reply }).is_err() {
            return crate::rewind::RewindOutcome::Refused("session_closed".into());
        }
        outcome
            .await
            .unwrap_or_else(|_| crate::rewind::RewindOutcome::Refused("session_closed".into()))
    }

    /// Whether [`MAX_PENDING_SETS`] sets wait for the actor: the edge refuses another.
    pub fn sets_full(&self) -> bool {
        self.sets.load(std::sync::atomic::Ordering::Acquire) >= MAX_PENDING_SETS
    }

    /// Sends a set, counted until the actor reads it.
    fn send_set(&self, op: Op) {
        self.sets.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _ = self.ops.send(op);
    }

    /// Cancels the running turn or side task and every prompt queued so far.
    pub fn cancel(&self) {
        self.epochs.cancel();
    }

    /// The current approval mode.
    pub fn mode(&self) -> Mode {
        self.view.borrow().mode
    }

    /// The model the next turn uses.
    pub fn model(&self) -> String {
        self.view.borrow().model.clone()
    }

    /// Switches the model; it applies from the next turn ([`Self::model`] says so once the
    /// session has taken the op).
    pub fn set_model(&self, model: &str) {
        self.send_set(Op::SetModel(model.to_string()));
    }

    /// The thought level the client chose (`None`: the model's default).
    pub fn effort(&self) -> Option<talaria_provider::Effort> {
        self.view.borrow().effort
    }

    /// Sets the thought level; it applies from the next turn.
    pub fn set_effort(&self, effort: Option<talaria_provider::Effort>) {
        self.send_set(Op::SetEffort(effort));
    }

    /// Names the session; a title the client set is never replaced by a generated one.
    pub fn set_title(&self, title: String) {
        self.send_set(Op::SetTitle(title));
    }

    /// Changes the approval mode; it applies to the next decision, also within a running turn.
    pub fn set_mode(&self, mode: Mode) {
        self.send_set(Op::SetMode(mode));
    }

    /// A copy of the session's state after the running turn (tests read the actor's state).
    #[cfg(test)]
    pub fn snapshot(&self) -> oneshot::Receiver<SessionSnapshot> {
        let (reply, answer) = oneshot::channel();
        let _ = self.ops.send(Op::Snapshot(reply));
        answer
    }

    /// Ends the session once what is queued has run (cancel first to stop it now).
    pub fn close(&self) {
        let _ = self.ops.send(Op::Close(None));
    }

    /// Ends the session and waits until everything it recorded is committed (or the store
    /// refused it, which the session has told its client).
    pub async fn close_and_wait(&self) {
        let (done, closed) = oneshot::channel();
        if self.ops.send(Op::Close(Some(done))).is_ok() {
            let _ = closed.await;
        }
    }
}
