//! An answered `session/fork` survives `kill -9`: the fork is answered once its row and its
//! record are committed together (or, the store held, once they wait in the spool, the
//! session told it is not saved yet), so after a kill at once it loads whole and the next
//! model request carries the parent's history — on SQLite and on PostgreSQL. A kill at the
//! fork's own durable steps leaves it whole or absent, never empty; a session row without a
//! record is refused with a clear error, not loaded as an empty session.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

fn fork_params(env: &TestEnv, session: &str) -> Value {
    json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []})
}

/// A parent session with one answered turn, in a running agent.
async fn parent(env: &TestEnv) -> (AgentProcess, String) {
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (answer, _) = prompt(&mut agent, &session, "the parent's question").await;
    assert_eq!(stop_reason(&answer), "end_turn");
    (agent, session)
}

/// A parent session made by an agent that then stopped cleanly.
async fn stopped_parent(env: &TestEnv) -> String {
    let (mut agent, session) = parent(env).await;
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
    session
}

/// Forks `session` and kills the agent the moment the answer is read; the fork's id.
async fn fork_then_kill(agent: &mut AgentProcess, env: &TestEnv, session: &str) -> String {
    let forked = agent
        .call("session/fork", fork_params(env, session))
        .await
        .expect("forked");
    kill_now(agent);
    let _ = agent.wait_exit(WAIT).await;
    forked["sessionId"].as_str().expect("fork id").to_string()
}

/// Loads `fork` in a new agent and prompts it: the replay and the model request carry the
/// parent's turn.
async fn the_fork_goes_on_whole(env: &TestEnv, fork: &str) {
    let mut agent = initialized(env).await;
    let loaded = agent
        .request("session/load", load_params(env, fork))
        .await
        .expect("load");
    assert!(loaded.get("result").is_some(), "{fork}: {loaded}");
    let (answer, _) = prompt(&mut agent, fork, "go on").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let last = env
        .mock
        .requests()
        .last()
        .expect("request")
        .body
        .to_string();
    assert!(
        last.contains("the parent's question") && last.contains("parent answer"),
        "the fork's next request lost the history: {last}"
    );
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
}

fn script(forks: usize) -> Vec<MockReply> {
    let mut script = vec![MockReply::text(&["parent answer"])];
    script.extend((0..forks).map(|n| MockReply::text(&[&format!("fork answer {n}")])));
    script
}

#[tokio::test]
async fn forks_answered_just_before_kill_9_load_whole() {
    const FORKS: usize = 5;
    let env = TestEnv::new(script(FORKS)).await;
    let session = stopped_parent(&env).await;
    let mut forks = Vec::new();
    for _ in 0..FORKS {
        let mut agent = initialized(&env).await;
        forks.push(fork_then_kill(&mut agent, &env, &session).await);
    }
    for fork in &forks {
        the_fork_goes_on_whole(&env, fork).await;
    }
}

#[tokio::test]
async fn a_fork_answered_while_the_store_is_locked_is_spooled_and_survives_kill_9() {
    let env = TestEnv::new(script(1)).await;
    let (mut agent, session) = parent(&env).await;
    let holder = hold_write_lock(&store_path(&env), Duration::from_secs(5));
    let forked = agent
        .call("session/fork", fork_params(&env, &session))
        .await
        .expect("forked");
    let fork = forked["sessionId"].as_str().expect("id").to_string();
    // It says it is not saved yet.
    agent
        .wait_for(WAIT, |m| {
            m["params"]["sessionId"] == fork.as_str()
                && notice_text(&m["params"]["update"]).is_some_and(|t| t.contains("not saved yet"))
        })
        .await
        .expect("the fork says it is not saved yet");
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    holder.join().expect("the lock holder");
    the_fork_goes_on_whole(&env, &fork).await;
}

/// A kill at `point` (a failpoint of the fork's copy) during a fork: after a restart the
/// fork is listed and loads whole, or is not there at all.
async fn killed_at(point: &str) {
    let mut env = TestEnv::new(script(1)).await;
    let session = stopped_parent(&env).await;
    env.extra_env
        .push(("TALARIA_CRASH_AT".into(), point.to_string()));
    let mut dying = env.spawn().await;
    env.extra_env.pop();
    dying
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let forked = dying
        .call("session/fork", fork_params(&env, &session))
        .await;
    let status = dying.wait_exit(WAIT).await.expect("ends");
    assert!(
        forked.is_err() && status.code().is_none(),
        "{point}: the agent was not killed there ({forked:?}, {status:?}): is it built with \
         --features talaria-server/failpoints (tests/run-all.sh builds it so)?"
    );
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    let listed = store.list(None, None, 50).expect("list");
    for meta in listed.sessions.iter().filter(|m| m.id != session) {
        let (_, transcript) = store.load(&meta.id).expect("load");
        assert!(
            !transcript.entries().is_empty(),
            "{point}: the fork {} is there without its record",
            meta.id
        );
        the_fork_goes_on_whole(&env, &meta.id).await;
    }
}

#[tokio::test]
async fn a_kill_before_the_forks_copy_is_committed_leaves_no_empty_fork() {
    // The first creation is the parent's (in the first agent); here the fork's is the first.
    killed_at("journal::create::before").await;
}

#[tokio::test]
async fn a_kill_once_the_forks_copy_is_committed_leaves_it_whole() {
    killed_at("journal::create::after").await;
}

#[tokio::test]
async fn a_session_row_without_a_record_is_refused_with_a_clear_error() {
    let env = TestEnv::new(script(0)).await;
    stopped_parent(&env).await;
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    store
        .create(&talaria_store::SessionMeta {
            id: "row-without-record".into(),
            cwd: env.workspace.path().display().to_string(),
            ..Default::default()
        })
        .expect("create");
    let mut agent = initialized(&env).await;
    for method in ["session/load", "session/resume", "session/fork"] {
        let answer = agent
            .request(method, load_params(&env, "row-without-record"))
            .await
            .expect("answered");
        assert_eq!(answer["error"]["code"], -32602, "{method}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("no saved record"), "{method}: {message}");
    }
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
}

#[tokio::test]
async fn forks_answered_just_before_kill_9_load_whole_on_postgresql() {
    let (_cluster, url) = throwaway_database().await;
    let mut env = TestEnv::new(script(3)).await;
    env.extra_env
        .push(("TALARIA_STORE_URL".into(), url.clone()));
    let session = stopped_parent(&env).await;
    let mut forks = Vec::new();
    for _ in 0..3 {
        let mut agent = initialized(&env).await;
        forks.push(fork_then_kill(&mut agent, &env, &session).await);
    }
    for fork in &forks {
        the_fork_goes_on_whole(&env, fork).await;
    }
}
