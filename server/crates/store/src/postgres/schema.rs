//! The PostgreSQL schema and its versioned migrations, applied once under an advisory lock;
//! a database newer than this build is refused.

use postgres::Client;

use crate::StoreError;

/// The schema version this build writes (the number of migrations).
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Serialises migrations across every process using the database.
const MIGRATION_LOCK: i64 = 0x0074_616c_6172_6961;

/// Each migration, in order; a fresh database gets them all.
const MIGRATIONS: &[&str] = &[
    // 1: sessions, entries with their search vector, claims.
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        cwd TEXT NOT NULL,
        additional_directories TEXT NOT NULL DEFAULT '[]',
        title TEXT,
        model TEXT NOT NULL,
        mode TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        cost DOUBLE PRECISION,
        parent_id TEXT
     );
     CREATE INDEX sessions_by_update ON sessions (updated_at DESC, id DESC);
     CREATE INDEX sessions_by_cwd ON sessions (cwd, updated_at DESC, id DESC);
     CREATE TABLE entries (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        entry_id BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        search_text TEXT,
        search TSVECTOR GENERATED ALWAYS AS
            (to_tsvector('english', coalesce(search_text, ''))) STORED,
        PRIMARY KEY (session_id, entry_id)
     );
     CREATE INDEX entries_search ON entries USING GIN (search);
     CREATE TABLE claims (
        session_id TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        since BIGINT NOT NULL
     );",
    // 2: who last committed a session's entries (a journal's token), so a writer whose
    // entries do not follow it never replaces what it wrote.
    "ALTER TABLE sessions ADD COLUMN writer TEXT NOT NULL DEFAULT '';",
    // 3: the ids of deleted sessions, so nothing written after a delete (a spool adopted
    // late, a waiting creation) brings a session back.
    "CREATE TABLE deleted_sessions (
        id TEXT PRIMARY KEY,
        deleted_at BIGINT NOT NULL
     );",
    // 4: a session another process asks the one holding it to hand over.
    "CREATE TABLE session_asks (
        session_id TEXT PRIMARY KEY,
        asked_by TEXT NOT NULL,
        asked_at BIGINT NOT NULL
     );",
];

fn other(error: &postgres::Error) -> StoreError {
    StoreError::Other(error.to_string())
}

/// Brings the database to [`VERSION`], one process at a time.
pub fn migrate(client: &mut Client) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|e| other(&e))?;
    let migrated = apply(client);
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    migrated?;
    unlocked.map_err(|e| other(&e))?;
    Ok(())
}

fn apply(client: &mut Client) -> Result<(), StoreError> {
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS talaria_schema (version BIGINT NOT NULL)")
        .map_err(|e| other(&e))?;
    let applied: i64 = client
        .query_opt("SELECT version FROM talaria_schema", &[])
        .map_err(|e| other(&e))?
        .map_or(0, |row| row.get(0));
    if applied > VERSION {
        return Err(StoreError::TooNew {
            found: applied,
            known: VERSION,
        });
    }
    let mut tx = client.transaction().map_err(|e| other(&e))?;
    for (index, migration) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(applied).unwrap_or(0))
    {
        tx.batch_execute(migration).map_err(|e| other(&e))?;
        tracing::info!(version = index + 1, "PostgreSQL session store migrated");
    }
    tx.execute("DELETE FROM talaria_schema", &[])
        .map_err(|e| other(&e))?;
    tx.execute(
        "INSERT INTO talaria_schema (version) VALUES ($1)",
        &[&VERSION],
    )
    .map_err(|e| other(&e))?;
    tx.commit().map_err(|e| other(&e))
}
