//! An orphan spool (a process that ended with a turn waiting for the store) is removed only
//! once every line of it is copied into the adopter's own spool and synced: a full disk, a
//! failing sync or a line this build cannot read keeps the orphan for a later try, so the
//! only copy of an answered turn is never deleted (issue 62, F1). Needs a failpoints build
//! (tests/run-all.sh builds the agent so).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use talaria_harness::{AgentProcess, MockReply};
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

fn spools(env: &TestEnv) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = env.home.path().join("talaria").join("spool");
    let mut found: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|listing| {
            listing
                .filter_map(|e| e.ok().map(|e| e.path()))
                .map(|p| {
                    let bytes = std::fs::read(&p).unwrap_or_default();
                    (p, bytes)
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

fn stored_answers(env: &TestEnv, session: &str) -> Vec<String> {
    let store = SqliteStore::open(&store_path(env)).expect("open the store");
    let (_, transcript) = store.load(session).expect("load");
    assistant_texts(&transcript)
}

/// Holds SQLite's write lock until told to let go.
struct Lock {
    release: std::sync::mpsc::Sender<()>,
    holder: std::thread::JoinHandle<()>,
}

impl Lock {
    fn hold(path: &Path) -> Self {
        let (held, holding) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let path = path.to_path_buf();
        let holder = std::thread::spawn(move || {
            let connection = rusqlite::Connection::open(&path).expect("open");
            connection
                .busy_timeout(Duration::from_secs(30))
                .expect("busy timeout");
            connection.execute_batch("BEGIN IMMEDIATE").expect("lock");
            held.send(()).expect("told");
            let _ = released.recv_timeout(Duration::from_secs(90));
            connection.execute_batch("COMMIT").expect("unlock");
        });
        holding
            .recv_timeout(Duration::from_secs(30))
            .expect("the lock is held");
        Self { release, holder }
    }

    fn let_go(self) {
        let _ = self.release.send(());
        self.holder.join().expect("the lock holder");
    }
}

/// A session with one saved turn and a second answered while the store is locked, after
/// which its process ends at end of input: the second turn is only in that process's spool.
async fn a_turn_left_in_an_orphan_spool(env: &TestEnv) -> (Lock, String) {
    let mut a = env.spawn().await;
    let session = a
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let answer = a
        .request("session/prompt", text_prompt(&session, "first"))
        .await
        .expect("first turn");
    assert_eq!(stop_reason(&answer), "end_turn");
    let lock = Lock::hold(&store_path(env));
    let answer = a
        .request("session/prompt", text_prompt(&session, "second"))
        .await
        .expect("second turn");
    assert_eq!(stop_reason(&answer), "end_turn");
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.close_stdin();
    a.wait_exit(WAIT).await.expect("the first agent ends");
    let orphans = spools(env);
    assert!(
        orphans.iter().any(|(_, bytes)| !bytes.is_empty()),
        "the waiting turn is not in a spool: {:?}",
        orphans.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    (lock, session)
}

/// Starts an agent with `failpoints` set and waits until it tried to adopt the orphan.
async fn an_adopter_that_fails(env: &mut TestEnv, failpoints: &str) -> AgentProcess {
    let trace = env.home.path().join(format!("trace-{}", failpoints.len()));
    env.extra_env
        .push(("FAILPOINTS".into(), failpoints.to_string()));
    env.extra_env.push((
        "TALARIA_FAILPOINT_TRACE".into(),
        trace.display().to_string(),
    ));
    let b = initialized(env).await;
    env.extra_env.clear();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let passed = std::fs::read_to_string(&trace).unwrap_or_default();
        if passed.contains("spool::adopt::before") {
            break;
        }
        assert!(
            Instant::now() < until,
            "the adopter never tried the orphan (is the agent built with --features \
             talaria-server/failpoints? tests/run-all.sh builds it so): {passed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Past the adoption's copy and whatever it would do after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    b
}

/// After the adopter ended (killed or stopped): the lock is let go, and a third agent loads
/// the session; both answered turns are in the store.
async fn a_third_agent_finds_both_turns(env: &TestEnv, lock: Lock, session: &str) {
    lock.let_go();
    let mut c = initialized(env).await;
    c.call("session/load", load_params(env, session))
        .await
        .expect("the session loads");
    c.close_stdin();
    c.wait_exit(WAIT).await.expect("the third agent ends");
    assert_eq!(
        stored_answers(env, session),
        ["answer one", "answer two"],
        "the answered second turn is lost"
    );
}

fn two_answers() -> Vec<MockReply> {
    vec![
        MockReply::text(&["answer one"]),
        MockReply::text(&["answer two"]),
    ]
}

#[tokio::test]
async fn an_orphan_adopted_on_a_full_disk_is_kept_and_its_turn_survives_the_adopters_kill() {
    let mut env = TestEnv::new(two_answers()).await;
    let (lock, session) = a_turn_left_in_an_orphan_spool(&env).await;
    let orphan_before = spools(&env);
    let mut b = an_adopter_that_fails(&mut env, "spool::write::before=return").await;
    let said = b.stderr();
    kill_now(&b);
    let _ = b.wait_exit(WAIT).await;
    let kept: Vec<_> = spools(&env)
        .into_iter()
        .filter(|spool| orphan_before.contains(spool))
        .collect();
    a_third_agent_finds_both_turns(&env, lock, &session).await;
    assert_eq!(kept, orphan_before, "the orphan was not kept as it was");
    assert!(
        said.contains("kept for a later try") && said.contains("full disk"),
        "the adopter did not say why it kept the orphan: {said}"
    );
}

#[tokio::test]
async fn an_orphan_adopted_on_a_full_disk_is_kept_through_the_adopters_clean_exit() {
    let mut env = TestEnv::new(two_answers()).await;
    let (lock, session) = a_turn_left_in_an_orphan_spool(&env).await;
    let mut b = an_adopter_that_fails(&mut env, "spool::write::before=return").await;
    b.close_stdin();
    b.wait_exit(WAIT).await.expect("the adopter ends");
    a_third_agent_finds_both_turns(&env, lock, &session).await;
}

#[tokio::test]
async fn an_orphan_whose_copy_cannot_be_synced_is_kept() {
    let mut env = TestEnv::new(two_answers()).await;
    let (lock, session) = a_turn_left_in_an_orphan_spool(&env).await;
    let mut b = an_adopter_that_fails(&mut env, "spool::sync::before=return").await;
    let said = b.stderr();
    kill_now(&b);
    let _ = b.wait_exit(WAIT).await;
    a_third_agent_finds_both_turns(&env, lock, &session).await;
    assert!(
        said.contains("kept for a later try") && said.contains("syncing"),
        "{said}"
    );
}

#[tokio::test]
async fn an_orphan_kept_on_a_full_disk_is_adopted_by_the_same_process_once_there_is_room() {
    // `return` twice: the first tries fail, a later one (the writer looks every few seconds)
    // copies the orphan, and the store then takes the turn without a restart.
    let mut env = TestEnv::new(two_answers()).await;
    let (lock, session) = a_turn_left_in_an_orphan_spool(&env).await;
    let mut b = an_adopter_that_fails(&mut env, "spool::write::before=1*return").await;
    lock.let_go();
    let until = Instant::now() + Duration::from_secs(20);
    while !b.stderr().contains("adopted the spool") {
        assert!(Instant::now() < until, "never adopted: {}", b.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.close_stdin();
    b.wait_exit(WAIT).await.expect("the adopter ends");
    assert_eq!(stored_answers(&env, &session), ["answer one", "answer two"]);
    assert!(
        spools(&env).iter().all(|(_, bytes)| bytes.is_empty()),
        "a spool is left after everything was written"
    );
}

#[tokio::test]
async fn an_orphan_with_a_line_this_build_cannot_read_is_left_whole_for_a_newer_build() {
    let env = TestEnv::new(two_answers()).await;
    let (lock, session) = a_turn_left_in_an_orphan_spool(&env).await;
    lock.let_go();
    // A line of a newer build (a record kind this one does not know), after the turn.
    let (orphan, mut bytes) = spools(&env)
        .into_iter()
        .find(|(_, bytes)| !bytes.is_empty())
        .expect("the orphan");
    bytes.extend_from_slice(b"{\"t\":\"tombstone\",\"session\":\"elsewhere\"}\n");
    std::fs::write(&orphan, &bytes).expect("write the newer line");
    let mut b = initialized(&env).await;
    b.call("session/load", load_params(&env, &session))
        .await
        .expect("the session loads");
    b.close_stdin();
    b.wait_exit(WAIT).await.expect("the agent ends");
    let said = b.stderr();
    assert!(
        said.contains("cannot be read by this build") && said.contains("kept for a later try"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&orphan).expect("the orphan is still there"),
        bytes,
        "the orphan was changed"
    );
    // None of it is taken: what a newer build wrote is that build's to adopt whole.
    assert_eq!(stored_answers(&env, &session), ["answer one"]);
}
