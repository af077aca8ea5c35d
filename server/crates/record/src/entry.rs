//! The entry types of the record (serde: they are stored and versioned).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::vocabulary::{Effects, ToolKind};

/// A stable, session-unique entry id (increasing).
pub type EntryId = u64;

/// One part of what the model sees of a user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UserPart {
    /// Plain text.
    Text { text: String },
    /// An image, base64-encoded.
    Image { mime_type: String, data: String },
}

impl UserPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The text of these parts (images left out), joined by `separator`.
    pub fn joined_text(parts: &[UserPart], separator: &str) -> String {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|part| match part {
                UserPart::Text { text } => Some(text.as_str()),
                UserPart::Image { .. } => None,
            })
            .collect();
        texts.join(separator)
    }
}

/// A block of user input as the client sent it (protocol-neutral).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputBlock {
    Text {
        text: String,
    },
    Image {
        mime_type: String,
        data: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
    Audio {
        mime_type: String,
        data: String,
    },
    /// A reference to a resource the client did not embed.
    ResourceLink {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// An embedded resource: text or base64 blob.
    Resource {
        uri: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
    /// Anything else, kept as the client's JSON.
    Other {
        json: Value,
    },
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The model's id for the call (echoed back with the result).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The raw arguments text (normally a JSON object; may be malformed).
    pub arguments: String,
}

/// The model's reasoning, with the provider's signature for replay (Anthropic thinking).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reasoning {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// What the model said, with any tool calls it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AssistantEntry {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// The model that answered (`provider/model` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The id its chunks carried to the client (`messageId`), so a replay shows the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    Completed,
    Failed,
}

/// Where a call acted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolLocation {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// One piece of what the client was shown on a tool card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DisplayContent {
    Text {
        text: String,
    },
    Diff {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old_text: Option<String>,
        new_text: String,
    },
    Terminal {
        terminal_id: String,
    },
    /// An image the call returned (an MCP tool's, a resource read), base64-encoded.
    Image {
        mime_type: String,
        data: String,
    },
}

/// What the client was shown of a tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ToolDisplay {
    pub title: String,
    pub kind: ToolKind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<ToolLocation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<DisplayContent>,
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultEntry {
    /// The model's id of the call this answers.
    pub call_id: String,
    /// The session-unique id the client saw (differs from `call_id` when the model repeated
    /// an id).
    pub client_id: String,
    pub tool: String,
    pub status: ResultStatus,
    pub display: ToolDisplay,
    /// The arguments as the client saw them.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub raw_input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
    /// The text the model read as the result.
    pub model_text: String,
    /// Images the result carried for the model (only [`UserPart::Image`]s; empty when the
    /// model does not take images). The model reads them in a user message after the results
    /// of the same response, since not every API takes images in a tool result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<UserPart>,
    /// What its tool declared it does (an older record's is read from its display kind:
    /// [`ToolResultEntry::effects`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects: Option<Effects>,
    /// The files the call changed, as its checkpoint kept them (a rewind puts them back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FileChange>,
}

/// One file a call changed: what it was before and after (`None`: it did not exist).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<FileVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<FileVersion>,
}

/// One version of a file, as a checkpoint kept it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileVersion {
    /// The content's hash (`sha256:<hex>`), under which the content is kept; `None` when the
    /// content was over the checkpoint's bound and was not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The file's permission bits.
    pub mode: u32,
    pub len: u64,
}

impl ToolResultEntry {
    /// What the call did, as its tool declared it; for a result recorded before tools
    /// declared effects, what its display kind tells.
    pub fn effects(&self) -> Effects {
        self.effects
            .clone()
            .unwrap_or_else(|| Effects::of_display_kind(self.display.kind))
    }
}

/// The files a rewind puts back: the changes of the entries that left the path, in the
/// order they were made, and whether a file changed since the agent is put back anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreIntent {
    pub changes: Vec<FileChange>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// How serious a notice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeLevel {
    Info,
    Warning,
    Error,
}

/// A todo item shown as the client's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub id: String,
    pub content: String,
    pub status: String,
}

/// What an entry holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryBody {
    /// The system prompt: the stable instructions, and the volatile environment (working
    /// directory, date, listing, model), which the model reads as a user message right after
    /// the system prompt so the instructions (and the tool schemas after them) stay a prefix
    /// shared between sessions, which servers keep in their prompt cache.
    System {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
    },
    /// The user's input as received, and the parts the model saw.
    User {
        input: Vec<InputBlock>,
        model_view: Vec<UserPart>,
    },
    Assistant(AssistantEntry),
    ToolResult(Box<ToolResultEntry>),
    /// A notice that belongs to the history (a fallback, a retry, a failure).
    Notice {
        level: NoticeLevel,
        text: String,
    },
    ModeChanged {
        mode: String,
    },
    ModelChanged {
        model: String,
    },
    Plan {
        items: Vec<PlanItem>,
    },
    /// A compaction summary standing for the compacted entries in `first..=last`; the model
    /// reads it just before entry `first` (the first it stands for, or the latest user
    /// message when that was kept in place inside the range).
    Summary {
        text: String,
        first: EntryId,
        last: EntryId,
    },
    /// A turn that did not complete (failed, or the process stopped).
    Interrupted {
        reason: String,
    },
    /// The conversation was rewound: it goes on after entry `head` (0: right after the system
    /// prompt). What followed `head` stays in the record, off the path, so a later rewind can
    /// come back to it.
    Rewound {
        head: EntryId,
        /// With the files put back: what to put back, recorded before any file is touched, so
        /// a rewind cut off (a kill, a full disk) is finished by the next load or rewind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restore: Option<RestoreIntent>,
    },
    /// The files of the rewind whose marker is entry `rewind` were put back; the paths that
    /// failed are tried again by the next load or rewind.
    FilesRestored {
        rewind: EntryId,
        restored: usize,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        failed: Vec<String>,
    },
    /// A steer the running turn accepted while it could not take it yet (a command runs, a
    /// permission question waits), recorded at once so its answer (`injected`) is a saved
    /// promise; the model does not read it here. `entered` names the user message it became
    /// at the turn's next safe step; one that never entered (its process stopped first) is
    /// entered by the next load ([`crate::Transcript::close_cut_off_turn`]).
    SteerWaiting {
        input: Vec<InputBlock>,
        model_view: Vec<UserPart>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entered: Option<EntryId>,
    },
    /// An instruction from Talaria itself within a turn (e.g. to act instead of announcing):
    /// the model reads it as a user message; clients are not shown it as the user's.
    Nudge {
        text: String,
    },
}

/// One entry of the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: EntryId,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// Replaced for the model by a compaction summary; still shown on replay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compacted: bool,
    #[serde(flatten)]
    pub body: EntryBody,
}
