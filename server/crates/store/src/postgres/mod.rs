//! The PostgreSQL store, for sessions shared across machines: the same [`SessionStore`] as
//! the embedded one, on a database server. Search uses PostgreSQL's own full-text engine
//! (a generated `tsvector` with a GIN index); claims are session-level advisory locks held on
//! a connection of their own, so a process that dies releases its claims with its connection.
//!
//! Reads and writes share a small pool of connections ([`link`]); each comes back after the
//! server does, with backoff. A claims connection that was lost (a restarted server drops
//! every lock) is connected again and its claims taken again before the next write; a claim
//! another process took meanwhile is lost, and this process's writes to that session are
//! refused (`InUse`) rather than interleaved with the new holder's.

mod claims;
mod link;
mod options;
mod report;
mod schema;
mod sessions;
mod tls;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::{Client, Row};
use talaria_record::{Entry, EntryId};

pub use options::{PgOptions, TlsMode};
pub use report::{PgReport, inspect};

use link::{Connector, Fresh, Link, Purpose};

use crate::{SessionMeta, StoreError};

/// Connections for reads and writes.
const POOL_SIZE: usize = 2;
/// How often, while writing, the claims connection is checked to be alive.
const CLAIMS_CHECK_EVERY: Duration = Duration::from_secs(5);

/// The PostgreSQL store.
pub struct PgStore {
    connector: Connector,
    /// Reads and writes.
    pool: Vec<Mutex<Link>>,
    /// Holds this process's claims (advisory locks live as long as their connection).
    claims: Mutex<Link>,
    held: Mutex<HashSet<String>>,
    /// Sessions whose claim another process took while this one's connection was away, and
    /// who has them.
    lost: Mutex<HashMap<String, String>>,
    /// When the claims connection was last known to be alive.
    claims_checked: Mutex<Instant>,
    /// Who holds this store's claims, as another process is told.
    holder: String,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("database", &self.connector.options.label)
            .finish_non_exhaustive()
    }
}

/// The longest dropping the store waits for its connections to close.
const CLOSE_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

impl Drop for PgStore {
    /// The driver's blocking client closes by running a runtime of its own, which panics —
    /// and aborts the process — on a thread that already runs one: the connections are
    /// closed on a thread of their own, whichever thread drops the store.
    fn drop(&mut self) {
        let mut clients = Vec::new();
        for link in self
            .pool
            .iter_mut()
            .chain(std::iter::once(&mut self.claims))
        {
            let link = talaria_util::get_mut(link);
            clients.extend(link.take_client());
        }
        if clients.is_empty() {
            return;
        }
        // Waited for a moment at most: a frozen server may never answer the goodbye, and
        // whoever drops the store (a stopping agent) must not wait on it. The thread ends
        // with the process.
        // One message: the goodbye was said.
        let (closed, done) = std::sync::mpsc::channel::<()>();
        match std::thread::Builder::new()
            .name("talaria-pg-close".into())
            .spawn(move || {
                drop(clients);
                let _ = closed.send(());
            }) {
            Ok(_closing) => {
                if done.recv_timeout(CLOSE_DEADLINE).is_err() {
                    tracing::warn!(
                        "the database did not take the connections' close within {:.1} s; \
                         not waiting for it",
                        CLOSE_DEADLINE.as_secs_f64()
                    );
                }
            }
            Err(error) => tracing::warn!("closing the database connections: {error}"),
        }
    }
}

/// A driver error as text: the server's own message when it sent one.
fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

impl From<postgres::Error> for StoreError {
    fn from(error: postgres::Error) -> Self {
        let detail = describe(&error);
        if error.is_closed() {
            return Self::Unreachable(detail);
        }
        match error.code() {
            Some(code) if *code == SqlState::DISK_FULL => Self::Full(detail),
            Some(code) if *code == SqlState::READ_ONLY_SQL_TRANSACTION => Self::ReadOnly(detail),
            Some(code)
                if *code == SqlState::ADMIN_SHUTDOWN
                    || *code == SqlState::CRASH_SHUTDOWN
                    || *code == SqlState::CANNOT_CONNECT_NOW =>
            {
                Self::Unreachable(detail)
            }
            _ if std::error::Error::source(&error).is_some_and(|s| s.is::<std::io::Error>()) => {
                Self::Unreachable(detail)
            }
            _ => Self::Other(detail),
        }
    }
}

use talaria_util::lock;

fn tokens(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn entry_key(id: EntryId) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

const SESSION_COLUMNS: &str = "id, cwd, additional_directories, title, model, mode, created_at, \
    updated_at, input_tokens, output_tokens, cost, parent_id, writer";

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
        writer: row.get(12),
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

/// The host this process runs on, as claims name it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "this host".into())
}

impl PgStore {
    /// Connects to the database `options` name (see [`PgOptions::parse`]) and migrates it
    /// once, under an advisory lock.
    pub fn open(options: PgOptions) -> Result<Self, StoreError> {
        let connector = Connector {
            tls: tls::connector(&options)?,
            options,
        };
        let mut first = connector.connect(Purpose::Data)?;
        schema::migrate(&mut first)?;
        let mut pool = vec![Mutex::new(Link::new(Purpose::Data, first))];
        for _ in 1..POOL_SIZE {
            pool.push(Mutex::new(Link::new(
                Purpose::Data,
                connector.connect(Purpose::Data)?,
            )));
        }
        Ok(Self {
            claims: Mutex::new(Link::new(
                Purpose::Claims,
                connector.connect(Purpose::Claims)?,
            )),
            connector,
            pool,
            held: Mutex::new(HashSet::new()),
            lost: Mutex::new(HashMap::new()),
            claims_checked: Mutex::new(Instant::now()),
            holder: format!("host {}, pid {}", host_name(), std::process::id()),
        })
    }

    /// Connects to `url` (the password may come from `PGPASSWORD` or `~/.pgpass`).
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        Self::open(PgOptions::parse(url, None, &|key| std::env::var(key).ok())?)
    }

    /// A plain connection to the database `url` names, with the store's TLS and password
    /// rules, for another user of the same database (a batch's queue).
    pub fn client(url: &str) -> Result<postgres::Client, StoreError> {
        let options = PgOptions::parse(url, None, &|key| std::env::var(key).ok())?;
        let connector = Connector {
            tls: tls::connector(&options)?,
            options,
        };
        connector.connect(Purpose::Data)
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        schema::VERSION
    }

    /// Where the store is, without credentials.
    pub fn label(&self) -> &str {
        &self.connector.options.label
    }

    /// Runs `call` on a pooled connection (a free one if any), connecting again if it was
    /// lost. After a reconnect the claims are checked before anything is written.
    fn with<T>(
        &self,
        call: impl FnOnce(&mut Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut link = self
            .pool
            .iter()
            .find_map(|slot| slot.try_lock().ok())
            .unwrap_or_else(|| lock(&self.pool[0]));
        let (client, fresh) = link.client(&self.connector)?;
        if matches!(fresh, Fresh::Reconnected) {
            self.keep_claims(true);
        }
        let result = call(client);
        if let Err(StoreError::Unreachable(_)) = &result {
            link.closed();
        }
        result
    }

    /// Refuses writes to a session whose claim another process took.
    fn fence(&self, session_id: &str) -> Result<(), StoreError> {
        self.keep_claims(false);
        match lock(&self.lost).get(session_id) {
            Some(holder) => Err(StoreError::InUse {
                session: session_id.to_string(),
                holder: holder.clone(),
            }),
            None => Ok(()),
        }
    }
}
