//! The store conformance suite against a real PostgreSQL server: a throwaway cluster in a
//! temporary directory (`initdb`, `pg_ctl`, a free port), run as an unprivileged user when
//! the tests run as root, stopped at the end. Needs Debian's `postgresql` (`.ci/run` installs
//! it when it is missing).
#![cfg(feature = "postgres")]
// A test crate: a failed set-up step is a failed test.
#![allow(clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use talaria_store::conformance as suite;
use talaria_store::{PgStore, SessionStore, StoreError};

/// A running throwaway cluster.
struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    as_user: Option<&'static str>,
    _dir: tempfile::TempDir,
}

/// The directory holding `initdb` and `pg_ctl`.
fn postgres_bin() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.flatten().map(|d| d.path().join("bin")).collect())
        .unwrap_or_default();
    candidates.sort();
    candidates
        .into_iter()
        .rev()
        .find(|dir| dir.join("initdb").exists())
        .expect("PostgreSQL's initdb (Debian's postgresql package)")
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path().join("data");
        let as_user = running_as_root().then_some("nobody");
        if as_user.is_some() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
                .expect("chmod");
        }
        let cluster = Self {
            bin: postgres_bin(),
            data,
            port: free_port(),
            as_user,
            _dir: dir,
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data.display().to_string(),
                "-U",
                "talaria",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
            ],
        );
        let socket_dir = cluster.data.display().to_string();
        let options = format!(
            "-p {} -k {socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off",
            cluster.port
        );
        let log = cluster.data.join("log").display().to_string();
        cluster.run(
            "pg_ctl",
            &[
                "-D",
                &cluster.data.display().to_string(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        );
        cluster
    }

    fn run(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program);
        let status = match self.as_user {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&program)
                .args(args)
                .current_dir("/")
                .status(),
            None => Command::new(&program).args(args).status(),
        }
        .expect("runs");
        assert!(status.success(), "{} {args:?} failed", program.display());
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://talaria@127.0.0.1:{}/{database}", self.port)
    }

    /// A fresh, empty database's URL.
    fn database(&self) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let mut admin =
            postgres::Client::connect(&self.url("postgres"), postgres::NoTls).expect("admin");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create database");
        self.url(&name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data.display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "immediate", "stop"]);
    }
}

#[test]
fn the_store_conformance_suite_holds_on_postgresql() {
    // One cluster for every check (each in a database of its own); stopped when it drops,
    // a failed check included.
    let cluster = Cluster::start();
    let store = || PgStore::connect(&cluster.database()).expect("connect");
    suite::round_trip(&store());
    suite::list_pages(&store());
    suite::search_ranks(&store());
    suite::many_writers(Arc::new(store()));
    suite::batch_and_reindex(&store());
    let url = cluster.database();
    let mine = PgStore::connect(&url).expect("mine");
    let theirs = PgStore::connect(&url).expect("theirs");
    suite::claims_are_exclusive(&mine, &theirs);
    a_dropped_connection_releases_its_claims_at_once(&cluster);
    connecting_many_at_once_migrates_once_and_a_newer_schema_is_refused(&cluster);
}

/// A process that dies closes its connections: its claims end with them.
fn a_dropped_connection_releases_its_claims_at_once(cluster: &Cluster) {
    let url = cluster.database();
    let theirs = PgStore::connect(&url).expect("theirs");
    {
        let mine = PgStore::connect(&url).expect("mine");
        mine.create(&suite::meta("s", "/p", 1)).expect("create");
        mine.claim("s").expect("claim");
        match theirs.claim("s") {
            Err(StoreError::InUse { holder, .. }) => {
                assert!(
                    holder.contains("host") && holder.contains("pid"),
                    "{holder}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    theirs.claim("s").expect("free once the holder is gone");
}

/// Six processes connecting to a fresh database at once all succeed (one migrates); a
/// database migrated by a newer build is refused, saying so.
fn connecting_many_at_once_migrates_once_and_a_newer_schema_is_refused(cluster: &Cluster) {
    let url = cluster.database();
    let openers: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PgStore::connect(&url).map(|_| ()))
        })
        .collect();
    for opener in openers {
        opener
            .join()
            .expect("joined")
            .expect("every opener succeeds");
    }
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("client");
    client
        .execute(
            "UPDATE talaria_schema SET version = $1",
            &[&(PgStore::schema_version() + 1)],
        )
        .expect("bump");
    match PgStore::connect(&url) {
        Err(StoreError::TooNew { found, known }) => {
            assert_eq!((found, known), (known + 1, PgStore::schema_version()));
        }
        other => panic!("{other:?}"),
    }
}
