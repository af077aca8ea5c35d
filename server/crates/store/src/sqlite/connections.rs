//! The store's SQLite connections: held for a writable store's life, opened per call for a
//! read-only one, so that a read-only store never keeps the file read-only for the process.
//!
//! SQLite keeps one WAL index (the `-shm` mapping) per file per process, shared by every
//! connection to that file in it. A connection that had to map it read-only (the `-shm`
//! or its folder could not be written) makes that shared index read-only for as long as
//! any connection to the file stays open: while a read-only store held one, every later
//! open in the process came out read-only too, and a home that became writable again was
//! never written without a restart. A read-only store therefore holds nothing between
//! calls; the journal's next reopen then starts from a closed file.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OpenFlags};

use super::classify;
use crate::StoreError;

/// A store's connections.
pub(super) enum Connections {
    /// A writable store: one connection for writes and one for reads (in WAL mode reads
    /// never wait for a writer), both kept open.
    Held(Box<Held>),
    /// A read-only store: a connection opened for each call and closed after it.
    PerCall(PathBuf),
}

/// A writable store's two connections.
pub(super) struct Held {
    pub(super) writer: Mutex<Connection>,
    pub(super) reader: Mutex<Connection>,
}

/// A connection for one call: a held one, locked, or one of its own.
pub(super) enum Borrowed<'a> {
    Locked(MutexGuard<'a, Connection>),
    Own(Box<Connection>),
}

impl Deref for Borrowed<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        match self {
            Borrowed::Locked(guard) => guard,
            Borrowed::Own(connection) => connection,
        }
    }
}

impl DerefMut for Borrowed<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        match self {
            Borrowed::Locked(guard) => guard,
            Borrowed::Own(connection) => connection,
        }
    }
}

impl Connections {
    /// The connection writes go through (on a read-only store they fail as read-only).
    pub(super) fn writer(&self) -> Result<Borrowed<'_>, StoreError> {
        match self {
            Connections::Held(held) => Ok(Borrowed::Locked(talaria_util::lock(&held.writer))),
            Connections::PerCall(path) => open_read_only(path).map(|c| Borrowed::Own(Box::new(c))),
        }
    }

    /// The connection reads go through.
    pub(super) fn reader(&self) -> Result<Borrowed<'_>, StoreError> {
        match self {
            Connections::Held(held) => Ok(Borrowed::Locked(talaria_util::lock(&held.reader))),
            Connections::PerCall(path) => open_read_only(path).map(|c| Borrowed::Own(Box::new(c))),
        }
    }
}

/// A connection that only reads the file at `path`: through its WAL when the WAL index
/// can be had (it sees every commit), else the file as it is (`immutable`: its folder
/// cannot hold the WAL's files, so nothing was committed to them either).
pub(super) fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    let reading = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|connection| {
        connection.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        Ok(connection)
    });
    let connection = match reading {
        Ok(connection) => connection,
        Err(_) => Connection::open_with_flags(
            format!("file:{}?immutable=1", path.display()),
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(classify)?,
    };
    connection
        .busy_timeout(std::time::Duration::from_secs(5))
        .map_err(classify)?;
    Ok(connection)
}
