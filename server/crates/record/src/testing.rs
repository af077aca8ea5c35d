//! Test helpers for any crate: entry builders and an assertion of the record's invariants.

use crate::entry::{
    AssistantEntry, EntryBody, InputBlock, ResultStatus, ToolCallRequest, ToolDisplay,
    ToolResultEntry, UserPart,
};
use crate::model_view::ModelMessage;
use crate::transcript::Transcript;
use crate::vocabulary::ToolKind;

/// A user entry with one text block.
pub fn user(text: &str) -> EntryBody {
    EntryBody::User {
        input: vec![InputBlock::Text { text: text.into() }],
        model_view: vec![UserPart::text(text)],
    }
}

/// An assistant entry; `calls` are `(id, name, arguments)`.
pub fn assistant(text: &str, calls: &[(&str, &str, &str)]) -> EntryBody {
    EntryBody::Assistant(AssistantEntry {
        text: text.into(),
        reasoning: None,
        tool_calls: calls
            .iter()
            .map(|(id, name, arguments)| ToolCallRequest {
                id: (*id).into(),
                name: (*name).into(),
                arguments: (*arguments).into(),
            })
            .collect(),
        model: None,
        message_id: None,
    })
}

/// A completed tool result for `call_id`.
pub fn result(call_id: &str, tool: &str, text: &str) -> EntryBody {
    EntryBody::ToolResult(Box::new(ToolResultEntry {
        call_id: call_id.into(),
        client_id: call_id.into(),
        tool: tool.into(),
        status: ResultStatus::Completed,
        display: ToolDisplay {
            title: tool.into(),
            kind: ToolKind::Other,
            ..ToolDisplay::default()
        },
        raw_input: serde_json::Value::Null,
        raw_output: None,
        model_text: text.into(),
        images: Vec::new(),
        effects: None,
        changes: Vec::new(),
    }))
}

/// Panics with the violations (and the rendered messages) if the record breaks an invariant.
#[track_caller]
pub fn assert_valid(transcript: &Transcript) {
    if let Err(violations) = transcript.validate() {
        panic!(
            "the record breaks its invariants: {violations:?}\nmodel view: {:#?}",
            transcript.model_messages()
        );
    }
}

/// Panics if the messages break an invariant.
#[track_caller]
pub fn assert_valid_messages(messages: &[ModelMessage<'_>]) {
    if let Err(violations) = crate::validate(messages) {
        panic!("messages break their invariants: {violations:?}\n{messages:#?}");
    }
}
