//! What a tool is: its definition, how it describes a call, and how it runs.

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// What kind of action a tool performs; editors use it to pick an icon and a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    Other,
}

/// The part of a tool the model sees, plus its kind and toolset.
#[derive(Debug, Clone)]
pub struct ToolDefinition {
    /// The name the model calls (Hermes-compatible).
    pub name: &'static str,
    /// The toolset the tool belongs to (e.g. `file`).
    pub toolset: &'static str,
    /// What the tool does, for the model.
    pub description: &'static str,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// The kind of action.
    pub kind: ToolKind,
}

/// Where a tool call acts, for "follow along" in editors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLocation {
    /// Absolute path.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<u32>,
}

/// The environment a tool runs in.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The session's working directory (absolute); relative paths resolve against it.
    pub cwd: PathBuf,
    /// Fires when the turn is cancelled; long-running tools must stop promptly.
    pub cancel: CancellationToken,
}

impl ToolContext {
    /// Resolves a path argument against the working directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.cwd.join(path)
        }
    }
}

/// Whether a call succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolStatus {
    Completed,
    Failed,
}

/// The result of one call: text for the model plus what the editor shows.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    /// Completed or failed.
    pub status: ToolStatus,
    /// What the model reads as the tool result.
    pub content: String,
    /// Structured output for clients (`rawOutput`), if any.
    pub raw_output: Option<Value>,
    /// Where the call acted.
    pub locations: Vec<ToolLocation>,
}

impl ToolOutcome {
    /// A successful result.
    pub fn completed(content: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Completed,
            content: content.into(),
            raw_output: None,
            locations: Vec::new(),
        }
    }

    /// A failed result whose message the model can read and act on.
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Failed,
            content: message.into(),
            raw_output: None,
            locations: Vec::new(),
        }
    }

    /// Adds locations.
    pub fn with_locations(mut self, locations: Vec<ToolLocation>) -> Self {
        self.locations = locations;
        self
    }
}

/// A short human description of a call, shown before it runs.
#[derive(Debug, Clone)]
pub struct CallDescription {
    /// E.g. `Read src/main.rs`.
    pub title: String,
    /// Where it will act.
    pub locations: Vec<ToolLocation>,
}

/// A tool: a definition plus a handler.
pub trait Tool: Send + Sync {
    /// The definition the model sees.
    fn definition(&self) -> &ToolDefinition;

    /// Describes a call before it runs (title and locations). `args` is already an object.
    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription;

    /// Runs the call. Errors are reported as a failed [`ToolOutcome`], never a panic.
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome>;
}
