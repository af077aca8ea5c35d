//! Engine events → ACP `session/update` payloads.

use talaria_engine::{EngineEvent, StopReason, ToolCallView};
use talaria_protocol::acp::{
    self, ContentBlock, ContentChunk, Diff, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    SessionUpdate, TextContent, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, UsageUpdate,
};
use talaria_record::{DisplayContent, ToolDisplay};
use talaria_tools::{TodoItem, ToolEffect, ToolKind, ToolStatus};

/// The most characters of a tool result shown in the editor card (the model gets its own copy).
pub const MAX_DISPLAY_CHARS: usize = 20_000;
/// Diffs whose old and new text together exceed this are summarised instead of sent whole
/// (editors choke on multi-megabyte updates).
pub const MAX_DIFF_BYTES: usize = 2 * 1024 * 1024;

/// The id a message's thought chunks carry: its own beside the answer's (`message`).
pub fn thought_id(message: &str) -> String {
    format!("{message}-thought")
}

/// A streamed answer or thought chunk of the message `message` (its `messageId`).
pub fn agent_chunk(event: EngineEvent, message: Option<&str>) -> Option<SessionUpdate> {
    let chunk = |text: String, id: Option<String>| {
        ContentChunk::new(text_block(text)).message_id(id.map(acp::MessageId::new))
    };
    match event {
        EngineEvent::AgentText(text) => Some(SessionUpdate::AgentMessageChunk(chunk(
            text,
            message.map(str::to_string),
        ))),
        EngineEvent::AgentThought(text) => Some(SessionUpdate::AgentThoughtChunk(chunk(
            text,
            message.map(thought_id),
        ))),
        _ => None,
    }
}

/// The update for an event, or `None` for events that are not updates (turn end, the start
/// of a message).
pub fn session_update(event: EngineEvent) -> Option<SessionUpdate> {
    Some(match event {
        EngineEvent::MessageStarts(_) | EngineEvent::PromptRecorded(_) => return None,
        chunk @ (EngineEvent::AgentText(_) | EngineEvent::AgentThought(_)) => {
            return agent_chunk(chunk, None);
        }
        EngineEvent::ToolCallStarted { id, name, kind } => SessionUpdate::ToolCall(
            ToolCall::new(id, name.clone())
                .name(name)
                .kind(tool_kind(kind))
                .status(ToolCallStatus::Pending),
        ),
        EngineEvent::ToolCallPending(view) if view.announced => completed_card(view),
        EngineEvent::ToolCallPending(view) => SessionUpdate::ToolCall(tool_call(view)),
        EngineEvent::ToolCallRunning { id } => update(
            id,
            ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
        ),
        EngineEvent::ToolCallProgress { id, output } => update(
            id,
            ToolCallUpdateFields::new()
                .content(vec![ToolCallContent::from(text_block(fence(&output)))]),
        ),
        EngineEvent::ToolCallSession { id, session_id } => update(
            id,
            ToolCallUpdateFields::new().content(vec![ToolCallContent::Session(
                acp::SessionReference::new(session_id),
            )]),
        ),
        EngineEvent::ToolCallTerminal { id, terminal_id } => update(
            id,
            ToolCallUpdateFields::new().content(vec![ToolCallContent::Terminal(
                acp::Terminal::new(terminal_id),
            )]),
        ),
        EngineEvent::ToolCallFinished {
            id,
            status,
            display,
            raw_output,
            ..
        } => finished_card(id, status, &display, raw_output),
        EngineEvent::SessionTitle(title) => {
            SessionUpdate::SessionInfoUpdate(acp::SessionInfoUpdate::new().title(title))
        }
        EngineEvent::Plan(items) => {
            SessionUpdate::Plan(Plan::new(items.iter().map(plan_entry).collect()))
        }
        EngineEvent::Usage { used, size, cost } => SessionUpdate::UsageUpdate(
            UsageUpdate::new(used, size).cost(cost.map(|amount| acp::Cost::new(amount, "USD"))),
        ),
        EngineEvent::TurnFinished { .. }
        | EngineEvent::ClientRequest(_)
        | EngineEvent::Steered(..)
        | EngineEvent::Compaction(_)
        | EngineEvent::RateLimits(_)
        | EngineEvent::CommandsChanged
        | EngineEvent::Subagent(_)
        | EngineEvent::ModeSwitched(_)
        | EngineEvent::ChildEvent { .. }
        | EngineEvent::Delivered(_)
        | EngineEvent::Notice { .. } => {
            return None;
        }
    })
}

/// The final update of a card, from what the record keeps of it (live and on replay).
pub fn finished_card(
    id: String,
    status: ToolStatus,
    display: &ToolDisplay,
    raw_output: Option<serde_json::Value>,
) -> SessionUpdate {
    let status = match status {
        ToolStatus::Completed => ToolCallStatus::Completed,
        ToolStatus::Failed => ToolCallStatus::Failed,
    };
    let mut fields = ToolCallUpdateFields::new()
        .status(status)
        .content(
            display
                .content
                .iter()
                .map(display_content)
                .collect::<Vec<_>>(),
        )
        .raw_output(raw_output);
    if !display.locations.is_empty() {
        fields = fields.locations(
            display
                .locations
                .iter()
                .map(|l| ToolCallLocation::new(l.path.clone()).line(l.line))
                .collect::<Vec<_>>(),
        );
    }
    update(id, fields)
}

fn display_content(content: &DisplayContent) -> ToolCallContent {
    match content {
        DisplayContent::Text { text } => {
            ToolCallContent::from(text_block(clip(text, MAX_DISPLAY_CHARS)))
        }
        DisplayContent::Diff {
            path,
            old_text,
            new_text,
        } => diff_content(path.into(), old_text.clone(), new_text.clone()),
        DisplayContent::Terminal { terminal_id } => {
            ToolCallContent::Terminal(acp::Terminal::new(terminal_id.clone()))
        }
        DisplayContent::Image { mime_type, data } => ToolCallContent::from(
            acp::ContentBlock::Image(acp::ImageContent::new(data.clone(), mime_type.clone())),
        ),
    }
}

fn diff_content(
    path: std::path::PathBuf,
    old_text: Option<String>,
    new_text: String,
) -> ToolCallContent {
    let size = old_text.as_ref().map_or(0, String::len) + new_text.len();
    if size > MAX_DIFF_BYTES {
        return ToolCallContent::from(text_block(format!(
            "{}: the change is too large to show as a diff ({size} bytes).",
            path.display()
        )));
    }
    ToolCallContent::Diff(Diff::new(path, new_text).old_text(old_text))
}

fn update(id: String, fields: ToolCallUpdateFields) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields))
}

fn effect_content(effect: &ToolEffect) -> Option<ToolCallContent> {
    match effect {
        ToolEffect::Diff {
            path,
            old_text,
            new_text,
        } => Some(diff_content(
            path.clone(),
            old_text.clone(),
            new_text.clone(),
        )),
        ToolEffect::Terminal { terminal_id } => Some(ToolCallContent::Terminal(
            acp::Terminal::new(terminal_id.clone()),
        )),
        ToolEffect::Plan(_) | ToolEffect::SandboxDenied { .. } | ToolEffect::Kept(_) => None,
    }
}

fn tool_call(view: ToolCallView) -> ToolCall {
    ToolCall::new(view.id, view.title)
        .name(view.name)
        .kind(tool_kind(view.kind))
        .status(ToolCallStatus::Pending)
        .content(view.preview.iter().filter_map(effect_content).collect())
        .locations(
            view.locations
                .into_iter()
                .map(|(path, line)| ToolCallLocation::new(path).line(line))
                .collect(),
        )
        .raw_input(view.raw_input)
}

/// The rest of a card announced when the model started the call: its title, places, proposed
/// diff and arguments (the status stays pending).
fn completed_card(view: ToolCallView) -> SessionUpdate {
    let fields = ToolCallUpdateFields::new()
        .title(view.title)
        .kind(tool_kind(view.kind))
        .content(
            view.preview
                .iter()
                .filter_map(effect_content)
                .collect::<Vec<_>>(),
        )
        .raw_input(view.raw_input);
    let fields = if view.locations.is_empty() {
        fields
    } else {
        fields.locations(
            view.locations
                .into_iter()
                .map(|(path, line)| ToolCallLocation::new(path).line(line))
                .collect::<Vec<_>>(),
        )
    };
    update(view.id, fields)
}

pub fn plan_entry(item: &TodoItem) -> PlanEntry {
    let (status, content) = match item.status.as_str() {
        "completed" => (PlanEntryStatus::Completed, item.content.clone()),
        "in_progress" => (PlanEntryStatus::InProgress, item.content.clone()),
        "cancelled" => (
            PlanEntryStatus::Completed,
            format!("(cancelled) {}", item.content),
        ),
        _ => (PlanEntryStatus::Pending, item.content.clone()),
    };
    PlanEntry::new(content, PlanEntryPriority::Medium, status)
}

pub(super) fn tool_kind(kind: ToolKind) -> acp::ToolKind {
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

fn fence(output: &str) -> String {
    format!("```\n{}\n```", output.trim_end())
}

fn clip(text: &str, max_chars: usize) -> String {
    match talaria_util::head(text, max_chars) {
        None => text.to_string(),
        Some((kept, more)) => format!("{kept}\n[… {more} more characters not shown]"),
    }
}

/// A notice as the client can show it: an ACP `notice` when it advertised notices, otherwise a
/// thought (info, warnings) or an agent message (errors).
pub fn notice_update(
    level: talaria_engine::NoticeLevel,
    message: String,
    notices: bool,
) -> acp::SessionUpdate {
    if notices {
        let severity = match level {
            talaria_engine::NoticeLevel::Info => acp::NoticeSeverity::Info,
            talaria_engine::NoticeLevel::Warning => acp::NoticeSeverity::Warning,
            talaria_engine::NoticeLevel::Error => acp::NoticeSeverity::Error,
        };
        return acp::SessionUpdate::Notice(acp::Notice::new(severity, message));
    }
    let text = acp::ContentBlock::Text(acp::TextContent::new(format!(
        "\n[{}] {message}\n",
        match level {
            talaria_engine::NoticeLevel::Info => "info",
            talaria_engine::NoticeLevel::Warning => "warning",
            talaria_engine::NoticeLevel::Error => "error",
        }
    )));
    match level {
        talaria_engine::NoticeLevel::Error => {
            acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(text))
        }
        _ => acp::SessionUpdate::AgentThoughtChunk(acp::ContentChunk::new(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_diffs_are_summarised_small_ones_sent_whole() {
        let small = ToolEffect::Diff {
            path: "/p/a".into(),
            old_text: Some("a".into()),
            new_text: "b".into(),
        };
        assert!(matches!(
            effect_content(&small),
            Some(ToolCallContent::Diff(_))
        ));
        let huge = ToolEffect::Diff {
            path: "/p/a".into(),
            old_text: None,
            new_text: "x".repeat(MAX_DIFF_BYTES + 1),
        };
        let Some(ToolCallContent::Content(content)) = effect_content(&huge) else {
            panic!("expected a text summary");
        };
        assert!(
            matches!(content.content, ContentBlock::Text(ref t) if t.text.contains("too large"))
        );
    }
}
