//! A salvage survives being interrupted: an agent recovering a damaged store is killed
//! (SIGKILL) or stopped (SIGTERM) at several points, and the next start still recovers every
//! session that reads — never a partial new store taken for the whole one. An agent whose
//! store another process salvaged (a new file put at its path) writes to the new one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use talaria_harness::MockReply;
use talaria_store::{SessionStore, SqliteStore};

use crate::support::*;

const SESSIONS: usize = 400;

/// A store of [`SESSIONS`] sessions cut to two thirds of its size; its path.
fn damaged_store(dir: &Path) -> PathBuf {
    let path = dir.join("state.db");
    crate::store_stalls::written_store(&path, SESSIONS, 12);
    let size = std::fs::metadata(&path).expect("size").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("file")
        .set_len(size * 2 / 3)
        .expect("truncate");
    path
}

/// Sessions a salvage of a copy of `damaged` recovers, uninterrupted.
fn recoverable(damaged: &Path) -> usize {
    let dir = tempfile::tempdir().expect("dir");
    let copy = dir.path().join("state.db");
    std::fs::copy(damaged, &copy).expect("copy");
    let store = SqliteStore::open_or_salvage(&copy).expect("salvaged");
    assert!(store.salvaged().is_some());
    drop(store);
    kept_sessions(&copy)
}

fn kept_sessions(path: &Path) -> usize {
    let store = SqliteStore::open(path).expect("open");
    store
        .list(None, None, SESSIONS * 2)
        .expect("list")
        .sessions
        .len()
}

#[tokio::test]
async fn a_salvage_killed_or_stopped_at_any_point_recovers_everything_on_the_next_start() {
    let template_dir = tempfile::tempdir().expect("dir");
    let template = damaged_store(template_dir.path());
    let expected = recoverable(&template);
    assert!(expected > SESSIONS / 3, "{expected}");
    for (signal, after_ms) in [
        (Signal::SIGKILL, 10),
        (Signal::SIGKILL, 400),
        (Signal::SIGKILL, 700),
        (Signal::SIGKILL, 900),
        (Signal::SIGTERM, 600),
        (Signal::SIGTERM, 1000),
        (Signal::SIGKILL, 1150),
    ] {
        let env = TestEnv::new(Vec::<MockReply>::new()).await;
        let path = env.home.path().join("talaria").join("state.db");
        std::fs::create_dir_all(path.parent().expect("home")).expect("home");
        std::fs::copy(&template, &path).expect("the damaged store");
        // `initialize` opens the store: the salvage starts then (about 1.3 s in a debug
        // build for this store: reading, then building the new store).
        let mut agent = initialized(&env).await;
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        let pid = nix::unistd::Pid::from_raw(agent.pid().expect("pid") as i32);
        let _ = nix::sys::signal::kill(pid, signal);
        agent.wait_exit(WAIT).await.expect("ended");
        // The next start finishes (or redoes) the salvage before anything else uses the store.
        let mut next = initialized(&env).await;
        let until = std::time::Instant::now() + WAIT;
        loop {
            let listed = next
                .request("session/list", serde_json::json!({"cwd": "/elsewhere"}))
                .await
                .expect("answered");
            if listed.get("result").is_some() {
                break;
            }
            assert!(std::time::Instant::now() < until, "never listed: {listed}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        next.close_stdin();
        next.wait_exit(WAIT).await.expect("exits");
        assert_eq!(
            kept_sessions(&path),
            expected,
            "{signal:?} after {after_ms} ms: {}",
            next.stderr()
        );
        let left: Vec<String> = std::fs::read_dir(path.parent().expect("home"))
            .expect("home")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains(".salvag") && !name.ends_with(".salvage-lock"))
            .collect();
        assert!(
            left.is_empty(),
            "{signal:?} after {after_ms} ms left {left:?}"
        );
    }
}

#[tokio::test]
async fn a_salvage_on_a_full_disk_keeps_the_damaged_store_says_what_it_needs_and_retries() {
    let template_dir = tempfile::tempdir().expect("dir");
    let template = damaged_store(template_dir.path());
    let expected = recoverable(&template);
    let mut env = TestEnv::new(Vec::<MockReply>::new()).await;
    let disk_path = env.home.path().join("small");
    let size = std::fs::metadata(&template).expect("size").len();
    let disk =
        crate::durability::SmallDisk::mount(&disk_path, &format!("{}k", size * 4 / 1024 + 1024));
    // The home as the agent sees it, and as this test reaches it.
    let home = disk.path.join("talaria");
    let reached = disk.outside(&home);
    std::fs::create_dir_all(&reached).expect("home");
    let path = reached.join("state.db");
    std::fs::copy(&template, &path).expect("the damaged store");
    // Room for SQLite to open the damaged file, not for the store a salvage builds.
    let spare = disk.outside(&disk.path.join("spare"));
    std::fs::write(&spare, vec![0u8; 256 * 1024]).expect("spare");
    let filler = disk.fill();
    std::fs::remove_file(&spare).expect("a little room");
    env.extra_env
        .push(("TALARIA_HOME".into(), home.display().to_string()));
    let mut agent = disk.spawn(&env).await;
    agent
        .call("initialize", serde_json::json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("a session while the store cannot be recovered yet");
    let told = agent
        .wait_for(WAIT, |m| {
            m["params"]["sessionId"] == session.as_str()
                && notice_text(&m["params"]["update"]).is_some_and(|t| t.contains("MB free"))
        })
        .await
        .map(|m| notice_text(&m["params"]["update"]).unwrap_or_default())
        .unwrap_or_else(|e| panic!("not told what the salvage needs: {e}\n{}", agent.stderr()));
    assert!(
        told.contains(&home.join("state.db").display().to_string()),
        "{told}"
    );
    // The damaged store is where it was, whole.
    assert_eq!(std::fs::metadata(&path).expect("kept").len(), size);
    std::fs::remove_file(&filler).expect("space back");
    agent
        .wait_for(Duration::from_secs(40), |m| {
            m["params"]["sessionId"] == session.as_str()
                && notice_text(&m["params"]["update"]).is_some_and(|t| t.contains("saved again"))
        })
        .await
        .unwrap_or_else(|e| panic!("never recovered: {e}\n{}", agent.stderr()));
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    // Everything that reads, and the session started meanwhile.
    let (_copy, copied) = disk.store_copy(&home.join("state.db"));
    assert_eq!(kept_sessions(&copied), expected + 1);
    let notices: Vec<String> = agent
        .transcript
        .iter()
        .filter(|m| m["params"]["sessionId"] == session.as_str())
        .filter_map(|m| notice_text(&m["params"]["update"]))
        .filter(|t| t.contains("MB free"))
        .collect();
    assert_eq!(notices.len(), 1, "told once: {notices:?}");
}

/// The answers `session` has in the store at `path`, once it has at least `count` (a few
/// seconds at most).
fn stored_answers(path: &Path, session: &str, count: usize) -> Vec<String> {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answers = SqliteStore::open(path)
            .and_then(|store| store.load(session))
            .map(|(_, transcript)| assistant_texts(&transcript))
            .unwrap_or_default();
        if answers.len() >= count || std::time::Instant::now() > until {
            return answers;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What another process's salvage does at its end: a whole new store (here a copy) put in
/// place of the old one in one rename, the old file and its logs moved aside.
fn replaced_as_a_salvage_does(path: &Path) {
    let new = path.with_extension("db.salvaged");
    rusqlite::Connection::open(path)
        .and_then(|c| c.execute("VACUUM INTO ?1", [new.display().to_string()]))
        .expect("a copy");
    let aside = path.with_extension("db.damaged-test");
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", path.display()));
        if from.exists() {
            std::fs::rename(&from, format!("{}{suffix}", aside.display())).expect("aside");
        }
    }
    std::fs::rename(&new, path).expect("in place");
}

#[tokio::test]
async fn a_running_agent_whose_store_another_process_salvaged_writes_to_the_new_one() {
    let env = TestEnv::new(vec![
        MockReply::text(&["before the salvage"]),
        MockReply::text(&["after the salvage"]),
    ])
    .await;
    let path = env.home.path().join("talaria").join("state.db");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "one").await;
    assert_eq!(stored_answers(&path, &session, 1).len(), 1);
    replaced_as_a_salvage_does(&path);
    prompt(&mut agent, &session, "two").await;
    assert_eq!(
        stored_answers(&path, &session, 2),
        ["before the salvage", "after the salvage"],
        "the turn after the salvage is in the store now at the path"
    );
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
    assert_eq!(stored_answers(&path, &session, 2).len(), 2);
}
