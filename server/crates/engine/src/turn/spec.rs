//! The one way to build a [`Turn`]: the prompt's turn, a subagent's and the review's differ
//! only in what their [`TurnSpec`] says (limits, approval, sink, steering and the session's
//! state, journal); everything else is filled in here, once.

use std::collections::HashSet;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use talaria_record::Transcript;
use talaria_tools::{Registry, SessionToolState};
use tokio::sync::mpsc;

use super::{Turn, TurnLimits};
use crate::events::EngineEvent;
use crate::journal::SessionJournal;
use crate::model_call::ModelCaller;
use crate::session_state::ApprovalState;
use crate::settings::SessionSettings;
use crate::steering::SteerInbox;

/// How one turn differs from the others.
pub(crate) struct TurnSpec<'a> {
    /// How many model requests it may make.
    pub max_requests: u32,
    /// How its calls are decided: the session's mode and rules, the parent's, the review's.
    pub approval: &'a ApprovalState,
    /// Where its events go: the chat, the parent's relay, nowhere.
    pub sink: &'a mpsc::Sender<EngineEvent>,
    /// The session it is the turn of: the client steers it, and it shares the session's tool
    /// state and call ids. `None`: a side turn (a subagent's, the review's), steered by no
    /// one, with state of its own.
    pub session: Option<SessionParts<'a>>,
    /// Where its record is saved as it grows (`None`: it is not saved).
    pub journal: Option<&'a mut SessionJournal>,
    /// Which side answered the file requests of the turn it works for (a subagent's
    /// parent's: the two are one turn's work on the same files); `None`: its own.
    pub file_sides: Option<talaria_tools::FileSides>,
}

/// What the session's own turn shares with the session.
pub(crate) struct SessionParts<'a> {
    /// The messages the client steers into the turn ([`crate::steering`]).
    pub steering: &'a SteerInbox,
    pub tool_state: &'a Arc<SessionToolState>,
    /// The call ids the session has used (a new call's id is unique among them).
    pub used_tool_ids: &'a mut HashSet<String>,
}

/// A part of a turn's state: the session's, or the turn's own (a side turn's, fresh).
pub(crate) enum Part<R, T> {
    Session(R),
    Own(T),
}

impl<T> Deref for Part<&T, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Part::Session(shared) => shared,
            Part::Own(own) => own,
        }
    }
}

impl<T> Deref for Part<&mut T, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Part::Session(shared) => shared,
            Part::Own(own) => own,
        }
    }
}

impl<T> DerefMut for Part<&mut T, T> {
    fn deref_mut(&mut self) -> &mut T {
        match self {
            Part::Session(shared) => shared,
            Part::Own(own) => own,
        }
    }
}

impl<'a> Turn<'a> {
    /// A turn over `history`, its model calls made by `caller` (whose cancel token is the
    /// turn's), as `spec` says.
    pub(crate) fn new(
        settings: &'a SessionSettings,
        registry: &'a Registry,
        history: &'a mut Transcript,
        caller: ModelCaller<'a>,
        spec: TurnSpec<'a>,
    ) -> Self {
        let (steering, tool_state, used_tool_ids) = match spec.session {
            Some(session) => (
                Part::Session(session.steering),
                Arc::clone(session.tool_state),
                Part::Session(session.used_tool_ids),
            ),
            None => (
                Part::Own(SteerInbox::default()),
                Arc::default(),
                Part::Own(HashSet::new()),
            ),
        };
        Turn {
            settings,
            limits: TurnLimits {
                max_requests: spec.max_requests,
                max_output_tokens: settings.max_output_tokens,
            },
            registry,
            approval: spec.approval,
            tool_state,
            events: spec.sink,
            cancel: caller.cancel,
            history,
            journal: spec.journal,
            used_tool_ids,
            kept: Vec::new(),
            caller,
            steering,
            opening: None,
            file_sides: spec.file_sides.unwrap_or_default(),
        }
    }
}
