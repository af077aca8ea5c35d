//! Versioned schema migrations (`PRAGMA user_version` is the applied count). A new file goes
//! through all of them too: one path to the schema, on an empty file a few milliseconds.

use rusqlite::Transaction;

use super::fts;

/// One migration: applied once, in order, in a transaction.
pub(super) type Migration = fn(&Transaction) -> rusqlite::Result<()>;

/// The migrations, oldest first. Append only: a released migration never changes.
pub(super) const MIGRATIONS: &[Migration] = &[
    sessions_and_entries,
    search_and_claims,
    index_by_rowid,
    last_writer,
    tombstones,
    asks,
];

/// 1: sessions and their record entries.
fn sessions_and_entries(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            cwd TEXT NOT NULL,
            additional_directories TEXT NOT NULL DEFAULT '[]',
            title TEXT,
            model TEXT NOT NULL DEFAULT '',
            mode TEXT NOT NULL DEFAULT '',
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cost REAL,
            parent_id TEXT
        );
        CREATE INDEX sessions_by_update ON sessions(updated_at DESC, id DESC);
        CREATE INDEX sessions_by_cwd ON sessions(cwd, updated_at DESC, id DESC);
        CREATE TABLE entries (
            session_id TEXT NOT NULL,
            entry_id INTEGER NOT NULL,
            at_ms INTEGER NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, entry_id)
        ) WITHOUT ROWID;",
    )
}

/// 2: full-text search over messages (backfilled), and which process has a session open.
fn search_and_claims(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE VIRTUAL TABLE entries_fts USING fts5(
            text, session_id UNINDEXED, entry_id UNINDEXED, tokenize = 'porter unicode61'
        );
        ALTER TABLE sessions ADD COLUMN owner_pid INTEGER;",
    )?;
    let mut select = tx.prepare("SELECT session_id, entry_id, body FROM entries")?;
    let rows = select.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, String>(2)?,
        ))
    })?;
    for row in rows {
        let (session_id, entry_id, body) = row?;
        // Version 2's index had the session and entry as columns (version 3 rebuilds it).
        if let Some(text) = serde_json::from_str(&body)
            .ok()
            .as_ref()
            .and_then(crate::search_text::text_of)
        {
            tx.execute(
                "INSERT INTO entries_fts (text, session_id, entry_id) VALUES (?1, ?2, ?3)",
                rusqlite::params![text, session_id, entry_id],
            )?;
        }
    }
    Ok(())
}

/// 3: entries get a rowid, and the search index is keyed by it, so re-indexing an entry is a
/// lookup instead of a scan of the whole index (the old index deleted by columns it does not
/// index). Claims move to lock files (the `owner_pid` column stays, unused).
fn index_by_rowid(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE entries_v3 (
            row INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            entry_id INTEGER NOT NULL,
            at_ms INTEGER NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            UNIQUE (session_id, entry_id)
        );
        INSERT INTO entries_v3 (session_id, entry_id, at_ms, kind, body)
            SELECT session_id, entry_id, at_ms, kind, body FROM entries
            ORDER BY session_id, entry_id;
        DROP TABLE entries;
        ALTER TABLE entries_v3 RENAME TO entries;
        DROP TABLE entries_fts;
        CREATE VIRTUAL TABLE entries_fts USING fts5(text, tokenize = 'porter unicode61');",
    )?;
    let mut select = tx.prepare("SELECT row, body FROM entries")?;
    let rows = select.query_map([], |row| {
        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
    })?;
    for row in rows {
        let (rowid, body) = row?;
        if let Ok(entry) = serde_json::from_str(&body) {
            let text = crate::search_text::text_of(&entry);
            fts::index(tx, rowid, text.as_deref())?;
        }
    }
    Ok(())
}

/// 4: who last committed a session's entries (a journal's token), so a writer whose entries
/// do not follow it never replaces what it wrote (`SessionStore::append_checked`).
fn last_writer(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch("ALTER TABLE sessions ADD COLUMN writer TEXT NOT NULL DEFAULT '';")
}

/// 5: the ids of deleted sessions, so nothing written after a delete (a spool adopted late, a
/// waiting creation) brings a session back: a create, append or fork into one is refused.
fn tombstones(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE deleted_sessions (
            id TEXT PRIMARY KEY,
            deleted_at INTEGER NOT NULL
        ) WITHOUT ROWID;",
    )
}

/// 6: a session another process asks this one to hand over (`SessionStore::ask_for`).
fn asks(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE session_asks (
            session_id TEXT PRIMARY KEY,
            asked_by TEXT NOT NULL,
            asked_at INTEGER NOT NULL
        ) WITHOUT ROWID;",
    )
}
