//! What of an entry is searchable, and turning a user's words into a safe FTS5 query.

use rusqlite::{Connection, params};
use talaria_record::{Entry, EntryBody, UserPart};

/// Tool output indexed per entry, at most.
const MAX_INDEXED_CHARS: usize = 8000;

/// The searchable text of an entry, if it has any.
pub(super) fn text_of(entry: &Entry) -> Option<String> {
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

/// (Re)indexes one entry under its row (a lookup by rowid, whatever the index's size).
pub(super) fn index(connection: &Connection, row: i64, entry: &Entry) -> rusqlite::Result<()> {
    connection.execute("DELETE FROM entries_fts WHERE rowid = ?1", params![row])?;
    if let Some(text) = text_of(entry) {
        connection.execute(
            "INSERT INTO entries_fts (rowid, text) VALUES (?1, ?2)",
            params![row, text],
        )?;
    }
    Ok(())
}

/// Words as FTS5 phrases joined with OR (ranking puts entries with every word first); no
/// operator the user typed can break the query.
pub(super) fn query_of(words: &str) -> Option<String> {
    let terms: Vec<String> = words
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .take(32)
        .map(|w| format!("\"{w}\""))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" OR "))
}
