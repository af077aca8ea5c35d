//! The session's actor: it owns the session's state and serves its ops one at a time. Its
//! work is in rooms: `prompts` (prompts, commands, `/compact`), `turns` (a turn and what
//! arrives during it), `saving` (the journal and what the client is told of it), `titles`
//! and `learning` (counters and the background review).

mod hooking;
mod learning;
mod prompts;
pub(crate) mod rewinding;
mod saving;
mod titles;
mod turns;

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use talaria_record::{EntryBody, Transcript};
use talaria_tools::{Registry, SessionToolState};
use tokio::sync::{mpsc, watch};

use super::handle::SessionHandle;
#[cfg(test)]
use super::ops::SessionSnapshot;
use super::ops::{Op, OpInbox};
use super::settings::SessionStart;
use crate::approval::{Mode, RuleStore};
use crate::context::ContextState;
use crate::events::EngineEvent;
use crate::model_call::SessionUsage;
use crate::router::ModelRouter;
use crate::session_state::{ApprovalState, CancelEpochs, Published, SessionView};
use crate::settings::SessionSettings;
use crate::slash::SlashCommands;

/// The session's state, owned by its actor task.
struct SessionActor {
    settings: SessionSettings,
    router: Arc<ModelRouter>,
    registry: Registry,
    events: mpsc::Sender<EngineEvent>,
    history: Transcript,
    /// Mode, model and rules as the actor publishes them (it alone writes them).
    published: Published,
    /// What the session's turns read of them.
    approval: ApprovalState,
    model: String,
    tool_state: Arc<SessionToolState>,
    context: ContextState,
    usage: SessionUsage,
    used_tool_ids: HashSet<String>,
    epochs: CancelEpochs,
    /// Counters toward the review and the review running beside the session.
    learning: learning::LearningState,
    /// What `/name` prompts mean (the edge's commands).
    commands: Option<Arc<dyn SlashCommands>>,
    /// Ops that arrived during a turn and wait for it (the client's own requests, each
    /// waiting for its answer).
    waiting: VecDeque<Op>,
    /// The steers for the running turn.
    steering: crate::steering::SteerInbox,
    /// The path's messages as a rewind names them, up to entry `.1` (what a rewind that
    /// arrives during a turn is checked against before the turn is cancelled).
    message_points: (Vec<(String, String)>, talaria_record::EntryId),
    journal: Option<crate::journal::SessionJournal>,
    /// What the client was told about saving.
    saving: saving::SavingState,
    /// The session's title, and the task that asks a model for one.
    titles: titles::TitleState,
    /// The session's own op queue, for the review to report back (weak: it never keeps the
    /// session alive).
    own_ops: mpsc::WeakUnboundedSender<Op>,
    /// What the `SessionStart` hooks of a continued session said, for its next prompt.
    resumed_context: Option<String>,
    /// The call the next turn opens with instead of a model request (`/agent`).
    opening: Option<talaria_provider::ToolCallRequest>,
}

/// On a one-slot server, how long the user must pause before side work is sent.
const SIDE_WORK_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts a new, unsaved session actor on the current runtime (the engine's tests).
#[cfg(test)]
pub fn spawn_session(
    settings: SessionSettings,
    router: Arc<ModelRouter>,
    registry: Registry,
    events: mpsc::Sender<EngineEvent>,
) -> SessionHandle {
    spawn_session_with(settings, router, registry, events, SessionStart::default())
}

/// Starts a session actor with a given start: a record to continue, a journal to save to.
/// A record whose last turn did not finish (the process stopped) is marked interrupted.
pub fn spawn_session_with(
    settings: SessionSettings,
    router: Arc<ModelRouter>,
    registry: Registry,
    events: mpsc::Sender<EngineEvent>,
    start: SessionStart,
) -> SessionHandle {
    // Unbounded so the dispatch loop never waits on a session: one op per client request
    // (a prompt, a cancel, a mode); what arrives during a turn waits in `waiting`. Bounded
    // by the turns' slots and the unread sets (`MAX_QUEUED_TURNS`, `MAX_PENDING_SETS`).
    let (ops, receiver) = mpsc::unbounded_channel::<Op>();
    let view = watch::Sender::new(SessionView {
        mode: settings.mode,
        model: settings.model.clone(),
        effort: None,
    });
    let handle = SessionHandle {
        ops: ops.clone(),
        epochs: CancelEpochs::new(),
        view: view.subscribe(),
        turns: std::sync::Arc::default(),
        sets: std::sync::Arc::default(),
    };
    let inbox = OpInbox {
        receiver,
        sets: handle.sets.clone(),
    };
    let epochs = handle.epochs.clone();
    let own_ops = ops.downgrade();
    drop(ops);
    tokio::spawn(async move {
        let mut start = start;
        let (mut settings, mut registry) = (settings, registry);
        // The rules file is read off the runtime thread, while the server's window arrives.
        let (home, cwd) = (settings.home.clone(), settings.cwd.clone());
        let rules = tokio::task::spawn_blocking(move || RuleStore::load(&home, &cwd));
        let sizing = async {
            match start.sizing.take() {
                Some(pending) => Some(pending.arrived().await),
                None => None,
            }
        };
        let (rules, sizing) = tokio::join!(rules, sizing);
        let rules = rules.unwrap_or_else(|_| RuleStore::in_memory());
        if let Some(sizing) = sizing {
            settings.context_window = sizing.context_window;
            settings.single_slot = sizing.single_slot;
            settings.subagents = sizing.subagents;
            settings.system_prompt = sizing.system_prompt;
            registry = sizing.registry;
        }
        // A new session's SessionStart hooks speak in its system prompt; a continued one's
        // (`source: "resume"`) with its next prompt, so its recorded prompt stays as it was.
        let resumed_context = if start.history.is_none() {
            start_hooks(&mut settings, &events).await;
            None
        } else {
            resume_hooks(&settings, &events).await
        };
        let published = Published::new(view, rules);
        let parts = ActorParts {
            settings,
            router,
            registry,
            events,
            epochs,
            approval: published.approval_state(Arc::new(own_ops.clone())),
            published,
            own_ops,
        };
        let mut actor = SessionActor::new(parts, start);
        actor.resumed_context = resumed_context;
        actor.save();
        actor.tell_unsaved_at_start().await;
        actor.finish_cut_off_restores().await;
        actor.run(inbox).await;
    });
    handle
}

/// A new session's `SessionStart` hooks: what they add reaches its system prompt; their
/// messages and failures are told.
async fn start_hooks(settings: &mut SessionSettings, events: &mpsc::Sender<EngineEvent>) {
    let outcome = settings
        .hook_scope()
        .run(
            crate::hooks::HookEvent::SessionStart,
            serde_json::json!({"source": "startup"}),
            events,
        )
        .await;
    if !outcome.context.is_empty() {
        settings.system_prompt.push_str(&format!(
            "\n\n# From the user's SessionStart hooks\n\n{}",
            outcome.context.join("\n\n")
        ));
    }
}

/// A continued session's `SessionStart` hooks (`source: "resume"`): what they add, for its
/// next prompt; their messages and failures are told.
async fn resume_hooks(
    settings: &SessionSettings,
    events: &mpsc::Sender<EngineEvent>,
) -> Option<String> {
    let outcome = settings
        .hook_scope()
        .run(
            crate::hooks::HookEvent::SessionStart,
            serde_json::json!({"source": "resume"}),
            events,
        )
        .await;
    (!outcome.context.is_empty()).then(|| outcome.context.join("\n\n"))
}

/// What a session actor is built from, besides how it starts.
struct ActorParts {
    settings: SessionSettings,
    router: Arc<ModelRouter>,
    registry: Registry,
    events: mpsc::Sender<EngineEvent>,
    epochs: CancelEpochs,
    published: Published,
    approval: ApprovalState,
    own_ops: mpsc::WeakUnboundedSender<Op>,
}

impl SessionActor {
    fn new(parts: ActorParts, start: SessionStart) -> Self {
        let ActorParts {
            settings,
            router,
            mut registry,
            events,
            epochs,
            published,
            approval,
            own_ops,
        } = parts;
        let mut history = start.history.unwrap_or_else(|| {
            Transcript::with_system_and_environment(
                settings.system_prompt.clone(),
                settings.environment.clone(),
            )
        });
        history.close_cut_off_turn();
        if let Some(slots) = settings.subagents {
            let kit = crate::subagent::SubagentKit {
                settings: settings.clone(),
                router: router.clone(),
                registry: registry.clone(),
                approval: approval.clone(),
                events: events.clone(),
                slots: Arc::new(tokio::sync::Semaphore::new(slots.max(1))),
                children: std::sync::atomic::AtomicU64::new(0),
                journal: start.journal.as_ref().map(|j| j.journal.clone()),
            };
            registry.register(Arc::new(crate::subagent::DelegateTask(Arc::new(kit))));
        }
        SessionActor {
            history,
            journal: start.journal,
            saving: saving::SavingState {
                at_start: start.unsaved,
                ..saving::SavingState::default()
            },
            titles: titles::TitleState {
                title: start.title,
                task: None,
                by_client: false,
            },
            published,
            approval,
            model: settings.model.clone(),
            tool_state: Arc::new(SessionToolState::default()),
            context: ContextState::new(
                settings.context_window,
                settings.compression,
                settings.tokenizers.clone(),
                &settings.model,
            ),
            usage: SessionUsage::default(),
            used_tool_ids: HashSet::new(),
            learning: learning::LearningState::default(),
            own_ops,
            opening: None,
            waiting: VecDeque::new(),
            steering: crate::steering::SteerInbox::default(),
            message_points: (Vec::new(), 0),
            epochs,
            commands: start.commands,
            resumed_context: None,
            settings,
            router,
            registry,
            events,
        }
    }

    async fn run(mut self, mut receiver: OpInbox) {
        let mut closing = None;
        self.watch_store_opening();
        loop {
            let op = match self.waiting.pop_front() {
                Some(op) => op,
                None => match receiver.recv().await {
                    Some(op) => op,
                    None => break,
                },
            };
            match op {
                Op::Prompt {
                    turn,
                    input,
                    ticket,
                } => {
                    self.tell_store_once(false).await;
                    self.prompt_op(turn, input, ticket, &mut receiver).await;
                }
                Op::Compact {
                    turn,
                    focus,
                    ticket,
                } => {
                    self.tell_store_once(false).await;
                    self.compact(turn, focus, ticket).await;
                }
                Op::Steer {
                    turn,
                    input,
                    idle,
                    ticket,
                    reply,
                } => {
                    use crate::steering::{IdleSteer, SteerOutcome};
                    if idle == IdleSteer::PromptRequired {
                        let _ = reply.send(SteerOutcome::PromptRequired);
                        continue;
                    }
                    let _ = reply.send(SteerOutcome::StartedNewTurn);
                    self.tell_store_once(false).await;
                    let input = crate::slash::PromptInput::Typed(input);
                    self.prompt_op(turn, input, ticket, &mut receiver).await;
                }
                Op::Rewind { request, reply } => {
                    let _ = reply.send(self.rewind(request).await);
                }
                Op::SetMode(mode) => self.set_mode(mode),
                Op::SetModel(model) => self.set_model(model),
                Op::SetEffort(effort) => self.published.set_effort(effort),
                Op::SetTitle(title) => self.title_from_client(title).await,
                Op::Remember(remember) => {
                    let _ = remember
                        .done
                        .send(self.published.remember(&remember.scopes, remember.allow));
                }
                #[cfg(test)]
                Op::Snapshot(reply) => {
                    let _ = reply.send(self.snapshot());
                }
                Op::ReviewFinished(outcome) => self.review_finished(outcome).await,
                Op::TitleFinished { answer, usage } => self.title_finished(answer, usage).await,
                Op::SaveSettled(saved) => self.save_settled(saved).await,
                Op::StoreTried => self.tell_store_once(true).await,
                Op::Close(done) => {
                    closing = done;
                    break;
                }
            }
        }
        self.end_hooks(closing.is_some()).await;
        self.commit().await;
        if let Some(done) = closing {
            let _ = done.send(());
        }
        tracing::debug!(session = %self.settings.id, "session ended");
    }

    async fn notice(&self, level: crate::events::NoticeLevel, message: String) {
        let _ = self
            .events
            .send(EngineEvent::Notice { level, message })
            .await;
    }

    fn update_meta(&self, update: talaria_store::MetaUpdate) {
        if let Some(journal) = &self.journal {
            journal.update(update);
        }
    }

    fn set_mode(&mut self, mode: Mode) {
        let previous = self.published.set_mode(mode);
        if previous != mode {
            self.record_mode(mode);
            self.save();
        }
    }

    /// Records a mode change (between turns); entering or leaving plan mode is also told to
    /// the model, where it happened.
    pub(super) fn record_mode(&mut self, mode: Mode) {
        let before = self.recorded_mode();
        self.history.push(EntryBody::ModeChanged {
            mode: mode.id().into(),
        });
        // The note, unless the turn already told the model (a plan it handed over).
        if let Some(note) = crate::approval::mode_note(before, mode)
            && !self
                .history
                .entries()
                .iter()
                .rev()
                .take(64)
                .any(|e| matches!(&e.body, EntryBody::Nudge { text } if *text == note))
        {
            self.history.push(EntryBody::Nudge { text: note });
        }
        self.update_meta(talaria_store::MetaUpdate {
            mode: Some(mode.id().into()),
            ..Default::default()
        });
    }

    /// The mode the record says the session is in: its last change, else the start's.
    fn recorded_mode(&self) -> Mode {
        self.history
            .entries()
            .iter()
            .rev()
            .find_map(|e| match &e.body {
                EntryBody::ModeChanged { mode } => Mode::from_id(mode),
                _ => None,
            })
            .unwrap_or(self.settings.mode)
    }

    fn set_model(&mut self, model: String) {
        if model == self.model {
            return;
        }
        // The model line is in the environment (in the system prompt for records written
        // before it had one).
        let switch = |text: &str| crate::system_prompt::with_model(text, &self.model, &model);
        match self.history.environment().map(str::to_string) {
            Some(environment) => {
                let switched = switch(&environment);
                self.history.set_environment(switched);
            }
            None => {
                let prompt = self
                    .history
                    .entries()
                    .iter()
                    .find_map(|e| match &e.body {
                        EntryBody::System { text, .. } => Some(text.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                let switched = switch(&prompt);
                self.history.set_system_prompt(switched);
            }
        }
        self.history.push(EntryBody::ModelChanged {
            model: model.clone(),
        });
        self.save();
        self.update_meta(talaria_store::MetaUpdate {
            model: Some(model.clone()),
            ..Default::default()
        });
        self.context.set_model(&model);
        self.published.set_model(&model);
        self.model = model;
    }

    #[cfg(test)]
    fn snapshot(&self) -> SessionSnapshot {
        SessionSnapshot {
            transcript: self.history.clone(),
            mode: self.published.mode(),
            model: self.model.clone(),
            usage: self.usage.tokens,
            cost: self.usage.priced.then_some(self.usage.cost),
        }
    }
}
