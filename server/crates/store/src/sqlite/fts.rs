//! What of an entry is searchable, and turning a user's words into a safe FTS5 query.

use rusqlite::{Connection, params};

/// (Re)indexes one entry's searchable text under its row (a lookup by rowid, whatever the
/// index's size).
pub(super) fn index(connection: &Connection, row: i64, text: Option<&str>) -> rusqlite::Result<()> {
    connection.execute("DELETE FROM entries_fts WHERE rowid = ?1", params![row])?;
    if let Some(text) = text {
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
    let terms: Vec<String> = crate::search_text::words_of(words)
        .into_iter()
        .map(|w| format!("\"{w}\""))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" OR "))
}
