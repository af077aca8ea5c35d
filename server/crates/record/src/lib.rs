//! The conversation record: what happened in a session, kept so it can be stored, replayed
//! to a client, summarised per tool, forked, and rendered for any model API.
//!
//! A [`Transcript`] is a list of [`Entry`]s with stable ids and timestamps. User entries keep
//! the input as received and the parts the model saw; tool results keep what the client was
//! shown (title, kind, locations, diffs, terminals), the raw output and the text the model
//! read. Markers (notices, mode and model changes, plans, compaction summaries, interrupted
//! turns) belong to the history without being model messages.
//!
//! [`Transcript::model_messages`] is the one place a transcript becomes the provider-neutral
//! message list; [`validate`] states the invariants every provider relies on.

mod branches;
mod cut_off;
mod entry;
mod model_view;
mod transcript;
mod validate;
mod vocabulary;

#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use entry::{
    AssistantEntry, DisplayContent, Entry, EntryBody, EntryId, FileChange, FileVersion, InputBlock,
    NoticeLevel, PlanItem, Reasoning, RestoreIntent, ResultStatus, ToolCallRequest, ToolDisplay,
    ToolLocation, ToolResultEntry, UserPart,
};
pub use model_view::{CUT_OFF, ModelMessage, TOOL_IMAGES_NOTE};
pub use transcript::{RECORD_VERSION, RecordError, Transcript};
pub use validate::{Violation, validate};
pub use vocabulary::{ArgNames, Effects, ToolKind};

#[cfg(test)]
mod persistence_tests;
#[cfg(test)]
mod tests;
