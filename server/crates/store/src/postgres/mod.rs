//! The PostgreSQL store, for sessions shared across machines: the same [`SessionStore`] as
//! the embedded one, on a database server. Search uses PostgreSQL's own full-text engine
//! (a generated `tsvector` with a GIN index); claims are session-level advisory locks held on
//! a connection of their own, so a process that dies releases its claims with its connection.
//!
//! Behind the `postgres` feature, not yet selectable from the configuration; connections are
//! plain (no TLS yet) and a lost connection is not yet re-established.

mod schema;

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};

use postgres::{Client, NoTls, Row};
use talaria_record::{Entry, EntryId, Transcript};

use crate::{ListPage, MetaUpdate, SearchHit, SessionMeta, SessionStore, StoreError, now_ms};

/// The PostgreSQL store.
pub struct PgStore {
    /// Reads and writes.
    client: Mutex<Client>,
    /// Holds this process's claims (advisory locks live as long as their connection).
    claims: Mutex<Client>,
    held: Mutex<HashSet<String>>,
    /// Who holds this store's claims, as another process is told.
    holder: String,
    /// The database, without its password, for messages.
    label: String,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("database", &self.label)
            .finish_non_exhaustive()
    }
}

fn other(error: &postgres::Error) -> StoreError {
    StoreError::Other(error.to_string())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn tokens(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn entry_key(id: EntryId) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// A claim's advisory-lock key: the session id, hashed by the server.
const CLAIM_KEY: &str = "hashtextextended('talaria-session:' || $1, 0)";

const SESSION_COLUMNS: &str = "id, cwd, additional_directories, title, model, mode, created_at, \
    updated_at, input_tokens, output_tokens, cost, parent_id";

fn meta_of(row: &Row) -> SessionMeta {
    let directories: String = row.get(2);
    SessionMeta {
        id: row.get(0),
        cwd: row.get(1),
        additional_directories: serde_json::from_str(&directories).unwrap_or_default(),
        title: row.get(3),
        model: row.get(4),
        mode: row.get(5),
        created_at: row.get(6),
        updated_at: row.get(7),
        input_tokens: u64::try_from(row.get::<_, i64>(8)).unwrap_or(0),
        output_tokens: u64::try_from(row.get::<_, i64>(9)).unwrap_or(0),
        cost: row.get(10),
        parent_id: row.get(11),
    }
}

fn entries_of(rows: &[Row], session_id: &str) -> Result<Vec<Entry>, StoreError> {
    rows.iter()
        .map(|row| {
            serde_json::from_str::<Entry>(row.get(0)).map_err(|e| {
                StoreError::Corrupt(format!(
                    "an entry of session {session_id} cannot be read: {e}"
                ))
            })
        })
        .collect()
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`; the password may
    /// come from `PGPASSWORD`), and migrates it once, under an advisory lock.
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        let mut config = postgres::Config::from_str(url).map_err(|e| StoreError::Open {
            path: "the store URL".into(),
            detail: e.to_string(),
        })?;
        if config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
        {
            config.password(password);
        }
        let label = format!(
            "{} on {}",
            config.get_dbname().unwrap_or("postgres"),
            config
                .get_hosts()
                .first()
                .map(|host| match host {
                    postgres::config::Host::Tcp(name) => name.clone(),
                    postgres::config::Host::Unix(path) => path.display().to_string(),
                })
                .unwrap_or_default()
        );
        let open = |config: &postgres::Config| {
            config.connect(NoTls).map_err(|e| StoreError::Open {
                path: label.clone(),
                detail: e.to_string(),
            })
        };
        let mut client = open(&config)?;
        let claims = open(&config)?;
        schema::migrate(&mut client)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "this host".into());
        Ok(Self {
            client: Mutex::new(client),
            claims: Mutex::new(claims),
            held: Mutex::new(HashSet::new()),
            holder: format!("host {host}, pid {}", std::process::id()),
            label,
        })
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        schema::VERSION
    }

    fn append_in(
        tx: &mut postgres::Transaction<'_>,
        session_id: &str,
        entries: &[Entry],
    ) -> Result<(), StoreError> {
        let upsert = tx
            .prepare(
                "INSERT INTO entries (session_id, entry_id, at_ms, kind, body, search_text)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (session_id, entry_id) DO UPDATE
                 SET at_ms = excluded.at_ms, kind = excluded.kind, body = excluded.body,
                     search_text = excluded.search_text",
            )
            .map_err(|e| other(&e))?;
        for entry in entries {
            let body =
                serde_json::to_string(entry).map_err(|e| StoreError::Other(e.to_string()))?;
            let text = crate::search_text::text_of(entry);
            tx.execute(
                &upsert,
                &[
                    &session_id,
                    &entry_key(entry.id),
                    &entry.at_ms,
                    &crate::search_text::kind_of(&entry.body),
                    &body,
                    &text,
                ],
            )
            .map_err(|e| other(&e))?;
        }
        tx.execute(
            "UPDATE sessions SET updated_at = $2 WHERE id = $1",
            &[&session_id, &now_ms()],
        )
        .map_err(|e| other(&e))?;
        Ok(())
    }

    /// Who holds `session_id` now, as its claim row says.
    fn holder_of(&self, client: &mut Client, session_id: &str) -> String {
        client
            .query_opt(
                "SELECT holder FROM claims WHERE session_id = $1",
                &[&session_id],
            )
            .ok()
            .flatten()
            .map_or_else(|| "another process".into(), |row| row.get(0))
    }
}

impl SessionStore for PgStore {
    fn create(&self, meta: &SessionMeta) -> Result<(), StoreError> {
        let directories = serde_json::to_string(&meta.additional_directories)
            .map_err(|e| StoreError::Other(e.to_string()))?;
        lock(&self.client)
            .execute(
                &format!(
                    "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES \
                     ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
                ),
                &[
                    &meta.id,
                    &meta.cwd,
                    &directories,
                    &meta.title,
                    &meta.model,
                    &meta.mode,
                    &meta.created_at,
                    &meta.updated_at,
                    &tokens(meta.input_tokens),
                    &tokens(meta.output_tokens),
                    &meta.cost,
                    &meta.parent_id,
                ],
            )
            .map_err(|e| other(&e))?;
        Ok(())
    }

    fn append(&self, session_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut client = lock(&self.client);
        let mut tx = client.transaction().map_err(|e| other(&e))?;
        Self::append_in(&mut tx, session_id, entries)?;
        tx.commit().map_err(|e| other(&e))
    }

    fn append_batch(&self, batch: &[(String, Vec<Entry>)]) -> Result<(), StoreError> {
        if batch.iter().all(|(_, entries)| entries.is_empty()) {
            return Ok(());
        }
        let mut client = lock(&self.client);
        let mut tx = client.transaction().map_err(|e| other(&e))?;
        for (session_id, entries) in batch {
            if !entries.is_empty() {
                Self::append_in(&mut tx, session_id, entries)?;
            }
        }
        tx.commit().map_err(|e| other(&e))
    }

    fn update(&self, session_id: &str, update: &MetaUpdate) -> Result<(), StoreError> {
        let (input, output) = update.tokens.unzip();
        lock(&self.client)
            .execute(
                "UPDATE sessions SET
                    title = COALESCE($2, title),
                    model = COALESCE($3, model),
                    mode = COALESCE($4, mode),
                    input_tokens = COALESCE($5, input_tokens),
                    output_tokens = COALESCE($6, output_tokens),
                    cost = COALESCE($7, cost),
                    updated_at = COALESCE($8, updated_at)
                 WHERE id = $1",
                &[
                    &session_id,
                    &update.title,
                    &update.model,
                    &update.mode,
                    &input.map(tokens),
                    &output.map(tokens),
                    &update.cost,
                    &update.updated_at,
                ],
            )
            .map_err(|e| other(&e))?;
        Ok(())
    }

    fn load(&self, session_id: &str) -> Result<(SessionMeta, Transcript), StoreError> {
        let mut client = lock(&self.client);
        let meta = client
            .query_opt(
                &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"),
                &[&session_id],
            )
            .map_err(|e| other(&e))?
            .map(|row| meta_of(&row))
            .ok_or_else(|| StoreError::NotFound(session_id.to_string()))?;
        let rows = client
            .query(
                "SELECT body FROM entries WHERE session_id = $1 ORDER BY entry_id",
                &[&session_id],
            )
            .map_err(|e| other(&e))?;
        Ok((
            meta,
            Transcript::from_entries(entries_of(&rows, session_id)?),
        ))
    }

    fn list(
        &self,
        cwd: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let (after_time, after_id) = crate::list_cursor(cursor);
        let limit = limit.clamp(1, 1000);
        let rows = lock(&self.client)
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions
                     WHERE ($1::text IS NULL OR cwd = $1)
                       AND ($2::bigint IS NULL OR (updated_at, id) < ($2, $3::text))
                     ORDER BY updated_at DESC, id DESC LIMIT $4"
                ),
                &[
                    &cwd,
                    &after_time,
                    &after_id,
                    &i64::try_from(limit + 1).unwrap_or(1001),
                ],
            )
            .map_err(|e| other(&e))?;
        Ok(ListPage::of(rows.iter().map(meta_of).collect(), limit))
    }

    fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        let held_before = lock(&self.held).contains(session_id);
        self.claim(session_id)?;
        let deleted = lock(&self.client)
            .execute("DELETE FROM sessions WHERE id = $1", &[&session_id])
            .map_err(|e| other(&e));
        if !held_before || matches!(deleted, Ok(1)) {
            self.release(session_id)?;
        }
        Ok(deleted? > 0)
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let Some(query) = crate::search_text::tsquery_of(query) else {
            return Ok(Vec::new());
        };
        let rows = lock(&self.client)
            .query(
                "SELECT e.session_id, e.entry_id, -ts_rank_cd(e.search, q) AS rank,
                        ts_headline('english', e.search_text, q,
                            'StartSel=[, StopSel=], MaxWords=16, MinWords=4, ShortWord=2'),
                        e.at_ms, s.title
                 FROM entries e
                 JOIN sessions s ON s.id = e.session_id,
                      to_tsquery('english', $1) q
                 WHERE e.search @@ q
                 ORDER BY rank, e.at_ms DESC LIMIT $2",
                &[&query, &i64::try_from(limit.clamp(1, 100)).unwrap_or(100)],
            )
            .map_err(|e| other(&e))?;
        Ok(rows
            .iter()
            .map(|row| SearchHit {
                session_id: row.get(0),
                entry_id: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
                rank: f64::from(row.get::<_, f32>(2)),
                snippet: row.get(3),
                at_ms: row.get(4),
                session_title: row.get(5),
            })
            .collect())
    }

    fn entries_around(
        &self,
        session_id: &str,
        entry_id: EntryId,
        before: usize,
        after: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let mut client = lock(&self.client);
        let id = entry_key(entry_id);
        let count = |n: usize| i64::try_from(n).unwrap_or(0);
        let earlier = client
            .query(
                "SELECT body FROM entries WHERE session_id = $1 AND entry_id < $2
                 ORDER BY entry_id DESC LIMIT $3",
                &[&session_id, &id, &count(before)],
            )
            .map_err(|e| other(&e))?;
        let later = client
            .query(
                "SELECT body FROM entries WHERE session_id = $1 AND entry_id >= $2
                 ORDER BY entry_id LIMIT $3",
                &[&session_id, &id, &count(after + 1)],
            )
            .map_err(|e| other(&e))?;
        let mut entries = entries_of(&earlier, session_id)?;
        entries.reverse();
        entries.extend(entries_of(&later, session_id)?);
        Ok(entries)
    }

    fn claim(&self, session_id: &str) -> Result<(), StoreError> {
        let mut held = lock(&self.held);
        if held.contains(session_id) {
            return Ok(());
        }
        let mut client = lock(&self.claims);
        let won: bool = client
            .query_one(
                &format!("SELECT pg_try_advisory_lock({CLAIM_KEY})"),
                &[&session_id],
            )
            .map_err(|e| other(&e))?
            .get(0);
        if !won {
            return Err(StoreError::InUse {
                session: session_id.to_string(),
                holder: self.holder_of(&mut client, session_id),
            });
        }
        client
            .execute(
                "INSERT INTO claims (session_id, holder, since) VALUES ($1, $2, $3)
                 ON CONFLICT (session_id) DO UPDATE SET holder = $2, since = $3",
                &[&session_id, &self.holder, &now_ms()],
            )
            .map_err(|e| other(&e))?;
        held.insert(session_id.to_string());
        Ok(())
    }

    fn release(&self, session_id: &str) -> Result<(), StoreError> {
        let mut held = lock(&self.held);
        if !held.remove(session_id) {
            return Ok(());
        }
        let mut client = lock(&self.claims);
        client
            .execute(
                "DELETE FROM claims WHERE session_id = $1 AND holder = $2",
                &[&session_id, &self.holder],
            )
            .map_err(|e| other(&e))?;
        client
            .query_one(
                &format!("SELECT pg_advisory_unlock({CLAIM_KEY})"),
                &[&session_id],
            )
            .map_err(|e| other(&e))?;
        Ok(())
    }
}
