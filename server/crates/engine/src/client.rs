//! What a turn asks of the client, without knowing the protocol: permission prompts and (when
//! the client offers them) its file buffers and terminals.
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
}

/// The client's answer.
#[derive(Debug)]
pub enum ClientAnswer {
    Permission(PermissionAnswer),
    Read(Result<String, FileError>),
    Wrote(Result<(), FileError>),
    Ran(Result<CommandResult, talaria_tools::ToolError>),
    Question(Result<talaria_tools::FormAnswer, talaria_tools::ToolError>),
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
