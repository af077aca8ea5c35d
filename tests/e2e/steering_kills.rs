//! A steer answered `injected` is a saved promise (issue 62, F3): while the turn cannot take
//! it yet (a command runs, a permission question waits) it is recorded at once as waiting,
//! and answered once that is committed or spooled; a `kill -9` before it entered leaves it
//! in the record, and the next load enters it where the turn was cut, for the model to read
//! exactly once.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};
use talaria_store::{SessionStore, SqliteStore};

use crate::steering::conversation;
use crate::support::*;

const STEER_TEXT: &str = "remember the steer";

fn store_path(env: &TestEnv) -> std::path::PathBuf {
    env.home.path().join("talaria").join("state.db")
}

/// Steers [`STEER_TEXT`] into the running turn; the answer and how long it took.
async fn steer(agent: &mut AgentProcess, session: &str) -> (Value, Duration) {
    let started = Instant::now();
    let answer = agent
        .request(
            "_session/steering",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": STEER_TEXT}]}),
        )
        .await
        .expect("the steer is answered");
    assert_eq!(answer["result"]["outcome"], "injected", "{answer}");
    (answer, started.elapsed())
}

/// A turn that runs `command` (yolo: no question) until it runs.
async fn a_command_running(env: &TestEnv, command: &str) -> (AgentProcess, String) {
    env.mock.push(MockReply::tool_call(
        "c1",
        "terminal",
        json!({"command": command}),
    ));
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    agent
        .start_request("session/prompt", text_prompt(&session, "wait"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m["params"]["update"]["status"] == "in_progress")
        .await
        .expect("a command runs");
    (agent, session)
}

/// After the kill: the steer is in the store; a new agent loads the session and its next
/// prompt's model request carries the steer once, after the cut turn's call and result.
async fn the_steer_survives(env: &TestEnv, session: &str) {
    let store = SqliteStore::open(&store_path(env)).expect("open the store");
    let (_, transcript) = store.load(session).expect("load");
    let json = serde_json::to_string(transcript.entries()).unwrap_or_default();
    assert!(
        json.contains(STEER_TEXT),
        "a steer answered injected is gone after kill -9"
    );
    drop(store);
    env.mock.push(MockReply::text(&["noted"]));
    let mut agent = initialized(env).await;
    agent
        .call("session/load", load_params(env, session))
        .await
        .expect("the session loads");
    let (response, _) = prompt(&mut agent, session, "go on").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    let last = conversation(&requests.last().expect("a model request").body);
    let steers = last
        .iter()
        .filter(|m| *m == &format!("user: {STEER_TEXT}"))
        .count();
    assert_eq!(steers, 1, "the model reads the steer once: {last:?}");
    let at = last
        .iter()
        .position(|m| *m == format!("user: {STEER_TEXT}"))
        .expect("the steer");
    assert!(
        last[..at].iter().any(|m| m.starts_with("tool:")),
        "the steer comes after the cut turn's call: {last:?}"
    );
    assert_eq!(last.last().map(String::as_str), Some("user: go on"));
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
}

#[tokio::test]
async fn a_steer_answered_while_a_command_runs_survives_kill_9() {
    let env = TestEnv::new(Vec::new()).await;
    let (mut agent, session) = a_command_running(&env, "sleep 8").await;
    let (_, took) = steer(&mut agent, &session).await;
    assert!(
        took < Duration::from_secs(3),
        "the steer waited for the command: {took:?}"
    );
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    the_steer_survives(&env, &session).await;
}

#[tokio::test]
async fn a_steer_answered_during_a_permission_question_survives_kill_9() {
    let env = TestEnv::new(vec![MockReply::tool_call(
        "w1",
        "write_file",
        json!({"path": "notes.txt", "content": "hello\n"}),
    )])
    .await;
    let (mut agent, session) = env.session().await;
    agent
        .start_request("session/prompt", text_prompt(&session, "write notes"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m["method"] == "session/request_permission")
        .await
        .expect("asked");
    steer(&mut agent, &session).await;
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    assert!(!env.workspace.path().join("notes.txt").exists());
    the_steer_survives(&env, &session).await;
}

#[tokio::test]
async fn a_steer_answered_while_the_store_is_locked_is_spooled_and_survives_kill_9() {
    let env = TestEnv::new(Vec::new()).await;
    let (mut agent, session) = a_command_running(&env, "sleep 8").await;
    let holder = hold_write_lock(&store_path(&env), Duration::from_secs(5));
    let (_, took) = steer(&mut agent, &session).await;
    assert!(
        took < Duration::from_millis(2500),
        "the steer's answer waited for the store: {took:?}"
    );
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    holder.join().expect("the lock holder");
    // The next start adopts the spool before the load.
    let mut adopter = initialized(&env).await;
    adopter.close_stdin();
    let _ = adopter.wait_exit(WAIT).await;
    the_steer_survives(&env, &session).await;
}

#[tokio::test]
async fn a_steer_recorded_while_a_command_ran_is_read_once_after_the_turn_ends() {
    let env = TestEnv::new(Vec::new()).await;
    let (mut agent, session) = a_command_running(&env, "sleep 2; echo done").await;
    steer(&mut agent, &session).await;
    env.mock.push(MockReply::text(&["took the steer"]));
    let turn = agent
        .wait_for(WAIT, |m| m["result"]["stopReason"].is_string())
        .await
        .expect("the turn ends");
    assert_eq!(turn["result"]["stopReason"], "end_turn", "{turn}");
    let carried = conversation(&env.mock.requests()[1].body);
    assert_eq!(
        carried.last().map(String::as_str),
        Some(&*format!("user: {STEER_TEXT}")),
        "{carried:?}"
    );
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    // Loaded again, the waiting marker is not entered a second time.
    env.mock.push(MockReply::text(&["noted"]));
    let mut again = initialized(&env).await;
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("loads");
    let (response, _) = prompt(&mut again, &session, "go on").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let last = conversation(&env.mock.requests().last().expect("request").body);
    assert_eq!(
        last.iter()
            .filter(|m| *m == &format!("user: {STEER_TEXT}"))
            .count(),
        1,
        "{last:?}"
    );
    assert!(
        !last.iter().any(|m| m.contains("stopped before")),
        "a steer that entered is not closed as interrupted: {last:?}"
    );
    again.close_stdin();
    let _ = again.wait_exit(WAIT).await;
}

#[tokio::test]
async fn two_steers_during_a_command_survive_kill_9_in_order() {
    let env = TestEnv::new(Vec::new()).await;
    let (mut agent, session) = a_command_running(&env, "sleep 8").await;
    for text in ["first steer", "second steer"] {
        let answer = agent
            .request(
                "_session/steering",
                json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
            )
            .await
            .expect("answered");
        assert_eq!(answer["result"]["outcome"], "injected", "{answer}");
    }
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    env.mock.push(MockReply::text(&["noted"]));
    let mut again = initialized(&env).await;
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("loads");
    let (response, _) = prompt(&mut again, &session, "go on").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let last = conversation(&env.mock.requests().last().expect("request").body);
    let first = last.iter().position(|m| m == "user: first steer");
    let second = last.iter().position(|m| m == "user: second steer");
    assert!(
        matches!((first, second), (Some(a), Some(b)) if a < b),
        "{last:?}"
    );
    again.close_stdin();
    let _ = again.wait_exit(WAIT).await;
}
