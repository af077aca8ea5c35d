//! A clean stop on SIGTERM, SIGINT, SIGHUP and end of input: the running turn ends as a
//! cancel ends it — the partial answer the client saw is stored and marked interrupted (on
//! reload and in the model's view), the running command and everything it started are gone —
//! and the process exits 0 within 3 s. A second signal exits at once. The PostgreSQL build
//! exits cleanly, again and again.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;
use talaria_harness::{AgentProcess, MockReply};
use talaria_record::{EntryBody, Transcript};
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

/// How the agent is told to stop.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Signal(Signal),
    EndOfInput,
}

const STOPS: [Stop; 4] = [
    Stop::Signal(Signal::SIGTERM),
    Stop::Signal(Signal::SIGINT),
    Stop::Signal(Signal::SIGHUP),
    Stop::EndOfInput,
];

/// The bound on a clean stop.
const STOPPED_WITHIN: Duration = Duration::from_secs(3);

fn signal(agent: &AgentProcess, signal: Signal) {
    let pid = agent.pid().expect("running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
        signal,
    )
    .expect("signalled");
}

/// Stops the agent as `how` says; asserts it exits 0 within [`STOPPED_WITHIN`].
async fn stop(agent: &mut AgentProcess, how: Stop) {
    let started = Instant::now();
    match how {
        Stop::Signal(sig) => signal(agent, sig),
        Stop::EndOfInput => agent.close_stdin(),
    }
    let status = agent.wait_exit(WAIT).await.expect("exits");
    let took = started.elapsed();
    assert!(status.success(), "{how:?}: {status:?}\n{}", agent.stderr());
    assert!(took < STOPPED_WITHIN, "{how:?}: stopping took {took:?}");
}

fn stored(env: &TestEnv, session: &str) -> Transcript {
    let store =
        SqliteStore::open(&env.home.path().join("talaria").join("state.db")).expect("the store");
    store.load(session).expect("the session").1
}

/// The last answer and whether an interruption marker follows it.
fn last_answer_marked(transcript: &Transcript) -> (String, bool) {
    let entries = transcript.entries();
    let Some(at) = entries
        .iter()
        .rposition(|e| matches!(e.body, EntryBody::Assistant(_)))
    else {
        return (String::new(), false);
    };
    let text = match &entries[at].body {
        EntryBody::Assistant(answer) => answer.text.clone(),
        _ => String::new(),
    };
    let marked = entries[at..]
        .iter()
        .any(|e| matches!(e.body, EntryBody::Interrupted { .. }));
    (text, marked)
}

async fn stop_during_an_answer(how: Stop) {
    let env = TestEnv::new(vec![MockReply::Hang {
        chunks: vec!["The first half of an answer".into()],
    }])
    .await;
    let (mut agent, session) = env.session().await;
    agent
        .start_request("session/prompt", text_prompt(&session, "explain"))
        .await
        .expect("prompt");
    let first = agent.next_update(WAIT).await.expect("a chunk");
    assert_eq!(first["content"]["text"], "The first half of an answer");
    stop(&mut agent, how).await;
    assert_clean_stdout(&agent);
    let transcript = stored(&env, &session);
    assert!(transcript.validate().is_ok());
    let (text, marked) = last_answer_marked(&transcript);
    assert_eq!(
        text, "The first half of an answer",
        "{how:?}: what the client saw"
    );
    assert!(marked, "{how:?}: the partial answer is marked interrupted");

    // Reloaded: the user sees where it stopped, and so does the model.
    env.mock.push(MockReply::text(&["the rest"]));
    let mut again = env.spawn().await;
    again
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await
        .expect("initialize");
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    let replay = again.updates();
    let thoughts = chunks(&replay, "agent_thought_chunk").concat();
    assert!(thoughts.contains("did not complete"), "{how:?}: {replay:?}");
    let (response, _) = prompt(&mut again, &session, "go on").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let messages = &env.mock.requests()[1].body["messages"];
    let cut = messages
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "assistant"))
        .expect("the partial answer");
    assert!(
        cut["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("The first half") && c.contains("cut off")),
        "{how:?}: {cut}"
    );
    again.close_stdin();
    let _ = again.wait_exit(WAIT).await;
}

#[tokio::test]
async fn sigterm_during_an_answer_stores_it_marked_and_exits_zero() {
    stop_during_an_answer(STOPS[0]).await;
}

#[tokio::test]
async fn sigint_during_an_answer_stores_it_marked_and_exits_zero() {
    stop_during_an_answer(STOPS[1]).await;
}

#[tokio::test]
async fn sighup_during_an_answer_stores_it_marked_and_exits_zero() {
    stop_during_an_answer(STOPS[2]).await;
}

#[tokio::test]
async fn end_of_input_during_an_answer_stores_it_marked_and_exits_zero() {
    stop_during_an_answer(STOPS[3]).await;
}

/// A command that starts a `setsid` grandchild and a plain child, all tagged, then waits.
fn long_command(tag: &str) -> String {
    format!(
        "setsid sh -c 'sleep 300 # {tag}-detached' & sh -c 'sleep 300 # {tag}-child' & \
         echo started; sh -c 'sleep 300 # {tag}-main'"
    )
}

async fn stop_during_a_command(how: Stop) {
    let tag = format!("shutdown-cmd-{}-{how:?}", std::process::id()).replace(['(', ')'], "");
    let env = TestEnv::new(vec![MockReply::tool_call(
        "run-1",
        "terminal",
        json!({"command": long_command(&tag)}),
    )])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "run it"))
        .await
        .expect("prompt");
    // Commands the parser cannot read ask even in yolo: allowed once.
    let started = Instant::now();
    while tagged_processes(&tag).len() < 3 && started.elapsed() < WAIT {
        if let Ok(asked) = agent.next_agent_request(Duration::from_millis(100)).await {
            allow_once(&mut agent, &asked).await;
        }
    }
    assert!(
        tagged_processes(&tag).len() >= 3,
        "the command did not start: {:?}",
        tagged_processes(&tag)
    );
    stop(&mut agent, how).await;
    let _ = id;
    let gone_by = Instant::now() + Duration::from_secs(1);
    while !tagged_processes(&tag).is_empty() && Instant::now() < gone_by {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        tagged_processes(&tag).is_empty(),
        "{how:?}: still running: {:#?}",
        tagged_processes(&tag)
    );
    let transcript = stored(&env, &session);
    assert!(transcript.validate().is_ok(), "{how:?}");
    assert!(
        transcript
            .entries()
            .iter()
            .any(|e| matches!(e.body, EntryBody::Interrupted { .. })),
        "{how:?}: the turn is marked interrupted"
    );
    assert!(
        transcript.open_tool_calls().is_empty(),
        "{how:?}: the call is closed"
    );
}

#[tokio::test]
async fn sigterm_during_a_command_ends_it_and_all_it_started() {
    stop_during_a_command(STOPS[0]).await;
}

#[tokio::test]
async fn sigint_during_a_command_ends_it_and_all_it_started() {
    stop_during_a_command(STOPS[1]).await;
}

#[tokio::test]
async fn sighup_during_a_command_ends_it_and_all_it_started() {
    stop_during_a_command(STOPS[2]).await;
}

#[tokio::test]
async fn end_of_input_during_a_command_ends_it_and_all_it_started() {
    stop_during_a_command(STOPS[3]).await;
}

/// An agent whose second turn is streaming while another program holds the store's write
/// lock for `period` (its first turn is saved).
async fn a_turn_on_a_locked_store(
    period: Duration,
) -> (TestEnv, AgentProcess, std::thread::JoinHandle<()>) {
    let env = TestEnv::new(vec![
        MockReply::text(&["saved before"]),
        MockReply::Hang {
            chunks: vec!["working".into()],
        },
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "one").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let holder = hold_write_lock(&env.home.path().join("talaria").join("state.db"), period);
    agent
        .start_request("session/prompt", text_prompt(&session, "two"))
        .await
        .expect("prompt");
    agent.next_update(WAIT).await.expect("a chunk");
    (env, agent, holder)
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    // Another program holds the store's write lock, so the clean stop waits for the store
    // (for its bounded time); a second signal does not wait.
    let (_env, mut agent, holder) = a_turn_on_a_locked_store(Duration::from_secs(8)).await;
    signal(&agent, Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = Instant::now();
    signal(&agent, Signal::SIGINT);
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(
        second.elapsed() < Duration::from_secs(1),
        "{:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{status:?}");
    holder.join().expect("the lock holder");
}

#[tokio::test]
async fn the_postgres_build_exits_cleanly_fifty_times_in_a_row() {
    let (cluster, url) = tokio::task::spawn_blocking(|| {
        let cluster = talaria_store::test_cluster::TestCluster::start();
        let url = cluster.database();
        (cluster, url)
    })
    .await
    .expect("cluster");
    let mut env = TestEnv::new(Vec::new()).await;
    env.extra_env
        .push(("TALARIA_STORE_URL".into(), url.clone()));
    for round in 0..50 {
        let mut agent = env.spawn().await;
        agent
            .start_session(env.workspace.path())
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        agent.close_stdin();
        let status = agent.wait_exit(WAIT).await.expect("exits");
        assert!(
            status.success(),
            "round {round}: {status:?}\n{}",
            agent.stderr()
        );
        assert!(
            !agent.stderr().contains("panicked"),
            "round {round}: {}",
            agent.stderr()
        );
    }
    drop(cluster);
}

/// Signals the agent; how long it took to exit (cleanly: asserted).
async fn stopped_by(agent: &mut AgentProcess, sig: Signal) -> Duration {
    let started = Instant::now();
    signal(agent, sig);
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{sig:?}: {status:?}");
    started.elapsed()
}

/// A signalled stop of an idle agent whose input is still open is as quick as end of input:
/// nothing waits for the input's reader (the old stop waited out two fixed pauses, 0.6 s).
#[tokio::test]
async fn a_signalled_stop_with_input_open_is_as_quick_as_end_of_input() {
    let env = TestEnv::new(vec![MockReply::text(&["done"])]).await;
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let (mut agent, session) = env.session().await;
        prompt(&mut agent, &session, "one").await;
        env.mock.push(MockReply::text(&["done"]));
        let took = stopped_by(&mut agent, sig).await;
        assert!(
            took < Duration::from_millis(450),
            "{sig:?}: an idle stop took {took:?}"
        );
    }
}

/// A stop while another program holds the store's write lock (a turn waiting for it) ends
/// within the stop's budget of 2.5 s, sessions, store and output together.
#[tokio::test]
async fn a_stop_on_a_locked_store_ends_within_its_budget() {
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let (_env, mut agent, holder) = a_turn_on_a_locked_store(Duration::from_secs(6)).await;
        let took = stopped_by(&mut agent, sig).await;
        assert!(
            took < Duration::from_millis(2700),
            "{sig:?}: the stop took {took:?}"
        );
        holder.join().expect("the lock holder");
    }
}

/// A stop while the agent waits on the client's answer to a permission question: the
/// question is withdrawn (`$/cancel_request` for it) before the agent exits, however it
/// stops, end of input included.
async fn stop_during_a_question(how: Stop) {
    let env = TestEnv::new(vec![MockReply::tool_call(
        "w",
        "write_file",
        json!({"path": "asked.txt", "content": "x\n"}),
    )])
    .await;
    let (mut agent, session) = env.session().await;
    agent
        .start_request("session/prompt", text_prompt(&session, "write it"))
        .await
        .expect("prompt");
    let asked = agent.next_agent_request(WAIT).await.expect("a question");
    assert_eq!(asked["method"], "session/request_permission");
    stop(&mut agent, how).await;
    agent.collect_remaining().await;
    let withdrawn = agent
        .transcript
        .iter()
        .any(|m| m["method"] == "$/cancel_request" && m["params"]["requestId"] == asked["id"]);
    assert!(withdrawn, "{how:?}: the question was never withdrawn");
    assert!(!env.workspace.path().join("asked.txt").exists(), "{how:?}");
}

#[tokio::test]
async fn every_stop_withdraws_a_pending_question() {
    for how in STOPS {
        stop_during_a_question(how).await;
    }
}
