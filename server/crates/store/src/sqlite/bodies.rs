//! How entry bodies are written and read: JSON stored as TEXT, or, for a large one, as a
//! BLOB of the same UTF-8 bytes written through SQLite's incremental I/O (binding it as text
//! would have SQLite copy it twice, so a 50 MB answer would cost 100 MB more to save).

use std::io::Write;

use rusqlite::blob::ZeroBlob;
use rusqlite::types::ValueRef;
use rusqlite::{MAIN_DB, Row, Transaction, params};
use talaria_record::Entry;

use crate::EncodedEntry;

/// Bodies longer than this are written as a BLOB.
pub(super) const INLINE_BODY_MAX: usize = 1 << 20;

/// Upserts one entry's row (by session and entry id) and writes its body; its rowid.
pub(super) fn upsert(
    tx: &Transaction,
    session_id: &str,
    entry: &EncodedEntry,
) -> rusqlite::Result<i64> {
    let mut upsert = tx.prepare_cached(
        "INSERT INTO entries (session_id, entry_id, at_ms, kind, body)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session_id, entry_id) DO UPDATE
         SET body = excluded.body, at_ms = excluded.at_ms, kind = excluded.kind
         RETURNING row",
    )?;
    let id = i64::try_from(entry.id).unwrap_or(i64::MAX);
    let (kind, at_ms) = (entry.kind, entry.at_ms);
    let body = entry
        .body
        .text()
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    if body.len() <= INLINE_BODY_MAX {
        return upsert.query_row(params![session_id, id, at_ms, kind, body.as_str()], |row| {
            row.get(0)
        });
    }
    let size = u64::try_from(body.len()).unwrap_or(u64::MAX);
    let row: i64 = upsert.query_row(
        params![session_id, id, at_ms, kind, ZeroBlob(size)],
        |row| row.get(0),
    )?;
    let mut blob = tx.blob_open(MAIN_DB, c"entries", c"body", row, false)?;
    blob.write_all(body.as_bytes())
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    blob.close()?;
    Ok(row)
}

/// The entry in column `index` of `row`, parsed where SQLite holds it (TEXT or BLOB); the
/// outer error is SQLite's, the inner one says the body is not an entry.
pub(super) fn entry_at(
    row: &Row,
    index: usize,
) -> rusqlite::Result<Result<Entry, serde_json::Error>> {
    Ok(match row.get_ref(index)? {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => serde_json::from_slice(bytes),
        other => {
            let found = other.data_type();
            return Err(rusqlite::Error::InvalidColumnType(
                index,
                "body".into(),
                found,
            ));
        }
    })
}

/// Whether the body in column `index` of `row` is exactly `body`'s bytes (TEXT or BLOB).
pub(super) fn same_body(row: &Row, index: usize, body: &[u8]) -> rusqlite::Result<bool> {
    Ok(match row.get_ref(index)? {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes == body,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use talaria_record::{AssistantEntry, EntryBody, Transcript};

    use crate::conformance::meta;
    use crate::{SessionStore, SqliteStore};

    use super::INLINE_BODY_MAX;

    #[test]
    fn a_large_body_is_written_as_a_blob_and_read_back_like_any_other() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("state.db");
        let store = SqliteStore::open(&path).expect("open");
        store.create(&meta("s", "/w", 1)).expect("create");
        let mut transcript = Transcript::with_system("sys");
        let large = "word ".repeat(INLINE_BODY_MAX / 2) + "needle-at-the-end";
        transcript.push(EntryBody::Assistant(AssistantEntry {
            text: large.clone(),
            ..AssistantEntry::default()
        }));
        transcript.push(talaria_record::testing::user("after"));
        store.append("s", transcript.entries()).expect("append");
        // Rewritten in place (as compaction does), then rewritten small.
        store
            .append("s", &transcript.entries()[1..2])
            .expect("again");
        let (_, loaded) = store.load("s").expect("load");
        assert_eq!(loaded.entries(), transcript.entries());
        let large_id = transcript.entries()[1].id;
        let around = store.entries_around("s", large_id, 1, 1).expect("around");
        assert_eq!(around.len(), 3);

        let connection = rusqlite::Connection::open(&path).expect("raw");
        let kinds: Vec<String> = connection
            .prepare("SELECT typeof(body) FROM entries ORDER BY entry_id")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .expect("types");
        assert_eq!(kinds, ["text", "blob", "text"]);
        // Searchable by its opening, not by what lies past the index's bound.
        assert_eq!(store.search("word", 5).expect("search").len(), 1);
        assert!(store.search("needle", 5).expect("search").is_empty());
    }
}
