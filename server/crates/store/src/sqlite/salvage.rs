//! A damaged store file (truncated, or with pages SQLite refuses) is kept aside and what can
//! still be read from it is copied into a new store, built beside it and put in its place
//! only when complete (see [`salvage`]): every session row that reads, and each
//! session's entries up to the first one that does not (a prefix of a record is a valid
//! record; a turn it cuts off reads as interrupted when the session is loaded).
//!
//! Rows are read in ranges of their row number; a range that fails is halved until the
//! single rows that fail are known, so one bad page costs the rows on it, not the table.
//! (SQLite's own recovery extension is not part of the bundled library, and binding it would
//! need `unsafe`, which the workspace forbids.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, params};
use talaria_record::Entry;

use super::{SESSION_COLUMNS, SqliteStore, meta_of};
use crate::{SessionMeta, SessionStore, StoreError};

/// Rows read per query while nothing fails.
const RANGE: i64 = 512;

/// What a salvage did, for the notice users get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvage {
    /// Where the damaged file (and its write-ahead log) now is.
    pub damaged_copy: PathBuf,
    /// Sessions copied into the new store.
    pub sessions: usize,
    /// Entries copied.
    pub entries: usize,
    /// Sessions of which part could not be read (kept up to the first unreadable entry).
    pub partial: usize,
}

impl Salvage {
    /// One line for the user.
    pub fn describe(&self) -> String {
        let partial = match self.partial {
            0 => String::new(),
            n => format!(" ({n} of them only in part)"),
        };
        format!(
            "the session store was damaged: it was moved to {} and {} sessions{partial} with \
             {} entries were recovered into a new store",
            self.damaged_copy.display(),
            self.sessions,
            self.entries
        )
    }
}

/// Whether the file at `path` is shorter than its header says (a truncated copy or disk).
pub(super) fn is_truncated(connection: &Connection, path: &Path) -> bool {
    let pages: i64 = connection
        .pragma_query_value(None, "page_count", |row| row.get(0))
        .unwrap_or(0);
    let page_size: i64 = connection
        .pragma_query_value(None, "page_size", |row| row.get(0))
        .unwrap_or(0);
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    let in_wal = std::fs::metadata(&wal).map_or(0, |m| m.len());
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    // Pages still in the write-ahead log may extend the file past its current end.
    in_wal == 0 && u64::try_from(pages.saturating_mul(page_size)).unwrap_or(0) > size
}

/// Recovers what reads of the damaged store at `path` into a new store built beside it,
/// then puts the new store in its place. Safe against a crash, a signal or a full disk at
/// any point:
///
/// 1. the new store is built at `<path>.salvaging` (one left by an interrupted salvage is
///    removed first: it is started again from the damaged file, which is untouched so far);
/// 2. once complete and synced it is renamed `<path>.salvaged` — the mark that it is whole;
/// 3. the damaged file gets a second name, `<path>.damaged-<time>` (a hard link), its
///    write-ahead log and shared memory are moved to that name too, and `<path>.salvaged`
///    replaces `<path>` in one rename.
///
/// A start that finds `<path>.salvaged` finishes step 3 ([`finish_interrupted`]). A disk that
/// fills during step 1 leaves the damaged file where it was and fails with
/// [`StoreError::Full`] naming the space needed; the journal opens the store again later, so
/// the salvage is tried again once there is room.
pub fn salvage(path: &Path) -> Result<(SqliteStore, Salvage), StoreError> {
    let _lock = salvage_lock(path)?;
    let building = suffixed(path, ".salvaging");
    remove_with_journals(&building);
    let (metas, entries, partial) = read_what_reads(path);
    talaria_util::failpoint::step("salvage::build::before");
    let built = build(&building, &metas, entries);
    let (sessions, entries) = match built {
        Ok(counts) => counts,
        Err(error) => {
            remove_with_journals(&building);
            return Err(full_or(error, path));
        }
    };
    talaria_util::failpoint::step("salvage::build::after");
    sync_file(&building)?;
    let done = suffixed(path, ".salvaged");
    talaria_util::failpoint::step("salvage::complete::before");
    std::fs::rename(&building, &done).map_err(|e| moved(path, &e))?;
    sync_parent(path);
    talaria_util::failpoint::step("salvage::complete::after");
    let damaged_copy = put_in_place(path, &done)?;
    let store = SqliteStore::open(path)?;
    let salvage = Salvage {
        damaged_copy,
        sessions,
        entries,
        partial,
    };
    tracing::warn!("{}", salvage.describe());
    Ok((store, salvage))
}

/// Finishes a salvage that was complete when it was interrupted (its `<path>.salvaged` is
/// there); the damaged copy's path when there was one.
pub(super) fn finish_interrupted(path: &Path) -> Result<Option<PathBuf>, StoreError> {
    let done = suffixed(path, ".salvaged");
    if !done.exists() {
        return Ok(None);
    }
    let _lock = salvage_lock(path)?;
    if !done.exists() {
        return Ok(None);
    }
    tracing::warn!(
        "finishing the salvage of {} that was interrupted after its new store was complete",
        path.display()
    );
    put_in_place(path, &done).map(Some)
}

/// Step 3: the damaged file (if still at `path`) keeps a name of its own with its journals,
/// and the complete new store takes its place.
fn put_in_place(path: &Path, done: &Path) -> Result<PathBuf, StoreError> {
    talaria_util::failpoint::step("salvage::place::before");
    let copy = PathBuf::from(format!(
        "{}.damaged-{}",
        path.display(),
        chrono_free_stamp()
    ));
    if path.exists() {
        match std::fs::hard_link(path, &copy) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(moved(path, &e)),
        }
    }
    for suffix in ["-wal", "-shm"] {
        let from = suffixed(path, suffix);
        if from.exists() {
            std::fs::rename(&from, suffixed(&copy, suffix)).map_err(|e| moved(path, &e))?;
        }
    }
    std::fs::rename(done, path).map_err(|e| moved(path, &e))?;
    sync_parent(path);
    talaria_util::failpoint::step("salvage::place::after");
    Ok(copy)
}

/// Writes what was recovered into a new store at `building`, in one transaction.
fn build(
    building: &Path,
    metas: &BTreeMap<String, SessionMeta>,
    entries: BTreeMap<String, Vec<Entry>>,
) -> Result<(usize, usize), StoreError> {
    let store = SqliteStore::open(building)?;
    let mut copied_sessions = 0;
    let mut copied_entries = 0;
    for (id, session_entries) in entries {
        let meta = metas.get(&id).cloned().unwrap_or_else(|| SessionMeta {
            id: id.clone(),
            title: Some("(recovered)".into()),
            created_at: session_entries.first().map_or(0, |e| e.at_ms),
            updated_at: session_entries.last().map_or(0, |e| e.at_ms),
            ..Default::default()
        });
        store.create(&meta)?;
        store.append(&id, &session_entries)?;
        copied_sessions += 1;
        copied_entries += session_entries.len();
    }
    // Sessions whose row reads but none of whose entries do are kept (empty) too.
    for (id, meta) in metas {
        if store.load(id).is_err() {
            store.create(meta)?;
            copied_sessions += 1;
        }
    }
    store.checkpoint()?;
    drop(store);
    // The last connection closed: the write-ahead log is folded in and removed.
    remove_with_journals_only(building);
    Ok((copied_sessions, copied_entries))
}

/// A full disk is said as such, with the room a salvage needs: up to twice the damaged
/// file's size (the new store, and its write-ahead log until it is folded in).
fn full_or(error: StoreError, path: &Path) -> StoreError {
    let needed = std::fs::metadata(path).map_or(0, |m| m.len()) * 2;
    let full = matches!(error, StoreError::Full(_))
        || error.to_string().contains("No space left")
        || error.to_string().contains("database or disk is full");
    if full {
        StoreError::Full(format!(
            "recovering the damaged store {} needs about {} MB free beside it; it is kept as \
             it is and tried again",
            path.display(),
            needed.div_ceil(1_000_000).max(1)
        ))
    } else {
        error
    }
}

/// One salvage at a time per store, across processes (`<path>.salvage-lock`, `flock`).
fn salvage_lock(path: &Path) -> Result<std::fs::File, StoreError> {
    let lock_path = suffixed(path, ".salvage-lock");
    use std::os::unix::fs::OpenOptionsExt;
    // Kept after use: removing a lock file races with another process opening it.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| moved(path, &e))?;
    file.try_lock().map_err(|_| {
        StoreError::Busy(format!(
            "another Talaria process is recovering the damaged store {}",
            path.display()
        ))
    })?;
    Ok(file)
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn remove_with_journals(path: &Path) {
    let _ = std::fs::remove_file(path);
    remove_with_journals_only(path);
}

fn remove_with_journals_only(path: &Path) {
    for suffix in ["-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(suffixed(path, suffix));
    }
}

fn sync_file(path: &Path) -> Result<(), StoreError> {
    std::fs::File::open(path)
        .and_then(|file| file.sync_all())
        .map_err(|e| moved(path, &e))
}

fn sync_parent(path: &Path) {
    if let Some(parent) = path.parent()
        && let Ok(dir) = std::fs::File::open(parent)
    {
        let _ = dir.sync_all();
    }
}

fn moved(path: &Path, error: &std::io::Error) -> StoreError {
    if error.raw_os_error() == Some(28) {
        return StoreError::Full(format!("recovering {}: {error}", path.display()));
    }
    StoreError::Open {
        path: path.display().to_string(),
        detail: format!("the damaged store could not be recovered: {error}"),
    }
}

/// Seconds since the epoch, for the damaged copy's name.
fn chrono_free_stamp() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

type Recovered = (
    BTreeMap<String, SessionMeta>,
    BTreeMap<String, Vec<Entry>>,
    usize,
);

/// Every session row and entry that reads, entries grouped by session and cut at the first
/// gap; and how many sessions were cut.
fn read_what_reads(copy: &Path) -> Recovered {
    let Ok(connection) = Connection::open_with_flags(copy, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return (BTreeMap::new(), BTreeMap::new(), 0);
    };
    // With a writable schema SQLite reads a file shorter than its header says up to its end
    // instead of refusing it whole (nothing is written: the connection is read-only).
    let _ = connection.pragma_update(None, "writable_schema", "ON");
    // A file older than version 4 has no writer column: its sessions are read without it.
    let has_writer = connection
        .prepare("SELECT writer FROM sessions LIMIT 0")
        .is_ok();
    let columns = if has_writer {
        SESSION_COLUMNS
    } else {
        super::SESSION_COLUMNS_BEFORE_WRITER
    };
    let metas: BTreeMap<String, SessionMeta> = rows(
        &connection,
        "sessions",
        "rowid",
        &format!("SELECT {columns} FROM sessions WHERE rowid BETWEEN ?1 AND ?2"),
        meta_of,
    )
    .into_iter()
    .map(|meta| (meta.id.clone(), meta))
    .collect();
    let bodies: Vec<(String, Option<Entry>)> = rows(
        &connection,
        "entries",
        "row",
        "SELECT session_id, body FROM entries WHERE row BETWEEN ?1 AND ?2",
        |row| Ok((row.get(0)?, super::bodies::entry_at(row, 1)?.ok())),
    );
    let mut by_session: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    for (session, entry) in bodies {
        if let Some(entry) = entry {
            by_session.entry(session).or_default().push(entry);
        }
    }
    let mut partial = 0;
    for entries in by_session.values_mut() {
        entries.sort_by_key(|e| e.id);
        let whole = entries.len();
        let unbroken = entries
            .iter()
            .enumerate()
            .take_while(|(at, e)| e.id == u64::try_from(*at).unwrap_or(u64::MAX) + 1)
            .count();
        entries.truncate(unbroken);
        if unbroken < whole || entries.is_empty() {
            partial += 1;
        }
    }
    by_session.retain(|_, entries| !entries.is_empty());
    (metas, by_session, partial)
}

/// The rows of `table` that read, by ranges of `key` (its row number), halving a range that
/// fails down to single rows. A table without that key (an older schema) is read in one
/// scan, up to the first row that fails.
fn rows<T>(
    connection: &Connection,
    table: &str,
    key: &str,
    query: &str,
    map: impl Fn(&rusqlite::Row) -> rusqlite::Result<T> + Copy,
) -> Vec<T> {
    if connection.prepare(query).is_err() {
        return scan(
            connection,
            &query[..query.find(" WHERE").unwrap_or(query.len())],
            map,
        );
    }
    let highest = connection
        .query_row(&format!("SELECT max({key}) FROM {table}"), [], |row| {
            row.get::<_, Option<i64>>(0)
        })
        .ok();
    let mut out = Vec::new();
    let mut low = 1;
    match highest {
        Some(highest) => {
            let highest = highest.unwrap_or(0);
            while low <= highest {
                let high = low.saturating_add(RANGE - 1);
                read_range(connection, query, low, high, map, &mut out);
                low = high.saturating_add(1);
            }
        }
        // Where the table ends cannot be read: probe until a long run of nothing.
        None => {
            let mut misses = 0;
            while misses < PROBE_MISSES {
                let high = low.saturating_add(RANGE - 1);
                let before = out.len();
                read_range(connection, query, low, high, map, &mut out);
                misses = if out.len() == before { misses + 1 } else { 0 };
                low = high.saturating_add(1);
            }
        }
    }
    out
}

/// Ranges in a row that read nothing before probing stops.
const PROBE_MISSES: usize = 32;

/// A plain scan, up to the first row that fails.
fn scan<T>(
    connection: &Connection,
    query: &str,
    map: impl Fn(&rusqlite::Row) -> rusqlite::Result<T> + Copy,
) -> Vec<T> {
    let mut out = Vec::new();
    if let Ok(mut statement) = connection.prepare(query)
        && let Ok(rows) = statement.query_map([], map)
    {
        for row in rows {
            match row {
                Ok(row) => out.push(row),
                Err(_) => break,
            }
        }
    }
    out
}

fn read_range<T>(
    connection: &Connection,
    query: &str,
    low: i64,
    high: i64,
    map: impl Fn(&rusqlite::Row) -> rusqlite::Result<T> + Copy,
    out: &mut Vec<T>,
) {
    let read = connection.prepare_cached(query).and_then(|mut statement| {
        statement
            .query_map(params![low, high], map)?
            .collect::<rusqlite::Result<Vec<T>>>()
    });
    match read {
        Ok(rows) => out.extend(rows),
        Err(_) if low < high => {
            let middle = low + (high - low) / 2;
            read_range(connection, query, low, middle, map, out);
            read_range(connection, query, middle + 1, high, map, out);
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, SeekFrom, Write};

    use talaria_record::Transcript;
    use talaria_record::testing::{assistant, user};

    use super::*;
    use crate::conformance::meta;

    /// A store of `sessions` sessions of `turns` turns each (long texts fill many pages),
    /// checkpointed and closed; its path.
    fn grown(dir: &Path, sessions: usize, turns: usize) -> PathBuf {
        let path = dir.join("state.db");
        let store = SqliteStore::open(&path).expect("open");
        for s in 0..sessions {
            let id = format!("s{s}");
            store.create(&meta(&id, "/work", s as i64)).expect("create");
            let mut transcript = Transcript::with_system("sys");
            for t in 0..turns {
                transcript.push(user(&format!(
                    "question {t} of {id} {}",
                    "words ".repeat(40)
                )));
                transcript.push(assistant(&format!("answer {t} of {id}"), &[]));
            }
            store.append(&id, transcript.entries()).expect("append");
        }
        store.checkpoint().expect("checkpoint");
        drop(store);
        path
    }

    fn cut_to(path: &Path, fraction: f64) {
        let size = std::fs::metadata(path).expect("size").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("file");
        file.set_len((size as f64 * fraction) as u64)
            .expect("truncate");
    }

    fn scribble(path: &Path, at_fraction: f64, bytes: usize) {
        let size = std::fs::metadata(path).expect("size").len();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("file");
        file.seek(SeekFrom::Start((size as f64 * at_fraction) as u64))
            .expect("seek");
        file.write_all(&vec![0xA5; bytes]).expect("scribble");
    }

    /// Every recovered session is a prefix of what was written: ids from 1, unbroken.
    fn assert_prefixes(store: &SqliteStore) -> usize {
        let page = store.list(None, None, 1000).expect("list");
        for session in &page.sessions {
            let (_, transcript) = store.load(&session.id).expect("load");
            for (at, entry) in transcript.entries().iter().enumerate() {
                assert_eq!(entry.id, at as u64 + 1, "{}: a gap", session.id);
            }
        }
        page.sessions.len()
    }

    #[test]
    fn a_truncated_store_is_moved_aside_and_what_reads_is_recovered() {
        for fraction in [0.9, 0.6, 0.3] {
            let dir = tempfile::tempdir().expect("dir");
            let path = grown(dir.path(), 6, 40);
            cut_to(&path, fraction);
            let store = SqliteStore::open_or_salvage(&path).expect("recovered");
            let salvage = store.salvaged().expect("salvaged").clone();
            assert!(
                salvage.damaged_copy.exists(),
                "{fraction}: the copy is kept"
            );
            assert!(salvage.sessions > 0, "{fraction}: {salvage:?}");
            assert!(salvage.entries > 0, "{fraction}: {salvage:?}");
            assert_eq!(assert_prefixes(&store), salvage.sessions, "{fraction}");
            assert!(store.notes()[0].contains(&salvage.damaged_copy.display().to_string()));
            // The new store takes writes.
            store.create(&meta("after", "/work", 99)).expect("writes");
        }
    }

    #[test]
    fn a_file_that_is_not_a_database_any_more_is_moved_aside_for_a_fresh_store() {
        let dir = tempfile::tempdir().expect("dir");
        let path = grown(dir.path(), 2, 5);
        scribble(&path, 0.0, 100);
        let store = SqliteStore::open_or_salvage(&path).expect("a fresh store");
        let salvage = store.salvaged().expect("salvaged");
        assert!(salvage.damaged_copy.exists());
        assert_eq!(assert_prefixes(&store), salvage.sessions);
    }

    #[test]
    fn damaged_pages_in_the_middle_cost_their_rows_not_the_table() {
        let dir = tempfile::tempdir().expect("dir");
        let path = grown(dir.path(), 8, 60);
        let (metas, before, _) = read_what_reads(&path);
        let written: usize = before.values().map(Vec::len).sum();
        scribble(&path, 0.5, 8192);
        let (metas_after, entries, _) = read_what_reads(&path);
        let recovered: usize = entries.values().map(Vec::len).sum();
        assert!(recovered > written / 4, "{recovered} of {written}");
        assert!(recovered < written, "the scribble cost something");
        assert!(metas_after.len() <= metas.len());
        for entries in entries.values() {
            for (at, entry) in entries.iter().enumerate() {
                assert_eq!(entry.id, at as u64 + 1);
            }
        }
    }

    #[test]
    fn a_healthy_store_is_not_salvaged() {
        let dir = tempfile::tempdir().expect("dir");
        let path = grown(dir.path(), 2, 3);
        let store = SqliteStore::open_or_salvage(&path).expect("open");
        assert!(store.salvaged().is_none());
        assert!(store.notes().is_empty());
        assert_eq!(store.list(None, None, 10).expect("list").sessions.len(), 2);
    }

    /// What a salvage of a copy of `path` recovers, untouched by any interruption.
    fn reference_sessions(path: &Path) -> usize {
        let dir = tempfile::tempdir().expect("dir");
        let copy = dir.path().join("state.db");
        std::fs::copy(path, &copy).expect("copy");
        let store = SqliteStore::open_or_salvage(&copy).expect("recovered");
        store.salvaged().expect("salvaged").sessions
    }

    #[test]
    fn a_salvage_interrupted_while_building_starts_again_from_the_damaged_file() {
        let dir = tempfile::tempdir().expect("dir");
        let path = grown(dir.path(), 12, 30);
        cut_to(&path, 0.7);
        let expected = reference_sessions(&path);
        // A crash (kill -9, a signal, a full disk) while the new store was being built left
        // part of it: the damaged file is still the store, untouched.
        let (metas, entries, _) = read_what_reads(&path);
        let partial: BTreeMap<String, Vec<Entry>> = entries.into_iter().take(2).collect();
        let building = suffixed(&path, ".salvaging");
        build(&building, &metas, partial).expect("part of a salvage");
        std::fs::write(suffixed(&building, "-wal"), b"torn").expect("a torn log");
        let store = SqliteStore::open_or_salvage(&path).expect("recovered");
        assert_eq!(store.salvaged().expect("salvaged").sessions, expected);
        assert_eq!(assert_prefixes(&store), expected, "never the partial store");
        assert!(!building.exists() && !suffixed(&building, "-wal").exists());
    }

    #[test]
    fn a_salvage_interrupted_once_its_store_was_complete_is_finished_by_the_next_open() {
        let dir = tempfile::tempdir().expect("dir");
        let path = grown(dir.path(), 12, 30);
        cut_to(&path, 0.7);
        let expected = reference_sessions(&path);
        let (metas, entries, _) = read_what_reads(&path);
        let done = suffixed(&path, ".salvaged");
        build(&done, &metas, entries).expect("a complete salvage");
        // Interrupted between marking it complete and putting it in place; or after moving
        // the damaged file's second name and its log (the same next step either way).
        let store = SqliteStore::open_or_salvage(&path).expect("finished");
        assert!(store.salvaged().is_none(), "nothing salvaged again");
        assert_eq!(assert_prefixes(&store), expected);
        assert!(!done.exists());
        let copies: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.contains(".damaged-") && !name.ends_with("-wal") && !name.ends_with("-shm")
            })
            .collect();
        assert_eq!(copies.len(), 1, "the damaged file is kept: {copies:?}");
    }

    #[test]
    fn two_salvages_at_once_do_not_build_over_each_other() {
        let dir = tempfile::tempdir().expect("dir");
        let path = grown(dir.path(), 3, 5);
        cut_to(&path, 0.7);
        let held = salvage_lock(&path).expect("the first salvage's lock");
        match salvage(&path) {
            Err(StoreError::Busy(why)) => assert!(why.contains("recovering"), "{why}"),
            other => panic!("a second salvage at once: {:?}", other.map(|(_, s)| s)),
        }
        drop(held);
        assert!(salvage(&path).is_ok());
    }
}
