//! What a session's handle tells its actor ([`Op`]), and how a queued op is cancelled
//! ([`Ticket`]).

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::approval::Mode;
use crate::events::TurnId;
#[cfg(test)]
use crate::events::TurnUsage;
use crate::session_state::{Remember, RememberQueue};
use crate::side_task::SideTaskError;
use crate::slash::PromptInput;
#[cfg(test)]
use talaria_record::Transcript;

/// A copy of the session's state (the engine's tests read it).
#[cfg(test)]
#[derive(Debug, Clone)]
pub struct SessionSnapshot {
    pub transcript: Transcript,
    pub mode: Mode,
    pub model: String,
    pub usage: TurnUsage,
    pub cost: Option<f64>,
}

/// What a session is told to do.
#[derive(Debug)]
pub(crate) enum Op {
    /// A prompt (a slash command is expanded when its turn comes).
    Prompt {
        turn: TurnId,
        input: PromptInput,
        ticket: Ticket,
    },
    /// Compacts the context now (`/compact [focus]`); answered like a prompt.
    Compact {
        turn: TurnId,
        focus: Option<String>,
        ticket: Ticket,
    },
    /// A message for the running turn ([`crate::steering`]); with no turn running, it runs
    /// as a prompt tagged `turn` (or is refused, as `idle` says). Answered at once.
    Steer {
        turn: TurnId,
        input: crate::session::UserInput,
        idle: crate::steering::IdleSteer,
        ticket: Ticket,
        reply: oneshot::Sender<crate::steering::SteerOutcome>,
    },
    /// Moves the conversation back to a message, and with it, on request, the files
    /// ([`crate::rewind`]). Refused while a turn runs unless it asks to interrupt it.
    Rewind {
        request: crate::rewind::RewindRequest,
        reply: oneshot::Sender<crate::rewind::RewindOutcome>,
    },
    SetMode(Mode),
    SetModel(String),
    /// The thought level (`None`: the model's default), from the next model request on.
    SetEffort(Option<talaria_provider::Effort>),
    /// The client named the session (`session/set_title`): the generated title never
    /// replaces it.
    SetTitle(String),
    /// Remembers an approval decision (a turn asks, and waits for the file's save, so its
    /// next decision sees the rule).
    Remember(Remember),
    #[cfg(test)]
    Snapshot(oneshot::Sender<SessionSnapshot>),
    /// A background review ended.
    ReviewFinished(crate::review::ReviewOutcome),
    /// The title task beside the session ended: the model's answer, and what it used.
    TitleFinished {
        answer: Result<String, SideTaskError>,
        usage: crate::model_call::SessionUsage,
    },
    /// The session's unsaved entries were written (`true`), or never will be.
    SaveSettled(bool),
    /// Opening the store was tried once since the session started (or a moment passed).
    StoreTried,
    /// Ends the session after what is queued before it, once what it recorded is committed;
    /// answers when it is.
    Close(Option<oneshot::Sender<()>>),
}

/// How a queued prompt can be cancelled: the session's cancel epoch it was queued under (a
/// later `cancel` ends it), and its own request's token (the client withdrew that one
/// request). Its turn's token is a child of the epoch's and follows the request's.
#[derive(Debug, Clone)]
pub struct Ticket {
    epoch: CancellationToken,
    request: CancellationToken,
    /// The session's count of turns queued or running, this one included until every copy
    /// of the ticket is gone (the turn ended, or it was dropped unrun).
    _slot: std::sync::Arc<TurnSlot>,
}

/// A session holds at most about this many model, title, mode and thought-level sets not
/// yet read by its actor (it reads none while a `/compact` or a command's expansion runs);
/// the edge refuses more until it has read them.
pub const MAX_PENDING_SETS: usize = 256;

/// The session's op queue as its actor reads it: each set read is counted off the sets its
/// handles sent ([`MAX_PENDING_SETS`]; never below zero: the actor's own sets are read too).
pub(crate) struct OpInbox {
    pub(crate) receiver: mpsc::UnboundedReceiver<Op>,
    pub(crate) sets: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl OpInbox {
    /// The next op, `None` once every sender is gone.
    pub(crate) async fn recv(&mut self) -> Option<Op> {
        let op = self.receiver.recv().await?;
        if matches!(
            op,
            Op::SetMode(_) | Op::SetModel(_) | Op::SetEffort(_) | Op::SetTitle(_)
        ) {
            let _ = self.sets.fetch_update(
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
                |sent| sent.checked_sub(1),
            );
        }
        Some(op)
    }
}

/// One of a session's [`MAX_QUEUED_TURNS`]: given back when dropped.
#[derive(Debug)]
pub(crate) struct TurnSlot(std::sync::Arc<std::sync::atomic::AtomicUsize>);

/// A session holds at most this many turns queued or running (prompts, `/compact`s, steers
/// that start a turn); the edge refuses the next one until one ends. With it and
/// [`MAX_PENDING_SETS`] the op queue is bounded (sets read during a turn keep one of each).
pub const MAX_QUEUED_TURNS: usize = 64;

impl TurnSlot {
    /// A slot of `count`, or `None` when all [`MAX_QUEUED_TURNS`] are taken.
    pub(crate) fn take(count: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Option<Self> {
        use std::sync::atomic::Ordering;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |taken| {
                (taken < MAX_QUEUED_TURNS).then_some(taken + 1)
            })
            .ok()
            .map(|_| Self(count.clone()))
    }
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Ticket {
    /// A ticket holding one of the session's turn slots.
    pub(crate) fn new(
        epoch: CancellationToken,
        request: CancellationToken,
        slot: TurnSlot,
    ) -> Self {
        Self {
            epoch,
            request,
            _slot: std::sync::Arc::new(slot),
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.epoch.is_cancelled() || self.request.is_cancelled()
    }

    /// The running work of this ticket, or `None` when it was cancelled while queued (a
    /// later `cancel`, or its request withdrawn).
    pub(crate) fn start(&self) -> Option<Work> {
        if self.is_cancelled() {
            return None;
        }
        Some(Work {
            token: self.epoch.child_token(),
            request: self.request.clone(),
        })
    }
}

/// Running work: its token is a child of the ticket's epoch (a `cancel` reaches it at once)
/// and follows the ticket's request while [`Work::follow`] drives it.
pub(crate) struct Work {
    pub(crate) token: CancellationToken,
    request: CancellationToken,
}

impl Work {
    /// Drives `work`, cancelling the token when the request is withdrawn (the work still
    /// runs to its end, which a cancelled token makes short).
    pub(crate) async fn follow<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        tokio::pin!(work);
        tokio::select! {
            done = &mut work => done,
            () = self.request.cancelled() => {
                self.token.cancel();
                work.await
            }
        }
    }
}

/// A turn's "remember this decision" goes into the session's op queue, in order with the
/// rest (weak: a turn never keeps its session alive).
impl RememberQueue for mpsc::WeakUnboundedSender<Op> {
    fn queue(&self, remember: Remember) -> bool {
        self.upgrade()
            .is_some_and(|ops| ops.send(Op::Remember(remember)).is_ok())
    }

    fn switch_mode(&self, mode: crate::approval::Mode) -> bool {
        self.upgrade()
            .is_some_and(|ops| ops.send(Op::SetMode(mode)).is_ok())
    }
}

#[cfg(test)]
mod slot_tests {
    use super::*;

    #[test]
    fn a_session_gives_out_64_turn_slots_and_each_comes_back_when_its_last_copy_goes() {
        let count = std::sync::Arc::default();
        let mut held: Vec<TurnSlot> = (0..MAX_QUEUED_TURNS)
            .map(|_| TurnSlot::take(&count).expect("a slot"))
            .collect();
        assert!(TurnSlot::take(&count).is_none(), "a 65th slot");
        let ticket = Ticket::new(
            CancellationToken::new(),
            CancellationToken::new(),
            held.pop().expect("one"),
        );
        let copy = ticket.clone();
        drop(ticket);
        assert!(TurnSlot::take(&count).is_none(), "a copy still holds it");
        drop(copy);
        let again = TurnSlot::take(&count).expect("given back");
        assert!(TurnSlot::take(&count).is_none());
        drop((again, held));
        assert_eq!(count.load(std::sync::atomic::Ordering::Acquire), 0);
    }
}
