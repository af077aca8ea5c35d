//! The session's settings as its actor publishes them: the edge, turns and subagents read
//! them through `watch`es; only the actor writes them, when an [`Op`] tells it to.
//!
//! Invariants:
//! - Mode, model and the remembered approval rules have one writer, the session's actor.
//!   A turn that wants a rule remembered asks the actor ([`Op::Remember`]) and waits until it
//!   is applied, so the next decision (its own or a subagent's) sees it.
//! - Cancellation is an epoch: every queued ticket holds the epoch's token; `cancel` ends the
//!   epoch (cancelling everything queued or running under it) and starts a fresh one.

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::approval::{Mode, RuleStore, Scope};

/// The settings a client can query without waiting on the actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub mode: Mode,
    pub model: String,
    /// The thought level the client chose (`None`: the model's default).
    pub effort: Option<talaria_provider::Effort>,
}

/// What a turn (and its subagents) read of the session's approval settings, and how they ask
/// the actor to remember a decision.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalState {
    view: watch::Receiver<SessionView>,
    rules: watch::Receiver<RuleStore>,
    /// Where decisions to remember go (the session's op queue).
    remember: std::sync::Arc<dyn RememberQueue>,
}

/// A decision to remember for these scopes; `done` answers with the rules file's save.
#[derive(Debug)]
pub(crate) struct Remember {
    pub scopes: Vec<Scope>,
    pub allow: bool,
    pub done: oneshot::Sender<Option<tokio::task::JoinHandle<()>>>,
}

/// Where a turn sends a decision to remember: the session's actor, which alone writes the
/// rules.
pub(crate) trait RememberQueue: Send + Sync + std::fmt::Debug {
    /// Queues `remember`; `false` when the session has ended.
    fn queue(&self, remember: Remember) -> bool;

    /// Queues a mode change the turn asks for (a plan approved); `false` when it cannot.
    fn switch_mode(&self, _mode: Mode) -> bool {
        false
    }
}

/// For work with no session to remember decisions in (the background review, whose policy
/// never asks).
#[derive(Debug)]
pub(crate) struct RememberNothing;

impl RememberQueue for RememberNothing {
    fn queue(&self, _: Remember) -> bool {
        false
    }
}

impl ApprovalState {
    pub(crate) fn new(
        view: watch::Receiver<SessionView>,
        rules: watch::Receiver<RuleStore>,
        remember: std::sync::Arc<dyn RememberQueue>,
    ) -> Self {
        Self {
            view,
            rules,
            remember,
        }
    }

    /// The approval mode now (a change applies to the next decision).
    pub(crate) fn mode(&self) -> Mode {
        self.view.borrow().mode
    }

    /// The session's model now (children without a model of their own follow a switch).
    pub(crate) fn model(&self) -> String {
        self.view.borrow().model.clone()
    }

    /// Asks the actor to switch the mode and waits (briefly) until it is published, so the
    /// next decision sees it; `false` when the session cannot switch.
    pub(crate) async fn switch_mode(&self, mode: Mode) -> bool {
        if !self.remember.switch_mode(mode) {
            return false;
        }
        let mut view = self.view.clone();
        let applied = view.wait_for(|v| v.mode == mode);
        tokio::time::timeout(std::time::Duration::from_secs(2), applied)
            .await
            .is_ok_and(|seen| seen.is_ok())
    }

    /// Reads the remembered rules.
    pub(crate) fn with_rules<R>(&self, read: impl FnOnce(&RuleStore) -> R) -> R {
        read(&self.rules.borrow())
    }

    /// Asks the actor to remember a decision for these scopes, and waits until it is applied
    /// and on disk. Without a session (it ended) there is nothing left to decide for.
    pub(crate) async fn remember(&self, scopes: Vec<Scope>, allow: bool) {
        let (done, applied) = oneshot::channel();
        if !self.remember.queue(Remember {
            scopes,
            allow,
            done,
        }) {
            return;
        }
        if let Ok(Some(saving)) = applied.await {
            let _ = saving.await;
        }
    }
}

/// The actor's side of the published settings.
#[derive(Debug)]
pub(crate) struct Published {
    pub view: watch::Sender<SessionView>,
    pub rules: watch::Sender<RuleStore>,
}

impl Published {
    pub(crate) fn new(view: watch::Sender<SessionView>, rules: RuleStore) -> Self {
        Self {
            view,
            rules: watch::Sender::new(rules),
        }
    }

    /// What a turn of this session reads.
    pub(crate) fn approval_state(
        &self,
        remember: std::sync::Arc<dyn RememberQueue>,
    ) -> ApprovalState {
        ApprovalState::new(self.view.subscribe(), self.rules.subscribe(), remember)
    }

    #[cfg(test)]
    pub(crate) fn mode(&self) -> Mode {
        self.view.borrow().mode
    }

    /// Sets the mode; returns the previous one.
    pub(crate) fn set_mode(&self, mode: Mode) -> Mode {
        let mut previous = mode;
        self.view
            .send_modify(|view| previous = std::mem::replace(&mut view.mode, mode));
        previous
    }

    pub(crate) fn set_model(&self, model: &str) {
        self.view.send_modify(|view| view.model = model.to_string());
    }

    pub(crate) fn set_effort(&self, effort: Option<talaria_provider::Effort>) {
        self.view.send_modify(|view| view.effort = effort);
    }

    /// Remembers a decision; the handle finishes when the rules file is written.
    pub(crate) fn remember(
        &self,
        scopes: &[Scope],
        allow: bool,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let mut saving = None;
        self.rules
            .send_modify(|rules| saving = rules.remember(scopes, allow));
        saving
    }
}

/// The session's cancel epochs, shared by its handles (the only writers) and read by the actor.
#[derive(Debug, Clone)]
pub(crate) struct CancelEpochs(std::sync::Arc<watch::Sender<CancellationToken>>);

impl CancelEpochs {
    pub(crate) fn new() -> Self {
        Self(std::sync::Arc::new(watch::Sender::new(
            CancellationToken::new(),
        )))
    }

    /// The current epoch's token: cancelled by the next `cancel`.
    pub(crate) fn current(&self) -> CancellationToken {
        self.0.borrow().clone()
    }

    /// Ends the current epoch: everything queued or running under it is cancelled.
    pub(crate) fn cancel(&self) {
        self.0.send_modify(|epoch| {
            epoch.cancel();
            *epoch = CancellationToken::new();
        });
    }
}
