//! An answered `session/delete` is never undone, and a delete sees a session as the process
//! that answered it does. A process killed after its backlog was written but before its spool
//! said so leaves lines of a session; another process adopts them, the client deletes the
//! session there, and the adopted writes that come later are refused by the store's tombstone
//! instead of bringing it back. A session whose creation still waits for the store (the lock
//! was given back a moment ago) is deleted too, not reported missing. And a process holding a
//! turn it adopted from an ended process's spool holds that session until the turn is
//! written: a third process loading it meanwhile is told it is in use, never served a view
//! without the answered turn.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::MockReply;
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

/// The ids `session/list` shows.
fn listed_ids(listed: &serde_json::Value) -> Vec<String> {
    listed["sessions"]
        .as_array()
        .map(|sessions| {
            sessions
                .iter()
                .filter_map(|s| s["sessionId"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A first process makes the store, so the lock can be held before the next one starts.
async fn store_made(env: &TestEnv) {
    std::fs::create_dir_all(env.home.path().join("talaria")).expect("mkdir");
    let mut first = initialized(env).await;
    first.close_stdin();
    let _ = first.wait_exit(WAIT).await;
}

/// Process A answers a session's first turn while the store is locked, then dies at
/// `crash_at` once the lock is given back and its backlog is written; the session.
async fn a_dies_after_writing_its_backlog(env: &mut TestEnv, crash_at: &str) -> String {
    store_made(env).await;
    let holder = hold_write_lock(&store_path(env), Duration::from_secs(3));
    env.extra_env
        .push(("TALARIA_CRASH_AT".into(), crash_at.into()));
    let mut a = env.spawn().await;
    env.extra_env.clear();
    let session = a
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (answer, _) = prompt(&mut a, &session, "first").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    holder.join().expect("holder");
    let status = a.wait_exit(Duration::from_secs(20)).await;
    assert!(
        status.as_ref().is_ok_and(|s| !s.success()),
        "A was to die at {crash_at}: {status:?}\n{}",
        a.stderr()
    );
    session
}

/// C adopts A's spool, its first writes of it refused for a moment, and deletes the session
/// (answered); once C ended, D neither lists nor loads it. With `refused_later`, A's spool
/// still has lines of the session (cut before its `written` lines), which C's store refuses
/// after the delete, and logs.
async fn a_delete_after_adoption_stays_done(crash_at: &str, refused_later: bool) {
    let mut env = TestEnv::new(vec![MockReply::text(&["answer one"])]).await;
    let session = a_dies_after_writing_its_backlog(&mut env, crash_at).await;
    env.extra_env.push((
        "FAILPOINTS".into(),
        "journal::backlog::before=2*return".into(),
    ));
    let mut c = initialized(&env).await;
    env.extra_env.clear();
    let deleted = c
        .call("session/delete", json!({"sessionId": session}))
        .await;
    assert!(deleted.is_ok(), "the delete is answered: {deleted:?}");
    // C's writer tries what it adopted again meanwhile (every 2 s).
    tokio::time::sleep(Duration::from_secs(5)).await;
    c.close_stdin();
    let _ = c.wait_exit(WAIT).await;
    let mut d = initialized(&env).await;
    let listed = d.call("session/list", json!({})).await.expect("list");
    let loaded = d.call("session/load", load_params(&env, &session)).await;
    d.close_stdin();
    let _ = d.wait_exit(WAIT).await;
    assert!(
        !listed_ids(&listed).contains(&session),
        "the deleted session is listed again ({crash_at}): {listed}\nC: {}",
        c.stderr()
    );
    assert!(
        loaded.is_err(),
        "the deleted session loads again ({crash_at})"
    );
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    assert!(store.load(&session).is_err());
    assert_eq!(
        c.stderr().contains("the session was deleted"),
        refused_later,
        "the dropped writes are logged: {}",
        c.stderr()
    );
}

#[tokio::test]
async fn a_delete_after_adopting_a_spool_whose_backlog_was_written_is_not_undone() {
    // Every line of the session is covered by a `written` line (its creation's too).
    a_delete_after_adoption_stays_done("spool::drain::before", false).await;
}

#[tokio::test]
async fn a_delete_after_adopting_a_spool_cut_before_its_written_line_is_not_undone() {
    // The spool's seventh line is the first `written` line after the backlog's commit.
    a_delete_after_adoption_stays_done("spool::write::before#7", true).await;
}

/// Holds SQLite's write lock from another connection until told to let it go.
fn hold_until_told(path: &Path) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (held, holding) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let path = path.to_path_buf();
    let holder = std::thread::spawn(move || {
        let connection = rusqlite::Connection::open(&path).expect("open");
        connection
            .busy_timeout(Duration::from_secs(30))
            .expect("busy");
        connection.execute_batch("BEGIN IMMEDIATE").expect("lock");
        held.send(()).expect("told");
        let _ = released.recv_timeout(Duration::from_secs(60));
        connection.execute_batch("COMMIT").expect("unlock");
    });
    holding.recv_timeout(Duration::from_secs(30)).expect("held");
    (release, holder)
}

#[tokio::test]
async fn a_delete_right_after_the_store_comes_back_deletes_the_session_whose_creation_waited() {
    let env = TestEnv::new(vec![
        MockReply::text(&["answer one"]),
        MockReply::text(&["answer two"]),
    ])
    .await;
    store_made(&env).await;
    let mut a = initialized(&env).await;
    // The store open (it opens off `initialize`) before another writer holds it: what this
    // test is about is the creations that wait, not an open that waits.
    let listed = a.call("session/list", json!({})).await.expect("list");
    assert!(listed["sessions"].is_array(), "{listed}");
    let (release, holder) = hold_until_told(&store_path(&env));
    let mut made = Vec::new();
    for _ in 0..2 {
        let created = a
            .call(
                "session/new",
                json!({"cwd": env.workspace.path(), "mcpServers": []}),
            )
            .await
            .expect("new");
        let session = created["sessionId"].as_str().expect("id").to_string();
        let (answer, _) = prompt(&mut a, &session, "first").await;
        assert_eq!(stop_reason(&answer), "end_turn");
        made.push(session);
    }
    release.send(()).expect("release");
    holder.join().expect("holder");
    // At once, before the writer's next try: the session is this process's, and deleted.
    let deleted = a
        .call("session/delete", json!({"sessionId": made[0]}))
        .await;
    assert!(
        deleted.is_ok(),
        "a session that exists here is deleted: {deleted:?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let listed = a.call("session/list", json!({})).await.expect("list");
    assert!(!listed_ids(&listed).contains(&made[0]), "{listed}");
    assert!(
        listed_ids(&listed).contains(&made[1]),
        "the other one is saved: {listed}"
    );
    let again = a
        .call("session/delete", json!({"sessionId": made[0]}))
        .await;
    assert!(again.is_err(), "a second delete finds nothing");
    a.close_stdin();
    let _ = a.wait_exit(WAIT).await;
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    assert!(store.load(&made[0]).is_err());
    assert_eq!(
        assistant_texts(&store.load(&made[1]).expect("kept").1),
        ["answer two"]
    );
}

#[tokio::test]
async fn a_third_process_is_told_in_use_while_an_adopter_holds_a_spooled_turn() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["answer one"]),
        MockReply::text(&["b answer"]),
        MockReply::text(&["answer two"]),
        MockReply::text(&["answer three"]),
    ])
    .await;
    let mut a = env.spawn().await;
    let session = a
        .start_session(env.workspace.path())
        .await
        .expect("session");
    prompt(&mut a, &session, "first").await;
    // B runs on the home with a turn of its own stalled: it probes, and adopts at a probe;
    // once the lock is given back, its first three writes of what waits are refused (as a
    // full disk would), so what it adopted waits a few seconds more.
    env.extra_env.push((
        "FAILPOINTS".into(),
        "journal::backlog::before=3*return".into(),
    ));
    let mut b = env.spawn().await;
    env.extra_env.clear();
    let b_session = b.start_session(env.workspace.path()).await.expect("b");
    let (release, holder) = hold_until_told(&store_path(&env));
    prompt(&mut b, &b_session, "b turn").await;
    let (answer, _) = prompt(&mut a, &session, "second").await;
    assert_eq!(stop_reason(&answer), "end_turn");
    tokio::time::sleep(Duration::from_millis(400)).await;
    a.close_stdin();
    let _ = a.wait_exit(WAIT).await;
    let until = Instant::now() + Duration::from_secs(15);
    while !b.stderr().contains("adopted the spool") && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(b.stderr().contains("adopted the spool"), "{}", b.stderr());
    tokio::time::sleep(Duration::from_millis(100)).await;
    release.send(()).expect("release");
    holder.join().expect("holder");
    // C at once: B has not written the adopted turn yet, so the session is B's.
    let mut c = initialized(&env).await;
    let from = c.transcript.len();
    let loaded = c.call("session/load", load_params(&env, &session)).await;
    let replayed: Vec<serde_json::Value> = c.transcript[from..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    let error = loaded.expect_err(&format!(
        "C loaded the session while B held its adopted turn: {:?}",
        chunks(&replayed, "agent_message_chunk")
    ));
    assert!(
        error.to_string().contains("in another Talaria process"),
        "{error}"
    );
    // Once B wrote the adopted turn, C loads it whole and goes on after it.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let from = c.transcript.len();
        match c.call("session/load", load_params(&env, &session)).await {
            Ok(_) => {
                let replayed: Vec<serde_json::Value> = c.transcript[from..]
                    .iter()
                    .filter(|m| m["method"] == "session/update")
                    .map(|m| m["params"]["update"].clone())
                    .collect();
                assert!(
                    chunks(&replayed, "agent_message_chunk").contains(&"answer two".to_string())
                );
                break;
            }
            Err(error) => {
                assert!(Instant::now() < until, "never free: {error}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    let (answer, _) = prompt(&mut c, &session, "third").await;
    assert_eq!(stop_reason(&answer), "end_turn");
    c.close_stdin();
    let _ = c.wait_exit(WAIT).await;
    b.close_stdin();
    let _ = b.wait_exit(WAIT).await;
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    let (_, record) = store.load(&session).expect("load");
    assert_eq!(
        assistant_texts(&record),
        ["answer one", "answer two", "answer three"]
    );
    record.validate().expect("valid");
    let page = store.list(None, None, 100).expect("list");
    assert!(
        page.sessions.iter().all(|m| !m.id.contains("recovered")),
        "no recovery was needed: {:?}",
        page.sessions
    );
}
