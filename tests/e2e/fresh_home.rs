//! The first sessions of a fresh home: the store is created in the background while the
//! client is answered, so `session/new` never waits for the disk; a session started before
//! the store exists keeps what it records in the journal's backlog, says so once opening was
//! tried, and is saved, in order, once the store is there.

use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::{AgentProcess, MockReply};
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

/// Long enough that a wait for the store shows (the old answer waited up to 1.5 s for it).
const SLOW_STORE_MS: &str = "3000";
/// What a `session/new` that does not wait for the store takes at most on a busy machine.
const ANSWERED_WITHIN: Duration = Duration::from_millis(1000);

fn slow_store_env(env: &mut TestEnv) {
    env.extra_env.push((
        "TALARIA_TEST_MIGRATION_PAUSE_MS".into(),
        SLOW_STORE_MS.into(),
    ));
}

async fn timed_session_new(agent: &mut AgentProcess, env: &TestEnv) -> (String, Duration) {
    let started = Instant::now();
    let created = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session/new");
    let took = started.elapsed();
    let id = created["sessionId"].as_str().expect("id").to_string();
    (id, took)
}

async fn saved_again(agent: &mut AgentProcess, session: &str) {
    let told = agent
        .wait_for(Duration::from_secs(30), |m| {
            m["params"]["sessionId"] == session
                && m["params"]["update"]["content"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("saved again"))
        })
        .await;
    assert!(told.is_ok(), "{session} was not saved: {}", agent.stderr());
}

#[tokio::test]
async fn the_first_session_new_of_a_fresh_home_does_not_wait_for_the_store() {
    let mut env = TestEnv::new(vec![MockReply::text(&["answered early"])]).await;
    slow_store_env(&mut env);
    let mut agent = initialized(&env).await;
    let (session, took) = timed_session_new(&mut agent, &env).await;
    assert!(
        took < ANSWERED_WITHIN,
        "session/new waited {took:?} for the store"
    );
    let (response, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    saved_again(&mut agent, &session).await;
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let store = SqliteStore::open(&env.home.path().join("talaria/state.db")).expect("store");
    let (_, transcript) = store.load(&session).expect("the session was saved");
    assert_eq!(assistant_texts(&transcript), ["answered early"]);
}

#[tokio::test]
async fn several_sessions_started_before_the_store_exists_are_all_answered_and_saved() {
    let mut env = TestEnv::new(Vec::new()).await;
    slow_store_env(&mut env);
    let mut agent = initialized(&env).await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let (session, took) = timed_session_new(&mut agent, &env).await;
        assert!(took < ANSWERED_WITHIN, "session/new waited {took:?}");
        sessions.push(session);
    }
    for session in &sessions {
        saved_again(&mut agent, session).await;
    }
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let store = SqliteStore::open(&env.home.path().join("talaria/state.db")).expect("store");
    for session in &sessions {
        assert!(store.load(session).is_ok(), "{session} saved");
    }
}

#[tokio::test]
async fn a_healthy_fresh_home_shows_no_unsaved_notice() {
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let mut agent = initialized(&env).await;
    let (session, _) = timed_session_new(&mut agent, &env).await;
    let (response, updates) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let texts = serde_json::to_string(&updates).unwrap_or_default();
    assert!(!texts.contains("not saved"), "{texts}");
}

/// Holds the store's opening for longer than any test waits: the migration hook (every
/// build) and the failpoint before the opening (a build with failpoints).
fn store_held_open(env: &mut TestEnv) {
    env.extra_env
        .push(("TALARIA_TEST_MIGRATION_PAUSE_MS".into(), "600000".into()));
    env.extra_env.push((
        "FAILPOINTS".into(),
        "store::open::before=sleep(600000)".into(),
    ));
}

#[tokio::test]
async fn the_first_session_new_right_after_initialize_is_answered_while_the_store_is_still_opening()
{
    let mut env = TestEnv::new(vec![MockReply::text(&["answered while opening"])]).await;
    store_held_open(&mut env);
    let mut agent = env.spawn().await;
    // Sent together: session/new arrives while initialize's opening of the store has begun.
    let init = agent
        .start_request("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let new = agent
        .start_request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session/new");
    agent.wait_response(init, WAIT).await.expect("initialized");
    // The opening is held for ten minutes: an answer within the test's wait did not wait
    // for it (no figure asserted).
    let created = agent.wait_response(new, WAIT).await.expect("answered");
    let session = created["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("a session: {created}"))
        .to_string();
    let (response, updates) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let said = serde_json::to_string(&updates).unwrap_or_default();
    assert!(said.contains("answered while opening"), "{said}");
    assert!(
        said.contains("not saved yet"),
        "the session was told the store is not open yet: {said}"
    );
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
}

/// The first `session/new` of a fresh home is answered while the checkpoints' store is still
/// opening (held for ten minutes by a failpoint, in a build with failpoints): its folders are
/// made off the answer's path, and a turn that changes no file does not wait for them.
#[tokio::test]
async fn the_first_session_new_is_answered_while_the_checkpoints_are_still_opening() {
    let mut env = TestEnv::new(vec![MockReply::text(&["answered before checkpoints"])]).await;
    env.extra_env.push((
        "FAILPOINTS".into(),
        "checkpoints::open::before=sleep(600000)".into(),
    ));
    let mut agent = initialized(&env).await;
    let (session, _) = timed_session_new(&mut agent, &env).await;
    let (response, updates) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let said = serde_json::to_string(&updates).unwrap_or_default();
    assert!(said.contains("answered before checkpoints"), "{said}");
    // A second session of the same workspace does not wait for the first one's opening.
    let (second, _) = timed_session_new(&mut agent, &env).await;
    assert_ne!(second, session);
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
}
