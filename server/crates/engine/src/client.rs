//! What a turn asks of the client, without knowing the protocol: permission prompts, (when
//! the client offers them) its file buffers and terminals, and its decision on each call at
//! the checkpoints it intercepts.
//!
//! Requests travel as `EngineEvent::ClientRequest` in the session's one ordered event stream,
//! after the events about the same call, so a request can never overtake its tool card and no
//! barrier is needed. The consumer of the stream answers each on its reply channel.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use talaria_tools::FileError;
use talaria_tools::ProgressSink;
use talaria_tools::{CommandResult, CommandSpec};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// An answer the user can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionChoice {
    AllowOnce,
    AllowAlways,
    /// Always allow every tool of the call's MCP server (in this project).
    AllowAlwaysServer,
    /// Run this one command again outside the OS sandbox (never remembered).
    RunUnsandboxedOnce,
    RejectOnce,
    RejectAlways,
    /// A plan handed over in plan mode: implement it, asking for edits and commands.
    ImplementAsking,
    /// Implement it, edits in the workspace accepted.
    ImplementAcceptingEdits,
    /// Stay in plan mode.
    KeepPlanning,
}

/// A question for the user about one tool call (already shown as a card).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRequest {
    /// The card's id.
    pub tool_call_id: String,
    pub title: String,
    /// Why the policy asks (e.g. "outside the workspace"), if there is a special reason.
    pub reason: Option<String>,
    pub choices: Vec<PermissionChoice>,
    /// The MCP server the tool belongs to, if any (names the per-server choice).
    pub server: Option<String>,
}

/// How a permission request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionAnswer {
    Chosen(PermissionChoice),
    /// The turn was cancelled while asking (or the client cancelled the prompt).
    Cancelled,
    /// The client could not be asked or answered unreadably.
    Failed(String),
}

/// Which work the client does instead of this machine (from its advertised capabilities).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Delegation {
    pub read_files: bool,
    pub write_files: bool,
    pub terminal: bool,
    /// The checkpoints at which the client decides on each call.
    pub interception: Interception,
}

/// The checkpoints a client intercepts (the ACP tool-interception draft): asked before a
/// call runs and after it ran, before the model reads its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interception {
    pub before: bool,
    pub after: bool,
    /// How long the client may take to decide; silence past it stops the call.
    pub timeout: std::time::Duration,
}

impl Default for Interception {
    /// Neither checkpoint, and the configuration's default wait.
    fn default() -> Self {
        Self {
            before: false,
            after: false,
            timeout: std::time::Duration::from_secs(60),
        }
    }
}

/// Which checkpoint a call is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterceptPhase {
    /// Decided (hooks ran), not yet approved nor run.
    Before,
    /// Ran; its result not yet read by the model.
    After,
}

/// A call at an interception checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct InterceptedCall {
    pub phase: InterceptPhase,
    /// The card's id.
    pub tool_call_id: String,
    /// The tool's name.
    pub name: String,
    pub title: String,
    pub kind: talaria_tools::ToolKind,
    pub raw_input: Value,
    /// After the call: whether it failed, and the text the model would read.
    pub result: Option<(bool, String)>,
}

/// What the client decided at a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum InterceptDecision {
    /// Cross the checkpoint unchanged.
    Allow,
    /// Before: do not run the call, this is its result; after: this result instead of its
    /// own. `failed` says whether the result is an error.
    ReplaceResult { failed: bool, text: String },
    /// Before only (Talaria's extension): run the call with this input, checked against the
    /// tool's schema and approved as the model's would be.
    ReplaceInput(Value),
    /// Stop the turn: the call does not run (or its result is withheld), and nothing after.
    Stop(Option<String>),
}

/// Why the client gave no decision at a checkpoint (the call then does not cross it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterceptError {
    #[error("the client answered with an error: {0}")]
    Client(String),
    #[error("unreadable answer ({why}): {answer}")]
    Unreadable { why: String, answer: String },
    #[error("no answer within {0} seconds")]
    TimedOut(u64),
    #[error("the request was withdrawn")]
    Withdrawn,
    #[error("the client did not answer")]
    NoAnswer,
}

/// What is asked.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientAsk {
    Permission(PermissionRequest),
    ReadFile {
        path: PathBuf,
    },
    WriteFile {
        path: PathBuf,
        text: String,
    },
    RunCommand {
        spec: CommandSpec,
    },
    /// A form for the user to fill in (the `clarify` tool's question, an MCP server's
    /// elicitation): a message and a restricted JSON schema.
    Question {
        message: String,
        schema: Value,
    },
    /// The client's decision on a call at a checkpoint it intercepts.
    Intercept(InterceptedCall),
}

/// The client's answer.
#[derive(Debug)]
pub enum ClientAnswer {
    Permission(PermissionAnswer),
    Read(Result<String, FileError>),
    Wrote(Result<(), FileError>),
    Ran(Result<CommandResult, talaria_tools::ToolError>),
    Question(Result<talaria_tools::FormAnswer, talaria_tools::ToolError>),
    /// The decision, or why there is none.
    Intercepted(Result<InterceptDecision, InterceptError>),
    /// The client whose files, terminals and interception the session was given is no
    /// longer attached to it (another client goes on with it): the file or command is this
    /// machine's, and no client intercepts the call.
    Local,
}

/// One request to the client, with the channel to answer it on.
#[derive(Clone)]
pub struct ClientRequest {
    pub ask: ClientAsk,
    /// Fires when the turn is cancelled: withdraw the request (or stop the command).
    pub cancel: CancellationToken,
    /// Receives a command's progress (the terminal it runs in).
    pub progress: Option<ProgressSink>,
    reply: Arc<Mutex<Option<oneshot::Sender<ClientAnswer>>>>,
}

impl std::fmt::Debug for ClientRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRequest")
            .field("ask", &self.ask)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ClientRequest {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.reply, &other.reply)
    }
}

impl ClientRequest {
    /// A request and the receiver of its answer.
    pub fn new(
        ask: ClientAsk,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
    ) -> (Self, oneshot::Receiver<ClientAnswer>) {
        let (tx, rx) = oneshot::channel();
        let request = Self {
            ask,
            cancel,
            progress,
            reply: Arc::new(Mutex::new(Some(tx))),
        };
        (request, rx)
    }

    /// The same request (its reply channel and cancellation) asking something else: a
    /// subagent's question shown on its parent's session.
    pub fn with_ask(&self, ask: ClientAsk) -> ClientRequest {
        ClientRequest {
            ask,
            ..self.clone()
        }
    }

    /// Answers the request (the first answer counts).
    pub fn answer(&self, answer: ClientAnswer) {
        if let Some(tx) = talaria_util::lock(&self.reply).take() {
            let _ = tx.send(answer);
        }
    }
}
