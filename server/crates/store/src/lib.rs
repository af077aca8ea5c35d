//! Durable sessions: what a store keeps (session metadata and record entries), the
//! [`SessionStore`] trait the engine and edge use, and [`SqliteStore`], the embedded default.
//!
//! The trait is small and synchronous: callers run it off the async runtime (one writer
//! thread for appends, the blocking pool for reads). `PgStore` (feature `postgres`)
//! implements the same trait on a PostgreSQL server; `conformance` holds the checks both
//! pass.

mod claims;
#[cfg(any(test, feature = "test-support"))]
pub mod conformance;
mod encoded;
#[cfg(feature = "postgres")]
mod postgres;
mod search_text;
mod sqlite;
#[cfg(feature = "postgres-test")]
pub mod test_cluster;

pub use claims::Claims;
pub use encoded::{Body, EncodedEntry};
#[cfg(feature = "postgres")]
pub use postgres::{PgOptions, PgReport, PgStore, TlsMode, inspect as inspect_postgres};
/// The words of a search query, as every store splits it.
pub use search_text::words_of as query_words;
pub use sqlite::{Salvage, SqliteStore, StoreReport};

use serde::{Deserialize, Serialize};
use talaria_record::{Entry, EntryId, Transcript};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the session store at {path} cannot be opened: {detail}")]
    Open { path: String, detail: String },
    /// SQLite's write lock is held by another writer (another program, another process,
    /// or another store of this one): not said to be another process, which it may not be.
    #[error("the session store's write lock is held by another writer; try again ({0})")]
    Busy(String),
    /// This process's own earlier calls to the store have not returned yet (a slow disk or
    /// server): nothing else holds it.
    #[error("the session store has not answered this process's earlier calls yet; try again ({0})")]
    Overloaded(String),
    #[error("the session store is read-only: {0}")]
    ReadOnly(String),
    #[error("the session store is damaged: {0}")]
    Corrupt(String),
    #[error("the session store has schema version {found}; this build knows up to {known}")]
    TooNew { found: i64, known: i64 },
    #[error(
        "session {session} is open in another Talaria process ({holder}); close it there first"
    )]
    InUse { session: String, holder: String },
    #[error("the disk holding the session store is full: {0}")]
    Full(String),
    #[error("the session database cannot be reached: {0}")]
    Unreachable(String),
    #[error("no session {0}")]
    NotFound(String),
    /// The session was deleted: nothing is created, appended or forked under its id again
    /// (its tombstone stays in the store).
    #[error("session {0} was deleted; nothing is written to it again")]
    Deleted(String),
    #[error(
        "session {0} has no saved record (its creation was saved, its system prompt and \
         turns never were): it cannot be continued; start a new session"
    )]
    NoRecord(String),
    #[error("the session store is not open yet ({0}); it is tried again in the background")]
    NotOpenYet(String),
    #[error("the session store did not answer within {0:?}")]
    TimedOut(std::time::Duration),
    #[error("{0}")]
    Unsupported(String),
    #[error("session store error: {0}")]
    Other(String),
}

impl StoreError {
    /// Whether the error is the store's as a whole (busy, unreachable, full, not open…)
    /// rather than one session's: trying other sessions' writes now would fail the same way.
    pub fn is_store_wide(&self) -> bool {
        !matches!(
            self,
            StoreError::InUse { .. }
                | StoreError::NotFound(_)
                | StoreError::Deleted(_)
                | StoreError::NoRecord(_)
                | StoreError::Other(_)
        )
    }

    /// Whether opening the store can never succeed as configured (trying again is useless).
    pub fn is_permanent(&self) -> bool {
        matches!(self, StoreError::TooNew { .. } | StoreError::Unsupported(_))
    }
}

/// What is known about a session besides its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SessionMeta {
    pub id: String,
    pub cwd: String,
    pub additional_directories: Vec<String>,
    pub title: Option<String>,
    pub model: String,
    pub mode: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: Option<f64>,
    /// The session this one was forked from.
    pub parent_id: Option<String>,
    /// Who last committed entries of it (a journal's token; empty before any checked write,
    /// or when an older build wrote it): what a writer's [`Basis`] builds on.
    #[serde(default)]
    pub writer: String,
}

/// What a writer's entries of a session build on, for the store's check that no other writer
/// committed the session since ([`SessionStore::append_checked`]): the session's `writer`
/// must be this writer or one it builds on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Basis {
    /// The writer committing them (a token of its own per journal); the session's `writer`
    /// once they are committed.
    pub writer: String,
    /// The session's `writer` values they follow: as the session was loaded or created here,
    /// and the writers (processes that ended) that spooled them before this one.
    pub builds_on: Vec<String>,
}

impl Basis {
    /// Whether a session last written by `writer` may take these entries as they are.
    pub fn follows(&self, writer: &str) -> bool {
        self.writer == writer || self.builds_on.iter().any(|w| w == writer)
    }
}

/// One session's entries for [`SessionStore::append_checked`].
#[derive(Debug, Clone)]
pub struct SessionAppend {
    pub session: String,
    pub entries: Vec<EncodedEntry>,
    pub basis: Basis,
}

/// A session [`SessionStore::append_checked`] did not write (nothing of it was written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another writer committed the session since what the entries build on, and they
    /// differ from what it wrote: writing them would replace or interleave with its entries.
    Diverged { session: String, writer: String },
    /// The session is not in the store (deleted since: its tombstone refuses every write,
    /// or it was never created).
    Missing { session: String },
}

impl Refusal {
    pub fn session(&self) -> &str {
        match self {
            Refusal::Diverged { session, .. } | Refusal::Missing { session } => session,
        }
    }
}

/// How a checked append treats one session, decided inside its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Check {
    /// Write the entries (the session follows the basis).
    Write,
    /// Nothing to write: every entry is in the store already, as it is.
    AlreadyThere,
    Refused(Refusal),
}

/// The check of a session last written by `stored` (none: not in the store): entries that
/// follow it are written; otherwise they are harmless only if each is already there as it
/// is (`same(entry)` reads the stored one and compares).
pub(crate) fn check_basis(
    append: &SessionAppend,
    stored: Option<&str>,
    mut same: impl FnMut(&EncodedEntry) -> Result<bool, StoreError>,
) -> Result<Check, StoreError> {
    let Some(stored) = stored else {
        return Ok(Check::Refused(Refusal::Missing {
            session: append.session.clone(),
        }));
    };
    if append.basis.follows(stored) {
        return Ok(Check::Write);
    }
    for entry in &append.entries {
        if !same(entry)? {
            return Ok(Check::Refused(Refusal::Diverged {
                session: append.session.clone(),
                writer: stored.to_string(),
            }));
        }
    }
    Ok(Check::AlreadyThere)
}

/// A change to a session's metadata (`None` fields stay as they are).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetaUpdate {
    pub title: Option<String>,
    pub model: Option<String>,
    pub mode: Option<String>,
    pub tokens: Option<(u64, u64)>,
    pub cost: Option<f64>,
    pub updated_at: Option<i64>,
}

/// One page of `list`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListPage {
    pub sessions: Vec<SessionMeta>,
    /// Pass back to get the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

impl ListPage {
    /// A page from up to `limit + 1` sessions, newest first: the extra one says there is a
    /// next page, whose cursor is the last shown session's `updated_at:id`.
    pub fn of(mut sessions: Vec<SessionMeta>, limit: usize) -> Self {
        let next_cursor = if sessions.len() > limit {
            sessions.truncate(limit);
            sessions
                .last()
                .map(|s| format!("{}:{}", s.updated_at, s.id))
        } else {
            None
        };
        Self {
            sessions,
            next_cursor,
        }
    }
}

/// A list cursor's parts (`updated_at:id`); a malformed one starts from the top.
pub(crate) fn list_cursor(cursor: Option<&str>) -> (Option<i64>, Option<String>) {
    match cursor.and_then(|c| c.split_once(':')) {
        Some((time, id)) => (time.parse::<i64>().ok(), Some(id.to_string())),
        None => (None, None),
    }
}

/// A full-text hit in past sessions.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub session_id: String,
    pub session_title: Option<String>,
    pub entry_id: EntryId,
    /// Lower is better (BM25).
    pub rank: f64,
    /// The matching text with the match marked `[…]`.
    pub snippet: String,
    pub at_ms: i64,
}

/// A session's durable history.
pub trait SessionStore: Send + Sync {
    /// Records a new session; creating one that is already there changes nothing (so a
    /// write made again, as the journal's spool may, is harmless). A session deleted before
    /// is refused (`Deleted`): its tombstone keeps a spool written late from bringing it back.
    fn create(&self, meta: &SessionMeta) -> Result<(), StoreError>;
    /// Appends entries (or replaces entries with the same ids: compaction rewrites).
    fn append(&self, session_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        self.append_encoded(session_id, &EncodedEntry::all(entries)?)
    }
    /// Appends entries already encoded (how the session writer sends them).
    fn append_encoded(&self, session_id: &str, entries: &[EncodedEntry]) -> Result<(), StoreError>;
    /// Appends entries of several sessions in one commit (all or nothing).
    fn append_batch(&self, batch: &[(String, Vec<EncodedEntry>)]) -> Result<(), StoreError> {
        for (session_id, entries) in batch {
            self.append_encoded(session_id, entries)?;
        }
        Ok(())
    }
    /// Appends entries of several sessions in one commit, each session's only where it was
    /// last written by a writer its [`Basis`] names (or where its entries are all there
    /// already, as they are): a stored entry another writer wrote is never replaced. The
    /// sessions written get the basis's writer; those refused are returned (nothing of them
    /// written). How the session writer writes. (The default, for stores that keep one
    /// writer, checks nothing.)
    fn append_checked(&self, batch: &[SessionAppend]) -> Result<Vec<Refusal>, StoreError> {
        let unchecked: Vec<(String, Vec<EncodedEntry>)> = batch
            .iter()
            .map(|a| (a.session.clone(), a.entries.clone()))
            .collect();
        self.append_batch(&unchecked)?;
        Ok(Vec::new())
    }
    /// Records a new session with its first entries in one commit (a fork's copy): the
    /// session is never in the store without them. Written again, it changes nothing; a
    /// session already there with other entries is refused as [`Refusal::Diverged`], one
    /// deleted before as [`Refusal::Missing`].
    fn create_with_entries(
        &self,
        meta: &SessionMeta,
        entries: &[EncodedEntry],
        basis: &Basis,
    ) -> Result<Option<Refusal>, StoreError> {
        match self.create(meta) {
            Err(StoreError::Deleted(session)) => return Ok(Some(Refusal::Missing { session })),
            other => other?,
        }
        let append = SessionAppend {
            session: meta.id.clone(),
            entries: entries.to_vec(),
            basis: basis.clone(),
        };
        Ok(self.append_checked(&[append])?.pop())
    }
    /// Changes metadata.
    fn update(&self, session_id: &str, update: &MetaUpdate) -> Result<(), StoreError>;
    /// Whether a write would be taken now (the write lock can be had, the server answers),
    /// changing nothing: how a writer asks a stuck store again without risking a write.
    fn accepts_writes(&self) -> Result<(), StoreError>;
    /// A session's metadata and record.
    fn load(&self, session_id: &str) -> Result<(SessionMeta, Transcript), StoreError>;
    /// Sessions by last update (newest first), optionally only those in `cwd`.
    fn list(
        &self,
        cwd: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError>;
    /// Removes a session and its record, and leaves its tombstone: nothing is created,
    /// appended or forked under its id again (a spool adopted after the delete is refused).
    /// `false` if the store had no such session — unless `waiting_here` (the session's
    /// creation still waits in this process's journal, not yet in the store): it is then
    /// tombstoned all the same, so its waiting writes are refused, and `true`. Refused
    /// (`InUse`) while another process has it open.
    fn delete(&self, session_id: &str, waiting_here: bool) -> Result<bool, StoreError>;
    /// Whether the session was deleted (its tombstone is there): how a process following a
    /// session another one runs learns it is gone. `false` for one never known.
    fn was_deleted(&self, session_id: &str) -> Result<bool, StoreError>;
    /// Ranked full-text search of past sessions' messages.
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError>;
    /// Entries of a session around one entry (for search context and scrolling).
    fn entries_around(
        &self,
        session_id: &str,
        entry_id: EntryId,
        before: usize,
        after: usize,
    ) -> Result<Vec<Entry>, StoreError>;
    /// Marks the session as open in this process, atomically: refused (`InUse`, naming the
    /// holder) while another live process has it; a dead process holds nothing.
    fn claim(&self, session_id: &str) -> Result<(), StoreError>;
    /// Releases this process's claim.
    fn release(&self, session_id: &str) -> Result<(), StoreError>;
    /// Whether this process holds the session's claim (it is open here, or claimed for
    /// writes adopted from a spool).
    fn holds(&self, _session_id: &str) -> bool {
        false
    }
    /// Asks the process that has session `session_id` open to hand it over, as `by` (who
    /// asks, unique to this ask, shown to that process's clients); renews `by`'s own ask. One
    /// ask stands per session: while another's is fresh (renewed within [`ASK_FRESH_MS`] by
    /// the store's clock) nothing is written and that asker is returned.
    fn ask_for(&self, _session_id: &str, _by: &str) -> Result<Option<String>, StoreError> {
        Err(StoreError::Unsupported(
            "this store cannot pass a session between processes".into(),
        ))
    }
    /// Which of `session_ids` an ask renewed within the last `within_ms` stands for, with
    /// who asks.
    fn asked_for(
        &self,
        _session_ids: &[String],
        _within_ms: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(Vec::new())
    }
    /// Withdraws `by`'s ask for `session_id` (another's stays).
    fn withdraw_ask(&self, _session_id: &str, _by: &str) -> Result<(), StoreError> {
        Ok(())
    }
    /// What users should be told once about how the store was opened (a damaged file
    /// recovered into a new one).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Makes everything committed durable in the main file (a clean exit's last step).
    fn checkpoint(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Whether the store at its place is no longer the one opened (another process put a
    /// recovered store there): the writer then opens it again. A replaced store is never
    /// closed by its holder: SQLite's last close removes the write-ahead log by name, which
    /// is now the new store's.
    fn is_replaced(&self) -> bool {
        false
    }

    /// Whether it was opened for reading only (its file or folder could not be written then).
    fn is_read_only(&self) -> bool {
        false
    }
}

/// How long an ask for a session stands without being renewed (its asker renews it while it
/// waits; one that died leaves an ask that soon counts for nothing).
pub const ASK_FRESH_MS: i64 = 2_000;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
