//! A stored record replayed as the `session/update`s a client saw live: the user's messages,
//! thoughts and answers, tool cards (opened with their title, kind, places and arguments,
//! then finished with the same content as live) and plans.

use serde_json::{Value, json};
use talaria_protocol::acp::{
    self, ContentBlock, ContentChunk, Plan, SessionUpdate, TextContent, ToolCall, ToolCallLocation,
    ToolCallStatus,
};
use talaria_record::{EntryBody, InputBlock, ResultStatus};
use talaria_tools::{TodoItem, ToolStatus};

use super::state::Replay;
use super::updates;

impl Replay {
    /// The updates of the record's entries, one entry at a time, in order.
    pub fn entries(&self) -> impl Iterator<Item = Vec<SessionUpdate>> + '_ {
        self.transcript
            .entries()
            .iter()
            .map(|entry| entry_updates(entry, self.compaction, self.subagents))
            .filter(|updates| !updates.is_empty())
    }

    /// The updates of the record's entries after entry `first` (all without one) up to
    /// entry `last` (all without one).
    pub fn entries_between(
        &self,
        first: Option<talaria_record::EntryId>,
        last: Option<talaria_record::EntryId>,
    ) -> impl Iterator<Item = Vec<SessionUpdate>> + '_ {
        self.transcript
            .entries()
            .iter()
            .skip_while(move |entry| first.is_some_and(|first| entry.id <= first))
            .take_while(move |entry| last.is_none_or(|last| entry.id <= last))
            .map(|entry| entry_updates(entry, self.compaction, self.subagents))
            .filter(|updates| !updates.is_empty())
    }
}

/// The updates that show one stored entry.
pub(super) fn entry_updates(
    entry: &talaria_record::Entry,
    compaction: bool,
    subagents: bool,
) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    match &entry.body {
        EntryBody::User { input, .. } => {
            let id = user_message_id(entry.id);
            out.extend(input.iter().filter_map(content_block).map(|block| {
                SessionUpdate::UserMessageChunk(
                    ContentChunk::new(block).message_id(acp::MessageId::new(id.clone())),
                )
            }));
        }
        EntryBody::Assistant(assistant) => {
            // The id its chunks carried live; a record from before ids were kept gets one
            // from its entry, the same at every load.
            let id = assistant
                .message_id
                .clone()
                .unwrap_or_else(|| format!("agent-{}", entry.id));
            if let Some(reasoning) = assistant.reasoning.as_ref().filter(|r| !r.text.is_empty()) {
                out.push(SessionUpdate::AgentThoughtChunk(
                    ContentChunk::new(text(&reasoning.text))
                        .message_id(acp::MessageId::new(updates::thought_id(&id))),
                ));
            }
            if !assistant.text.is_empty() {
                out.push(SessionUpdate::AgentMessageChunk(
                    ContentChunk::new(text(&assistant.text)).message_id(acp::MessageId::new(id)),
                ));
            }
        }
        EntryBody::ToolResult(result) => push_tool_card(&mut out, result, subagents),
        EntryBody::Plan { items } => {
            let items: Vec<TodoItem> = items
                .iter()
                .map(|item| TodoItem {
                    id: item.id.clone(),
                    content: item.content.clone(),
                    status: item.status.clone(),
                })
                .collect();
            out.push(SessionUpdate::Plan(Plan::new(
                items.iter().map(updates::plan_entry).collect(),
            )));
        }
        EntryBody::Summary { text: summary, .. } if compaction => {
            let body = talaria_compress::summary::summary_body(summary);
            out.push(SessionUpdate::CompactionUpdate(
                acp::CompactionUpdate::new(
                    format!("compaction-record-{}", entry.id),
                    acp::CompactionStatus::Completed,
                )
                .summary(vec![text(body)]),
            ));
        }
        // A turn that did not complete says so where it stopped, so a reloaded answer is
        // not read as a complete one.
        EntryBody::Interrupted { reason } => {
            out.push(SessionUpdate::AgentThoughtChunk(ContentChunk::new(text(
                &format!("[This turn did not complete: {reason}]"),
            ))));
        }
        EntryBody::System { .. }
        | EntryBody::Notice { .. }
        | EntryBody::ModeChanged { .. }
        | EntryBody::ModelChanged { .. }
        | EntryBody::Summary { .. }
        | EntryBody::Nudge { .. }
        | EntryBody::Rewound { .. }
        | EntryBody::FilesRestored { .. }
        // Shown where it entered, as the user message it became.
        | EntryBody::SteerWaiting { .. } => {}
    }
    out
}

/// The `messageId` of a user message: its record entry's, stable across loads.
pub(super) fn user_message_id(entry: talaria_record::EntryId) -> String {
    talaria_engine::user_message_id(entry)
}

/// A tool call's card; a delegation's preceded by its child's announcement and linking the
/// child's session, as live (for clients that show subagents).
fn push_tool_card(
    out: &mut Vec<SessionUpdate>,
    result: &talaria_record::ToolResultEntry,
    subagents: bool,
) {
    let child = subagents.then(|| subagent_of(result)).flatten();
    if let Some((session_id, title)) = &child {
        out.push(SessionUpdate::SubagentUpdate(
            acp::SubagentUpdate::new(session_id.clone())
                .title(title.clone())
                .state(acp::StateUpdate::Idle(acp::IdleStateUpdate::new())),
        ));
    }
    let [opened, finished] = tool_card(result);
    out.push(opened);
    if let Some((session_id, _)) = child {
        out.push(SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate::new(
            result.client_id.clone(),
            acp::ToolCallUpdateFields::new().content(vec![acp::ToolCallContent::Session(
                acp::SessionReference::new(session_id),
            )]),
        )));
    }
    out.push(finished);
}

/// The subagent session a delegation's result names (its id and title), as it ran live.
fn subagent_of(result: &talaria_record::ToolResultEntry) -> Option<(String, String)> {
    let subagent = result.raw_output.as_ref()?.get("subagent")?;
    let session_id = subagent.get("sessionId")?.as_str()?.to_string();
    let title = subagent
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("subagent")
        .to_string();
    Some((session_id, title))
}

/// A tool call's card as it was shown live: opened, then finished.
fn tool_card(result: &talaria_record::ToolResultEntry) -> [SessionUpdate; 2] {
    let display = &result.display;
    let card = ToolCall::new(result.client_id.clone(), display.title.clone())
        .name(result.tool.clone())
        .kind(updates::tool_kind(display.kind))
        .status(ToolCallStatus::Pending)
        .locations(
            display
                .locations
                .iter()
                .map(|l| ToolCallLocation::new(l.path.clone()).line(l.line))
                .collect::<Vec<_>>(),
        )
        .raw_input((!result.raw_input.is_null()).then(|| result.raw_input.clone()));
    let status = match result.status {
        ResultStatus::Completed => ToolStatus::Completed,
        ResultStatus::Failed => ToolStatus::Failed,
    };
    [
        SessionUpdate::ToolCall(card),
        updates::finished_card(
            result.client_id.clone(),
            status,
            display,
            result.raw_output.clone(),
        ),
    ]
}

fn text(text: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text.to_string()))
}

/// A user input block as the ACP content block it came from.
pub(super) fn content_block(block: &InputBlock) -> Option<ContentBlock> {
    let json: Value = match block {
        InputBlock::Text { text } => json!({"type": "text", "text": text}),
        InputBlock::Image {
            mime_type,
            data,
            uri,
        } => json!({"type": "image", "mimeType": mime_type, "data": data, "uri": uri}),
        InputBlock::Audio { mime_type, data } => {
            json!({"type": "audio", "mimeType": mime_type, "data": data})
        }
        InputBlock::ResourceLink {
            uri,
            name,
            description,
            mime_type,
        } => json!({"type": "resource_link", "uri": uri, "name": name,
                    "description": description, "mimeType": mime_type}),
        InputBlock::Resource {
            uri,
            mime_type,
            text,
            blob,
        } => {
            let mut resource = json!({"uri": uri, "mimeType": mime_type});
            match (text, blob) {
                (Some(text), _) => resource["text"] = json!(text),
                (None, Some(blob)) => resource["blob"] = json!(blob),
                (None, None) => resource["text"] = json!(""),
            }
            json!({"type": "resource", "resource": resource})
        }
        InputBlock::Other { json } => json.clone(),
    };
    serde_json::from_value(strip_nulls(json)).ok()
}

fn strip_nulls(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.retain(|_, v| !v.is_null());
        for v in object.values_mut() {
            *v = strip_nulls(v.take());
        }
    }
    value
}
