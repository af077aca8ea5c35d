//! A store that blocks, or is not there, never holds up an answer and loses nothing: SQLite's
//! write lock held by another program while four sessions prompt, and for 40 s while forty
//! sessions run turns of many calls (as fast as with the store free); a PostgreSQL server
//! frozen with SIGSTOP mid-turn, and fifty stops (each signal and end of input) while it is
//! frozen, each within the stop's 2.5 s budget; the agent started while PostgreSQL is down.
//! Each session is told once that it is not saved yet and once when it is; every turn ends
//! up stored, in order.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::{AgentProcess, MockReply};
use talaria_record::Transcript;
use talaria_store::test_cluster::TestCluster;
use talaria_store::{PgStore, SessionStore, SqliteStore};

use crate::support::*;

/// The bound every answer is held to while the store blocks (the journal's deadline is
/// 1.5 s; the rest is room for a loaded machine). The store blocks for 10 s.
const ANSWERED_WITHIN: Duration = Duration::from_secs(5);
const BLOCKED_FOR: Duration = Duration::from_secs(10);

const NOT_SAVED: &str = "not being saved";
const NOT_SAVED_YET: &str = "not saved yet";
const SAVED_AGAIN: &str = "saved again";

/// The notices one session was shown so far, in order.
fn notices_of(agent: &AgentProcess, session: &str) -> Vec<String> {
    agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
        .map(|m| &m["params"]["update"])
        .filter_map(notice_text)
        .collect()
}

fn count(notices: &[String], text: &str) -> usize {
    notices.iter().filter(|n| n.contains(text)).count()
}

/// Waits until `session` was told it is saved again.
async fn wait_saved_again(agent: &mut AgentProcess, session: &str, within: Duration) {
    agent
        .wait_for(within, |m| {
            m["method"] == "session/update"
                && m["params"]["sessionId"] == session
                && notice_text(&m["params"]["update"]).is_some_and(|t| t.contains(SAVED_AGAIN))
        })
        .await
        .unwrap_or_else(|e| panic!("{session} was never told it is saved again: {e}"));
}

fn answers(n: usize) -> Vec<MockReply> {
    (0..n)
        .map(|i| MockReply::text(&[&format!("answer {i}")]))
        .collect()
}

/// `n` sessions in the workspace of one agent.
async fn sessions(agent: &mut AgentProcess, env: &TestEnv, n: usize) -> Vec<String> {
    let mut ids = vec![
        agent
            .start_session(env.workspace.path())
            .await
            .expect("session"),
    ];
    while ids.len() < n {
        let created = agent
            .call(
                "session/new",
                json!({"cwd": env.workspace.path(), "mcpServers": []}),
            )
            .await
            .expect("session/new");
        ids.push(created["sessionId"].as_str().expect("id").to_string());
    }
    ids
}

/// Prompts every session at once; every answer must come within `bound`. How long each
/// answer took, from the prompts' start, in the order the answers came.
async fn prompt_all_within(
    agent: &mut AgentProcess,
    sessions: &[String],
    bound: Duration,
) -> Vec<Duration> {
    let started = Instant::now();
    let mut ids = Vec::new();
    for session in sessions {
        ids.push(
            agent
                .start_request("session/prompt", text_prompt(session, "go on"))
                .await
                .expect("prompt"),
        );
    }
    // Each answer as it comes, whichever it is.
    let mut answered = Vec::new();
    for _ in 0..ids.len() {
        let left = bound.saturating_sub(started.elapsed());
        let response = agent
            .wait_for(left, |m| {
                m.get("method").is_none() && m["id"].as_i64().is_some_and(|id| ids.contains(&id))
            })
            .await
            .expect("answered");
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
        answered.push(started.elapsed());
    }
    let took = started.elapsed();
    assert!(
        took < bound,
        "the answers waited {took:?} for a blocked store"
    );
    answered.sort();
    answered
}

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

#[tokio::test]
async fn a_write_lock_held_by_another_program_holds_no_answer_and_loses_nothing() {
    let env = TestEnv::new(answers(8)).await;
    let mut agent = env.spawn().await;
    let sessions = sessions(&mut agent, &env, 4).await;
    prompt_all_within(&mut agent, &sessions, WAIT).await;

    let holder = hold_write_lock(&store_path(&env), BLOCKED_FOR);
    let locked_at = Instant::now();
    prompt_all_within(&mut agent, &sessions, ANSWERED_WITHIN).await;
    // Listing reads past the lock (and does not wait for the writer more than a moment).
    let started = Instant::now();
    let listed = agent.call("session/list", json!({})).await.expect("list");
    assert!(started.elapsed() < ANSWERED_WITHIN, "listing waited");
    assert!(locked_at.elapsed() < BLOCKED_FOR, "the lock was still held");
    assert_eq!(listed["sessions"].as_array().map(Vec::len), Some(4));
    for session in &sessions {
        let told = notices_of(&agent, session);
        assert_eq!(count(&told, NOT_SAVED), 1, "{session}: {told:?}");
    }

    holder.join().expect("the lock holder");
    for session in &sessions {
        wait_saved_again(&mut agent, session, Duration::from_secs(30)).await;
    }
    for session in &sessions {
        let told = notices_of(&agent, session);
        assert_eq!(count(&told, NOT_SAVED), 1, "told once: {told:?}");
        assert_eq!(count(&told, SAVED_AGAIN), 1, "told once: {told:?}");
    }
    agent.close_stdin();
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{status:?}");
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    let mut stored = Vec::new();
    for session in &sessions {
        let (_, transcript) = store.load(session).expect("load");
        assert!(transcript.validate().is_ok());
        let texts = assistant_texts(&transcript);
        assert_eq!(texts.len(), 2, "both turns of {session}: {texts:?}");
        stored.extend(texts);
    }
    stored.sort();
    let expected: Vec<String> = (0..8).map(|i| format!("answer {i}")).collect();
    assert_eq!(stored, expected, "every answer, once");
    assert_clean_stdout(&agent);
}

/// Tool results in a stored record.
fn tool_results(transcript: &Transcript) -> usize {
    transcript
        .entries()
        .iter()
        .filter(|e| matches!(e.body, talaria_record::EntryBody::ToolResult(_)))
        .count()
}

/// `calls` file reads taken by `sessions` sessions as they come, then an answer each.
fn many_calls(sessions: usize, calls: usize) -> Vec<MockReply> {
    let mut script: Vec<MockReply> = (0..calls)
        .map(|i| MockReply::tool_call(&format!("c{i}"), "read_file", json!({"path": "notes.txt"})))
        .collect();
    script.extend(answers(sessions));
    script
}

/// Another program holding SQLite's write lock from now until this is dropped.
struct LockHeld {
    release: Option<std::sync::mpsc::Sender<()>>,
    holder: Option<std::thread::JoinHandle<()>>,
}

impl LockHeld {
    fn take(path: &std::path::Path) -> Self {
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
            let _ = released.recv();
            connection.execute_batch("COMMIT").expect("unlock");
        });
        holding
            .recv_timeout(Duration::from_secs(30))
            .expect("the lock was taken");
        Self {
            release: Some(release),
            holder: Some(holder),
        }
    }
}

impl Drop for LockHeld {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(holder) = self.holder.take() {
            let _ = holder.join();
        }
    }
}

#[tokio::test]
async fn forty_sessions_of_many_calls_answer_through_a_long_lock_as_fast_as_without_it() {
    const SESSIONS: usize = 40;
    const CALLS: usize = 40 * 49;
    // A bound on progress only: the machine may be busy (the bench has the figures).
    const ROUND_WITHIN: Duration = Duration::from_secs(180);
    // Each round: 40 fresh sessions (the same history, none), 1,960 file reads, then an
    // answer per session — about 4,000 entries, as many as the writer's queue holds. First
    // with the store free, then with it locked from before the round to after it.
    let mut script = many_calls(SESSIONS, CALLS);
    script.extend(many_calls(SESSIONS, CALLS));
    let env = TestEnv::new(script).await;
    std::fs::write(env.workspace.path().join("notes.txt"), "the notes\n").expect("notes");
    let mut agent = env.spawn().await;
    let all = sessions(&mut agent, &env, 2 * SESSIONS).await;
    let (free, held) = all.split_at(SESSIONS);
    let healthy = prompt_all_within(&mut agent, free, ROUND_WITHIN).await;
    let lock = LockHeld::take(&store_path(&env));
    let locked = prompt_all_within(&mut agent, held, ROUND_WITHIN).await;
    drop(lock);
    // Each answer (the n-th to come with the store locked against the n-th without): the
    // store's deadline (1.5 s) plus room for a loaded machine; not the lock's length.
    for (n, (locked, healthy)) in locked.iter().zip(&healthy).enumerate() {
        assert!(
            *locked < healthy.mul_f64(1.5) + Duration::from_millis(2_500),
            "answer {n} took {locked:?} with the store locked, {healthy:?} without \
             (every answer: {locked_all:?} against {healthy:?})",
            locked_all = &locked,
        );
    }
    for session in held {
        wait_saved_again(&mut agent, session, Duration::from_secs(60)).await;
    }
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    let mut results = 0;
    for session in &all {
        let (_, transcript) = store.load(session).expect("load");
        assert!(transcript.validate().is_ok(), "{:?}", transcript.validate());
        assert_eq!(assistant_texts(&transcript).len(), 1, "{session}'s answer");
        results += tool_results(&transcript);
    }
    assert_eq!(results, 2 * CALLS, "every call's result, stored once");
}

/// A throwaway server and a host (a home of its own) using it.
async fn host_on(url: &str, script: Vec<MockReply>) -> TestEnv {
    let mut env = TestEnv::new(script).await;
    env.extra_env
        .push(("TALARIA_STORE_URL".into(), url.to_string()));
    env
}

async fn stored_texts(url: &str, session: &str) -> Result<Vec<String>, talaria_store::StoreError> {
    let (url, session) = (url.to_string(), session.to_string());
    tokio::task::spawn_blocking(move || {
        PgStore::connect(&url)
            .and_then(|store| store.load(&session))
            .map(|(_, transcript)| assistant_texts(&transcript))
    })
    .await
    .expect("joined")
}

#[tokio::test]
async fn a_frozen_database_server_holds_no_answer_and_loses_nothing() {
    let (cluster, url) = throwaway_database().await;
    let env = host_on(&url, answers(6)).await;
    let mut agent = env.spawn().await;
    let sessions = sessions(&mut agent, &env, 2).await;
    prompt_all_within(&mut agent, &sessions, WAIT).await;

    cluster.freeze(true);
    let frozen_at = Instant::now();
    prompt_all_within(&mut agent, &sessions, ANSWERED_WITHIN).await;
    let listed = agent
        .request("session/list", json!({}))
        .await
        .expect("answered");
    assert!(
        frozen_at.elapsed() < BLOCKED_FOR,
        "the server thawed already"
    );
    // The frozen server cannot list: said so, as something to try again.
    assert_eq!(listed["error"]["code"], json!(-32010), "{listed}");
    for session in &sessions {
        let told = notices_of(&agent, session);
        assert_eq!(count(&told, NOT_SAVED), 1, "{session}: {told:?}");
    }
    tokio::time::sleep(BLOCKED_FOR.saturating_sub(frozen_at.elapsed())).await;
    cluster.freeze(false);
    for session in &sessions {
        wait_saved_again(&mut agent, session, Duration::from_secs(30)).await;
    }
    // It goes on saved.
    prompt_all_within(&mut agent, &sessions, WAIT).await;
    agent.close_stdin();
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{status:?}");
    let mut all = Vec::new();
    for session in &sessions {
        let texts = stored_texts(&url, session).await.expect("stored");
        assert_eq!(texts.len(), 3, "{session}: {texts:?}");
        all.extend(texts);
    }
    all.sort();
    let expected: Vec<String> = (0..6).map(|i| format!("answer {i}")).collect();
    assert_eq!(all, expected, "every answer, once");
    for session in &sessions {
        let told = notices_of(&agent, session);
        assert_eq!(count(&told, NOT_SAVED), 1, "{told:?}");
        assert_eq!(count(&told, SAVED_AGAIN), 1, "{told:?}");
    }
}

#[tokio::test]
async fn started_while_the_database_is_down_it_saves_once_the_database_is_up() {
    let cluster = tokio::task::spawn_blocking(TestCluster::not_started)
        .await
        .expect("cluster");
    let url = cluster.url("postgres");
    let env = host_on(&url, answers(2)).await;
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("a session while the database is down");
    let (response, _) = prompt(&mut agent, &session, "one").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let told = notices_of(&agent, &session);
    assert_eq!(count(&told, NOT_SAVED_YET), 1, "{told:?}");
    let listed = agent
        .request("session/list", json!({}))
        .await
        .expect("answered");
    assert_eq!(listed["error"]["code"], json!(-32010), "{listed}");
    assert!(
        listed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not open yet")),
        "{listed}"
    );

    let started = Instant::now();
    let cluster = std::sync::Arc::new(cluster);
    let restarted = cluster.clone();
    tokio::task::spawn_blocking(move || restarted.start_again())
        .await
        .expect("the database is up");
    wait_saved_again(&mut agent, &session, Duration::from_secs(30)).await;
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "saved {:?} after the database came up",
        started.elapsed()
    );
    assert_eq!(
        stored_texts(&url, &session).await.expect("stored"),
        ["answer 0"]
    );
    let listed = agent.call("session/list", json!({})).await.expect("lists");
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["sessionId"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, [session.as_str()]);
    let (response, _) = prompt(&mut agent, &session, "two").await;
    assert_eq!(stop_reason(&response), "end_turn");
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    assert_eq!(
        stored_texts(&url, &session).await.expect("stored"),
        ["answer 0", "answer 1"]
    );
    drop(cluster);
}

/// A store of `sessions` sessions with `turns` turns each, written through the store's API.
pub(crate) fn written_store(path: &std::path::Path, sessions: usize, turns: usize) {
    let store = SqliteStore::open(path).expect("open");
    for s in 0..sessions {
        let id = format!("kept-{s}");
        store
            .create(&talaria_store::SessionMeta {
                id: id.clone(),
                cwd: "/elsewhere".into(),
                created_at: 1,
                updated_at: 1 + s as i64,
                ..Default::default()
            })
            .expect("create");
        let mut transcript = Transcript::with_system("sys");
        for t in 0..turns {
            transcript.push(talaria_record::testing::user(&format!(
                "question {t} {}",
                "words ".repeat(40)
            )));
            transcript.push(talaria_record::testing::assistant(
                &format!("answer {t}"),
                &[],
            ));
        }
        store.append(&id, transcript.entries()).expect("append");
    }
    store.checkpoint().expect("checkpoint");
}

#[tokio::test]
async fn a_truncated_store_is_moved_aside_and_its_readable_sessions_recovered() {
    let env = TestEnv::new(answers(1)).await;
    let path = store_path(&env);
    std::fs::create_dir_all(path.parent().expect("home")).expect("home");
    written_store(&path, 6, 40);
    let size = std::fs::metadata(&path).expect("size").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("file")
        .set_len(size * 2 / 3)
        .expect("truncate");

    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("a session on the recovered store");
    let told = agent
        .wait_for(WAIT, |m| {
            m["params"]["sessionId"] == session.as_str()
                && notice_text(&m["params"]["update"]).is_some_and(|t| t.contains("was damaged"))
        })
        .await
        .map(|m| notice_text(&m["params"]["update"]).unwrap_or_default())
        .unwrap_or_else(|e| panic!("not told: {e}: {:?}", notices_of(&agent, &session)));
    let copy = std::fs::read_dir(path.parent().expect("home"))
        .expect("home")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("state.db.damaged-"))
                && !p.to_string_lossy().ends_with("-wal")
                && !p.to_string_lossy().ends_with("-shm")
        })
        .expect("the damaged copy is kept");
    assert!(told.contains(&copy.display().to_string()), "{told}");
    // Only the first session is told.
    let second = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session/new");
    let second = second["sessionId"].as_str().expect("id").to_string();
    let (response, _) = prompt(&mut agent, &second, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(!notices_of(&agent, &second).join("\n").contains("damaged"));

    let listed = agent
        .call("session/list", json!({"cwd": "/elsewhere"}))
        .await
        .expect("list");
    let kept: Vec<String> = listed["sessions"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|s| s["sessionId"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert!(!kept.is_empty(), "nothing recovered");
    let loaded = agent
        .call(
            "session/load",
            json!({"sessionId": kept[0], "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    assert!(loaded.is_ok(), "{loaded:?}");
    agent.close_stdin();
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success());
    // The new store holds the recovered sessions and the new one's turn.
    let store = SqliteStore::open(&path).expect("open");
    let (_, transcript) = store.load(&second).expect("the new session");
    assert_eq!(assistant_texts(&transcript), ["answer 0"]);
}

/// Which of two responses came first on the agent's output.
async fn first_answered(agent: &mut AgentProcess, one: i64, other: i64) -> i64 {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(60), agent.next_message())
            .await
            .expect("an answer in time")
            .expect("a message");
        for id in [one, other] {
            if message["id"] == id {
                return id;
            }
        }
    }
}

/// With the store blocked by `block` (and freed by `unblock`), a `method` (delete, list, fork,
/// load of a stored session, or "session/load (open)": a load of a session open here, which
/// replays it) waits on it off the loop: another session's cancel is answered first.
async fn cancel_goes_first(
    env: &TestEnv,
    method: &str,
    block: impl FnOnce(),
    unblock: impl FnOnce(),
) {
    let mut agent = env.spawn().await;
    let ids = sessions(&mut agent, env, 2).await;
    let (stored, busy) = (&ids[0], &ids[1]);
    let (response, _) = prompt(&mut agent, stored, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn");
    if method == "session/load" {
        agent
            .call("session/close", json!({"sessionId": stored}))
            .await
            .expect("closed");
    }
    let running = agent
        .start_request("session/prompt", text_prompt(busy, "a long answer"))
        .await
        .expect("prompt");
    agent
        .wait_for(Duration::from_secs(30), |m| {
            m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await
        .expect("the long answer streams");
    block();
    let params = match method {
        "session/delete" => json!({"sessionId": stored}),
        "session/list" => json!({}),
        _ => json!({"sessionId": stored, "cwd": env.workspace.path(), "mcpServers": []}),
    };
    let sent = method.trim_end_matches(" (open)");
    let waiting = agent.start_request(sent, params).await.expect("sent");
    agent
        .notify("session/cancel", json!({"sessionId": busy}))
        .await
        .expect("cancel");
    let cancelled_at = Instant::now();
    let first = first_answered(&mut agent, running, waiting).await;
    // SQLite's writer gives up on a held lock after a second, so the waiting request may be
    // answered first — with the store's refusal, never a result it could not have had.
    let waiting_answered = first == waiting;
    if waiting_answered {
        let answer = agent
            .transcript
            .iter()
            .find(|m| m["id"] == waiting)
            .cloned()
            .unwrap_or_default();
        assert!(answer.get("error").is_some(), "{method}: {answer}");
        agent
            .wait_response(running, WAIT)
            .await
            .expect("the cancelled prompt");
    }
    assert!(
        cancelled_at.elapsed() < ANSWERED_WITHIN,
        "{method}: the cancelled prompt waited {:?} for a blocked store",
        cancelled_at.elapsed()
    );
    // The loop goes on serving: a new handshake and a new session are answered meanwhile.
    agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await
        .expect("initialize");
    agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session/new");
    assert!(
        waiting_answered || !agent.transcript.iter().any(|m| m["id"] == waiting),
        "{method}: answered before the store was freed"
    );
    unblock();
    agent.close_stdin();
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{method}: {status:?}");
}

fn two_answers() -> Vec<MockReply> {
    let slow_answer = MockReply::Text {
        chunks: (0..100).map(|n| format!("word{n} ")).collect(),
        reasoning: Vec::new(),
        delay_ms: 100,
        usage: None,
        finish_reason: None,
    };
    vec![MockReply::text(&["first"]), slow_answer]
}

#[tokio::test]
async fn a_delete_waiting_on_a_locked_store_holds_no_other_sessions_cancel() {
    let env = TestEnv::new(two_answers()).await;
    let holder = std::cell::RefCell::new(None);
    cancel_goes_first(
        &env,
        "session/delete",
        || *holder.borrow_mut() = Some(hold_write_lock(&store_path(&env), BLOCKED_FOR)),
        || {
            if let Some(holder) = holder.borrow_mut().take() {
                holder.join().expect("the lock holder");
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_delete_load_fork_or_list_waiting_on_a_frozen_database_holds_no_other_sessions_cancel() {
    let (cluster, url) = throwaway_database().await;
    for method in [
        "session/delete",
        "session/load",
        "session/load (open)",
        "session/fork",
        "session/list",
    ] {
        let env = host_on(&url, two_answers()).await;
        cancel_goes_first(
            &env,
            method,
            || cluster.freeze(true),
            || cluster.freeze(false),
        )
        .await;
    }
}

/// Stops the agent with `signal` twice, the second while the first stop may still be stuck;
/// returns how long the exit took after the second and the exit status.
async fn stopped_twice(
    agent: &mut AgentProcess,
    signal: nix::sys::signal::Signal,
) -> (Duration, std::process::ExitStatus) {
    let pid = nix::unistd::Pid::from_raw(agent.pid().expect("pid") as i32);
    let _ = nix::sys::signal::kill(pid, signal);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = Instant::now();
    let _ = nix::sys::signal::kill(pid, signal);
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("the second signal ends it");
    (second.elapsed(), status)
}

#[tokio::test]
async fn a_second_signal_ends_a_stop_stuck_on_a_frozen_database_at_once() {
    use nix::sys::signal::Signal;
    let (cluster, url) = throwaway_database().await;
    for (round, signal) in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
    ]
    .into_iter()
    .enumerate()
    {
        let env = host_on(&url, answers(1)).await;
        let mut agent = env.spawn().await;
        let sessions = sessions(&mut agent, &env, 1).await;
        cluster.freeze(true);
        prompt_all_within(&mut agent, &sessions, ANSWERED_WITHIN).await;
        let (took, status) = stopped_twice(&mut agent, signal).await;
        cluster.freeze(false);
        assert!(
            took < Duration::from_millis(1500),
            "round {round} ({signal}): the second signal took {took:?}"
        );
        assert!(!status.success(), "round {round}: {status}");
    }
}

#[tokio::test]
async fn every_stop_on_a_frozen_database_ends_within_its_budget() {
    use nix::sys::signal::Signal;
    // The stop's budget is 2.5 s from the signal; the rest is room for a loaded machine.
    const STOPPED_WITHIN: Duration = Duration::from_secs(3);
    // Fifty stops, ten agents at a time, each signal and end of input in turn.
    const AT_ONCE: usize = 10;
    let (cluster, url) = throwaway_database().await;
    let stops = [
        Some(Signal::SIGTERM),
        Some(Signal::SIGINT),
        Some(Signal::SIGHUP),
        None,
    ];
    let mut times = Vec::new();
    for batch in 0..5 {
        let mut running = Vec::new();
        for _ in 0..AT_ONCE {
            let env = host_on(&url, answers(2)).await;
            let mut agent = env.spawn().await;
            let sessions = sessions(&mut agent, &env, 1).await;
            prompt_all_within(&mut agent, &sessions, WAIT).await;
            running.push((env, agent, sessions));
        }
        cluster.freeze(true);
        // A turn each with the server frozen, all at once; each answered in time.
        let prompted = Instant::now();
        let mut prompts = Vec::new();
        for (_, agent, sessions) in &mut running {
            let prompt = text_prompt(&sessions[0], "go on");
            prompts.push(
                agent
                    .start_request("session/prompt", prompt)
                    .await
                    .expect("sent"),
            );
        }
        for ((_, agent, _), id) in running.iter_mut().zip(prompts) {
            let response = agent.wait_response(id, WAIT).await.expect("answered");
            assert_eq!(stop_reason(&response), "end_turn", "{response}");
        }
        assert!(
            prompted.elapsed() < ANSWERED_WITHIN,
            "{:?}",
            prompted.elapsed()
        );
        let started = Instant::now();
        for (n, (_, agent, _)) in running.iter_mut().enumerate() {
            match stops[(batch * AT_ONCE + n) % stops.len()] {
                Some(signal) => {
                    let pid = nix::unistd::Pid::from_raw(agent.pid().expect("pid") as i32);
                    nix::sys::signal::kill(pid, signal).expect("signalled");
                }
                None => agent.close_stdin(),
            }
        }
        for (n, (_, agent, _)) in running.iter_mut().enumerate() {
            let how = stops[(batch * AT_ONCE + n) % stops.len()];
            let status = agent.wait_exit(WAIT).await.expect("exits");
            // At most how long it took (agents are waited for in turn).
            let took = started.elapsed();
            times.push(took);
            assert!(status.success(), "batch {batch}, {how:?}: {status}");
            assert!(
                took < STOPPED_WITHIN,
                "batch {batch}, {how:?}: the stop took {took:?}"
            );
        }
        cluster.freeze(false);
    }
    let slowest = times.iter().max();
    eprintln!("50 stops on a frozen database, the slowest {slowest:?}");
}
