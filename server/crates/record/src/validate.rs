//! The invariants every provider needs of the messages it is sent.

use std::collections::HashSet;

use crate::entry::EntryId;
use crate::model_view::ModelMessage;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A system message after the start.
    SystemNotFirst { index: usize },
    /// The first message after the system prompt is not the user's.
    DoesNotStartWithUser { index: usize },
    /// Two assistant messages with nothing between them.
    AssistantTwiceInARow { index: usize },
    /// A tool call without exactly one result right after its message.
    CallWithoutResult { call_id: String },
    /// A tool result that answers no open call.
    OrphanResult { index: usize, call_id: String },
    /// Two calls with one id in the same message.
    DuplicateCallId { call_id: String },
    /// Entry ids that do not increase.
    IdsNotIncreasing { before: EntryId, after: EntryId },
}

/// Checks `messages`: the system prompt (if any) first; then the user; no two assistant
/// messages in a row; each tool call followed, before any other message, by exactly one
/// result; no result without its call.
pub fn validate(messages: &[ModelMessage<'_>]) -> Result<(), Vec<Violation>> {
    let mut violations = Vec::new();
    let mut open: Vec<&str> = Vec::new();
    let mut seen_non_system = false;
    let mut previous_assistant = false;
    for (index, message) in messages.iter().enumerate() {
        if !matches!(message, ModelMessage::Tool { .. }) {
            for call_id in open.drain(..) {
                violations.push(Violation::CallWithoutResult {
                    call_id: call_id.to_string(),
                });
            }
        }
        match message {
            ModelMessage::System(_) => {
                if seen_non_system || index > 0 {
                    violations.push(Violation::SystemNotFirst { index });
                }
            }
            ModelMessage::User(_) => {
                seen_non_system = true;
                previous_assistant = false;
            }
            ModelMessage::Assistant { tool_calls, .. } => {
                if !seen_non_system {
                    violations.push(Violation::DoesNotStartWithUser { index });
                }
                if previous_assistant {
                    violations.push(Violation::AssistantTwiceInARow { index });
                }
                seen_non_system = true;
                previous_assistant = true;
                let mut ids = HashSet::new();
                for call in *tool_calls {
                    if !ids.insert(call.id.as_str()) {
                        violations.push(Violation::DuplicateCallId {
                            call_id: call.id.clone(),
                        });
                    }
                    open.push(&call.id);
                }
            }
            ModelMessage::Tool { call_id, .. } => {
                previous_assistant = false;
                match open.iter().position(|id| id == call_id) {
                    Some(position) => {
                        open.remove(position);
                    }
                    None => violations.push(Violation::OrphanResult {
                        index,
                        call_id: call_id.to_string(),
                    }),
                }
            }
        }
    }
    for call_id in open {
        violations.push(Violation::CallWithoutResult {
            call_id: call_id.to_string(),
        });
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}
