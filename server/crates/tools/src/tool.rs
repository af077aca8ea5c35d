//! What a tool is: its definition, how it describes a call, and how it runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::fs::FileAccess;
use crate::interfaces::UserQuestions;
pub use crate::interfaces::{Progress, ProgressSink};
pub use crate::interfaces::{SessionToolState, TodoItem};
use crate::sensitive::SensitivePaths;
use crate::shell::CommandRunner;
/// The words a tool declares itself in, shared with the record that keeps them.
pub use talaria_record::{Effects, ToolKind};

/// What running a tool needs from the approval policy, declared by the tool. The policy asks
/// by default: only `ReadOnly` tools run unasked in `ask` mode, and only they run at all in
/// `read-only` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalNeed {
    /// Only reads (files, searches, session state): safe to run unasked. Reads of secret
    /// paths still ask.
    ReadOnly,
    /// Changes files.
    Edits,
    /// Runs commands or processes.
    RunsCommands,
    /// Not declared, or from outside (MCP servers): asks in `ask` and `accept-edits`.
    #[default]
    Unknown,
}

/// How a call may run alongside the other calls of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Reads only: runs concurrently with other read-only calls.
    ReadOnly,
    /// Touches the paths it names: runs concurrently only with calls on other paths.
    PathScoped,
    /// Runs alone, in order.
    Exclusive,
}

/// The part of a tool the model sees, plus how the engine treats it.
#[derive(Debug, Clone)]
pub struct ToolDefinition {
    /// The name the model calls (Hermes-compatible; tools from MCP servers and skills get
    /// names at run time).
    pub name: Arc<str>,
    /// The toolset the tool belongs to (e.g. `file`).
    pub toolset: Arc<str>,
    /// What the tool does, for the model.
    pub description: Arc<str>,
    /// JSON Schema of the arguments object; arguments are checked and coerced against it.
    pub parameters: Value,
    /// The kind of action (for display; the policy uses `approval`).
    pub kind: ToolKind,
    /// What the approval policy must know about running it.
    pub approval: ApprovalNeed,
    /// Concurrency class within a batch.
    pub concurrency: Concurrency,
    /// Results longer than this are stored to a file and previewed; `None` uses the budget.
    pub max_result_chars: Option<usize>,
    /// What running it does (see [`Effects`]).
    pub effects: Effects,
}

/// Where a tool call acts, for "follow along" in editors.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolLocation {
    /// Absolute path.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<u32>,
}

/// The environment a tool runs in.
#[derive(Clone)]
pub struct ToolContext {
    /// The session's working directory (absolute); relative paths resolve against it.
    pub cwd: PathBuf,
    /// Fires when the turn is cancelled; long-running tools must stop promptly.
    pub cancel: CancellationToken,
    /// Reads and writes text files (locally, or through the editor).
    pub files: Arc<dyn FileAccess>,
    /// Runs foreground commands (locally, or in an editor terminal).
    pub commands: Arc<dyn CommandRunner>,
    /// Per-session state: background processes and the todo list.
    pub state: Arc<SessionToolState>,
    /// Which paths hold secrets (searches skip them unless aimed at them).
    pub sensitive: Arc<SensitivePaths>,
    /// Receives live output, when the caller wants it.
    pub progress: Option<ProgressSink>,
    /// Asks the user questions, when the client can show them.
    pub questions: Option<Arc<dyn UserQuestions>>,
    /// How commands start: the OS sandbox, the clean environment.
    pub shell: Arc<crate::shell::Shell>,
    /// This one call runs outside the sandbox (the user agreed, for this call only).
    pub unconfined: bool,
    /// The most characters this call's result should take (what the window leaves); tools
    /// that page (read_file) size their page to it.
    pub result_chars: Option<usize>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context on the local machine (files and commands run here).
    pub fn local(cwd: PathBuf, cancel: CancellationToken, state: Arc<SessionToolState>) -> Self {
        Self {
            cwd,
            cancel,
            files: Arc::new(crate::fs::LocalFiles::default()),
            commands: Arc::new(crate::shell::LocalRunner),
            state,
            sensitive: Arc::new(SensitivePaths::from_env()),
            progress: None,
            questions: None,
            shell: Arc::new(crate::shell::Shell::default()),
            unconfined: false,
            result_chars: None,
        }
    }

    /// Resolves a path argument against the working directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        resolve_in(&self.cwd, path)
    }

    /// Reports progress, if anyone listens.
    pub fn report_progress(&self, progress: Progress) {
        if let Some(sink) = &self.progress {
            sink(progress);
        }
    }

    /// Refuses a file that is a credential under another name: a hard link to a file in a
    /// credential store or in Talaria's own settings, found by its device and inode whatever
    /// path reaches it (the kernel's sandbox judges by the path walked, so it cannot see
    /// this). The check runs on the blocking pool.
    pub async fn refuse_linked_credential(
        &self,
        path: &std::path::Path,
    ) -> Result<(), crate::error::ToolError> {
        let sensitive = self.sensitive.clone();
        let checked = path.to_path_buf();
        let linked = tokio::task::spawn_blocking(move || {
            std::fs::metadata(&checked).is_ok_and(|meta| sensitive.is_linked_credential(&meta))
        })
        .await
        .unwrap_or(true);
        if linked {
            return Err(crate::error::ToolError::Rejected(format!(
                "Refused: {} is another name (a hard link) for a credential (a key, a token \
                 store or Talaria's own settings); it is never read or changed through it. If \
                 the credential is really needed, read it by its own path: the user will be asked.",
                path.display()
            )));
        }
        Ok(())
    }
}

/// Resolves `path` against `cwd` (expanding a leading `~/` to `$HOME`) and removes `.`/`..`
/// components lexically (no file system access, so it works for files not yet created).
pub fn resolve_in(cwd: &Path, path: &str) -> PathBuf {
    let expanded = match path.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(rest))
            .unwrap_or_else(|| PathBuf::from(path)),
        None => PathBuf::from(path),
    };
    let joined = if expanded.is_absolute() {
        expanded
    } else {
        cwd.join(expanded)
    };
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether a call succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ToolStatus {
    Completed,
    Failed,
}

/// Something a call did that the editor should show, beside the text result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ToolEffect {
    /// A file's text before (`None`: new file) and after.
    Diff {
        path: PathBuf,
        old_text: Option<String>,
        new_text: String,
    },
    /// The command ran in this editor terminal.
    Terminal { terminal_id: String },
    /// The todo list after the call.
    Plan(Vec<TodoItem>),
    /// The OS sandbox refused something the command tried (what, in words); the user may
    /// run this one call again outside it.
    SandboxDenied { what: String },
    /// The call wrote something that outlasts the session.
    Kept(Kept),
}

/// What a call wrote that outlasts the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Kept {
    /// A skill: `live` when it changed the skills now (else it was staged as a proposal).
    Skill { live: bool },
    /// Memory (live, or staged as a proposal).
    Memory,
}

/// An image a call returned for the model to look at.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolImage {
    pub mime_type: String,
    /// Base64.
    pub data: String,
}

/// The result of one call: text for the model plus what the editor shows.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ToolOutcome {
    /// Completed or failed.
    pub status: ToolStatus,
    /// What the model reads as the tool result.
    pub content: String,
    /// Structured output for clients (`rawOutput`), if any.
    pub raw_output: Option<Value>,
    /// Where the call acted.
    pub locations: Vec<ToolLocation>,
    /// Diffs, terminals and plans.
    pub effects: Vec<ToolEffect>,
    /// Images for the model (the content says they exist, for models that take none).
    pub images: Vec<ToolImage>,
}

impl ToolOutcome {
    /// A successful result.
    pub fn completed(content: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Completed,
            content: content.into(),
            raw_output: None,
            locations: Vec::new(),
            effects: Vec::new(),
            images: Vec::new(),
        }
    }

    /// A failed result whose message the model can read and act on.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        Self {
            status: ToolStatus::Failed,
            content: message.to_string(),
            raw_output: None,
            locations: Vec::new(),
            effects: Vec::new(),
            images: Vec::new(),
        }
    }

    /// Adds locations.
    pub fn with_locations(mut self, locations: Vec<ToolLocation>) -> Self {
        self.locations = locations;
        self
    }

    /// Adds an effect.
    pub fn with_effect(mut self, effect: ToolEffect) -> Self {
        self.effects.push(effect);
        self
    }

    /// Adds images for the model.
    pub fn with_images(mut self, images: Vec<ToolImage>) -> Self {
        self.images = images;
        self
    }

    /// Sets the structured output.
    pub fn with_raw_output(mut self, raw: Value) -> Self {
        self.raw_output = Some(raw);
        self
    }
}

/// A description of a call before it runs: for the card, the policy and the batch planner.
#[derive(Debug, Clone, Default)]
pub struct CallDescription {
    /// E.g. `Read src/main.rs`.
    pub title: String,
    /// Where it will act (shown to the user).
    pub locations: Vec<ToolLocation>,
    /// Absolute paths the call reads or writes (for overlap checks).
    pub paths: Vec<PathBuf>,
    /// Absolute paths the call would change (for the edit policy).
    pub writes: Vec<PathBuf>,
    /// Absolute paths the call would read (for the secret-read policy).
    pub reads: Vec<PathBuf>,
    /// The shell command it would run (for the command policy).
    pub command: Option<String>,
    /// Where that command starts (for the classifier: `workdir`, or unknown for text typed
    /// into a running shell).
    pub command_start: crate::shell::safety::StartDir,
    /// This particular call only observes (e.g. `process poll`), whatever the tool's kind:
    /// the policy treats it like a read.
    pub read_only: bool,
    /// The writes go to the tool's own store inside `TALARIA_HOME` (skills, memory), which
    /// no other tool may edit.
    pub own_store: bool,
}

impl CallDescription {
    /// A call that changes these files (and only reads them to do so).
    pub fn writing(title: String, paths: Vec<PathBuf>) -> Self {
        Self {
            title,
            locations: paths
                .iter()
                .map(|path| ToolLocation {
                    path: path.clone(),
                    line: None,
                })
                .collect(),
            paths: paths.clone(),
            writes: paths,
            ..Self::default()
        }
    }
}

/// Deserializes a call's (schema-checked) arguments into the tool's argument type; a failure
/// becomes the failed outcome to return.
// The error is the very outcome the tool returns, so boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
pub fn parse_args<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: Value,
) -> Result<T, ToolOutcome> {
    serde_json::from_value(args)
        .map_err(|e| ToolOutcome::failed(format!("Invalid arguments for {tool}: {e}")))
}

/// A tool: a definition plus a handler.
pub trait Tool: Send + Sync {
    /// The definition the model sees.
    fn definition(&self) -> &ToolDefinition;

    /// Whether the tool can be offered in this environment (default: always).
    fn available(&self) -> bool {
        true
    }

    /// Describes a call before it runs. `args` has passed the schema.
    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription;

    /// What the call would change, computed without changing anything (for the approval
    /// prompt). Default: nothing to preview.
    fn preview<'a>(
        &'a self,
        _args: &'a Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Vec<ToolEffect>> {
        Box::pin(async { Vec::new() })
    }

    /// A call that cannot succeed, found without changing anything (an edit whose old text
    /// is not in the file, of a file that does not exist): its failed outcome, returned
    /// before anyone is asked to allow it. Default: every call may succeed.
    fn check<'a>(
        &'a self,
        _args: &'a Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Option<ToolOutcome>> {
        Box::pin(async { None })
    }

    /// Whether the call would leave everything as it is (a write of the content a file
    /// already holds), found by reading only what the call names. Default: it may change.
    fn changes_nothing<'a>(
        &'a self,
        _args: &'a Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }

    /// Runs the call. Errors are reported as a failed [`ToolOutcome`], never a panic.
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome>;
}
