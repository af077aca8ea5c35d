//! What a session reports while it works. The ACP edge maps these one-to-one onto
//! `session/update` notifications and the prompt response.

use std::path::PathBuf;

use serde_json::Value;
use talaria_tools::{TodoItem, ToolEffect, ToolKind, ToolStatus};

/// An opaque tag the caller attaches to a prompt; it comes back in [`EngineEvent::TurnFinished`]
/// (the edge puts the JSON-RPC id of the request there, so answering needs no table).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TurnId(pub std::sync::Arc<str>);

impl From<u64> for TurnId {
    fn from(number: u64) -> Self {
        Self(number.to_string().into())
    }
}

/// Why a turn ended normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

/// Why a turn failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The model call failed after every recovery (the provider's error is its source).
    #[error(transparent)]
    Model(#[from] crate::call_error::CallError),
    /// A slash command could not be prepared (its message says why).
    #[error("{0}")]
    Command(String),
    /// A bug in Talaria (for example a panic inside the turn).
    #[error("{0}")]
    Internal(String),
}

/// How important a notice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeLevel {
    Info,
    Warning,
    Error,
}

/// Tokens of a turn (or a session), summed over its model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnUsage {
    pub input: u64,
    pub output: u64,
    pub cached_read: u64,
    pub cached_write: u64,
    pub reasoning: u64,
}

impl TurnUsage {
    /// Adds one call's usage.
    pub fn add(&mut self, usage: &talaria_provider::Usage) {
        self.input += usage.input_tokens;
        self.output += usage.output_tokens;
        self.cached_read += usage.cached_input_tokens;
        self.cached_write += usage.cache_write_tokens;
        self.reasoning += usage.reasoning_tokens;
    }

    /// Adds another total.
    pub fn merge(&mut self, other: &TurnUsage) {
        self.input += other.input;
        self.output += other.output;
        self.cached_read += other.cached_read;
        self.cached_write += other.cached_write;
        self.reasoning += other.reasoning;
    }
}

/// How a tool call is shown.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallView {
    /// A card with this id was already shown when the model started the call
    /// ([`EngineEvent::ToolCallStarted`]); this completes it.
    pub announced: bool,
    /// Unique within the session.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// A short human title.
    pub title: String,
    pub kind: ToolKind,
    /// Absolute paths (and lines) the call touches.
    pub locations: Vec<(PathBuf, Option<u32>)>,
    /// The arguments as the model sent them (parsed when they were JSON).
    pub raw_input: Value,
    /// What the call would change (diffs of edits), shown while it waits for approval.
    pub preview: Vec<ToolEffect>,
}

/// A subagent as its parent's client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentView {
    pub session_id: String,
    pub title: String,
    pub description: String,
    /// Working (`true`) or done.
    pub running: bool,
    /// How its work ended, once it did.
    pub stop: Option<SubagentStop>,
    /// A message it was sent or sent back: the task, then its report.
    pub message: Option<SubagentMessage>,
}

/// How a subagent's work ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubagentStop {
    Finished(StopReason),
    Failed(String),
}

/// A message between a session and its subagent, as the parent's transcript shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentMessage {
    /// Unique in the parent's session.
    pub id: String,
    /// From the parent to the child (the task), or back (the report).
    pub to_child: bool,
    pub text: String,
}

/// Where a context compaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionStatus {
    InProgress,
    Completed,
    Failed,
}

/// A model call's rate limits, as its provider's answer stated them.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsView {
    /// The provider's name (`openai`, `anthropic`, …) and the model called.
    pub provider: String,
    pub model: String,
    pub limits: talaria_provider::RateLimits,
    /// A limit refused the call (a rate limit, a spent quota; no usage follows it): the
    /// context the refused request held and the window, for a usage report with the limits.
    pub refused: Option<ContextUse>,
}

impl LimitsView {
    /// The name of the limits' pool: the provider and the model (`openai/gpt-4.1`).
    pub fn pool(&self) -> String {
        limits_pool(&self.provider, &self.model)
    }
}

/// The name of a provider's and model's pool of limits (`openai/gpt-4.1`).
pub fn limits_pool(provider: &str, model: &str) -> String {
    format!("{provider}/{model}")
}

/// How much of the context window a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextUse {
    pub used: u64,
    pub size: u64,
}

/// A context compaction, as the client is told about it (the same id from start to end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionView {
    /// Unique within the session.
    pub id: String,
    pub status: CompactionStatus,
    /// What the compaction left for the model (the summary, or what the cheap pass did).
    pub summary: Option<String>,
    /// Why it failed, or that its summary is the marked fallback.
    pub error: Option<String>,
}

/// Fires once: the consumer of the event stream fires it when it reaches the event, so the
/// sender knows every earlier event (a prompt's response included) was delivered.
#[derive(Clone, Default)]
pub struct Signal(std::sync::Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>>);

impl Signal {
    /// A signal and the receiver it fires.
    pub fn new() -> (Self, tokio::sync::oneshot::Receiver<()>) {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (
            Self(std::sync::Arc::new(std::sync::Mutex::new(Some(sender)))),
            receiver,
        )
    }

    pub fn fire(&self) {
        let sender = talaria_util::lock(&self.0).take();
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }
}

impl std::fmt::Debug for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signal")
    }
}

impl PartialEq for Signal {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One thing that happened in a session.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// The answer of the next model call is this message (its chunks carry this id, and so
    /// does its record entry).
    MessageStarts(String),
    /// A piece of the answer, as it streams.
    AgentText(String),
    /// The prompt of the turn that runs is recorded as this entry (its `messageId`, which a
    /// rewind names, is the entry's).
    PromptRecorded(talaria_record::EntryId),
    /// A message the client steered into the running turn, where it entered.
    /// (Its record entry, which names it as a message, and what the client sent.)
    Steered(talaria_record::EntryId, Vec<talaria_record::InputBlock>),
    /// A piece of the model's reasoning, as it streams.
    AgentThought(String),
    /// The model made a tool call; it waits for the policy, the user, or its turn.
    ToolCallPending(ToolCallView),
    /// The model started a tool call (its arguments still stream): show its card now.
    ToolCallStarted {
        id: String,
        name: String,
        kind: ToolKind,
    },
    /// The call started running.
    ToolCallRunning { id: String },
    /// Output of a running call so far (its tail).
    ToolCallProgress { id: String, output: String },
    /// The call runs in this editor terminal.
    ToolCallTerminal { id: String, terminal_id: String },
    /// The call's work goes on in this child session.
    ToolCallSession { id: String, session_id: String },
    /// The turn switched the session's mode (a plan the user chose to implement).
    ModeSwitched(String),
    /// A subagent's session was started or its state changed (shown only to clients that
    /// advertise subagents).
    Subagent(SubagentView),
    /// An event of a subagent's own session.
    ChildEvent {
        session_id: String,
        event: Box<EngineEvent>,
    },
    /// A tool call finished (or was refused, declined or cancelled).
    ToolCallFinished {
        id: String,
        status: ToolStatus,
        /// What the card shows: diffs, terminal, result text and locations (as kept in the
        /// record, so a replay shows the same).
        display: talaria_record::ToolDisplay,
        raw_output: Option<Value>,
        /// The call changed the skills now (the slash commands change with them).
        skills_changed: bool,
    },
    /// The session got a title.
    SessionTitle(String),
    /// The todo list changed.
    Plan(Vec<TodoItem>),
    /// A request to the client (permission, files, terminal), after every event about the
    /// same call; the consumer answers it on its reply channel.
    ClientRequest(crate::client::ClientRequest),
    /// Context occupancy after a model call, and the session's cost so far (when the price
    /// table knows the model).
    Usage {
        used: u64,
        size: u64,
        cost: Option<f64>,
    },
    /// A model call's answer stated its provider's rate limits (at the start of its stream,
    /// or with a refusal).
    RateLimits(LimitsView),
    /// A context compaction started, finished or failed.
    Compaction(CompactionView),
    /// The client's slash commands may have changed (a skill was written or accepted).
    CommandsChanged,
    /// Every earlier event has been delivered once the consumer fires this.
    Delivered(Signal),
    /// Something the user should know: a retry, a key rotation, a fallback, a failure.
    Notice { level: NoticeLevel, message: String },
    /// The turn tagged `turn` ended. Always the last event of a turn.
    TurnFinished {
        turn: TurnId,
        outcome: Result<StopReason, TurnError>,
        usage: TurnUsage,
    },
}
