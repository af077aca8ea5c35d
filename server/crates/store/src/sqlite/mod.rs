//! The embedded store: one SQLite file (`TALARIA_HOME/state.db`) in WAL mode with
//! `synchronous = NORMAL`, so several Talaria processes can share it and a killed process
//! loses nothing committed (a power cut may lose the last commits, never the file's
//! consistency). Claims are lock files beside it (`claims/`).

mod bodies;
mod connections;
mod fts;
mod migrations;
mod salvage;

pub use salvage::Salvage;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use talaria_record::{Entry, EntryId, Transcript};

use crate::claims::Claims;
use crate::{
    Basis, EncodedEntry, ListPage, MetaUpdate, Refusal, SearchHit, SessionAppend, SessionMeta,
    SessionStore, StoreError, now_ms,
};
use connections::{Borrowed, Connections};

/// How long one attempt at opening and migrating keeps retrying while another process holds
/// the file (the journal then tries again, with backoff, for as long as it takes).
const OPEN_PATIENCE: Duration = Duration::from_secs(5);

/// The SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    /// Held for a writable store's life, opened per call for a read-only one (see
    /// [`connections`]).
    connections: Connections,
    claims: Claims,
    /// Opened read-only (the file or its folder cannot be written): reads work, writes fail.
    read_only: bool,
    /// The session columns it reads: a read-only file of a version before 4 has no `writer`.
    session_columns: &'static str,
    /// The damaged file this store was recovered from, when it was.
    salvaged: Option<Salvage>,
    /// The file opened (device, inode): another process that salvages a damaged store puts
    /// a new file at the path, and this one is then no longer the store.
    opened: Option<(u64, u64)>,
}

/// The device and inode of the file at `path`.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// What `talaria doctor` says about the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreReport {
    pub path: PathBuf,
    /// The file and its write-ahead log, in bytes.
    pub bytes: u64,
    pub schema_version: i64,
    pub writable: bool,
    /// `PRAGMA quick_check`: `ok`, or what is wrong.
    pub check: String,
    pub sessions: i64,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn classify(error: rusqlite::Error) -> StoreError {
    match &error {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                StoreError::Busy(error.to_string())
            }
            ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied => {
                StoreError::ReadOnly(error.to_string())
            }
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                StoreError::Corrupt(error.to_string())
            }
            ErrorCode::DiskFull => StoreError::Full(error.to_string()),
            _ => StoreError::Other(error.to_string()),
        },
        _ => StoreError::Other(error.to_string()),
    }
}

/// One migration by index (tests build older files with it).
#[cfg(test)]
pub(crate) fn migration_for_tests(index: usize) -> migrations::Migration {
    migrations::MIGRATIONS[index]
}

/// The shape of a schema, names of automatic indexes aside: each table's columns and its
/// indexes' columns (tests compare a new file with a migrated one).
#[cfg(test)]
pub(crate) fn schema_shape(connection: &Connection) -> Vec<String> {
    let mut shape = Vec::new();
    let tables: Vec<String> = connection
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'entries_fts_%' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .unwrap_or_default();
    for table in tables {
        let columns: Vec<String> = connection
            .prepare(&format!(
                "SELECT name, type, \"notnull\", pk FROM pragma_table_info('{table}')"
            ))
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok(format!(
                        "{} {} {} {}",
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?
                    ))
                })?
                .collect()
            })
            .unwrap_or_default();
        shape.push(format!("{table}: {}", columns.join(", ")));
        let indexes: Vec<String> = connection
            .prepare(&format!("SELECT name FROM pragma_index_list('{table}')"))
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .unwrap_or_default();
        let mut index_columns: Vec<String> = indexes
            .iter()
            .map(|index| {
                let columns: Vec<String> = connection
                    .prepare(&format!("SELECT name FROM pragma_index_info('{index}')"))
                    .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                    .unwrap_or_default();
                format!("{table} index ({})", columns.join(", "))
            })
            .collect();
        index_columns.sort();
        shape.extend(index_columns);
    }
    shape
}

const SESSION_COLUMNS: &str = "id, cwd, additional_directories, title, model, mode, created_at, \
    updated_at, input_tokens, output_tokens, cost, parent_id, writer";
/// The session columns of a file of a version before 4.
const SESSION_COLUMNS_BEFORE_WRITER: &str = "id, cwd, additional_directories, title, model, \
    mode, created_at, updated_at, input_tokens, output_tokens, cost, parent_id";

fn meta_of(row: &rusqlite::Row) -> rusqlite::Result<SessionMeta> {
    let directories: String = row.get(2)?;
    Ok(SessionMeta {
        id: row.get(0)?,
        cwd: row.get(1)?,
        additional_directories: serde_json::from_str(&directories).unwrap_or_default(),
        title: row.get(3)?,
        model: row.get(4)?,
        mode: row.get(5)?,
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
        input_tokens: u64::try_from(row.get::<_, i64>(8)?).unwrap_or(0),
        output_tokens: u64::try_from(row.get::<_, i64>(9)?).unwrap_or(0),
        cost: row.get(10)?,
        parent_id: row.get(11)?,
        // A file older than version 4 (a damaged one salvaged) has no writer column.
        writer: row.get(12).unwrap_or_default(),
    })
}

fn tokens(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A test hook: `TALARIA_TEST_MIGRATION_PAUSE_MS` holds a migration's transaction open that
/// long, as a large store's migration on a slow disk would (tests of processes starting
/// together use it; nothing else sets it).
fn migration_pause_for_tests() {
    if let Some(pause) = std::env::var("TALARIA_TEST_MIGRATION_PAUSE_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(pause));
    }
}

/// How long a write waits for another program's lock before it is refused as busy (and
/// waits in the journal's backlog, which asks again every couple of seconds): short, so the
/// journal's writer is never held long by a lock it cannot take. Reads wait longer.
const WRITE_PATIENCE: Duration = Duration::from_secs(1);

/// Runs `step` until it is not refused as busy, for at most [`OPEN_PATIENCE`].
fn patiently<T>(mut step: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    let started = std::time::Instant::now();
    loop {
        match step() {
            Err(StoreError::Busy(_)) if started.elapsed() < OPEN_PATIENCE => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

impl SqliteStore {
    /// Opens (creating it and its folder when needed) and migrates the store at `path`. A
    /// store that cannot be written is opened read-only: sessions can be listed and loaded,
    /// and every write fails with `ReadOnly`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let open_error = |detail: String| StoreError::Open {
            path: path.display().to_string(),
            detail,
        };
        if let Some(parent) = path.parent()
            && !parent.exists()
        {
            let _ = talaria_util::private::private_dir(parent);
        }
        // The store holds every session's transcript: this user's alone, and so are its
        // journals (SQLite gives them the store's mode; older ones are tightened).
        let _ = talaria_util::private::create_private_file(path);
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut journal = path.as_os_str().to_owned();
            journal.push(suffix);
            let _ = talaria_util::private::private_file(Path::new(&journal));
        }
        let opened = file_identity(path);
        let (mut connection, read_only) = match Self::connect(path) {
            // SQLite opens a file it may not write for reading only, without an error: that
            // store is read-only too (and is opened again once the file can be written).
            Ok(connection) if connection.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) => {
                (connection, true)
            }
            Ok(connection) => (connection, false),
            Err(StoreError::ReadOnly(_)) if path.exists() => {
                (connections::open_read_only(path)?, true)
            }
            Err(StoreError::Other(detail)) => return Err(open_error(detail)),
            Err(other) => return Err(other),
        };
        if salvage::is_truncated(&connection, path) {
            return Err(StoreError::Corrupt(
                "the file is shorter than its header says (truncated)".into(),
            ));
        }
        let mut session_columns = SESSION_COLUMNS;
        let connections = if read_only {
            if Self::check_version(&connection)? < 4 {
                session_columns = SESSION_COLUMNS_BEFORE_WRITER;
            }
            // Closed before anything else opens the file (see `connections`).
            drop(connection);
            Connections::PerCall(path.to_path_buf())
        } else {
            patiently(|| Self::migrate(&mut connection))?;
            Connections::Held(Box::new(connections::Held {
                reader: std::sync::Mutex::new(Self::reader(path)?),
                writer: std::sync::Mutex::new(connection),
            }))
        };
        let claims_dir = path
            .parent()
            .map_or_else(|| PathBuf::from("claims"), |p| p.join("claims"));
        Ok(Self {
            path: path.to_path_buf(),
            connections,
            claims: Claims::new(claims_dir),
            read_only,
            session_columns,
            salvaged: None,
            opened,
        })
    }

    /// Opens the store at `path`; a damaged file is moved aside and what reads of it is
    /// recovered into a new store there (said by [`SessionStore::notes`]).
    pub fn open_or_salvage(path: &Path) -> Result<Self, StoreError> {
        // A salvage interrupted after its new store was complete is finished first (it logs
        // where the damaged copy is).
        salvage::finish_interrupted(path)?;
        match Self::open(path) {
            Err(StoreError::Corrupt(why)) if path.exists() => {
                tracing::error!("the session store at {} is damaged: {why}", path.display());
                let (mut store, salvage) = salvage::salvage(path)?;
                store.salvaged = Some(salvage);
                Ok(store)
            }
            other => other,
        }
    }

    /// What the salvage of a damaged file recovered, when this store came from one.
    pub fn salvaged(&self) -> Option<&Salvage> {
        self.salvaged.as_ref()
    }

    /// A connection in WAL mode that can write, or an error (`ReadOnly` when the file or its
    /// folder cannot be written).
    fn connect(path: &Path) -> Result<Connection, StoreError> {
        let connection = Connection::open(path).map_err(classify)?;
        connection.busy_timeout(WRITE_PATIENCE).map_err(classify)?;
        // Setting WAL on a fresh file needs a moment alone with it.
        patiently(|| {
            connection
                .pragma_update(None, "journal_mode", "WAL")
                .map_err(classify)
        })?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(classify)?;
        // Fail early when the file cannot be written (a read-only file or folder).
        connection
            .execute_batch("BEGIN IMMEDIATE; ROLLBACK;")
            .map_err(classify)?;
        Ok(connection)
    }

    /// The connection reads go through (the file is already in WAL mode).
    fn reader(path: &Path) -> Result<Connection, StoreError> {
        let connection = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(classify)?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(classify)?;
        connection
            .execute_batch("PRAGMA query_only = ON")
            .map_err(classify)?;
        Ok(connection)
    }

    /// The file it lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        i64::try_from(migrations::MIGRATIONS.len()).unwrap_or(i64::MAX)
    }

    fn check_version(connection: &Connection) -> Result<i64, StoreError> {
        let applied: i64 = connection
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(classify)?;
        let known = Self::schema_version();
        if applied > known {
            return Err(StoreError::TooNew {
                found: applied,
                known,
            });
        }
        Ok(applied)
    }

    /// Applies the missing migrations, one process at a time: the version is read again
    /// inside an immediate transaction, so a process that waited for another finds the work
    /// done.
    fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
        if Self::check_version(connection)? == Self::schema_version() {
            return Ok(());
        }
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        let applied = Self::check_version(&tx)?;
        for (index, migration) in migrations::MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(applied).unwrap_or(0))
        {
            migration(&tx).map_err(classify)?;
            tx.pragma_update(
                None,
                "user_version",
                i64::try_from(index + 1).unwrap_or(i64::MAX),
            )
            .map_err(classify)?;
        }
        if applied > 0 {
            let to = Self::schema_version();
            tracing::info!(from = applied, to, "session store migrated");
        }
        migration_pause_for_tests();
        tx.commit().map_err(classify)
    }

    /// Copies the store, consistent as of now, to `target` (which must not exist).
    pub fn backup(&self, target: &Path) -> Result<(), StoreError> {
        self.lock()?
            .execute("VACUUM INTO ?1", params![target.display().to_string()])
            .map_err(classify)?;
        Ok(())
    }

    /// The store's state, for `talaria doctor`.
    pub fn report(&self) -> Result<StoreReport, StoreError> {
        let connection = self.lock()?;
        let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
        let wal = PathBuf::from(format!("{}-wal", self.path.display()));
        let check: String = connection
            .query_row("PRAGMA quick_check", [], |row| row.get(0))
            .map_err(classify)?;
        let sessions: i64 = connection
            .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
            .map_err(classify)?;
        let writable = !self.read_only
            && connection
                .execute_batch("BEGIN IMMEDIATE; ROLLBACK;")
                .is_ok();
        Ok(StoreReport {
            path: self.path.clone(),
            bytes: size(&self.path) + size(&wal),
            schema_version: Self::check_version(&connection)?,
            writable,
            check,
            sessions,
        })
    }

    /// Appends `entries` inside an open transaction.
    fn append_in(
        tx: &rusqlite::Transaction,
        session_id: &str,
        entries: &[EncodedEntry],
    ) -> Result<(), StoreError> {
        for entry in entries {
            let row = bodies::upsert(tx, session_id, entry).map_err(classify)?;
            fts::index(tx, row, entry.search_text().as_deref().map(String::as_str))
                .map_err(classify)?;
        }
        tx.execute(
            "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
            params![session_id, now_ms()],
        )
        .map_err(classify)?;
        Ok(())
    }

    /// One session's checked append inside an open transaction: written (its `writer` now
    /// the basis's), found already there, or refused.
    fn append_checked_in(
        tx: &rusqlite::Transaction,
        append: &SessionAppend,
    ) -> Result<Option<Refusal>, StoreError> {
        let stored: Option<String> = tx
            .query_row(
                "SELECT writer FROM sessions WHERE id = ?1",
                params![append.session],
                |row| row.get(0),
            )
            .optional()
            .map_err(classify)?;
        let same = |entry: &EncodedEntry| -> Result<bool, StoreError> {
            let id = i64::try_from(entry.id).unwrap_or(i64::MAX);
            let body = entry.body.text()?;
            tx.query_row(
                "SELECT body FROM entries WHERE session_id = ?1 AND entry_id = ?2",
                params![append.session, id],
                |row| bodies::same_body(row, 0, body.as_bytes()),
            )
            .optional()
            .map(|same| same.unwrap_or(false))
            .map_err(classify)
        };
        match crate::check_basis(append, stored.as_deref(), same)? {
            crate::Check::Write => {
                Self::append_in(tx, &append.session, &append.entries)?;
                tx.execute(
                    "UPDATE sessions SET writer = ?2 WHERE id = ?1",
                    params![append.session, append.basis.writer],
                )
                .map_err(classify)?;
                Ok(None)
            }
            crate::Check::AlreadyThere => Ok(None),
            crate::Check::Refused(refusal) => Ok(Some(refusal)),
        }
    }

    /// The writes' connection.
    fn lock(&self) -> Result<Borrowed<'_>, StoreError> {
        self.connections.writer()
    }

    /// The reads' connection.
    fn read(&self) -> Result<Borrowed<'_>, StoreError> {
        self.connections.reader()
    }
}

/// Whether `session_id` was deleted (its tombstone is there).
fn is_deleted(connection: &Connection, session_id: &str) -> Result<bool, StoreError> {
    connection
        .query_row(
            "SELECT 1 FROM deleted_sessions WHERE id = ?1",
            params![session_id],
            |_| Ok(()),
        )
        .optional()
        .map(|found| found.is_some())
        .map_err(classify)
}

/// Refuses writes of a deleted session (`Deleted`).
fn refuse_deleted(connection: &Connection, session_id: &str) -> Result<(), StoreError> {
    if is_deleted(connection, session_id)? {
        return Err(StoreError::Deleted(session_id.to_string()));
    }
    Ok(())
}

/// Records a new session (nothing when it is there already) on `connection`, inside a
/// transaction; a deleted one is refused (`Deleted`).
fn create_in(connection: &Connection, meta: &SessionMeta) -> Result<(), StoreError> {
    refuse_deleted(connection, &meta.id)?;
    let directories = serde_json::to_string(&meta.additional_directories)
        .map_err(|e| StoreError::Other(e.to_string()))?;
    connection
        .execute(
            &format!(
                "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES \
                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
                 ON CONFLICT (id) DO NOTHING"
            ),
            params![
                meta.id,
                meta.cwd,
                directories,
                meta.title,
                meta.model,
                meta.mode,
                meta.created_at,
                meta.updated_at,
                tokens(meta.input_tokens),
                tokens(meta.output_tokens),
                meta.cost,
                meta.parent_id,
                meta.writer
            ],
        )
        .map_err(classify)?;
    Ok(())
}

impl SessionStore for SqliteStore {
    fn create(&self, meta: &SessionMeta) -> Result<(), StoreError> {
        let mut connection = self.lock()?;
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        create_in(&tx, meta)?;
        tx.commit().map_err(classify)
    }

    fn create_with_entries(
        &self,
        meta: &SessionMeta,
        entries: &[EncodedEntry],
        basis: &Basis,
    ) -> Result<Option<Refusal>, StoreError> {
        let mut connection = self.lock()?;
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        match create_in(&tx, meta) {
            Err(StoreError::Deleted(session)) => return Ok(Some(Refusal::Missing { session })),
            other => other?,
        }
        let append = SessionAppend {
            session: meta.id.clone(),
            entries: entries.to_vec(),
            basis: basis.clone(),
        };
        let refused = Self::append_checked_in(&tx, &append)?;
        tx.commit().map_err(classify)?;
        Ok(refused)
    }

    fn append_checked(&self, batch: &[SessionAppend]) -> Result<Vec<Refusal>, StoreError> {
        if batch.iter().all(|a| a.entries.is_empty()) {
            return Ok(Vec::new());
        }
        let mut connection = self.lock()?;
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        let mut refused = Vec::new();
        for append in batch.iter().filter(|a| !a.entries.is_empty()) {
            refused.extend(Self::append_checked_in(&tx, append)?);
        }
        tx.commit().map_err(classify)?;
        Ok(refused)
    }

    fn append_encoded(&self, session_id: &str, entries: &[EncodedEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut connection = self.lock()?;
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        refuse_deleted(&tx, session_id)?;
        Self::append_in(&tx, session_id, entries)?;
        tx.commit().map_err(classify)
    }

    fn append_batch(&self, batch: &[(String, Vec<EncodedEntry>)]) -> Result<(), StoreError> {
        if batch.iter().all(|(_, entries)| entries.is_empty()) {
            return Ok(());
        }
        let mut connection = self.lock()?;
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        for (session_id, entries) in batch {
            if !entries.is_empty() {
                refuse_deleted(&tx, session_id)?;
                Self::append_in(&tx, session_id, entries)?;
            }
        }
        tx.commit().map_err(classify)
    }

    fn update(&self, session_id: &str, update: &MetaUpdate) -> Result<(), StoreError> {
        let (input, output) = update.tokens.unzip();
        self.lock()?
            .execute(
                "UPDATE sessions SET
                    title = COALESCE(?2, title),
                    model = COALESCE(?3, model),
                    mode = COALESCE(?4, mode),
                    input_tokens = COALESCE(?5, input_tokens),
                    output_tokens = COALESCE(?6, output_tokens),
                    cost = COALESCE(?7, cost),
                    updated_at = COALESCE(?8, updated_at)
                 WHERE id = ?1",
                params![
                    session_id,
                    update.title,
                    update.model,
                    update.mode,
                    input.map(tokens),
                    output.map(tokens),
                    update.cost,
                    update.updated_at
                ],
            )
            .map_err(classify)?;
        Ok(())
    }

    fn load(&self, session_id: &str) -> Result<(SessionMeta, Transcript), StoreError> {
        let connection = self.read()?;
        let meta = connection
            .query_row(
                &format!(
                    "SELECT {} FROM sessions WHERE id = ?1",
                    self.session_columns
                ),
                params![session_id],
                meta_of,
            )
            .optional()
            .map_err(classify)?
            .ok_or_else(|| StoreError::NotFound(session_id.to_string()))?;
        let mut select = connection
            .prepare_cached("SELECT body FROM entries WHERE session_id = ?1 ORDER BY entry_id")
            .map_err(classify)?;
        let mut entries = Vec::new();
        let rows = select
            .query_map(params![session_id], |row| bodies::entry_at(row, 0))
            .map_err(classify)?;
        for row in rows {
            match row.map_err(classify)? {
                Ok(entry) => entries.push(entry),
                Err(e) => {
                    return Err(StoreError::Corrupt(format!(
                        "an entry of session {session_id} cannot be read: {e}"
                    )));
                }
            }
        }
        Ok((meta, Transcript::from_entries(entries)))
    }

    fn list(
        &self,
        cwd: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let (after_time, after_id) = crate::list_cursor(cursor);
        let limit = limit.clamp(1, 1000);
        let connection = self.read()?;
        let mut select = connection
            .prepare_cached(&format!(
                "SELECT {} FROM sessions
                 WHERE (?1 IS NULL OR cwd = ?1)
                   AND (?2 IS NULL OR (updated_at, id) < (?2, ?3))
                 ORDER BY updated_at DESC, id DESC LIMIT ?4",
                self.session_columns
            ))
            .map_err(classify)?;
        let rows = select
            .query_map(
                params![
                    cwd,
                    after_time,
                    after_id,
                    i64::try_from(limit + 1).unwrap_or(1001)
                ],
                meta_of,
            )
            .map_err(classify)?;
        let sessions = rows.collect::<Result<Vec<_>, _>>().map_err(classify)?;
        Ok(ListPage::of(sessions, limit))
    }

    fn delete(&self, session_id: &str, waiting_here: bool) -> Result<bool, StoreError> {
        // Held while deleting, so no other process can open it meanwhile.
        let held_before = self.claims.holds(session_id);
        self.claims.claim(session_id)?;
        let deleted = (|| {
            let mut connection = self.lock()?;
            let tx = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(classify)?;
            tx.execute(
                "DELETE FROM entries_fts WHERE rowid IN
                    (SELECT row FROM entries WHERE session_id = ?1)",
                params![session_id],
            )
            .map_err(classify)?;
            tx.execute(
                "DELETE FROM entries WHERE session_id = ?1",
                params![session_id],
            )
            .map_err(classify)?;
            let removed = tx
                .execute("DELETE FROM sessions WHERE id = ?1", params![session_id])
                .map_err(classify)?;
            let deleted = removed > 0 || waiting_here;
            if deleted {
                tx.execute(
                    "INSERT OR IGNORE INTO deleted_sessions (id, deleted_at) VALUES (?1, ?2)",
                    params![session_id, now_ms()],
                )
                .map_err(classify)?;
            }
            if talaria_util::failpoint::injected("delete::commit::before") {
                return Err(StoreError::Full(
                    "injected at delete::commit::before".into(),
                ));
            }
            tx.commit().map_err(classify)?;
            talaria_util::failpoint::step("delete::commit::after");
            Ok(deleted)
        })();
        match &deleted {
            Ok(true) => self.claims.remove(session_id),
            _ if !held_before => self.claims.release(session_id),
            _ => {}
        }
        deleted
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let Some(query) = fts::query_of(query) else {
            return Ok(Vec::new());
        };
        let connection = self.read()?;
        let mut select = connection
            .prepare_cached(
                "SELECT e.session_id, e.entry_id, bm25(entries_fts) AS rank,
                        snippet(entries_fts, 0, '[', ']', '…', 16), e.at_ms, s.title
                 FROM entries_fts f
                 JOIN entries e ON e.row = f.rowid
                 JOIN sessions s ON s.id = e.session_id
                 WHERE entries_fts MATCH ?1
                 ORDER BY rank LIMIT ?2",
            )
            .map_err(classify)?;
        let rows = select
            .query_map(
                params![query, i64::try_from(limit.clamp(1, 100)).unwrap_or(100)],
                |row| {
                    Ok(SearchHit {
                        session_id: row.get(0)?,
                        entry_id: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                        rank: row.get(2)?,
                        snippet: row.get(3)?,
                        at_ms: row.get(4)?,
                        session_title: row.get(5)?,
                    })
                },
            )
            .map_err(classify)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(classify)
    }

    fn was_deleted(&self, session_id: &str) -> Result<bool, StoreError> {
        let connection = self.read()?;
        is_deleted(&connection, session_id)
    }

    fn entries_around(
        &self,
        session_id: &str,
        entry_id: EntryId,
        before: usize,
        after: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let connection = self.read()?;
        let id = i64::try_from(entry_id).unwrap_or(i64::MAX);
        let read = |sql: &str, count: usize| -> Result<Vec<Entry>, StoreError> {
            let mut select = connection.prepare_cached(sql).map_err(classify)?;
            let rows = select
                .query_map(
                    params![session_id, id, i64::try_from(count).unwrap_or(0)],
                    |row| bodies::entry_at(row, 0),
                )
                .map_err(classify)?;
            let mut entries = Vec::new();
            for row in rows {
                if let Ok(entry) = row.map_err(classify)? {
                    entries.push(entry);
                }
            }
            Ok(entries)
        };
        let mut earlier = read(
            "SELECT body FROM entries WHERE session_id = ?1 AND entry_id < ?2
             ORDER BY entry_id DESC LIMIT ?3",
            before,
        )?;
        earlier.reverse();
        earlier.extend(read(
            "SELECT body FROM entries WHERE session_id = ?1 AND entry_id >= ?2
             ORDER BY entry_id LIMIT ?3",
            after + 1,
        )?);
        Ok(earlier)
    }

    fn is_replaced(&self) -> bool {
        match (self.opened, file_identity(&self.path)) {
            (Some(opened), Some(now)) => opened != now,
            _ => false,
        }
    }

    fn accepts_writes(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly(self.path.display().to_string()));
        }
        // Takes the write lock (waiting at most the write patience) and lets it go.
        self.lock()?
            .execute_batch("BEGIN IMMEDIATE; ROLLBACK;")
            .map_err(classify)
    }

    fn claim(&self, session_id: &str) -> Result<(), StoreError> {
        self.claims.claim(session_id)
    }

    fn release(&self, session_id: &str) -> Result<(), StoreError> {
        self.claims.release(session_id);
        Ok(())
    }

    fn holds(&self, session_id: &str) -> bool {
        self.claims.holds(session_id)
    }

    fn ask_for(&self, session_id: &str, by: &str) -> Result<Option<String>, StoreError> {
        let mut connection = self.lock()?;
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        let now = crate::now_ms();
        let standing: Option<(String, i64)> = tx
            .query_row(
                "SELECT asked_by, asked_at FROM session_asks WHERE session_id = ?1",
                params![session_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(classify)?;
        if let Some((other, at)) = standing
            && other != by
            && now - at < crate::ASK_FRESH_MS
        {
            return Ok(Some(other));
        }
        tx.execute(
            "INSERT INTO session_asks (session_id, asked_by, asked_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (session_id) DO UPDATE SET asked_by = ?2, asked_at = ?3",
            params![session_id, by, now],
        )
        .map_err(classify)?;
        tx.commit().map_err(classify)?;
        Ok(None)
    }

    fn asked_for(
        &self,
        session_ids: &[String],
        within_ms: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        let connection = self.read()?;
        let mut select = connection
            .prepare_cached("SELECT session_id, asked_by FROM session_asks WHERE asked_at > ?1")
            .map_err(classify)?;
        let fresh = crate::now_ms() - within_ms;
        let rows = select
            .query_map(params![fresh], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(classify)?;
        let mut asked = Vec::new();
        for row in rows {
            let (id, by): (String, String) = row.map_err(classify)?;
            if session_ids.contains(&id) {
                asked.push((id, by));
            }
        }
        Ok(asked)
    }

    fn withdraw_ask(&self, session_id: &str, by: &str) -> Result<(), StoreError> {
        self.lock()?
            .execute(
                "DELETE FROM session_asks WHERE session_id = ?1 AND asked_by = ?2",
                params![session_id, by],
            )
            .map_err(classify)?;
        Ok(())
    }

    fn notes(&self) -> Vec<String> {
        self.salvaged.iter().map(Salvage::describe).collect()
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn checkpoint(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        self.lock()?
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(classify)
    }
}
