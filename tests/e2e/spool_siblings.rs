//! A stopped process's spool is never replayed over a live sibling's newer turn: process A
//! answers turn 2 while another program holds SQLite's write lock and stops (input closed,
//! SIGTERM or kill -9) with turn 2 only in its spool; process B, already running on the same
//! home, loads the session — its replay and record have turn 2 (it adopted A's spool before
//! reading), and it answers turn 3 after it; process C then starts. The store ends with
//! every answered turn once, in order, the record valid. And when B reads the session before
//! the spool is adopted by it (C took it first, the store still locked), both turns survive:
//! nothing stored is replaced, the turn the other did not see is saved as a recovered fork.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::{AgentProcess, MockReply};
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

/// How process A ends while its turn 2 waits for the store.
#[derive(Clone, Copy, Debug)]
enum Ending {
    InputClosed,
    Terminated,
    Killed,
}

fn script() -> Vec<MockReply> {
    ["answer one", "answer two", "answer three", "answer four"]
        .iter()
        .map(|text| MockReply::text(&[text]))
        .collect()
}

/// B: a process already running on the home (its store open, a session of its own).
async fn running_sibling(env: &TestEnv) -> AgentProcess {
    let mut agent = env.spawn().await;
    agent
        .start_session(env.workspace.path())
        .await
        .expect("B's own session");
    agent
}

/// A: turn 1 saved, turn 2 answered while the store is locked, then A ends; the lock holder
/// (holding for `locked`) and the session.
async fn a_ends_with_turn_two_spooled(
    env: &TestEnv,
    ending: Ending,
    locked: Duration,
) -> (std::thread::JoinHandle<()>, String) {
    let mut a = env.spawn().await;
    let session = a
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (answer, _) = prompt(&mut a, &session, "one").await;
    assert_eq!(stop_reason(&answer), "end_turn");
    let holder = hold_write_lock(&store_path(env), locked);
    let (answer, _) = prompt(&mut a, &session, "two").await;
    assert_eq!(stop_reason(&answer), "end_turn", "answered while locked");
    // The writer has spooled turn 2 by the time it was answered past the deadline.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = nix::unistd::Pid::from_raw(a.pid().expect("pid") as i32);
    match ending {
        Ending::InputClosed => a.close_stdin(),
        Ending::Terminated => {
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("term")
        }
        Ending::Killed => kill_now(&a),
    }
    a.wait_exit(WAIT).await.expect("A ends");
    (holder, session)
}

/// The session as the store has it once it holds `answers` answers (at most 60 s).
fn stored_once_it_has(env: &TestEnv, session: &str, answers: usize) -> talaria_record::Transcript {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(store) = SqliteStore::open(&store_path(env))
            && let Ok((_, transcript)) = store.load(session)
            && assistant_texts(&transcript).len() >= answers
        {
            return transcript;
        }
        assert!(
            Instant::now() < until,
            "{session} never held {answers} answers"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Lines in the spool of `agent`'s process (its file is named after its pid).
fn spool_lines(env: &TestEnv, agent: &AgentProcess) -> usize {
    let prefix = format!("{}-", agent.pid().expect("pid"));
    std::fs::read_dir(env.home.path().join("talaria").join("spool"))
        .map(|listing| {
            listing
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| std::fs::read(e.path()).unwrap_or_default())
                .map(|bytes| bytes.iter().filter(|b| **b == b'\n').count())
                .sum()
        })
        .unwrap_or(0)
}

/// The record's ids are unique and increasing, and it validates.
fn whole(transcript: &talaria_record::Transcript) {
    let ids: Vec<u64> = transcript.all_entries().iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    transcript.validate().expect("valid");
}

async fn b_goes_on_after_a_stopped(ending: Ending) {
    let env = TestEnv::new(script()).await;
    let mut b = running_sibling(&env).await;
    let (holder, session) =
        a_ends_with_turn_two_spooled(&env, ending, Duration::from_secs(4)).await;
    holder.join().expect("the lock holder");
    // B loads the session A left: the replay shows turn 2.
    let loaded = b
        .request("session/load", load_params(&env, &session))
        .await
        .expect("load");
    assert!(loaded.get("result").is_some(), "{ending:?}: {loaded}");
    let replayed = b
        .transcript
        .iter()
        .filter(|m| m["params"]["sessionId"] == session.as_str())
        .map(ToString::to_string)
        .collect::<String>();
    assert!(replayed.contains("answer two"), "{ending:?}: {replayed}");
    let (answer, _) = prompt(&mut b, &session, "three").await;
    assert_eq!(stop_reason(&answer), "end_turn");
    // The model saw turn 2 before turn 3.
    let last = env
        .mock
        .requests()
        .last()
        .expect("request")
        .body
        .to_string();
    assert!(last.contains("answer two"), "{ending:?}: {last}");
    // C starts on the same home and opens the store.
    let mut c = initialized(&env).await;
    c.call("session/list", json!({})).await.expect("list");
    let stored = stored_once_it_has(&env, &session, 3);
    assert_eq!(
        assistant_texts(&stored),
        ["answer one", "answer two", "answer three"],
        "{ending:?}"
    );
    whole(&stored);
    for agent in [&mut b, &mut c] {
        agent.close_stdin();
        assert!(agent.wait_exit(WAIT).await.expect("exits").success());
    }
    // Nothing is left to adopt, and nothing changed once more processes came and went.
    assert_eq!(
        assistant_texts(&stored_once_it_has(&env, &session, 3)),
        ["answer one", "answer two", "answer three"]
    );
}

#[tokio::test]
async fn a_sibling_goes_on_after_the_turn_a_process_spooled_before_its_input_closed() {
    b_goes_on_after_a_stopped(Ending::InputClosed).await;
}

#[tokio::test]
async fn a_sibling_goes_on_after_the_turn_a_process_spooled_before_sigterm() {
    b_goes_on_after_a_stopped(Ending::Terminated).await;
}

#[tokio::test]
async fn a_sibling_goes_on_after_the_turn_a_process_spooled_before_kill_9() {
    b_goes_on_after_a_stopped(Ending::Killed).await;
}

#[tokio::test]
async fn a_sibling_loading_while_the_store_is_still_locked_goes_on_after_the_spooled_turn() {
    let env = TestEnv::new(script()).await;
    let mut b = running_sibling(&env).await;
    let (holder, session) =
        a_ends_with_turn_two_spooled(&env, Ending::Killed, Duration::from_secs(12)).await;
    // Still locked: B loads (reads past the lock) and answers turn 3; both wait in B.
    let loaded = b
        .request("session/load", load_params(&env, &session))
        .await
        .expect("load");
    assert!(loaded.get("result").is_some(), "{loaded}");
    let (answer, _) = prompt(&mut b, &session, "three").await;
    assert_eq!(stop_reason(&answer), "end_turn");
    holder.join().expect("the lock holder");
    let stored = stored_once_it_has(&env, &session, 3);
    assert_eq!(
        assistant_texts(&stored),
        ["answer one", "answer two", "answer three"]
    );
    whole(&stored);
    b.close_stdin();
    assert!(b.wait_exit(WAIT).await.expect("exits").success());
}

#[tokio::test]
async fn a_spool_adopted_by_another_process_first_never_replaces_the_turn_b_answered() {
    let env = TestEnv::new(script()).await;
    let mut b = running_sibling(&env).await;
    let (holder, session) =
        a_ends_with_turn_two_spooled(&env, Ending::Killed, Duration::from_secs(12)).await;
    // C starts and adopts A's spool at once, while the store is still locked (C cannot open
    // it yet): turn 2 waits in C. B then loads the session without it (its store was open
    // before the lock) and answers turn 3 under the same ids.
    let mut c = initialized(&env).await;
    c.request("session/list", json!({}))
        .await
        .expect("answered");
    let adopted = Instant::now() + Duration::from_secs(10);
    while spool_lines(&env, &c) == 0 {
        assert!(Instant::now() < adopted, "C did not adopt A's spool");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let loaded = b
        .request("session/load", load_params(&env, &session))
        .await
        .expect("load");
    assert!(loaded.get("result").is_some(), "{loaded}");
    let (answer, _) = prompt(&mut b, &session, "three").await;
    assert_eq!(stop_reason(&answer), "end_turn");
    holder.join().expect("the lock holder");
    // Whichever writes first, the other's turn is not replaced: every answer is stored, in
    // the session or in a recovered fork of it, and each record is valid.
    let until = Instant::now() + Duration::from_secs(60);
    let everything = loop {
        let store = SqliteStore::open(&store_path(&env)).expect("open");
        let listed = store.list(None, None, 100).expect("list");
        let mut answers = Vec::new();
        for meta in &listed.sessions {
            let (_, transcript) = store.load(&meta.id).expect("load");
            whole(&transcript);
            if meta.id == session || meta.parent_id.as_deref() == Some(&session) {
                answers.extend(assistant_texts(&transcript));
            }
        }
        if answers.contains(&"answer two".to_string())
            && answers.contains(&"answer three".to_string())
        {
            break answers;
        }
        assert!(Instant::now() < until, "lost an answer: {answers:?}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(everything.contains(&"answer one".to_string()));
    for agent in [&mut b, &mut c] {
        agent.close_stdin();
        let _ = agent.wait_exit(WAIT).await;
    }
}
