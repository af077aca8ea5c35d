//! The embedded store: one SQLite file (`TALARIA_HOME/state.db`) in WAL mode, so several
//! Talaria processes can share it and a killed process loses at most the write in flight.

mod fts;
mod migrations;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use talaria_record::{Entry, EntryBody, EntryId, Transcript};

use crate::{ListPage, MetaUpdate, SearchHit, SessionMeta, SessionStore, StoreError, now_ms};

/// The SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    connection: Mutex<Connection>,
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

fn kind_of(body: &EntryBody) -> &'static str {
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

/// Whether a process with this pid is running (a zombie, killed but not yet reaped by its
/// parent, is not).
fn alive(pid: i32) -> bool {
    let exists = match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(errno) => errno == nix::errno::Errno::EPERM,
    };
    if !exists {
        return false;
    }
    // `/proc/PID/stat`: "pid (name) STATE …"; the name may contain spaces and parentheses.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        Err(_) => true,
    }
}

const SESSION_COLUMNS: &str = "id, cwd, additional_directories, title, model, mode, created_at, \
    updated_at, input_tokens, output_tokens, cost, parent_id";

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
    })
}

fn tokens(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl SqliteStore {
    /// Opens (creating it and its folder when needed) and migrates the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let open_error = |detail: String| StoreError::Open {
            path: path.display().to_string(),
            detail,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| open_error(e.to_string()))?;
        }
        let mut connection = Connection::open(path).map_err(|e| match classify(e) {
            StoreError::Other(detail) => open_error(detail),
            other => other,
        })?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(classify)?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(classify)?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(classify)?;
        Self::migrate(&mut connection)?;
        Ok(Self {
            path: path.to_path_buf(),
            connection: Mutex::new(connection),
        })
    }

    /// The file it lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        i64::try_from(migrations::MIGRATIONS.len()).unwrap_or(i64::MAX)
    }

    fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
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
        for (index, migration) in migrations::MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(applied).unwrap_or(0))
        {
            let tx = connection.transaction().map_err(classify)?;
            migration(&tx).map_err(classify)?;
            tx.pragma_update(
                None,
                "user_version",
                i64::try_from(index + 1).unwrap_or(i64::MAX),
            )
            .map_err(classify)?;
            tx.commit().map_err(classify)?;
            tracing::info!(version = index + 1, "session store migrated");
        }
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn lock_for_tests(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl SessionStore for SqliteStore {
    fn create(&self, meta: &SessionMeta) -> Result<(), StoreError> {
        let directories = serde_json::to_string(&meta.additional_directories)
            .map_err(|e| StoreError::Other(e.to_string()))?;
        self.lock()
            .execute(
                &format!(
                    "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
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
                    meta.parent_id
                ],
            )
            .map_err(classify)?;
        Ok(())
    }

    fn append(&self, session_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut connection = self.lock();
        let tx = connection.transaction().map_err(classify)?;
        for entry in entries {
            let body =
                serde_json::to_string(entry).map_err(|e| StoreError::Other(e.to_string()))?;
            let id = i64::try_from(entry.id).unwrap_or(i64::MAX);
            tx.execute(
                "INSERT INTO entries (session_id, entry_id, at_ms, kind, body) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session_id, entry_id) DO UPDATE SET body = excluded.body",
                params![session_id, id, entry.at_ms, kind_of(&entry.body), body],
            )
            .map_err(classify)?;
            fts::index(&tx, session_id, id, entry).map_err(classify)?;
        }
        tx.execute(
            "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
            params![session_id, now_ms()],
        )
        .map_err(classify)?;
        tx.commit().map_err(classify)
    }

    fn update(&self, session_id: &str, update: &MetaUpdate) -> Result<(), StoreError> {
        let (input, output) = update.tokens.unzip();
        self.lock()
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
        let connection = self.lock();
        let meta = connection
            .query_row(
                &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
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
            .query_map(params![session_id], |row| row.get::<_, String>(0))
            .map_err(classify)?;
        for row in rows {
            let body = row.map_err(classify)?;
            match serde_json::from_str::<Entry>(&body) {
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
        let (after_time, after_id) = match cursor.and_then(|c| c.split_once(':')) {
            Some((time, id)) => (time.parse::<i64>().ok(), Some(id.to_string())),
            None => (None, None),
        };
        let limit = limit.clamp(1, 1000);
        let connection = self.lock();
        let mut select = connection
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions
                 WHERE (?1 IS NULL OR cwd = ?1)
                   AND (?2 IS NULL OR (updated_at, id) < (?2, ?3))
                 ORDER BY updated_at DESC, id DESC LIMIT ?4"
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
        let mut sessions = rows.collect::<Result<Vec<_>, _>>().map_err(classify)?;
        let next_cursor = if sessions.len() > limit {
            sessions.truncate(limit);
            sessions
                .last()
                .map(|s| format!("{}:{}", s.updated_at, s.id))
        } else {
            None
        };
        Ok(ListPage {
            sessions,
            next_cursor,
        })
    }

    fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        let mut connection = self.lock();
        let tx = connection.transaction().map_err(classify)?;
        tx.execute(
            "DELETE FROM entries WHERE session_id = ?1",
            params![session_id],
        )
        .map_err(classify)?;
        tx.execute(
            "DELETE FROM entries_fts WHERE session_id = ?1",
            params![session_id],
        )
        .map_err(classify)?;
        let removed = tx
            .execute("DELETE FROM sessions WHERE id = ?1", params![session_id])
            .map_err(classify)?;
        tx.commit().map_err(classify)?;
        Ok(removed > 0)
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let Some(query) = fts::query_of(query) else {
            return Ok(Vec::new());
        };
        let connection = self.lock();
        let mut select = connection
            .prepare_cached(
                "SELECT f.session_id, f.entry_id, bm25(entries_fts) AS rank,
                        snippet(entries_fts, 0, '[', ']', '…', 16), e.at_ms, s.title
                 FROM entries_fts f
                 JOIN entries e ON e.session_id = f.session_id AND e.entry_id = f.entry_id
                 JOIN sessions s ON s.id = f.session_id
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

    fn entries_around(
        &self,
        session_id: &str,
        entry_id: EntryId,
        before: usize,
        after: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let connection = self.lock();
        let id = i64::try_from(entry_id).unwrap_or(i64::MAX);
        let read = |sql: &str, count: usize| -> Result<Vec<Entry>, StoreError> {
            let mut select = connection.prepare_cached(sql).map_err(classify)?;
            let rows = select
                .query_map(
                    params![session_id, id, i64::try_from(count).unwrap_or(0)],
                    |row| row.get::<_, String>(0),
                )
                .map_err(classify)?;
            let mut entries = Vec::new();
            for row in rows {
                if let Ok(entry) = serde_json::from_str(&row.map_err(classify)?) {
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

    fn claim(&self, session_id: &str) -> Result<(), StoreError> {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let mut connection = self.lock();
        let tx = connection.transaction().map_err(classify)?;
        let owner: Option<Option<i32>> = tx
            .query_row(
                "SELECT owner_pid FROM sessions WHERE id = ?1",
                params![session_id],
                |row| row.get(0),
            )
            .optional()
            .map_err(classify)?;
        match owner {
            None => return Err(StoreError::NotFound(session_id.to_string())),
            Some(Some(pid)) if pid != me && alive(pid) => {
                return Err(StoreError::InUse(session_id.to_string(), pid));
            }
            Some(_) => {}
        }
        tx.execute(
            "UPDATE sessions SET owner_pid = ?2 WHERE id = ?1",
            params![session_id, me],
        )
        .map_err(classify)?;
        tx.commit().map_err(classify)
    }

    fn release(&self, session_id: &str) -> Result<(), StoreError> {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        self.lock()
            .execute(
                "UPDATE sessions SET owner_pid = NULL WHERE id = ?1 AND owner_pid = ?2",
                params![session_id, me],
            )
            .map_err(classify)?;
        Ok(())
    }
}
