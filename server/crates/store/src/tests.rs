//! Tests of the SQLite store: round trips, pagination, search ranking, migrations, damaged
//! files, concurrent writers and claims.

use std::sync::Arc;

use talaria_record::Transcript;
use talaria_record::testing::user;

use crate::conformance::{conversation, meta};
use crate::{SessionStore, SqliteStore, StoreError};

fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("dir");
    let store = SqliteStore::open(&dir.path().join("state.db")).expect("open");
    (dir, store)
}

/// The conformance suite on the SQLite store.
mod conformance {
    use std::sync::Arc;

    use crate::SqliteStore;
    use crate::conformance as suite;

    #[test]
    fn a_session_round_trips_with_its_record() {
        let (_dir, store) = super::store();
        suite::round_trip(&store);
    }

    #[test]
    fn list_pages_newest_first_and_filters_by_cwd() {
        let (_dir, store) = super::store();
        suite::list_pages(&store);
    }

    #[test]
    fn search_ranks_the_best_match_first_and_scrolls_around_it() {
        let (_dir, store) = super::store();
        suite::search_ranks(&store);
    }

    #[test]
    fn many_sessions_write_at_once() {
        let (_dir, store) = super::store();
        suite::many_writers(Arc::new(store));
    }

    #[test]
    fn a_session_open_elsewhere_cannot_be_claimed_or_deleted_until_released() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("state.db");
        // Two stores on one file stand for two processes: each has its own lock files open.
        let mine = SqliteStore::open(&path).expect("open");
        let theirs = SqliteStore::open(&path).expect("open");
        suite::claims_are_exclusive(&mine, &theirs);
    }

    #[test]
    fn a_process_asks_another_for_a_session_it_holds() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("state.db");
        let mine = SqliteStore::open(&path).expect("open");
        let theirs = SqliteStore::open(&path).expect("open");
        suite::asks_pass_between_holders(&mine, &theirs);
    }

    #[test]
    fn a_deleted_session_is_never_created_appended_or_forked_again() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("state.db");
        let store = SqliteStore::open(&path).expect("open");
        let other = SqliteStore::open(&path).expect("open");
        suite::deleted_sessions_stay_deleted(&store, &other);
    }

    #[test]
    fn a_very_large_answer_is_saved_whole_and_found_by_its_opening() {
        let (_dir, store) = super::store();
        suite::large_entries(&store);
    }

    #[test]
    fn checked_appends_never_replace_what_another_writer_wrote() {
        let (_dir, store) = super::store();
        suite::checked_appends(&store);
    }

    #[test]
    fn a_session_created_with_its_entries_is_there_whole_or_not_at_all() {
        let (_dir, store) = super::store();
        suite::created_with_entries(&store);
    }

    #[test]
    fn a_batch_commits_every_session_at_once_and_reindexing_finds_the_new_text() {
        let (_dir, store) = super::store();
        suite::batch_and_reindex(&store);
    }
}

#[test]
fn an_older_schema_is_migrated_and_its_entries_become_searchable() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    {
        // A version-1 file: sessions and entries, no search index.
        let mut connection = rusqlite::Connection::open(&path).expect("open");
        let tx = connection.transaction().expect("tx");
        (super::sqlite::migration_for_tests(0))(&tx).expect("v1");
        tx.pragma_update(None, "user_version", 1).expect("version");
        let mut t = Transcript::with_system("sys");
        t.push(user("remember the migration plan"));
        let body = serde_json::to_string(&t.entries()[1]).expect("json");
        tx.execute(
            "INSERT INTO sessions (id, cwd, created_at, updated_at) VALUES ('old', '/p', 1, 1)",
            [],
        )
        .expect("session");
        tx.execute(
            "INSERT INTO entries (session_id, entry_id, at_ms, kind, body) VALUES ('old', 2, 1, 'user', ?1)",
            [body],
        )
        .expect("entry");
        tx.commit().expect("commit");
    }
    let store = SqliteStore::open(&path).expect("migrates");
    let hits = store.search("migration", 5).expect("search");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_id, "old");
    store.claim("old").expect("claims work after the migration");
}

#[test]
fn a_new_file_goes_through_every_migration_to_the_latest_schema() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("new.db");
    drop(SqliteStore::open(&path).expect("created"));
    let connection = rusqlite::Connection::open(&path).expect("open");
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("version");
    assert_eq!(version, SqliteStore::schema_version());
    let shape = super::sqlite::schema_shape(&connection);
    // The last migration's shapes: entries keyed by rowid, the index keyed by it.
    assert!(
        shape.iter().any(|t| t.starts_with("entries: row INTEGER")),
        "{shape:#?}"
    );
    assert!(
        shape.iter().any(|t| t.starts_with("entries_fts: text ")),
        "{shape:#?}"
    );
}

#[test]
fn a_newer_schema_or_a_damaged_file_gives_a_clear_error() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    {
        let connection = rusqlite::Connection::open(&path).expect("open");
        connection
            .pragma_update(None, "user_version", 99)
            .expect("version");
    }
    assert!(matches!(
        SqliteStore::open(&path),
        Err(StoreError::TooNew { found: 99, .. })
    ));
    let damaged = dir.path().join("damaged.db");
    std::fs::write(
        &damaged,
        b"this is not a database, just some text ".repeat(200),
    )
    .expect("write");
    let error = SqliteStore::open(&damaged).expect_err("damaged");
    assert!(matches!(error, StoreError::Corrupt(_)), "{error}");
    assert!(error.to_string().contains("damaged"), "{error}");
}

#[test]
fn stores_opened_at_the_same_instant_all_end_up_migrated() {
    for old in [false, true] {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("state.db");
        if old {
            let mut connection = rusqlite::Connection::open(&path).expect("open");
            let tx = connection.transaction().expect("tx");
            (super::sqlite::migration_for_tests(0))(&tx).expect("v1");
            tx.pragma_update(None, "user_version", 1).expect("version");
            tx.commit().expect("commit");
        }
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let openers: Vec<_> = (0..6)
            .map(|n| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let store = SqliteStore::open(&path).expect("every opener succeeds");
                    store
                        .create(&meta(&format!("s{n}"), "/p", n))
                        .expect("and can write");
                })
            })
            .collect();
        for opener in openers {
            opener.join().expect("joined");
        }
        let store = SqliteStore::open(&path).expect("open");
        let page = store.list(None, None, 100).expect("list");
        assert_eq!(page.sessions.len(), 6, "old store: {old}");
    }
}

/// A read-only view of `dir`: a read-only bind mount when running as root (file modes do
/// not stop root), else the folder and its files made read-only. `None` (with the reason
/// printed) only where neither is possible.
struct ReadOnlyView {
    path: std::path::PathBuf,
    mounted: bool,
}

impl ReadOnlyView {
    fn of(dir: &std::path::Path) -> Option<Self> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        if !root {
            for entry in std::fs::read_dir(dir).ok()?.flatten() {
                let _ =
                    std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o444));
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).ok()?;
            return Some(Self {
                path: dir.to_path_buf(),
                mounted: false,
            });
        }
        let view = dir.with_extension("ro");
        std::fs::create_dir_all(&view).ok()?;
        let mount = |args: &[&str]| {
            std::process::Command::new("mount")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        let (from, to) = (dir.display().to_string(), view.display().to_string());
        if mount(&["--bind", &from, &to]) && mount(&["-o", "remount,ro,bind", &to]) {
            Some(Self {
                path: view,
                mounted: true,
            })
        } else {
            eprintln!("skipped: cannot mount a read-only view here (no mount permission)");
            None
        }
    }
}

impl ReadOnlyView {
    /// The view made writable again (a remount, a fixed permission).
    fn make_writable(&self) {
        use std::os::unix::fs::PermissionsExt;
        if self.mounted {
            let remounted = std::process::Command::new("mount")
                .args(["-o", "remount,rw,bind"])
                .arg(&self.path)
                .status()
                .is_ok_and(|s| s.success());
            assert!(remounted, "remounting {} read-write", self.path.display());
            return;
        }
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        for entry in std::fs::read_dir(&self.path)
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644));
        }
    }
}

impl Drop for ReadOnlyView {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.mounted {
            let _ = std::process::Command::new("umount")
                .arg(&self.path)
                .status();
        } else {
            let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755));
        }
    }
}

#[test]
fn a_read_only_store_lists_and_loads_but_refuses_writes() {
    let dir = tempfile::tempdir().expect("dir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    {
        let store = SqliteStore::open(&home.join("state.db")).expect("open");
        store.create(&meta("s", "/p", 1)).expect("create");
        store.append("s", conversation().entries()).expect("append");
        store.checkpoint().expect("checkpoint");
    }
    let Some(view) = ReadOnlyView::of(&home) else {
        return;
    };
    let store = SqliteStore::open(&view.path.join("state.db")).expect("opens read-only");
    assert!(store.is_read_only());
    assert_eq!(store.list(None, None, 10).expect("list").sessions.len(), 1);
    assert_eq!(store.load("s").expect("load").1.len(), conversation().len());
    assert!(matches!(
        store.append("s", conversation().entries()),
        Err(StoreError::ReadOnly(_))
    ));
    assert!(matches!(store.claim("s"), Err(StoreError::ReadOnly(_))));
    drop(store);
}

/// SQLite shares a file's WAL index among a process's connections; a read-only store that
/// kept one open kept every later open in the process read-only, so a home that became
/// writable was never written again without a restart.
#[test]
fn a_read_only_store_never_keeps_the_file_read_only_for_the_process() {
    let dir = tempfile::tempdir().expect("dir");
    let (first, home) = (dir.path().join("first"), dir.path().join("home"));
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    {
        let store = SqliteStore::open(&first.join("state.db")).expect("open");
        store.create(&meta("s", "/p", 1)).expect("create");
        store.append("s", conversation().entries()).expect("append");
        // The WAL and its index are left beside the file, as a killed process leaves them.
        let held = rusqlite::Connection::open(first.join("state.db")).expect("held");
        let _: i64 = held
            .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
            .expect("read");
        drop(store);
        for name in ["state.db", "state.db-wal", "state.db-shm"] {
            std::fs::copy(first.join(name), home.join(name)).expect("copy");
        }
    }
    let Some(view) = ReadOnlyView::of(&home) else {
        return;
    };
    let path = view.path.join("state.db");
    let read_only = SqliteStore::open(&path).expect("opens read-only");
    assert!(read_only.is_read_only());
    assert_eq!(
        read_only.load("s").expect("load").1.len(),
        conversation().len()
    );
    view.make_writable();
    let writable = SqliteStore::open(&path).expect("opens again");
    assert!(!writable.is_read_only(), "still read-only in this process");
    writable
        .create(&meta("t", "/p", 2))
        .expect("written once writable");
    // The read-only store goes on reading, and sees what was written since.
    assert_eq!(
        read_only.list(None, None, 10).expect("list").sessions.len(),
        2
    );
}

#[test]
fn asking_whether_writes_are_taken_says_busy_while_another_program_holds_the_lock() {
    let (dir, store) = store();
    store.create(&meta("s", "/p", 1)).expect("create");
    store.accepts_writes().expect("a free store takes writes");
    let other = rusqlite::Connection::open(dir.path().join("state.db")).expect("other");
    other
        .execute_batch("BEGIN IMMEDIATE;")
        .expect("the other program takes the write lock");
    assert!(matches!(store.accepts_writes(), Err(StoreError::Busy(_))));
    other.execute_batch("ROLLBACK;").expect("let go");
    store.accepts_writes().expect("taken again");
    // Asking changed nothing.
    assert_eq!(store.load("s").expect("load").1.len(), 0);
}

#[test]
fn a_backup_taken_while_a_writer_commits_is_whole() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).expect("open");
    store.create(&meta("s", "/p", 1)).expect("create");
    let mut record = Transcript::with_system("sys");
    store.append("s", record.entries()).expect("append");
    // Another process commits a turn after another while the backup is taken.
    let writing = std::thread::spawn(move || {
        let writer = SqliteStore::open(&path).expect("open");
        for n in 0..200 {
            record.push(user(&format!("message {n}")));
            let last = record.entries().len() - 1;
            writer
                .append("s", &record.entries()[last..])
                .expect("append");
        }
    });
    let copy = dir.path().join("copy.db");
    store.backup(&copy).expect("backup");
    writing.join().expect("writer");
    let (_, copied) = SqliteStore::open(&copy)
        .expect("the copy opens")
        .load("s")
        .expect("the session is in it");
    // A consistent copy: the record as of one commit, every entry up to it.
    let ids: Vec<u64> = copied.entries().iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    assert!(
        matches!(
            store.backup(&copy),
            Err(StoreError::Other(_) | StoreError::ReadOnly(_) | StoreError::Corrupt(_))
        ),
        "a target that exists is refused"
    );
}

/// A version-3 file (before the `writer` column) at `path`, with one session of two entries.
fn version_three_store(path: &std::path::Path) {
    let mut connection = rusqlite::Connection::open(path).expect("open");
    let tx = connection.transaction().expect("tx");
    for index in 0..3 {
        (super::sqlite::migration_for_tests(index))(&tx).expect("migration");
    }
    tx.pragma_update(None, "user_version", 3).expect("version");
    tx.execute(
        "INSERT INTO sessions (id, cwd, created_at, updated_at) VALUES ('old', '/p', 1, 1)",
        [],
    )
    .expect("session");
    for entry in Transcript::with_system("sys").entries() {
        let body = serde_json::to_string(entry).expect("json");
        tx.execute(
            "INSERT INTO entries (session_id, entry_id, at_ms, kind, body) VALUES ('old', ?1, 1, 'system', ?2)",
            rusqlite::params![i64::try_from(entry.id).expect("id"), body],
        )
        .expect("entry");
    }
    tx.commit().expect("commit");
}

#[test]
fn a_read_only_store_of_an_older_schema_lists_and_loads_and_a_current_one_keeps_its_writer() {
    let dir = tempfile::tempdir().expect("dir");
    let (old, new) = (dir.path().join("old"), dir.path().join("new"));
    std::fs::create_dir_all(&old).expect("mkdir");
    std::fs::create_dir_all(&new).expect("mkdir");
    version_three_store(&old.join("state.db"));
    {
        let store = SqliteStore::open(&new.join("state.db")).expect("open");
        store.create(&meta("s", "/p", 1)).expect("create");
        let append = crate::SessionAppend {
            session: "s".into(),
            entries: crate::EncodedEntry::all(conversation().entries()).expect("encodes"),
            basis: crate::Basis {
                writer: "the writer".into(),
                builds_on: vec![String::new()],
            },
        };
        assert!(store.append_checked(&[append]).expect("append").is_empty());
        store.checkpoint().expect("checkpoint");
    }
    let (Some(old_view), Some(new_view)) = (ReadOnlyView::of(&old), ReadOnlyView::of(&new)) else {
        return;
    };
    let store = SqliteStore::open(&old_view.path.join("state.db")).expect("opens read-only");
    assert!(store.is_read_only());
    assert_eq!(store.list(None, None, 10).expect("list").sessions.len(), 1);
    let (read, record) = store.load("old").expect("load");
    assert_eq!((read.writer.as_str(), record.len()), ("", 1));
    let store = SqliteStore::open(&new_view.path.join("state.db")).expect("opens read-only");
    assert!(store.is_read_only());
    assert_eq!(store.load("s").expect("load").0.writer, "the writer");
}

#[test]
fn what_is_the_stores_as_a_whole_and_what_can_never_open_are_told_apart() {
    let one_session = [
        StoreError::InUse {
            session: "s".into(),
            holder: "h".into(),
        },
        StoreError::NotFound("s".into()),
        StoreError::NoRecord("s".into()),
        StoreError::Other("one entry".into()),
    ];
    for error in &one_session {
        assert!(!error.is_store_wide(), "{error}");
        assert!(!error.is_permanent(), "{error}");
    }
    let whole = [
        StoreError::Busy("locked".into()),
        StoreError::Overloaded("calls".into()),
        StoreError::Full("disk".into()),
        StoreError::ReadOnly("ro".into()),
        StoreError::Unreachable("down".into()),
        StoreError::NotOpenYet("opening".into()),
    ];
    for error in &whole {
        assert!(error.is_store_wide(), "{error}");
        assert!(!error.is_permanent(), "{error}");
    }
    for error in [
        StoreError::TooNew { found: 9, known: 4 },
        StoreError::Unsupported("no driver".into()),
    ] {
        assert!(error.is_store_wide() && error.is_permanent(), "{error}");
    }
    let own = StoreError::Overloaded("4 of them are still running".into()).to_string();
    assert!(!own.contains("another process"), "{own}");
}
