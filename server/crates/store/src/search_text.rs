//! What of an entry is searchable and how it is filed, shared by every store, and a user's
//! words as a safe query (no operator they typed can break it).

use talaria_record::{Entry, EntryBody, UserPart};

/// Tool output indexed per entry, at most.
const MAX_INDEXED_CHARS: usize = 8000;

/// The searchable text of an entry, if it has any.
pub(crate) fn text_of(entry: &Entry) -> Option<String> {
    let text = match &entry.body {
        EntryBody::User { model_view, .. } => model_view
            .iter()
            .filter_map(|part| match part {
                UserPart::Text { text } => Some(text.as_str()),
                UserPart::Image { .. } => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        EntryBody::Assistant(assistant) => assistant.text.clone(),
        EntryBody::ToolResult(result) => {
            let output: String = result.model_text.chars().take(MAX_INDEXED_CHARS).collect();
            format!("{}\n{output}", result.display.title)
        }
        EntryBody::Summary { text, .. } => text.clone(),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

/// The kind an entry is filed under.
pub(crate) fn kind_of(body: &EntryBody) -> &'static str {
    match body {
        EntryBody::System { .. } => "system",
        EntryBody::User { .. } => "user",
        EntryBody::Assistant(_) => "assistant",
        EntryBody::ToolResult(_) => "tool_result",
        EntryBody::Notice { .. } => "notice",
        EntryBody::ModeChanged { .. } => "mode_changed",
        EntryBody::ModelChanged { .. } => "model_changed",
        EntryBody::Plan { .. } => "plan",
        EntryBody::Summary { .. } => "summary",
        EntryBody::Interrupted { .. } => "interrupted",
        EntryBody::Nudge { .. } => "nudge",
    }
}

/// The words of a query (letters, digits and `_`), at most 32.
pub(crate) fn words_of(query: &str) -> Vec<&str> {
    query
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .take(32)
        .collect()
}

/// Words as a PostgreSQL `tsquery` joined with OR (ranking puts entries with every word
/// first); stop words among them are dropped by the server.
#[cfg(feature = "postgres")]
pub(crate) fn tsquery_of(query: &str) -> Option<String> {
    let words = words_of(query);
    (!words.is_empty()).then(|| words.join(" | "))
}
