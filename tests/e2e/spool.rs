//! What waits for a stuck store outlives the process: with SQLite's write lock held by
//! another program, a turn is answered, the agent exits (its input closed, killed with
//! SIGKILL, or stopped by a second SIGINT, which names the waiting session first) with the
//! turn unsaved, and the turn is in the spool, readable only by the user;
//! the next agent on the same home writes it to the store once the lock is gone, and loading
//! the session replays it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::{AgentProcess, MockReply};
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

fn spool_dir(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("spool")
}

/// The spool files with something in them.
fn spooled(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|listing| {
            listing
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
                .collect()
        })
        .unwrap_or_default()
}

/// How the first agent ends while its store is locked.
#[derive(Clone, Copy, Debug)]
enum Ending {
    InputClosed,
    Killed,
    /// SIGINT, and SIGINT again while the stop waits for the store.
    SignalledTwice,
}

/// A session with one saved turn and one answered while the store is locked, after which
/// the agent ends; the lock holder (still holding) and the session's id.
async fn ended_with_a_turn_waiting(
    env: &TestEnv,
    ending: Ending,
) -> (std::thread::JoinHandle<()>, String) {
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let answer = agent
        .request("session/prompt", text_prompt(&session, "first"))
        .await
        .expect("first turn");
    assert_eq!(stop_reason(&answer), "end_turn");
    let holder = hold_write_lock(&store_path(env), Duration::from_secs(8));
    let answer = agent
        .request("session/prompt", text_prompt(&session, "second"))
        .await
        .expect("second turn, answered while the store is locked");
    assert_eq!(stop_reason(&answer), "end_turn");
    end(&mut agent, ending, &session).await;
    (holder, session)
}

async fn end(agent: &mut AgentProcess, ending: Ending, session: &str) {
    let started = Instant::now();
    match ending {
        Ending::InputClosed => {
            // The turn's entries reach the spool within a batch of the writer being stalled.
            tokio::time::sleep(Duration::from_millis(300)).await;
            agent.close_stdin();
        }
        Ending::SignalledTwice => {}
        Ending::Killed => {
            // Give the writer its stalled batch (it answers the turn only after 1.5 s or
            // the store's refusal, so the entries are in the spool by now).
            tokio::time::sleep(Duration::from_millis(300)).await;
            let pid = agent.pid().expect("pid") as i32;
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("kill");
        }
    }
    if let Ending::SignalledTwice = ending {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pid = nix::unistd::Pid::from_raw(agent.pid().expect("pid") as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal");
        // At once: the stop of a store stuck a moment ago takes only milliseconds.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    }
    let status = agent.wait_exit(WAIT).await.expect("exits");
    if let Ending::SignalledTwice = ending {
        // 130 when the second signal came while the stop ran, 0 when the stop was done.
        assert!(matches!(status.code(), Some(0 | 130)), "{status:?}");
        let said = agent.stderr();
        assert!(
            said.lines()
                .any(|l| l.contains("has not taken yet") && l.contains(session)),
            "the waiting turn was not named before the second signal: {said}"
        );
    }
    if let Ending::InputClosed = ending {
        assert!(
            started.elapsed() < Duration::from_millis(2800),
            "a stop on a stuck store took {:?}",
            started.elapsed()
        );
        assert!(
            agent.stderr().contains("kept in the spool"),
            "{}",
            agent.stderr()
        );
        assert!(status.code().is_some(), "{status:?}");
    }
}

async fn the_next_start_writes_what_the_last_one_spooled(ending: Ending) {
    let env = TestEnv::new(vec![
        MockReply::text(&["answer one"]),
        MockReply::text(&["answer two"]),
    ])
    .await;
    let (holder, session) = ended_with_a_turn_waiting(&env, ending).await;
    let files = spooled(&spool_dir(&env));
    assert_eq!(files.len(), 1, "{ending:?}: {files:?}");
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&files[0])
            .expect("spool")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode, 0o600, "readable only by the user");
    let spool_text = std::fs::read_to_string(&files[0]).expect("spool");
    assert!(spool_text.contains("answer two"), "{spool_text}");
    // The store has only the first turn.
    let stored = |env: &TestEnv| {
        let store = SqliteStore::open(&store_path(env)).expect("open");
        assistant_texts(&store.load(&session).expect("load").1)
    };
    holder.join().expect("lock holder");
    assert_eq!(stored(&env), ["answer one"], "{ending:?}");

    // The next start writes the spool, and a load replays both turns.
    let mut agent = initialized(&env).await;
    let from = agent.transcript.len();
    agent
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("load");
    let replayed: Vec<serde_json::Value> = agent.transcript[from..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    assert_eq!(
        chunks(&replayed, "agent_message_chunk"),
        ["answer one", "answer two"],
        "{ending:?}"
    );
    let until = Instant::now() + WAIT;
    while stored(&env) != ["answer one", "answer two"] {
        assert!(Instant::now() < until, "never written: {:?}", stored(&env));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let transcript = {
        let store = SqliteStore::open(&store_path(&env)).expect("open");
        store.load(&session).expect("load").1
    };
    assert!(transcript.validate().is_ok(), "{ending:?}");
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
    assert!(spooled(&spool_dir(&env)).is_empty(), "the spool is drained");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_turn_waiting_when_input_ends_is_spooled_and_written_by_the_next_start() {
    the_next_start_writes_what_the_last_one_spooled(Ending::InputClosed).await;
}

#[tokio::test]
async fn a_turn_waiting_when_the_agent_is_killed_is_spooled_and_written_by_the_next_start() {
    the_next_start_writes_what_the_last_one_spooled(Ending::Killed).await;
}

#[tokio::test]
async fn a_turn_waiting_when_a_second_signal_ends_the_stop_is_named_spooled_and_written_by_the_next_start()
 {
    the_next_start_writes_what_the_last_one_spooled(Ending::SignalledTwice).await;
}
