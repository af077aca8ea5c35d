//! Durable sessions against the real store file: an answered turn is a saved turn, even when
//! the process is killed right after the answer, on an empty store and on a large one; two
//! processes share one store (migrations, claims, deletes, kills); a full disk is told and
//! heals without holes; a read-only home still lists and loads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};
use talaria_record::{EntryBody, Transcript};
use talaria_store::{SessionMeta, SessionStore, SqliteStore};

use crate::support::*;

fn store_path(env: &TestEnv) -> PathBuf {
    env.home.path().join("talaria").join("state.db")
}

/// The text of each session's answers in these updates, by session id.
fn answers_by_session(agent: &AgentProcess) -> HashMap<String, String> {
    let mut answers: HashMap<String, String> = HashMap::new();
    for message in &agent.transcript {
        if message["method"] == "session/update"
            && message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        {
            let session = message["params"]["sessionId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let text = message["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap_or_default();
            answers.entry(session).or_default().push_str(text);
        }
    }
    answers
}

fn assistant_texts(transcript: &Transcript) -> Vec<String> {
    transcript
        .entries()
        .iter()
        .filter_map(|e| match &e.body {
            EntryBody::Assistant(answer) => Some(answer.text.clone()),
            _ => None,
        })
        .collect()
}

/// Grows the store at `path` to `entries` entries through the store's own API.
fn pre_grow(path: &Path, entries: usize) {
    let store = SqliteStore::open(path).expect("open");
    let per_session = 1000;
    for s in 0..entries.div_ceil(per_session) {
        let id = format!("old-{s}");
        store
            .create(&SessionMeta {
                id: id.clone(),
                cwd: "/elsewhere".into(),
                model: "m".into(),
                mode: "ask".into(),
                created_at: 1,
                updated_at: 1,
                ..SessionMeta::default()
            })
            .expect("create");
        let mut t = Transcript::with_system("sys");
        for n in 1..per_session {
            if n % 2 == 1 {
                t.push(talaria_record::testing::user(&format!(
                    "question {n} about topic {s}"
                )));
            } else {
                t.push(talaria_record::testing::assistant(
                    &format!("answer {n} on {s}"),
                    &[],
                ));
            }
        }
        store.append(&id, t.entries()).expect("append");
    }
}

/// `n` sessions each answer one prompt at once; the process is killed the moment the last
/// answer is out; every answered turn is in the store.
async fn answered_turns_survive_a_kill(n: usize, grown_to: usize) {
    let script: Vec<MockReply> = (0..n)
        .map(|i| MockReply::text(&[&format!("answer-{i}")]))
        .collect();
    let env = TestEnv::new(script).await;
    if grown_to > 0 {
        pre_grow(&store_path(&env), grown_to);
    }
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let mut sessions = Vec::new();
    for _ in 0..n {
        sessions.push(
            agent
                .start_session(env.workspace.path())
                .await
                .expect("session"),
        );
    }
    let mut pending = Vec::new();
    for session in &sessions {
        pending.push(
            agent
                .start_request("session/prompt", text_prompt(session, "go"))
                .await
                .expect("prompt"),
        );
    }
    for id in pending {
        let response = agent.wait_response(id, WAIT).await.expect("response");
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
    }
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    let answered = answers_by_session(&agent);
    assert_eq!(answered.len(), n);
    let store = SqliteStore::open(&store_path(&env)).expect("reopen");
    for session in &sessions {
        let (_, transcript) = store.load(session).expect("the session is stored");
        assert!(transcript.validate().is_ok(), "{session}");
        assert_eq!(
            assistant_texts(&transcript),
            [answered[session].clone()],
            "{session}: the answered turn is stored"
        );
    }
}

#[tokio::test]
async fn every_answered_turn_is_stored_when_the_process_is_killed_right_after() {
    answered_turns_survive_a_kill(50, 0).await;
}

#[tokio::test]
async fn every_answered_turn_is_stored_on_a_store_of_100k_entries_too() {
    answered_turns_survive_a_kill(50, 100_000).await;
}

/// A version-2 store (before the rowid-keyed index) with one session.
fn old_store(path: &Path) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let connection = rusqlite::Connection::open(path).expect("open");
    let mut t = Transcript::with_system("sys");
    t.push(talaria_record::testing::user("the ancient walrus question"));
    let body = serde_json::to_string(&t.entries()[1]).expect("json");
    connection
        .execute_batch(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, cwd TEXT NOT NULL,
                additional_directories TEXT NOT NULL DEFAULT '[]', title TEXT,
                model TEXT NOT NULL DEFAULT '', mode TEXT NOT NULL DEFAULT '',
                created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
                input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
                cost REAL, parent_id TEXT, owner_pid INTEGER);
             CREATE TABLE entries (session_id TEXT NOT NULL, entry_id INTEGER NOT NULL,
                at_ms INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
                PRIMARY KEY (session_id, entry_id)) WITHOUT ROWID;
             CREATE VIRTUAL TABLE entries_fts USING fts5(text, session_id UNINDEXED,
                entry_id UNINDEXED, tokenize = 'porter unicode61');
             INSERT INTO sessions (id, cwd, created_at, updated_at) VALUES ('old', '/p', 1, 1);
             PRAGMA user_version = 2;",
        )
        .expect("schema");
    connection
        .execute(
            "INSERT INTO entries (session_id, entry_id, at_ms, kind, body) VALUES ('old', 2, 1, 'user', ?1)",
            [body],
        )
        .expect("entry");
}

#[tokio::test]
async fn two_processes_starting_together_on_a_fresh_or_old_store_both_save() {
    for old in [false, true] {
        let env = TestEnv::new(vec![
            MockReply::text(&["first"]),
            MockReply::text(&["second"]),
        ])
        .await;
        if old {
            old_store(&store_path(&env));
        }
        let ((mut a, first), (mut b, second)) =
            tokio::join!(start_and_prompt(&env), start_and_prompt(&env));
        for agent in [&mut a, &mut b] {
            agent.close_stdin();
            let _ = agent.wait_exit(WAIT).await;
            assert!(
                !agent.stderr().contains("already exists"),
                "{}",
                agent.stderr()
            );
        }
        let store = SqliteStore::open(&store_path(&env)).expect("open");
        for session in [&first, &second] {
            let (_, transcript) = store.load(session).expect("saved");
            assert_eq!(assistant_texts(&transcript).len(), 1, "old store: {old}");
        }
        if old {
            assert_eq!(store.search("walrus", 5).expect("search").len(), 1);
        }
    }
}

/// A process started now, with one session that answered one prompt.
async fn start_and_prompt(env: &TestEnv) -> (AgentProcess, String) {
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, _) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    (agent, session)
}

/// A stored session with one answered turn, closed, from a process that then exits.
async fn stored_session(env: &TestEnv) -> String {
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, _) = prompt(&mut agent, &session, "remember this").await;
    assert_eq!(stop_reason(&response), "end_turn");
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    // A clean exit checkpoints: the main file alone holds everything.
    let wal = env.home.path().join("talaria/state.db-wal");
    assert_eq!(std::fs::metadata(&wal).map_or(0, |m| m.len()), 0, "{wal:?}");
    session
}

#[tokio::test]
async fn a_session_has_one_live_writer_across_processes() {
    let env = TestEnv::new(vec![MockReply::text(&["stored"])]).await;
    let session = stored_session(&env).await;
    // Two processes load it at the same instant: exactly one wins.
    let (mut b, mut c) = (initialized(&env).await, initialized(&env).await);
    let (from_b, from_c) = tokio::join!(
        b.request("session/load", load_params(&env, &session)),
        c.request("session/load", load_params(&env, &session)),
    );
    let (from_b, from_c) = (from_b.expect("b answers"), from_c.expect("c answers"));
    let (mut holder, mut other, lost) = if from_b.get("result").is_some() {
        (b, c, from_c)
    } else {
        (c, b, from_b)
    };
    assert_eq!(lost["error"]["code"], -32602, "{lost}");
    let message = lost["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("open in another Talaria process") && message.contains("pid"),
        "{message}"
    );
    // Deleting it from the other process is refused while it is held.
    let deleted = other
        .request("session/delete", json!({"sessionId": session}))
        .await
        .expect("answered");
    assert!(
        deleted["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("open in another Talaria process")),
        "{deleted}"
    );
    // A lock file that names a live pid but is not locked claims nothing (a reused pid
    // cannot block anyone)...
    let lock = env
        .home
        .path()
        .join("talaria/claims")
        .join(format!("{session}.lock"));
    assert!(lock.exists());
    // ...and when the holder is killed, the claim ends with it, at once.
    kill_now(&holder);
    let _ = holder.wait_exit(WAIT).await;
    std::fs::write(&lock, format!("somewhere pid {}\n", std::process::id())).expect("stale");
    let loaded = other
        .request("session/load", load_params(&env, &session))
        .await
        .expect("answered");
    assert!(loaded.get("result").is_some(), "{loaded}");
}

/// A small file system (a tmpfs) the test makes without privileges: mounted in a user and
/// mount namespace of its own, kept by a holder process for as long as this value lives.
/// The agent runs in that namespace ([`SmallDisk::spawn`]); the test reaches the files
/// through the holder's view ([`SmallDisk::outside`], `/proc/PID/root`). Where the kernel
/// refuses unprivileged user namespaces the test fails, saying so: it never passes untried.
pub(crate) struct SmallDisk {
    /// Where it is mounted, as the agent sees it.
    pub(crate) path: PathBuf,
    holder: std::process::Child,
}

impl SmallDisk {
    pub(crate) fn mount(path: &Path, size: &str) -> Self {
        use std::io::BufRead;
        std::fs::create_dir_all(path).expect("mount point");
        let script = format!(
            "mount -t tmpfs -o size={size} tmpfs '{}' && echo mounted && exec sleep 3600",
            path.display()
        );
        let mut holder = std::process::Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs");
        let mut said = String::new();
        let stdout = holder.stdout.take().expect("stdout");
        let _ = std::io::BufReader::new(stdout).read_line(&mut said);
        if said.trim() != "mounted" {
            let _ = holder.kill();
            let mut why = String::new();
            if let Some(mut stderr) = holder.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut why);
            }
            panic!(
                "a small disk cannot be made here: a tmpfs in an unprivileged user namespace \
                 was refused ({why}); this test needs user namespaces \
                 (kernel.unprivileged_userns_clone=1)"
            );
        }
        Self {
            path: path.to_path_buf(),
            holder,
        }
    }

    /// `inside` (a path on the disk as the agent sees it) as the test reaches it.
    pub(crate) fn outside(&self, inside: &Path) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/root{}",
            self.holder.id(),
            inside.display()
        ))
    }

    /// A copy of the SQLite store at `inside` (with its write-ahead log), to open from this
    /// test: SQLite resolves the `/proc/PID/root` link to this namespace's own (empty) view.
    pub(crate) fn store_copy(&self, inside: &Path) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let copy = dir.path().join("state.db");
        std::fs::copy(self.outside(inside), &copy).expect("copy the store");
        for suffix in ["-wal", "-shm"] {
            let from = self.outside(Path::new(&format!("{}{suffix}", inside.display())));
            if from.exists() {
                std::fs::copy(&from, format!("{}{suffix}", copy.display())).expect("copy");
            }
        }
        (dir, copy)
    }

    /// An agent of `env` running where the disk is mounted.
    pub(crate) async fn spawn(&self, env: &TestEnv) -> talaria_harness::AgentProcess {
        let pid = self.holder.id().to_string();
        let talaria = talaria_harness::binary::talaria_bin();
        let talaria = talaria.display().to_string();
        let args = [
            "--user",
            "--mount",
            "--preserve-credentials",
            "--target",
            pid.as_str(),
            "--",
            talaria.as_str(),
            "acp",
        ];
        talaria_harness::AgentProcess::spawn_as(
            Path::new("nsenter"),
            &args,
            &env.env(),
            talaria_harness::WireFraming::NewlineDelimited,
            None,
        )
        .await
        .expect("the agent starts where the small disk is")
    }

    /// Fills the file system; returns the filler to remove (as the test reaches it).
    pub(crate) fn fill(&self) -> PathBuf {
        let filler = self.outside(&self.path.join("filler"));
        let _ = std::process::Command::new("dd")
            .args(["if=/dev/zero", "bs=64k"])
            .arg(format!("of={}", filler.display()))
            .stderr(std::process::Stdio::null())
            .status();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn notices(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk" || u["sessionUpdate"] == "notice")
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn a_full_disk_is_told_and_the_record_heals_without_holes() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["before the disk filled"]),
        MockReply::text(&["while the disk was full"]),
        MockReply::text(&["after space came back"]),
    ])
    .await;
    let disk_path = env.home.path().join("small");
    let disk = SmallDisk::mount(&disk_path, "2m");
    let home = disk.path.join("talaria");
    env.extra_env
        .push(("TALARIA_HOME".into(), home.display().to_string()));
    let mut agent = disk.spawn(&env).await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, _) = prompt(&mut agent, &session, "one").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let filler = disk.fill();
    let (response, updates) = prompt(&mut agent, &session, "two").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let told = notices(&updates);
    assert!(told.contains("not being saved"), "{told}");
    std::fs::remove_file(&filler).expect("space back");
    let (response, updates) = prompt(&mut agent, &session, "three").await;
    assert_eq!(stop_reason(&response), "end_turn");
    // The store is asked again every couple of seconds, not once per write: the recovery
    // is told in this turn or soon after it.
    if !notices(&updates).contains("saved again") {
        let told = agent
            .wait_for(Duration::from_secs(30), |m| {
                m["params"]["sessionId"] == session.as_str()
                    && m["params"]["update"]["content"]["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("saved again"))
            })
            .await;
        assert!(told.is_ok(), "never told saved again: {}", agent.stderr());
    }
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    let (_copy, copied) = disk.store_copy(&home.join("state.db"));
    let store = SqliteStore::open(&copied).expect("open");
    let (_, transcript) = store.load(&session).expect("load");
    assert!(transcript.validate().is_ok());
    assert_eq!(
        assistant_texts(&transcript),
        [
            "before the disk filled",
            "while the disk was full",
            "after space came back"
        ],
        "every turn, in order, no holes"
    );
}

#[tokio::test]
async fn a_read_only_home_lists_and_loads_and_says_prompts_are_not_saved() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["stored answer"]),
        MockReply::text(&["unsaved answer"]),
    ])
    .await;
    let session = stored_session(&env).await;
    // The home can be read, not written: by another user when the tests run as root.
    let talaria = env.home.path().join("talaria");
    let restore = make_read_only(&talaria);
    if running_as_root() {
        for path in [env.home.path(), talaria.as_path()] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        give_to(env.workspace.path(), NOBODY);
        env.user = Some(NOBODY);
    }
    let mut agent = initialized(&env).await;
    let listed = agent
        .call("session/list", json!({}))
        .await
        .expect("list works");
    assert!(listed.to_string().contains(&session), "{listed}");
    let loaded = agent
        .request("session/load", load_params(&env, &session))
        .await
        .expect("answered");
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed: String = agent.updates().iter().map(Value::to_string).collect();
    assert!(
        replayed.contains("stored answer"),
        "the replay shows the history"
    );
    let (response, updates) = prompt(&mut agent, &session, "more").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let told = notices(&updates);
    assert!(told.contains("not being saved"), "{told}");
    drop(restore);
}

#[tokio::test]
async fn a_read_only_home_that_becomes_writable_is_written_again_without_a_restart() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["stored answer"]),
        MockReply::text(&["answered while read-only"]),
        MockReply::text(&["answered once writable"]),
    ])
    .await;
    let session = stored_session(&env).await;
    let talaria = env.home.path().join("talaria");
    // Read-only to the agent: by its mode, for the user the agent runs as (another user than
    // root, which may write anything).
    let runs_as = running_as_root().then_some(NOBODY);
    if let Some(user) = runs_as {
        for path in [env.home.path(), talaria.as_path()] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        give_to(&talaria, user);
        give_to(env.workspace.path(), user);
        env.user = Some(user);
    }
    let restore = make_read_only(&talaria);
    let mut agent = initialized(&env).await;
    agent
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    let (response, updates) = prompt(&mut agent, &session, "while read-only").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(
        notices(&updates).contains("not being saved"),
        "{}",
        notices(&updates)
    );
    // The home becomes writable (a remount, a fixed permission): the waiting turn is written
    // and the session told, without a restart.
    drop(restore);
    let told = agent
        .wait_for(Duration::from_secs(30), |m| {
            m["params"]["sessionId"] == session.as_str()
                && m["params"]["update"].to_string().contains("saved again")
        })
        .await;
    assert!(
        told.is_ok(),
        "never written again: {}\n{}",
        agent.stderr(),
        listing(&talaria)
    );
    let (response, _) = prompt(&mut agent, &session, "once writable").await;
    assert_eq!(stop_reason(&response), "end_turn");
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    let store = SqliteStore::open(&talaria.join("state.db")).expect("open");
    let (_, transcript) = store.load(&session).expect("load");
    assert!(transcript.validate().is_ok());
    assert_eq!(
        assistant_texts(&transcript),
        [
            "stored answer",
            "answered while read-only",
            "answered once writable"
        ]
    );
}

/// The modes and owners of `dir` and its files, for a failure's message.
fn listing(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path()),
    );
    paths
        .iter()
        .filter_map(|path| {
            let meta = std::fs::symlink_metadata(path).ok()?;
            Some(format!(
                "{:o} {} {}\n",
                meta.mode(),
                meta.uid(),
                path.display()
            ))
        })
        .collect()
}

/// Makes `dir` and its files read-only for everyone but root; undone when dropped.
fn make_read_only(dir: &Path) -> impl Drop {
    use std::os::unix::fs::PermissionsExt;
    struct Restore(Vec<PathBuf>);
    impl Drop for Restore {
        fn drop(&mut self) {
            for path in &self.0 {
                let mode = if path.is_dir() { 0o755 } else { 0o644 };
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
            }
        }
    }
    let mut changed = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let mode = if path.is_dir() { 0o555 } else { 0o444 };
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
        changed.push(path);
    }
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555));
    changed.push(dir.to_path_buf());
    Restore(changed)
}

#[tokio::test]
async fn loading_or_resuming_a_session_open_in_this_connection_works() {
    let env = TestEnv::new(vec![MockReply::text(&["hello there"])]).await;
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let resumed = agent
        .request("session/resume", load_params(&env, &session))
        .await
        .expect("answered");
    assert!(resumed.get("result").is_some(), "{resumed}");
    let before = agent.updates().len();
    let loaded = agent
        .request("session/load", load_params(&env, &session))
        .await
        .expect("answered");
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed: String = agent.updates()[before..]
        .iter()
        .map(Value::to_string)
        .collect();
    assert!(replayed.contains("hello there"), "load replays again");
}

#[tokio::test]
async fn a_replay_during_a_streaming_turn_is_written_whole_by_the_sessions_one_writer() {
    // A record with many cards to replay, then a turn that streams slowly.
    let calls: Vec<(String, Value)> = (0..400)
        .map(|i| (format!("c{i}"), json!({"path": "notes.txt"})))
        .collect();
    let batch_of_reads = batch(
        &calls
            .iter()
            .map(|(id, args)| (id.as_str(), "read_file", args.clone()))
            .collect::<Vec<_>>(),
    );
    let live: Vec<String> = (0..1500).map(|i| format!("<live {i}>")).collect();
    let live_refs: Vec<&str> = live.iter().map(String::as_str).collect();
    let env = TestEnv::new(vec![
        batch_of_reads,
        MockReply::text(&["read them"]),
        MockReply::Text {
            chunks: live.clone(),
            reasoning: Vec::new(),
            delay_ms: 1,
            usage: None,
            finish_reason: None,
        },
    ])
    .await;
    std::fs::write(env.workspace.path().join("notes.txt"), "a note\n").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "read the notes").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let streaming = agent
        .start_request("session/prompt", text_prompt(&session, "now stream"))
        .await
        .expect("send");
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("<live"))
        })
        .await
        .expect("streaming");
    let before = agent.updates().len();
    let loaded = agent
        .request("session/load", load_params(&env, &session))
        .await
        .expect("answered");
    assert!(loaded.get("result").is_some(), "{loaded}");
    let answered = agent
        .wait_response(streaming, WAIT)
        .await
        .expect("answered");
    assert_eq!(stop_reason(&answered), "end_turn", "{answered}");
    let updates = agent.updates();
    let after: Vec<&Value> = updates[before..].iter().collect();
    let user = |u: &&Value, text: &str| {
        u["sessionUpdate"] == "user_message_chunk" && u["content"]["text"] == text
    };
    let first = after
        .iter()
        .position(|u| user(u, "read the notes"))
        .expect("replay starts");
    let last = after
        .iter()
        .position(|u| user(u, "now stream"))
        .expect("replay reaches the running turn");
    let replay = &after[first..=last];
    assert!(replay.len() > 800, "{} updates replayed", replay.len());
    let interleaved: Vec<&&Value> = replay
        .iter()
        .filter(|u| {
            u["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("<live"))
        })
        .collect();
    assert!(
        interleaved.is_empty(),
        "live deltas inside the replay: {interleaved:?}"
    );
    // Every live delta still arrives, once.
    let streamed: Vec<String> = chunks(&updates, "agent_message_chunk")
        .into_iter()
        .filter(|t| t.starts_with("<live"))
        .collect();
    assert_eq!(streamed, live_refs);
}

#[tokio::test]
async fn a_lone_surrogate_in_a_prompt_reads_as_the_replacement_character() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let (mut agent, session) = env.session().await;
    let raw = format!(
        r#"{{"jsonrpc":"2.0","id":77,"method":"session/prompt","params":{{"sessionId":"{session}","prompt":[{{"type":"text","text":"half \ud83d emoji"}}]}}}}"#
    );
    agent
        .send_raw(format!("{raw}\n").as_bytes())
        .await
        .expect("send");
    let response = agent.wait_response(77, WAIT).await.expect("answered");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(last_user(&env.mock.requests()[0].body).contains("half \u{fffd} emoji"));
}

/// Adds `count` entries to the old (version 2) store at `path`, spread over sessions.
fn grow_old_store(path: &Path, count: usize) {
    let mut connection = rusqlite::Connection::open(path).expect("open");
    let tx = connection.transaction().expect("tx");
    let mut t = Transcript::with_system("sys");
    t.push(talaria_record::testing::user(&format!(
        "an old question {}",
        "words ".repeat(20)
    )));
    let body = serde_json::to_string(&t.entries()[1]).expect("json");
    for s in 0..count.div_ceil(1000) {
        tx.execute(
            "INSERT INTO sessions (id, cwd, created_at, updated_at) VALUES (?1, '/p', 1, 1)",
            [format!("grown-{s}")],
        )
        .expect("session");
        for e in 0..1000.min(count - s * 1000) {
            tx.execute(
                "INSERT INTO entries (session_id, entry_id, at_ms, kind, body) VALUES (?1, ?2, 1, 'user', ?3)",
                rusqlite::params![format!("grown-{s}"), (e + 1) as i64, body],
            )
            .expect("entry");
        }
    }
    tx.commit().expect("commit");
}

#[tokio::test]
async fn two_processes_on_an_old_store_with_a_slow_migration_both_end_up_saving() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["first"]),
        MockReply::text(&["second"]),
    ])
    .await;
    old_store(&store_path(&env));
    grow_old_store(&store_path(&env), 20_000);
    // The migration holds its transaction longer than one attempt's patience (5 s): the
    // process that waits for it must keep trying, not give up.
    env.extra_env
        .push(("TALARIA_TEST_MIGRATION_PAUSE_MS".into(), "8000".into()));
    let ((mut a, first), (mut b, second)) =
        tokio::join!(start_and_prompt(&env), start_and_prompt(&env));
    for (agent, session) in [(&mut a, &first), (&mut b, &second)] {
        let told = agent
            .wait_for(Duration::from_secs(60), |m| {
                m["params"]["sessionId"] == session.as_str()
                    && m["params"]["update"]["content"]["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("saved again"))
            })
            .await;
        assert!(told.is_ok(), "{session} was not saved: {}", agent.stderr());
    }
    for agent in [&mut a, &mut b] {
        agent.close_stdin();
        let status = agent.wait_exit(WAIT).await.expect("exits");
        assert!(status.success(), "{}", agent.stderr());
    }
    let store = SqliteStore::open(&store_path(&env)).expect("open");
    for (session, answer) in [(&first, "first"), (&second, "second")] {
        let (_, transcript) = store.load(session).expect("saved");
        let texts = assistant_texts(&transcript);
        assert_eq!(texts.len(), 1, "{texts:?}");
        assert!(["first", "second"].contains(&texts[0].as_str()), "{answer}");
    }
    assert_eq!(store.search("walrus", 5).expect("search").len(), 1);
}

#[tokio::test]
async fn a_second_sigint_while_another_process_migrates_loses_no_answered_turn_unnamed() {
    let mut env = TestEnv::new(vec![MockReply::text(&["answered during the migration"])]).await;
    old_store(&store_path(&env));
    grow_old_store(&store_path(&env), 20_000);
    // The migrator holds the migration's transaction for 8 s.
    env.extra_env
        .push(("TALARIA_TEST_MIGRATION_PAUSE_MS".into(), "8000".into()));
    let mut migrator = env.spawn().await;
    let _ = migrator
        .start_session(env.workspace.path())
        .await
        .expect("session");
    env.extra_env.pop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // This process cannot open the store meanwhile: its turn is answered, then stopped
    // twice.
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, _) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let pid = nix::unistd::Pid::from_raw(agent.pid().expect("pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(matches!(status.code(), Some(0 | 130)), "{status:?}");
    let said = agent.stderr();
    assert!(
        said.lines()
            .any(|l| l.contains("has not taken yet") && l.contains(&session)),
        "the waiting turn was not named: {said}"
    );
    // Once the migration is done, the next process writes the turn from the spool.
    migrator.close_stdin();
    let _ = migrator.wait_exit(Duration::from_secs(40)).await;
    let mut next = initialized(&env).await;
    // It opens (and migrates) the store in the background, then writes what was spooled.
    next.request("session/list", json!({}))
        .await
        .expect("answered");
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let stored = SqliteStore::open(&store_path(&env))
            .and_then(|store| store.load(&session))
            .map(|(_, transcript)| assistant_texts(&transcript))
            .unwrap_or_default();
        if stored == ["answered during the migration"] {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the answered turn was lost: {stored:?}\n{said}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    next.close_stdin();
    let _ = next.wait_exit(WAIT).await;
}

#[tokio::test]
async fn a_second_sigint_during_a_migration_keeps_the_running_turns_prompt_and_names_the_rest() {
    let mut env = TestEnv::new(vec![MockReply::Hang {
        chunks: vec!["a partial answer ".into()],
    }])
    .await;
    old_store(&store_path(&env));
    grow_old_store(&store_path(&env), 20_000);
    env.extra_env
        .push(("TALARIA_TEST_MIGRATION_PAUSE_MS".into(), "8000".into()));
    let mut migrator = env.spawn().await;
    let _ = migrator
        .start_session(env.workspace.path())
        .await
        .expect("session");
    env.extra_env.pop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    // A turn streams (and hangs) while the store cannot be opened; then two SIGINTs.
    agent
        .start_request(
            "session/prompt",
            text_prompt(&session, "the running question"),
        )
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m.to_string().contains("a partial answer"))
        .await
        .expect("streaming");
    let pid = nix::unistd::Pid::from_raw(agent.pid().expect("pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(matches!(status.code(), Some(0 | 130)), "{status:?}");
    let said = agent.stderr();
    assert!(
        said.lines()
            .any(|l| l.contains("running turns are ended") && l.contains(&session)),
        "the running turn was not named: {said}"
    );
    migrator.close_stdin();
    let _ = migrator.wait_exit(Duration::from_secs(40)).await;
    let mut next = initialized(&env).await;
    next.request("session/list", json!({}))
        .await
        .expect("answered");
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let prompt_kept = SqliteStore::open(&store_path(&env))
            .and_then(|store| store.load(&session))
            .is_ok_and(|(_, transcript)| {
                serde_json::to_string(&transcript)
                    .is_ok_and(|text| text.contains("the running question"))
            });
        if prompt_kept {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the running turn's prompt was lost\n{said}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    next.close_stdin();
    let _ = next.wait_exit(WAIT).await;
}
