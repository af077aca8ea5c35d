//! Engine events → ACP `session/update` payloads.

use talaria_engine::{EngineEvent, StopReason, ToolCallView};
use talaria_protocol::acp::{
    self, ContentBlock, ContentChunk, SessionUpdate, TextContent, ToolCall, ToolCallContent,
    ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, UsageUpdate,
};
use talaria_tools::{ToolKind, ToolStatus};

/// The most characters of a tool result shown in the editor card (the model gets it all).
pub const MAX_DISPLAY_CHARS: usize = 20_000;

/// The update for an event, or `None` for events that are not updates (turn end).
pub fn session_update(event: EngineEvent) -> Option<SessionUpdate> {
    Some(match event {
        EngineEvent::AgentText(text) => {
            SessionUpdate::AgentMessageChunk(ContentChunk::new(text_block(text)))
        }
        EngineEvent::AgentThought(text) => {
            SessionUpdate::AgentThoughtChunk(ContentChunk::new(text_block(text)))
        }
        EngineEvent::ToolCallStarted(view) => SessionUpdate::ToolCall(tool_call(view)),
        EngineEvent::ToolCallFinished {
            id,
            status,
            content,
            raw_output,
        } => {
            let status = match status {
                ToolStatus::Completed => ToolCallStatus::Completed,
                ToolStatus::Failed => ToolCallStatus::Failed,
            };
            let shown = ToolCallContent::from(text_block(clip(&content, MAX_DISPLAY_CHARS)));
            let fields = ToolCallUpdateFields::new()
                .status(status)
                .content(vec![shown])
                .raw_output(raw_output);
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields))
        }
        EngineEvent::Usage { used, size } => {
            SessionUpdate::UsageUpdate(UsageUpdate::new(used, size))
        }
        EngineEvent::TurnFinished { .. } => return None,
    })
}

fn tool_call(view: ToolCallView) -> ToolCall {
    ToolCall::new(view.id, view.title)
        .name(view.name)
        .kind(tool_kind(view.kind))
        .status(ToolCallStatus::InProgress)
        .locations(
            view.locations
                .into_iter()
                .map(|(path, line)| ToolCallLocation::new(path).line(line))
                .collect(),
        )
        .raw_input(view.raw_input)
}

fn tool_kind(kind: ToolKind) -> acp::ToolKind {
    match kind {
        ToolKind::Read => acp::ToolKind::Read,
        ToolKind::Edit => acp::ToolKind::Edit,
        ToolKind::Delete => acp::ToolKind::Delete,
        ToolKind::Move => acp::ToolKind::Move,
        ToolKind::Search => acp::ToolKind::Search,
        ToolKind::Execute => acp::ToolKind::Execute,
        ToolKind::Think => acp::ToolKind::Think,
        ToolKind::Fetch => acp::ToolKind::Fetch,
        ToolKind::Other => acp::ToolKind::Other,
    }
}

/// The ACP stop reason for an engine stop reason.
pub fn stop_reason(reason: StopReason) -> acp::StopReason {
    match reason {
        StopReason::EndTurn => acp::StopReason::EndTurn,
        StopReason::MaxTokens => acp::StopReason::MaxTokens,
        StopReason::MaxTurnRequests => acp::StopReason::MaxTurnRequests,
        StopReason::Refusal => acp::StopReason::Refusal,
        StopReason::Cancelled => acp::StopReason::Cancelled,
    }
}

fn text_block(text: String) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text))
}

fn clip(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some((cut, _)) => format!(
            "{}\n[… {} more characters not shown]",
            &text[..cut],
            text[cut..].chars().count()
        ),
    }
}
