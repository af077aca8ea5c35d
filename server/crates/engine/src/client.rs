//! What a turn asks of the client, without knowing the protocol: permission prompts and (when
//! the client offers them) its file buffers and terminals.
//!
//! Requests travel as [`EngineEvent::ClientRequest`] in the session's one ordered event stream,
//! after the events about the same call, so a request can never overtake its tool card and no
//! barrier is needed. The consumer of the stream answers each on its reply channel.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;
use talaria_tools::ProgressSink;
use talaria_tools::fs::{FileAccess, FileError, LocalFiles};
use talaria_tools::shell::{CommandResult, CommandRunner, CommandSpec, LocalRunner};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::events::EngineEvent;

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
    Question(Result<talaria_tools::clarify::FormAnswer, talaria_tools::ToolError>),
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

/// Sends a request down the event stream and waits for its answer; `None` when the consumer
/// is gone or dropped the request unanswered.
pub(crate) async fn ask(
    events: &mpsc::Sender<EngineEvent>,
    ask: ClientAsk,
    cancel: CancellationToken,
    progress: Option<ProgressSink>,
) -> Option<ClientAnswer> {
    let (request, answer) = ClientRequest::new(ask, cancel, progress);
    events
        .send(EngineEvent::ClientRequest(request))
        .await
        .ok()?;
    answer.await.ok()
}

const NO_ANSWER: &str = "the client did not answer";

/// Files through the client when it offers them, else the local disk.
pub(crate) struct ClientFiles {
    pub events: mpsc::Sender<EngineEvent>,
    pub delegation: Delegation,
    /// The turn's token: a cancelled turn stops waiting for the editor.
    pub cancel: CancellationToken,
}

impl FileAccess for ClientFiles {
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        Box::pin(async move {
            if !self.delegation.read_files {
                return LocalFiles.read_text(path).await;
            }
            let asked = ClientAsk::ReadFile {
                path: path.to_path_buf(),
            };
            match ask(&self.events, asked, self.cancel.clone(), None).await {
                Some(ClientAnswer::Read(result)) => result,
                _ => Err(FileError::Other(NO_ANSWER.into())),
            }
        })
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move {
            if !self.delegation.write_files {
                return LocalFiles.write_text(path, text).await;
            }
            let asked = ClientAsk::WriteFile {
                path: path.to_path_buf(),
                text: text.to_string(),
            };
            match ask(&self.events, asked, self.cancel.clone(), None).await {
                Some(ClientAnswer::Wrote(result)) => result,
                _ => Err(FileError::Other(NO_ANSWER.into())),
            }
        })
    }
}

/// Commands in the client's terminals when it offers them, else on this machine.
pub(crate) struct ClientCommands {
    pub events: mpsc::Sender<EngineEvent>,
    pub delegation: Delegation,
}

impl CommandRunner for ClientCommands {
    fn run<'a>(
        &'a self,
        spec: CommandSpec,
        cancel: &'a CancellationToken,
        progress: Option<ProgressSink>,
    ) -> BoxFuture<'a, Result<CommandResult, talaria_tools::ToolError>> {
        Box::pin(async move {
            if !self.delegation.terminal {
                return LocalRunner.run(spec, cancel, progress).await;
            }
            let asked = ClientAsk::RunCommand { spec };
            match ask(&self.events, asked, cancel.clone(), progress).await {
                Some(ClientAnswer::Ran(result)) => result,
                _ => Err(talaria_tools::ToolError::Client(NO_ANSWER.into())),
            }
        })
    }
}

/// Questions to the user through the client (its forms).
pub(crate) struct ClientQuestions {
    pub events: mpsc::Sender<EngineEvent>,
}

impl talaria_tools::clarify::UserQuestions for ClientQuestions {
    fn ask_form<'a>(
        &'a self,
        message: &'a str,
        schema: &'a Value,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<talaria_tools::clarify::FormAnswer, talaria_tools::ToolError>> {
        Box::pin(async move {
            let asked = ClientAsk::Question {
                message: message.to_string(),
                schema: schema.clone(),
            };
            match ask(&self.events, asked, cancel.clone(), None).await {
                Some(ClientAnswer::Question(answer)) => answer,
                _ if cancel.is_cancelled() => Ok(talaria_tools::clarify::FormAnswer::Cancelled),
                _ => Err(talaria_tools::ToolError::Client(NO_ANSWER.into())),
            }
        })
    }
}
