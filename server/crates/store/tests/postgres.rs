//! The store conformance suite against a real PostgreSQL server: a throwaway cluster in a
//! temporary directory (`initdb`, `pg_ctl`, a free port), run as an unprivileged user when
//! the tests run as root, stopped at the end. Needs Debian's `postgresql` (`.ci/run` installs
//! it when it is missing).
#![cfg(feature = "postgres-test")]
// A test crate: a failed set-up step is a failed test.
#![allow(clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria_store::conformance as suite;
use talaria_store::test_cluster::TestCluster as Cluster;
use talaria_store::{PgOptions, PgStore, SessionStore, StoreError, TlsMode};

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
    suite::large_entries(&store());
    suite::checked_appends(&store());
    suite::created_with_entries(&store());
    let url = cluster.database();
    suite::deleted_sessions_stay_deleted(
        &PgStore::connect(&url).expect("one"),
        &PgStore::connect(&url).expect("another"),
    );
    let url = cluster.database();
    let mine = PgStore::connect(&url).expect("mine");
    let theirs = PgStore::connect(&url).expect("theirs");
    suite::claims_are_exclusive(&mine, &theirs);
    suite::asks_pass_between_holders(&mine, &theirs);
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

fn entries(ids: std::ops::Range<u64>) -> Vec<talaria_record::Entry> {
    suite::conversation()
        .entries()
        .iter()
        .cycle()
        .zip(ids)
        .map(|(entry, id)| {
            let mut entry = entry.clone();
            entry.id = id;
            entry
        })
        .collect()
}

/// Tries `call` until it succeeds or `within` passes.
fn eventually<T>(within: Duration, mut call: impl FnMut() -> Result<T, StoreError>) -> T {
    let start = Instant::now();
    loop {
        match call() {
            Ok(value) => return value,
            Err(error) if start.elapsed() < within => {
                assert!(
                    matches!(error, StoreError::Unreachable(_) | StoreError::Open { .. }),
                    "{error:?}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(error) => panic!("still failing after {within:?}: {error}"),
        }
    }
}

/// The server stops (as in a crash) and comes back: writes fail while it is away, then
/// succeed on a new connection; nothing written before is lost, and the claim is this
/// process's again (another process cannot take it).
#[test]
fn a_restarted_server_is_connected_again_with_the_claims() {
    let cluster = Cluster::start();
    let url = cluster.database();
    let mine = PgStore::connect(&url).expect("mine");
    mine.create(&suite::meta("s", "/p", 1)).expect("create");
    mine.claim("s").expect("claim");
    mine.append("s", &entries(1..4)).expect("before");
    cluster.stop();
    match mine.append("s", &entries(4..6)) {
        Err(StoreError::Unreachable(why)) => assert!(!why.is_empty()),
        other => panic!("{other:?}"),
    }
    // While it is away, calls fail at once rather than wait on a dead connection.
    let started = Instant::now();
    assert!(mine.list(None, None, 10).is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    cluster.start_again();
    eventually(Duration::from_secs(40), || mine.append("s", &entries(4..6)));
    let theirs = PgStore::connect(&url).expect("theirs");
    match theirs.claim("s") {
        Err(StoreError::InUse { holder, .. }) => {
            assert!(holder.contains(&std::process::id().to_string()), "{holder}");
        }
        other => panic!("the claim was not taken again: {other:?}"),
    }
    let (_, transcript) = theirs.load("s").expect("load");
    let ids: Vec<u64> = transcript.entries().iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
}

/// The claims connection alone is cut (an administrator ends it) and another process takes
/// the session meanwhile: this process's writes to it are refused, naming the new holder,
/// instead of interleaving with theirs.
#[test]
fn a_claim_lost_while_its_connection_was_away_fences_writes() {
    let cluster = Cluster::start();
    let url = cluster.database();
    let mine = PgStore::connect(&url).expect("mine");
    mine.create(&suite::meta("s", "/p", 1)).expect("create");
    mine.claim("s").expect("claim");
    mine.append("s", &entries(1..2)).expect("first");
    let ended: i64 = cluster
        .admin()
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks
             WHERE locktype = 'advisory' AND granted",
            &[],
        )
        .expect("terminate")
        .get(0);
    assert_eq!(ended, 1);
    let theirs = PgStore::connect(&url).expect("theirs");
    eventually(Duration::from_secs(5), || theirs.claim("s"));
    // The claims connection is checked at least every five seconds of writing.
    std::thread::sleep(Duration::from_millis(5_200));
    match mine.append("s", &entries(2..3)) {
        Err(StoreError::InUse { holder, .. }) => assert!(holder.contains("pid"), "{holder}"),
        other => panic!("a write without the claim went through: {other:?}"),
    }
    theirs
        .append("s", &entries(2..3))
        .expect("the holder writes");
    theirs.release("s").expect("release");
    mine.claim("s").expect("mine again once released");
    mine.append("s", &entries(3..4)).expect("and writes again");
}

/// TLS through rustls with libpq's `sslmode`s, against a server that refuses plain
/// connections and has a self-signed certificate for `localhost`.
#[test]
fn tls_modes_encrypt_and_verify_as_libpq_does() {
    let cluster = Cluster::start_tls_only();
    let database = cluster.database();
    let name = database.rsplit('/').next().expect("name");
    let root = cluster.certificate().display().to_string();
    let port = cluster.port();
    let open = |host: &str, query: &str| {
        let url = format!("postgres://talaria@{host}:{port}/{name}?{query}");
        PgOptions::parse(&url, None, &|_| None).and_then(PgStore::open)
    };
    match open("localhost", "sslmode=disable") {
        Err(StoreError::Open { detail, .. }) => {
            assert!(detail.contains("no encryption"), "{detail}")
        }
        other => panic!("a plain connection was accepted: {other:?}"),
    }
    open("localhost", "sslmode=require").expect("encrypted without verification");
    open("localhost", "").expect("prefer encrypts when offered");
    let full = format!("sslmode=verify-full&sslrootcert={root}");
    open("localhost", &full).expect("verified against the named root");
    match open("localhost", "sslmode=verify-full") {
        Err(StoreError::Open { detail, .. }) => assert!(detail.contains("certificate"), "{detail}"),
        other => panic!("a self-signed server passed the web roots: {other:?}"),
    }
    match open("127.0.0.1", &full) {
        Err(StoreError::Open { detail, .. }) => assert!(detail.contains("certificate"), "{detail}"),
        other => panic!("verify-full accepted a certificate for another name: {other:?}"),
    }
    let chain = format!("sslmode=verify-ca&sslrootcert={root}");
    let store = open("127.0.0.1", &chain).expect("verify-ca ignores the name");
    assert_eq!(
        PgOptions::parse(&format!("postgres://h/d?{chain}"), None, &|_| None)
            .expect("options")
            .tls,
        TlsMode::VerifyCa
    );
    suite::round_trip(&store);
}
