//! One actor per session. The actor owns the session's state (the record, mode, model,
//! remembered rules, tool state, usage) and receives [`Op`]s through its [`SessionHandle`];
//! it emits one stream of [`EngineEvent`]s.
//!
//! Invariants:
//! - At most one turn of a session runs at a time; prompts run in arrival order, never
//!   interleaved. Side tasks and snapshots wait for the running turn.
//! - A mode change applies to the next decision, also within a running turn; a model change
//!   applies from the next model call after the current turn. Both are recorded as markers.
//! - `cancel` ends the running turn (or side task) and every prompt queued before it; each of
//!   them still finishes with [`EngineEvent::TurnFinished`] (`Cancelled`). Prompts sent after
//!   the cancel run normally. Cancellation bypasses the queue so it is immediate.
//! - Every prompt gets exactly one `TurnFinished`, even if the turn panics; a failed or
//!   panicked turn stays in the record, interrupted.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::FutureExt;
use talaria_record::{EntryBody, InputBlock, Transcript, UserPart};
use talaria_tools::{Registry, SessionToolState};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::approval::{Mode, RuleStore};
use crate::config::RetryPolicy;
use crate::context::ContextState;
use crate::events::{EngineEvent, StopReason, TurnError, TurnId, TurnUsage};
use crate::model_call::{ModelCaller, SessionUsage};
use crate::router::ModelRouter;
pub use crate::session_state::SessionView;
use crate::session_state::{ApprovalState, CancelEpochs, Published};
pub use crate::side_task::SideTaskError;
use crate::slash::{CommandReply, Expansion, PromptInput, SlashCommand, SlashCommands};
use crate::turn::{Turn, TurnLimits};

/// What a session needs to know about itself.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub id: String,
    pub cwd: PathBuf,
    pub model: String,
    /// The stable instructions (identity, skill index, memory snapshot, project files).
    pub system_prompt: String,
    /// The volatile environment the model reads after them (directory, date, model, files).
    pub environment: String,
    pub context_window: u64,
    /// Retries and backoff for model calls.
    pub retry: RetryPolicy,
    pub max_turn_requests: u32,
    pub max_output_tokens: Option<u32>,
    /// `TALARIA_HOME`: remembered permissions and stored oversized results live here.
    pub home: PathBuf,
    /// Workspace roots: the cwd plus additional directories. Edits outside them ask.
    pub roots: Vec<PathBuf>,
    /// The approval mode the session starts in.
    pub mode: Mode,
    /// Which reads are of secrets, and how they are treated.
    pub secrets: crate::approval::SecretReads,
    /// Which work the client does (its file buffers, its terminals).
    pub delegation: crate::client::Delegation,
    /// Title the session with a model after its first turn (else: the first prompt's line).
    pub titles: bool,
    /// The model server serves one request at a time (a local server): side work waits while
    /// the user is active, and gives way when a prompt arrives.
    pub single_slot: bool,
    /// Nudge the model once per turn when it announces an action without taking it.
    pub nudges: bool,
    /// A turn that edited files and ran nothing is asked once to run the project's check.
    pub verify_after_edits: bool,
    /// When and how the context is compacted.
    pub compression: talaria_compress::Settings,
    /// Token encodings configured per model.
    pub tokenizers: Arc<std::collections::HashMap<String, talaria_compress::Encoding>>,
    /// When the background review runs.
    pub learning: crate::config::Learning,
    /// The review's skill and memory tools; `None` turns the review off.
    pub review: Option<crate::review::ReviewFactory>,
    /// Subagents running at once through `delegate_task`; `None` offers no delegation.
    pub subagents: Option<usize>,
    /// The client shows subagents as sessions of their own (else on the parent's cards).
    pub announce_subagents: bool,
    /// The model takes images: those tool results carry reach it (else only their mention).
    pub images: bool,
    /// How the session's commands start: the OS sandbox, the clean environment, the private
    /// temporary directory (shared with its subagents).
    pub shell: Arc<talaria_tools::shell::Shell>,
}

/// What the user sent: as received (kept in the record) and as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInput {
    pub blocks: Vec<InputBlock>,
    pub model_view: Vec<UserPart>,
}

impl UserInput {
    /// Plain text, as both.
    pub fn text(text: &str) -> Self {
        Self {
            blocks: vec![InputBlock::Text { text: text.into() }],
            model_view: vec![UserPart::text(text)],
        }
    }
}

/// A model call on the session's behalf that does not stream into the chat (a title, a
/// summary, a review): routed to `[auxiliary.<task>]` when configured, else the session's
/// model; its usage counts in the session's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SideRequest {
    /// The kind of task (`title`, `compression`, `review`, …): picks the auxiliary model.
    pub task: String,
    /// The system prompt when not working on the session's history.
    pub system: String,
    /// The instruction, sent as a user message.
    pub prompt: String,
    /// Work on a copy of the session's record (same system prompt, so a provider's prompt
    /// cache is reused) instead of a fresh one.
    pub with_history: bool,
    pub max_tokens: Option<u32>,
}

/// What a side task produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SideAnswer {
    pub text: String,
    pub usage: TurnUsage,
    /// Recovery steps taken (retries, fallbacks), for the caller to report its own way.
    pub notices: Vec<String>,
}

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
    SetMode(Mode),
    SetModel(String),
    /// Remembers an approval decision for these scopes (a turn asks, and waits on `done` for
    /// the file's save, so its next decision sees the rule).
    Remember {
        scopes: Vec<crate::approval::Scope>,
        allow: bool,
        done: oneshot::Sender<Option<tokio::task::JoinHandle<()>>>,
    },
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
}

impl Ticket {
    fn is_cancelled(&self) -> bool {
        self.epoch.is_cancelled() || self.request.is_cancelled()
    }
}

/// Running work: its token is a child of the ticket's epoch (a `cancel` reaches it at once)
/// and follows the ticket's request while [`Work::follow`] drives it.
struct Work {
    token: CancellationToken,
    request: CancellationToken,
}

impl Work {
    /// Drives `work`, cancelling the token when the request is withdrawn (the work still
    /// runs to its end, which a cancelled token makes short).
    async fn follow<T>(&self, work: impl std::future::Future<Output = T>) -> T {
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

/// A handle to a running session. Dropping every handle ends the session after its queue.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    ops: mpsc::UnboundedSender<Op>,
    epochs: CancelEpochs,
    view: watch::Receiver<SessionView>,
}

impl SessionHandle {
    /// Queues a prompt; it runs after every prompt queued before it. `cancel` cancels this
    /// prompt alone (its request was withdrawn).
    pub fn prompt(
        &self,
        turn: TurnId,
        cancel: CancellationToken,
        input: impl Into<PromptInput>,
    ) -> Result<(), TurnId> {
        self.queue(turn, cancel, |turn, ticket| Op::Prompt {
            turn,
            input: input.into(),
            ticket,
        })
    }

    /// Queues an op with a ticket for the current cancel generation; `Err` when the session
    /// ended.
    fn queue(
        &self,
        turn: TurnId,
        cancel: CancellationToken,
        op: impl FnOnce(TurnId, Ticket) -> Op,
    ) -> Result<(), TurnId> {
        let ticket = Ticket {
            epoch: self.epochs.current(),
            request: cancel,
        };
        self.ops.send(op(turn.clone(), ticket)).map_err(|_| turn)
    }

    /// Queues a compaction of the context (`/compact`), answered with `TurnFinished` like a
    /// prompt, in order with the prompts.
    pub fn compact(
        &self,
        turn: TurnId,
        cancel: CancellationToken,
        focus: Option<String>,
    ) -> Result<(), TurnId> {
        self.queue(turn, cancel, |turn, ticket| Op::Compact {
            turn,
            focus,
            ticket,
        })
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
        let _ = self.ops.send(Op::SetModel(model.to_string()));
    }

    /// Changes the approval mode; it applies to the next decision, also within a running turn.
    pub fn set_mode(&self, mode: Mode) {
        let _ = self.ops.send(Op::SetMode(mode));
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
    /// The running background review's token (a child of the cancel epoch it started in).
    review: Option<CancellationToken>,
    /// What `/name` prompts mean (the edge's commands).
    commands: Option<Arc<dyn SlashCommands>>,
    /// Ops that arrived during a turn and wait for it.
    waiting: VecDeque<Op>,
    journal: Option<crate::journal::SessionJournal>,
    /// The client was told the session is not being saved (and will be told when it is).
    told_unsaved: bool,
    /// A task waits for the journal to say the session is saved again.
    watching_saved: bool,
    /// The title task running beside the session, if any.
    title_task: Option<CancellationToken>,
    /// A review that gave way to a prompt (one-slot servers) and runs again after it.
    review_retry: bool,
    title: Option<String>,
    /// Model calls that used tools since the last skill write.
    since_skill_write: u32,
    /// User turns since the last memory write.
    since_memory_write: u32,
    /// The session's own op queue, for the review to report back (weak: it never keeps the
    /// session alive).
    own_ops: mpsc::WeakUnboundedSender<Op>,
}

/// On a one-slot server, how long the user must pause before side work is sent.
const SIDE_WORK_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// The instruction for the title task.
const TITLE_SYSTEM: &str = "You name conversations. Answer with a title of at most 8 words \
    for the conversation that starts with the user's message below: no quotes, no final \
    period, nothing else.";

/// A title from a model's answer or a prompt: its first line, trimmed, at most 80 characters.
fn clean_title(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line
        .trim_matches(|c: char| c == '"' || c == '\'' || c == '*' || c == '#' || c.is_whitespace())
        .trim_end_matches('.');
    let mut title: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        title.push('…');
    }
    (!title.is_empty()).then_some(title)
}

/// Marks a record that ends in the middle of a turn (the process stopped) as interrupted:
/// its open calls get failed results. Returns whether it did. Idempotent.
pub fn close_cut_off_turn(history: &mut Transcript) -> bool {
    let cut_off = turn_was_cut_off(history);
    if cut_off {
        history.interrupt("the previous Talaria process stopped during this turn");
    }
    cut_off
}

/// Whether the record ends in the middle of a turn: calls without results, or the user's
/// message with no answer and no interruption marker after it.
fn turn_was_cut_off(history: &Transcript) -> bool {
    if !history.open_tool_calls().is_empty() {
        return true;
    }
    let last = history.entries().iter().rev().find(|e| {
        matches!(
            e.body,
            EntryBody::User { .. }
                | EntryBody::Nudge { .. }
                | EntryBody::Assistant(_)
                | EntryBody::ToolResult(_)
                | EntryBody::Interrupted { .. }
        )
    });
    matches!(
        last.map(|e| &e.body),
        Some(EntryBody::User { .. } | EntryBody::Nudge { .. } | EntryBody::ToolResult(_))
    )
}

/// How a session begins: fresh, or from a stored or forked record.
#[derive(Debug, Default)]
pub struct SessionStart {
    /// The record to continue (its system prompt is kept); `None` starts a new one.
    pub history: Option<Transcript>,
    /// Where the record is saved; `None` runs unsaved.
    pub journal: Option<crate::journal::SessionJournal>,
    /// The session's title, if it has one already.
    pub title: Option<String>,
    /// What `/name` prompts mean; without any they are ordinary prompts.
    pub commands: Option<Arc<dyn SlashCommands>>,
    /// What a local server's window decides, when it had not answered yet: taken before
    /// the first op, in place of the spawned settings' figures.
    pub sizing: Option<crate::window_sizing::PendingSizing>,
}

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
    let (ops, receiver) = mpsc::unbounded_channel::<Op>();
    let view = watch::Sender::new(SessionView {
        mode: settings.mode,
        model: settings.model.clone(),
    });
    let handle = SessionHandle {
        ops: ops.clone(),
        epochs: CancelEpochs::new(),
        view: view.subscribe(),
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
        let published = Published::new(view, rules);
        let parts = ActorParts {
            settings,
            router,
            registry,
            events,
            epochs,
            approval: published.approval_state(own_ops.clone()),
            published,
            own_ops,
        };
        let mut actor = SessionActor::new(parts, start);
        actor.save();
        actor.run(receiver).await;
    });
    handle
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
        close_cut_off_turn(&mut history);
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
            told_unsaved: false,
            watching_saved: false,
            title_task: None,
            review_retry: false,
            title: start.title,
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
            since_skill_write: 0,
            since_memory_write: 0,
            own_ops,
            waiting: VecDeque::new(),
            epochs,
            review: None,
            commands: start.commands,
            settings,
            router,
            registry,
            events,
        }
    }

    async fn run(mut self, mut receiver: mpsc::UnboundedReceiver<Op>) {
        let mut closing = None;
        self.tell_if_store_not_open().await;
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
                } => self.prompt_op(turn, input, ticket, &mut receiver).await,
                Op::Compact {
                    turn,
                    focus,
                    ticket,
                } => self.compact(turn, focus, ticket).await,
                Op::SetMode(mode) => self.set_mode(mode),
                Op::SetModel(model) => self.set_model(model),
                Op::Remember {
                    scopes,
                    allow,
                    done,
                } => {
                    let _ = done.send(self.published.remember(&scopes, allow));
                }
                #[cfg(test)]
                Op::Snapshot(reply) => {
                    let _ = reply.send(self.snapshot());
                }
                Op::ReviewFinished(outcome) => self.review_finished(outcome).await,
                Op::TitleFinished { answer, usage } => self.title_finished(answer, usage).await,
                Op::SaveSettled(saved) => self.save_settled(saved).await,
                Op::Close(done) => {
                    closing = done;
                    break;
                }
            }
        }
        // A review in the background ends with its session.
        if let Some(review) = self.review.take() {
            review.cancel();
        }
        self.commit().await;
        if let Some(done) = closing {
            let _ = done.send(());
        }
        tracing::debug!(session = %self.settings.id, "session ended");
    }

    /// Sends what the record gained to the store.
    fn save(&mut self) {
        if let Some(journal) = &mut self.journal {
            journal.save(&mut self.history);
        }
    }

    /// Sends what the record gained and waits until the store committed it: a turn is
    /// answered once it is saved, or once the journal's deadline passed (a store that blocks
    /// never holds an answer). Not being saved is told once (the entries wait in memory and
    /// are written, in order, when the store accepts writes again), and so is the recovery.
    async fn commit(&mut self) {
        self.save();
        let Some(journal) = &self.journal else {
            return;
        };
        let report = journal.committed().await;
        match (&report.error, self.told_unsaved) {
            (Some(error), false) => {
                let message = format!(
                    "This session is not being saved: {error}. This turn is not saved yet; \
                     the session goes on, keeps everything in memory and writes it, in order, \
                     as soon as the store accepts writes again."
                );
                self.tell_unsaved(message).await;
            }
            (None, true) => self.save_settled(true).await,
            _ => {}
        }
        if report.error.is_some() {
            self.watch_saved();
        }
    }

    /// A session that starts before the store opened says so at once.
    async fn tell_if_store_not_open(&mut self) {
        let Some(why) = self.journal.as_ref().and_then(|j| j.journal.not_open()) else {
            return;
        };
        self.tell_unsaved(format!(
            "This session is not saved yet: {why}. The session goes on, keeps everything in \
             memory and writes it, in order, once the store opens."
        ))
        .await;
        self.watch_saved();
    }

    async fn tell_unsaved(&mut self, message: String) {
        self.told_unsaved = true;
        self.notice(crate::events::NoticeLevel::Warning, message)
            .await;
    }

    /// Waits, beside the session, for the journal to have written everything unsaved.
    fn watch_saved(&mut self) {
        let Some(journal) = &self.journal else {
            return;
        };
        if std::mem::replace(&mut self.watching_saved, true) {
            return;
        }
        let saved = journal.when_saved();
        let ops = self.own_ops.clone();
        tokio::spawn(async move {
            let saved = saved.await;
            if let Some(ops) = ops.upgrade() {
                let _ = ops.send(Op::SaveSettled(saved));
            }
        });
    }

    /// The journal settled what was unsaved: told once, when it is saved again.
    async fn save_settled(&mut self, saved: bool) {
        self.watching_saved = false;
        if saved && std::mem::take(&mut self.told_unsaved) {
            self.notice(
                crate::events::NoticeLevel::Info,
                "The session is saved again: everything it recorded meanwhile is written.".into(),
            )
            .await;
        }
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
            self.history.push(EntryBody::ModeChanged {
                mode: mode.id().into(),
            });
            self.save();
            self.update_meta(talaria_store::MetaUpdate {
                mode: Some(mode.id().into()),
                ..Default::default()
            });
        }
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

    /// The running work of a ticket, or `None` when it was cancelled while queued (a later
    /// `cancel`, or its request withdrawn).
    fn start_work(ticket: &Ticket) -> Option<Work> {
        if ticket.is_cancelled() {
            return None;
        }
        Some(Work {
            token: ticket.epoch.child_token(),
            request: ticket.request.clone(),
        })
    }

    /// A prompt's turn: a slash command is expanded first (unless cancelled while queued).
    async fn prompt_op(
        &mut self,
        turn: TurnId,
        input: PromptInput,
        ticket: Ticket,
        receiver: &mut mpsc::UnboundedReceiver<Op>,
    ) {
        let input = match input {
            PromptInput::Typed(input) => input,
            PromptInput::Slash(_) if ticket.is_cancelled() => {
                return self
                    .finish_without_model(turn, Ok(StopReason::Cancelled))
                    .await;
            }
            PromptInput::Slash(command) => match self.expand(command).await {
                Expansion::Prompt(input) => input,
                Expansion::Reply(reply) => return self.command_reply(turn, reply).await,
                Expansion::Failed(why) => return self.fail_prompt(turn, why).await,
            },
        };
        self.prompt(turn, input, ticket, receiver).await;
    }

    /// What a slash command means, asked of the edge's commands on the blocking pool.
    async fn expand(&self, command: SlashCommand) -> Expansion {
        let Some(commands) = self.commands.clone() else {
            return Expansion::Prompt(command.typed);
        };
        match tokio::task::spawn_blocking(move || commands.expand(&command)).await {
            Ok(expansion) => expansion,
            Err(e) => Expansion::Failed(format!("the command failed: {e}")),
        }
    }

    async fn prompt(
        &mut self,
        turn: TurnId,
        input: UserInput,
        ticket: Ticket,
        receiver: &mut mpsc::UnboundedReceiver<Op>,
    ) {
        self.give_way();
        let before = self.history.last_id();
        let (outcome, usage, kept) = match Self::start_work(&ticket) {
            None => (Ok(StopReason::Cancelled), TurnUsage::default(), Vec::new()),
            Some(work) => {
                let end = work
                    .follow(self.run_turn(input, &work.token, receiver))
                    .await;
                (end.outcome, end.usage, end.kept)
            }
        };
        let ran = !matches!(outcome, Ok(StopReason::Cancelled)) || self.history.last_id() > before;
        // Durable before answered.
        self.commit().await;
        let _ = self
            .events
            .send(EngineEvent::TurnFinished {
                turn,
                outcome,
                usage,
            })
            .await;
        if ran {
            self.count_learning(before, &kept);
            self.maybe_review().await;
        }
        if self.title.is_none() {
            self.start_title().await;
        }
    }

    /// Answers a prompt that could not be prepared with an error.
    async fn fail_prompt(&mut self, turn: TurnId, why: String) {
        self.finish_without_model(turn, Err(TurnError::Command(why)))
            .await;
    }

    /// Ends a turn that made no model call of its own (a command, a failure to start).
    async fn finish_without_model(&mut self, turn: TurnId, outcome: Result<StopReason, TurnError>) {
        self.commit().await;
        let _ = self
            .events
            .send(EngineEvent::TurnFinished {
                turn,
                outcome,
                usage: TurnUsage::default(),
            })
            .await;
    }

    /// A command answered without the model: its reply as the agent's message.
    async fn command_reply(&mut self, turn: TurnId, reply: CommandReply) {
        let _ = self.events.send(EngineEvent::AgentText(reply.text)).await;
        if reply.commands_changed {
            let _ = self.events.send(EngineEvent::CommandsChanged).await;
        }
        self.finish_without_model(turn, Ok(StopReason::EndTurn))
            .await;
    }

    /// Counts what the turn after entry `before` did toward the review thresholds: model
    /// calls that used tools, and the user turn; a call that wrote a skill or memory (`kept`,
    /// by the results' unique ids: what the tools themselves said) resets its count.
    fn count_learning(
        &mut self,
        before: talaria_record::EntryId,
        kept: &[(String, talaria_tools::Kept)],
    ) {
        self.since_memory_write += 1;
        for entry in self.history.entries_after(before) {
            match &entry.body {
                EntryBody::Assistant(answer) if !answer.tool_calls.is_empty() => {
                    self.since_skill_write += 1;
                }
                EntryBody::ToolResult(result) => {
                    match kept.iter().find(|(id, _)| *id == result.client_id) {
                        Some((_, talaria_tools::Kept::Skill { .. })) => self.since_skill_write = 0,
                        Some((_, talaria_tools::Kept::Memory)) => self.since_memory_write = 0,
                        None => {}
                    }
                }
                _ => {}
            }
        }
    }

    /// Starts the background review when a threshold is reached and none is running; it
    /// begins once the prompt's response has been delivered.
    async fn maybe_review(&mut self) {
        let learning = self.settings.learning;
        let skills_due = learning.skill_review_after > 0
            && self.since_skill_write >= learning.skill_review_after;
        let memory_due = learning.memory_review_after > 0
            && self.since_memory_write >= learning.memory_review_after;
        let Some(factory) = self.settings.review.clone() else {
            return;
        };
        if !(skills_due || memory_due || self.review_retry) || self.review.is_some() {
            return;
        }
        self.review_retry = false;
        self.since_skill_write = 0;
        self.since_memory_write = 0;
        let id = format!(
            "r{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() % 100_000_000)
        );
        let kit = (factory.0)(&id);
        let mut registry = self.registry.clone();
        // The review may run exactly the tools the edge handed it.
        let allowed: Vec<String> = kit
            .tools
            .iter()
            .map(|tool| tool.definition().name.to_string())
            .collect();
        for tool in kit.tools {
            registry.register(tool);
        }
        // A later `cancel` ends it with the epoch it started in.
        let token = self.epochs.current().child_token();
        self.review = Some(token.clone());
        let job = crate::review::ReviewJob {
            id: id.clone(),
            transcript: self.history.clone(),
            registry: registry
                .dispatch_only(&allowed.iter().map(String::as_str).collect::<Vec<_>>()),
            tools: crate::turn::tool_specs(&self.registry),
            router: self.router.clone(),
            model: self.model.clone(),
            retry: self.settings.retry,
            context: self.context.for_side_task(),
            cancel: token,
            max_calls: learning.max_review_calls,
            cwd: self.settings.cwd.clone(),
            roots: self.settings.roots.clone(),
            secrets: self.settings.secrets.clone(),
            results_dir: self.settings.home.join("tool-results").join(&id),
            staged: kit.staged,
        };
        let (delivered, responded) = crate::events::Signal::new();
        let _ = self.events.send(EngineEvent::Delivered(delivered)).await;
        tracing::info!(session = %self.settings.id, review = %id, "background review started");
        tokio::spawn(review_beside(
            job,
            responded,
            self.settings.single_slot,
            self.own_ops.clone(),
        ));
    }

    /// Takes a finished review's usage into the session's and tells the user what it proposes.
    async fn review_finished(&mut self, outcome: crate::review::ReviewOutcome) {
        self.review = None;
        self.usage.tokens.merge(&outcome.usage);
        if outcome.priced {
            self.usage.cost += outcome.cost;
            self.usage.priced = true;
        }
        tracing::info!(
            session = %self.settings.id,
            review = %outcome.id,
            calls = outcome.calls,
            proposals = outcome.proposals.len(),
            cancelled = outcome.cancelled,
            error = ?outcome.error,
            "background review finished"
        );
        let staged = self.settings.learning.stage_reviews;
        for proposal in &outcome.proposals {
            let message = if staged {
                format!(
                    "The agent proposes {proposal}. Use /skills to inspect, accept or reject it."
                )
            } else {
                format!("The agent saved {proposal} in the background.")
            };
            self.history.push(EntryBody::Notice {
                level: talaria_record::NoticeLevel::Info,
                text: message.clone(),
            });
            let _ = self
                .events
                .send(EngineEvent::Notice {
                    level: crate::events::NoticeLevel::Info,
                    message,
                })
                .await;
        }
        self.save();
        self.update_meta(talaria_store::MetaUpdate {
            tokens: Some((self.usage.tokens.input, self.usage.tokens.output)),
            cost: self.usage.priced.then_some(self.usage.cost),
            ..Default::default()
        });
        // A threshold reached while this review ran is served now.
        if !outcome.cancelled {
            self.maybe_review().await;
        }
    }

    /// The text of the session's first prompt.
    fn first_prompt(&self) -> Option<String> {
        self.history.entries().iter().find_map(|e| match &e.body {
            EntryBody::User { model_view, .. } => Some(
                model_view
                    .iter()
                    .filter_map(|p| match p {
                        UserPart::Text { text } => Some(text.as_str()),
                        UserPart::Image { .. } => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        })
    }

    /// Titles the session after its first turn: through the title model, beside the session
    /// (a prompt that arrives meanwhile is served at once), when titles are on; else from the
    /// first prompt's first line.
    async fn start_title(&mut self) {
        if self.title_task.is_some() {
            return;
        }
        let Some(first) = self.first_prompt() else {
            return;
        };
        if !self.settings.titles {
            self.set_title(clean_title(&first)).await;
            return;
        }
        let token = CancellationToken::new();
        self.title_task = Some(token.clone());
        let call = self.side_call(token.clone(), false);
        let request = SideRequest {
            task: "title".into(),
            system: TITLE_SYSTEM.into(),
            prompt: first.chars().take(2000).collect(),
            with_history: false,
            max_tokens: Some(40),
        };
        let ops = self.own_ops.clone();
        let single_slot = self.settings.single_slot;
        tokio::spawn(async move {
            // On a one-slot server, wait for the user to pause: a prompt cancels this.
            if single_slot {
                tokio::select! {
                    () = token.cancelled() => {}
                    () = tokio::time::sleep(SIDE_WORK_PAUSE) => {}
                }
            }
            let (answer, usage) = if token.is_cancelled() {
                (Err(SideTaskError::Cancelled), SessionUsage::default())
            } else {
                crate::side_task::run(call, request).await
            };
            if let Some(ops) = ops.upgrade() {
                let _ = ops.send(Op::TitleFinished {
                    answer: answer.map(|a| a.text),
                    usage,
                });
            }
        });
    }

    /// The title task ended: its title (or the first prompt's line), unless it gave way to a
    /// prompt, in which case it starts again (ops are handled between turns, so after it).
    async fn title_finished(&mut self, answer: Result<String, SideTaskError>, usage: SessionUsage) {
        let gave_way = self
            .title_task
            .take()
            .is_some_and(|task| task.is_cancelled());
        self.usage.merge(&usage);
        if gave_way {
            // Asked again; on a one-slot server it waits for the user to pause again.
            self.start_title().await;
            return;
        }
        let title = match answer {
            Ok(text) => clean_title(&text),
            Err(why) => {
                tracing::info!(session = %self.settings.id, "no title from the model: {why}");
                None
            }
        };
        let title = title.or_else(|| self.first_prompt().as_deref().and_then(clean_title));
        self.set_title(title).await;
    }

    async fn set_title(&mut self, title: Option<String>) {
        let Some(title) = title else {
            return;
        };
        self.title = Some(title.clone());
        self.update_meta(talaria_store::MetaUpdate {
            title: Some(title.clone()),
            ..Default::default()
        });
        let _ = self.events.send(EngineEvent::SessionTitle(title)).await;
    }

    /// Runs one turn; mode changes that arrive meanwhile apply at once, other ops wait.
    async fn run_turn(
        &mut self,
        input: UserInput,
        token: &CancellationToken,
        receiver: &mut mpsc::UnboundedReceiver<Op>,
    ) -> crate::turn::TurnEnd {
        let mut modes_set = Vec::new();
        let result = {
            let caller = ModelCaller::new(
                self.router.as_ref(),
                self.router.chain(&self.model),
                self.settings.retry,
                token,
                &mut self.context,
                &mut self.usage,
            );
            let turn = Turn {
                settings: &self.settings,
                limits: TurnLimits {
                    max_requests: self.settings.max_turn_requests,
                    max_output_tokens: self.settings.max_output_tokens,
                },
                registry: &self.registry,
                approval: &self.approval,
                tool_state: &self.tool_state,
                events: &self.events,
                cancel: token,
                history: &mut self.history,
                journal: self.journal.as_mut(),
                used_tool_ids: &mut self.used_tool_ids,
                kept: Vec::new(),
                caller,
            };
            let running = std::panic::AssertUnwindSafe(turn.run(input)).catch_unwind();
            tokio::pin!(running);
            loop {
                tokio::select! {
                    result = &mut running => break result,
                    Some(op) = receiver.recv() => {
                        take_during_turn(op, &self.published, &mut self.waiting, &mut modes_set);
                    }
                }
            }
        };
        self.turn_ended(result, modes_set)
    }

    /// After a turn: the mode changes it saw recorded, a panic made a failure, a failed or
    /// cut-off turn marked interrupted, the usage saved.
    fn turn_ended(
        &mut self,
        result: std::thread::Result<crate::turn::TurnEnd>,
        modes_set: Vec<Mode>,
    ) -> crate::turn::TurnEnd {
        for mode in modes_set {
            self.history.push(EntryBody::ModeChanged {
                mode: mode.id().into(),
            });
            self.update_meta(talaria_store::MetaUpdate {
                mode: Some(mode.id().into()),
                ..Default::default()
            });
        }
        let crate::turn::TurnEnd {
            outcome,
            usage,
            kept,
        } = match result {
            Ok(done) => done,
            Err(panic) => {
                let what = panic_message(panic.as_ref());
                tracing::error!(session = %self.settings.id, "turn panicked: {what}");
                let error = TurnError::Internal(format!("the turn failed unexpectedly: {what}"));
                crate::turn::TurnEnd {
                    outcome: Err(error),
                    usage: TurnUsage::default(),
                    kept: Vec::new(),
                }
            }
        };
        // A failed turn stays in the record, marked (open calls get failed results), so the
        // next request is valid for every provider.
        match &outcome {
            Err(error) => self.history.interrupt(error.to_string()),
            // A cancelled turn is marked: before any answer so roles stay valid, and after a
            // partial one so it is not read (by the user on reload, or the model) as complete.
            Ok(StopReason::Cancelled) => {
                self.history.interrupt("the turn was cancelled");
            }
            Ok(_) => {}
        }
        self.save();
        self.update_meta(talaria_store::MetaUpdate {
            tokens: Some((self.usage.tokens.input, self.usage.tokens.output)),
            cost: self.usage.priced.then_some(self.usage.cost),
            ..Default::default()
        });
        crate::turn::TurnEnd {
            outcome,
            usage,
            kept,
        }
    }

    /// `/compact [focus]`: compacts the record now, through the session's model chain, with
    /// the compaction's progress streamed to the chat; answered like a prompt.
    async fn compact(&mut self, turn: TurnId, focus: Option<String>, ticket: Ticket) {
        let outcome = match Self::start_work(&ticket) {
            None => Ok(StopReason::Cancelled),
            Some(work) => {
                let token = work.token.clone();
                let tools = crate::turn::tool_specs(&self.registry);
                let tools = crate::context::tools_text(&tools);
                let mut caller = ModelCaller::new(
                    self.router.as_ref(),
                    self.router.chain(&self.model),
                    self.settings.retry,
                    &token,
                    &mut self.context,
                    &mut self.usage,
                );
                let mut sink = crate::model_call::ChatSink {
                    events: &self.events,
                    session_id: &self.settings.id,
                    registry: &self.registry,
                    used_ids: &mut self.used_tool_ids,
                    announced: Vec::new(),
                    notices: Vec::new(),
                    hold: None,
                };
                let trigger = crate::model_call::compaction::Trigger::Manual { focus };
                let result = work
                    .follow(caller.compact(&mut self.history, &tools, trigger, &mut sink))
                    .await;
                let cancelled = token.is_cancelled();
                let notices = std::mem::take(&mut sink.notices);
                drop(work);
                for (_, text) in notices {
                    self.history.push(EntryBody::Notice {
                        level: talaria_record::NoticeLevel::Warning,
                        text,
                    });
                }
                if let Err(why) = &result {
                    self.history.push(EntryBody::Notice {
                        level: talaria_record::NoticeLevel::Warning,
                        text: format!("/compact did not compact the conversation: {why}"),
                    });
                }
                self.save();
                if cancelled {
                    Ok(StopReason::Cancelled)
                } else {
                    Ok(StopReason::EndTurn)
                }
            }
        };
        self.finish_without_model(turn, outcome).await;
    }

    /// What a side task needs of this session (a side task never lowers the session's own
    /// window nor compacts its record).
    fn side_call(
        &self,
        cancel: CancellationToken,
        with_history: bool,
    ) -> crate::side_task::SideCall {
        crate::side_task::SideCall {
            router: self.router.clone(),
            model: self.model.clone(),
            retry: self.settings.retry,
            context: self.context.for_side_task(),
            cancel,
            history: with_history.then(|| self.history.clone()),
        }
    }

    /// On a one-slot server, side work gives way to a prompt that arrives: it is cancelled
    /// (so it never takes the slot, or the prompt cache, from the conversation) and runs again
    /// after the turn.
    fn give_way(&mut self) {
        if !self.settings.single_slot {
            return;
        }
        if let Some(task) = &self.title_task {
            task.cancel();
        }
        let review = self.review.take();
        if let Some(review) = review {
            review.cancel();
            self.review_retry = true;
        }
    }
}

/// Runs a review beside its session, once the prompt's response was delivered (and, on a
/// one-slot server, the user paused), and reports back to the session.
async fn review_beside(
    job: crate::review::ReviewJob,
    responded: tokio::sync::oneshot::Receiver<()>,
    single_slot: bool,
    ops: mpsc::WeakUnboundedSender<Op>,
) {
    let cancel = job.cancel.clone();
    let gave_up = |id: &str| crate::review::ReviewOutcome {
        id: id.to_string(),
        cancelled: true,
        ..Default::default()
    };
    let outcome = tokio::select! {
        biased;
        () = cancel.cancelled() => gave_up(&job.id),
        delivered = responded => match delivered {
            Ok(()) => {
                if single_slot {
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        () = tokio::time::sleep(SIDE_WORK_PAUSE) => {}
                    }
                }
                crate::review::run(job).await
            }
            // Nobody reads the events any more: the client is gone.
            Err(_) => gave_up(&job.id),
        },
    };
    if let Some(ops) = ops.upgrade() {
        let _ = ops.send(Op::ReviewFinished(outcome));
    }
}

/// An op that arrived during a turn: a mode change or a rule applies at once, a model
/// switch is shown at once and applied after the turn, anything else waits for it.
fn take_during_turn(
    op: Op,
    published: &Published,
    waiting: &mut VecDeque<Op>,
    modes_set: &mut Vec<Mode>,
) {
    match op {
        Op::SetMode(mode) => {
            published.set_mode(mode);
            modes_set.push(mode);
        }
        Op::Remember {
            scopes,
            allow,
            done,
        } => {
            let _ = done.send(published.remember(&scopes, allow));
        }
        Op::SetModel(model) => {
            published.set_model(&model);
            waiting.push_back(Op::SetModel(model));
        }
        other => waiting.push_back(other),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_string())
}
