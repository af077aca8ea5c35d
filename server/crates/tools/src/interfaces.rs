//! What a tool's context offers besides files and commands, as interfaces the engine, the
//! edge or `session_state.rs` implements: where progress goes, how the user is asked, and the
//! session's background processes (and the per-session state that holds them). Depends on nothing else
//! of the crate but its error type, so every module can use it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;

/// What a running tool reports before it finishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Output as it arrives (e.g. from a command).
    Output(String),
    /// The call now runs in this editor terminal (embed it in the card).
    Terminal(String),
    /// The call's work goes on in this (child) session (reference it from the card).
    Session(String),
}

/// Receives [`Progress`] from a running tool.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// How the user answered a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormAnswer {
    /// The user filled in the form: its content (an object keyed by the schema's properties).
    Accepted(Value),
    /// The user chose not to answer.
    Declined,
    /// The user dismissed the form (or the turn was cancelled).
    Cancelled,
}

/// Asks the user to fill in forms (through the client): a message and a restricted JSON
/// schema, an object of primitive properties (as MCP's and ACP's elicitation define it).
pub trait UserQuestions: Send + Sync {
    fn ask_form<'a>(
        &'a self,
        message: &'a str,
        schema: &'a Value,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<FormAnswer, ToolError>>;
}

/// A todo item (Hermes `todo` shape).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TodoItem {
    pub id: String,
    pub content: String,
    /// `pending`, `in_progress`, `completed` or `cancelled`.
    pub status: String,
}

/// How a background process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// A command running in the background, as `process` sees it.
pub trait BackgroundProcess: Send + Sync + std::fmt::Debug {
    /// Its id in the session's table (`proc_1`, …).
    fn id(&self) -> &str;
    /// The command as the model wrote it.
    fn command(&self) -> &str;
    fn pid(&self) -> u32;
    fn started(&self) -> Instant;
    /// `None` while running.
    fn exit_info(&self) -> Option<ExitInfo>;
    /// Output since the last poll (and advances the poll mark).
    fn take_new_output(&self) -> String;
    /// All retained output, and how many bytes were dropped before it.
    fn full_log(&self) -> (String, usize);
    /// Waits for exit, up to `timeout`.
    fn wait(&self, timeout: Duration) -> BoxFuture<'_, Option<ExitInfo>>;
    /// Writes to its standard input.
    fn write_stdin<'a>(&'a self, data: &'a str) -> BoxFuture<'a, Result<(), ToolError>>;
    /// Kills it and its group.
    fn kill(&self);
}

/// A session's background processes.
pub trait ProcessTable: Send + Sync + std::fmt::Debug {
    /// Starts one: `start` is given the id the table chose and returns the running process.
    fn start(
        &self,
        start: &mut dyn FnMut(String) -> Result<Arc<dyn BackgroundProcess>, ToolError>,
    ) -> Result<Arc<dyn BackgroundProcess>, ToolError>;
    /// A process by id.
    fn get(&self, id: &str) -> Option<Arc<dyn BackgroundProcess>>;
    /// Every process, oldest first.
    fn list(&self) -> Vec<Arc<dyn BackgroundProcess>>;
}

/// Everything a session's tools keep between calls.
#[derive(Debug)]
pub struct SessionToolState {
    pub processes: Arc<dyn ProcessTable>,
    pub todos: Mutex<Vec<TodoItem>>,
}

impl SessionToolState {
    pub fn new(processes: Arc<dyn ProcessTable>) -> Self {
        Self {
            processes,
            todos: Mutex::default(),
        }
    }
}
