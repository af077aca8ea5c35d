//! A turn waiting for the store is still part of its session: with SQLite's write lock held
//! by another program, a close and load, a load of the live session, a fork and a search
//! each see the whole history; the reloaded session's next ids follow the waiting ones (the
//! record is valid after the heal and the next model request too); the claim holds against
//! another process throughout, and after the heal.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

/// Long enough for every step a test takes while the store is locked.
const LOCKED_FOR: Duration = Duration::from_secs(15);
/// Every answer while the store is locked comes within this (the journal's deadline is 1.5 s).
const ANSWERED_WITHIN: Duration = Duration::from_secs(5);

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

/// The answer texts a client was shown by messages from `from` on.
fn shown_since(agent: &AgentProcess, from: usize, session: &str) -> Vec<String> {
    let updates: Vec<Value> = agent.transcript[from..]
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
        .map(|m| m["params"]["update"].clone())
        .collect();
    chunks(&updates, "agent_message_chunk")
}

/// Calls `method` and asserts it answered, quickly, with a result.
async fn call_quickly(agent: &mut AgentProcess, method: &str, params: Value) -> Value {
    let started = Instant::now();
    let answer = agent.request(method, params).await.expect("answered");
    assert!(
        started.elapsed() < ANSWERED_WITHIN,
        "{method} waited {:?} for a locked store",
        started.elapsed()
    );
    assert!(answer.get("result").is_some(), "{method}: {answer}");
    answer["result"].clone()
}

/// Waits until the store holds `answers` answers for `session` (after the lock is gone).
fn stored_answers(path: &Path, session: &str, answers: usize) -> talaria_record::Transcript {
    let store = SqliteStore::open(path).expect("open");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((_, transcript)) = store.load(session)
            && assistant_texts(&transcript).len() >= answers
        {
            return transcript;
        }
        assert!(
            Instant::now() < until,
            "{session} never stored {answers} answers"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The session's claim, as another process sees it while the store is locked (that process
/// cannot open the store then): held, naming the holder.
fn claim_held(env: &TestEnv, session: &str) {
    let claims = talaria_store::Claims::new(env.home.path().join("talaria").join("claims"));
    match claims.claim(session) {
        Err(talaria_store::StoreError::InUse { holder, .. }) => {
            assert!(holder.contains("pid"), "{holder}");
        }
        other => panic!("the claim of {session} was not held: {other:?}"),
    }
}

/// Another agent process on the same home loading `session`: refused, naming the holder.
async fn refused_elsewhere(env: &TestEnv, session: &str) {
    let mut other = initialized(env).await;
    let answer = other
        .request("session/load", load_params(env, session))
        .await
        .expect("answered");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("open in another Talaria process"),
        "another process opened {session}: {answer}"
    );
}

/// Once the lock is gone: the answers of `session`'s stored record (at least `count`, the
/// record valid), in order.
fn stored_as(env: &TestEnv, session: &str, count: usize) -> Vec<String> {
    let stored = stored_answers(&store_path(env), session, count);
    assert_valid(&stored);
    assistant_texts(&stored)
}

/// The claim still holds against another process; then the agent exits cleanly.
async fn held_to_the_end(env: &TestEnv, mut agent: AgentProcess, session: &str) {
    refused_elsewhere(env, session).await;
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
}

/// A record the model can be sent: every tool result has its call, roles alternate.
fn assert_valid(transcript: &talaria_record::Transcript) {
    assert!(transcript.validate().is_ok(), "{:?}", transcript.validate());
}

fn the_script() -> Vec<MockReply> {
    vec![
        MockReply::text(&["stored answer"]),
        MockReply::tool_call("c1", "read_file", json!({"path": "notes.txt"})),
        MockReply::text(&["waiting answer"]),
        MockReply::text(&["after reload"]),
    ]
}

async fn locked_env() -> TestEnv {
    let env = TestEnv::new(the_script()).await;
    std::fs::write(env.workspace.path().join("notes.txt"), "the notes\n").expect("notes");
    env
}

#[tokio::test]
async fn a_session_closed_and_loaded_while_its_turn_waits_goes_on_from_the_whole_history() {
    let env = locked_env().await;
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "one").await;

    let holder = hold_write_lock(&store_path(&env), LOCKED_FOR);
    let (answered, _) = prompt(&mut agent, &session, "read the notes").await;
    assert_eq!(stop_reason(&answered), "end_turn", "{answered}");
    call_quickly(&mut agent, "session/close", json!({"sessionId": session})).await;

    let from = agent.transcript.len();
    call_quickly(&mut agent, "session/load", load_params(&env, &session)).await;
    let replayed = shown_since(&agent, from, &session);
    assert!(
        replayed.iter().any(|t| t.contains("waiting answer")),
        "the replay lacks the waiting turn: {replayed:?}"
    );
    // The claim passed to the reload: another process cannot open it, now or after the heal.
    claim_held(&env, &session);

    let (answered, _) = prompt(&mut agent, &session, "go on").await;
    assert_eq!(stop_reason(&answered), "end_turn", "{answered}");
    let sent = env.mock.requests();
    let last = sent.last().expect("a request").body.to_string();
    assert!(
        last.contains("waiting answer") && last.contains("the notes"),
        "the model was not sent the waiting turn: {last}"
    );
    assert!(
        env.mock.take_problems().is_empty(),
        "an invalid model request"
    );

    holder.join().expect("the lock holder");
    let expected = ["stored answer", "waiting answer", "after reload"];
    assert_eq!(
        stored_as(&env, &session, expected.len()),
        expected,
        "every turn once, in order"
    );
    held_to_the_end(&env, agent, &session).await;
}

#[tokio::test]
async fn a_live_load_a_fork_and_a_search_see_the_turn_that_waits() {
    let mut script = the_script();
    script.truncate(3);
    script.push(MockReply::tool_call(
        "s1",
        "session_search",
        json!({"query": "waiting"}),
    ));
    script.push(MockReply::text(&["found it"]));
    script.push(MockReply::text(&["fork goes on"]));
    let env = TestEnv::new(script).await;
    std::fs::write(env.workspace.path().join("notes.txt"), "the notes\n").expect("notes");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "one").await;

    let holder = hold_write_lock(&store_path(&env), LOCKED_FOR);
    prompt(&mut agent, &session, "read the notes").await;

    // The live session's load replays the turn the store has not committed.
    let from = agent.transcript.len();
    call_quickly(&mut agent, "session/load", load_params(&env, &session)).await;
    let replayed = shown_since(&agent, from, &session);
    assert!(
        replayed.iter().any(|t| t.contains("waiting answer")),
        "the live load's replay lacks the waiting turn: {replayed:?}"
    );

    // Search finds it too.
    let (searched, _) = prompt(&mut agent, &session, "search").await;
    assert_eq!(stop_reason(&searched), "end_turn", "{searched}");
    let index = env.mock.requests().len() - 1;
    let results = tool_results(&env.mock, index).join("\n");
    assert!(
        results.contains("waiting answer"),
        "the search missed the waiting turn: {results}"
    );

    // A fork is answered at once and starts from the whole history.
    let forked = call_quickly(
        &mut agent,
        "session/fork",
        json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
    )
    .await;
    let fork = forked["sessionId"].as_str().expect("fork id").to_string();
    prompt(&mut agent, &fork, "go on").await;
    let last = env
        .mock
        .requests()
        .last()
        .expect("a request")
        .body
        .to_string();
    assert!(
        last.contains("waiting answer"),
        "the fork lacks its parent's waiting turn: {last}"
    );
    assert!(env.mock.take_problems().is_empty(), "an invalid request");

    holder.join().expect("the lock holder");
    stored_as(&env, &session, 3);
    let texts = stored_as(&env, &fork, 3);
    assert!(
        texts.starts_with(&["stored answer".to_string(), "waiting answer".to_string()])
            && texts.last().map(String::as_str) == Some("fork goes on"),
        "{texts:?}"
    );
    held_to_the_end(&env, agent, &fork).await;
}

#[tokio::test]
async fn a_session_never_stored_is_loaded_from_what_waits_and_keeps_its_claim() {
    // The store is locked before the session's creation is written: its whole record waits.
    let env = TestEnv::new(vec![
        MockReply::text(&["first answer"]),
        MockReply::text(&["second answer"]),
    ])
    .await;
    let mut agent = initialized(&env).await;
    // A first session opens the store; the lock is taken before the second one starts.
    agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let holder = hold_write_lock(&store_path(&env), LOCKED_FOR);
    let created = call_quickly(
        &mut agent,
        "session/new",
        json!({"cwd": env.workspace.path(), "mcpServers": []}),
    )
    .await;
    let session = created["sessionId"].as_str().expect("id").to_string();
    prompt(&mut agent, &session, "one").await;
    call_quickly(&mut agent, "session/close", json!({"sessionId": session})).await;
    let from = agent.transcript.len();
    call_quickly(&mut agent, "session/load", load_params(&env, &session)).await;
    let replayed = shown_since(&agent, from, &session);
    assert!(
        replayed.iter().any(|t| t.contains("first answer")),
        "{replayed:?}"
    );
    prompt(&mut agent, &session, "two").await;
    holder.join().expect("the lock holder");
    let expected = ["first answer", "second answer"];
    assert_eq!(stored_as(&env, &session, expected.len()), expected);
    held_to_the_end(&env, agent, &session).await;
}
