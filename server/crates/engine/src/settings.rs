//! The vocabulary the engine's rooms share about a session: its settings and the user's
//! input. A leaf below the rooms that use it (the session actor, the turn, subagents, the
//! review, slash commands, steering): it uses none of them.

use std::path::PathBuf;
use std::sync::Arc;

use talaria_record::{InputBlock, UserPart};

use crate::approval::Mode;
use crate::config::RetryPolicy;

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
    pub review: Option<crate::review_kit::ReviewFactory>,
    /// Subagents running at once through `delegate_task`; `None` offers no delegation.
    pub subagents: Option<usize>,
    /// The client shows subagents as sessions of their own (else on the parent's cards).
    pub announce_subagents: bool,
    /// The model takes images: those tool results carry reach it (else only their mention).
    pub images: bool,
    /// How the session's commands start: the OS sandbox, the clean environment, the private
    /// temporary directory (shared with its subagents).
    pub shell: Arc<talaria_tools::Shell>,
    /// What the session's calls keep of the files they change, for a rewind to put back
    /// (`None`: no checkpoints).
    pub checkpoints: Option<Arc<crate::checkpointing::Checkpoints>>,
    /// The other agents `delegate_task` may hand a task to (`[agents.NAME]`).
    pub agents: Option<crate::external_agents::AgentSet>,
    /// The user's hooks (and a trusted project's) around the session's events.
    pub hooks: Arc<crate::hooks::Hooks>,
}

impl SessionSettings {
    /// Where the session's hooks run.
    pub fn hook_scope(&self) -> crate::hooks::HookScope<'_> {
        crate::hooks::HookScope {
            hooks: &self.hooks,
            session_id: &self.id,
            cwd: &self.cwd,
            shell: &self.shell,
        }
    }
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
