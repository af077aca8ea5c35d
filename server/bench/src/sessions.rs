//! The durable-session figures of `talaria-bench`: append latency in the store, replay of a
//! 10,000-message session, `session/list` over 10,000 sessions, and memory per idle loaded
//! session. Stores are generated directly with the store crate, then driven over stdio.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use talaria_harness::{AgentProcess, WireFraming};
use talaria_record::Transcript;
use talaria_record::testing::{assistant, result, user};
use talaria_store::{SessionMeta, SessionStore, SqliteStore};

/// What was measured.
pub struct SessionFigures {
    pub append_p50: Duration,
    pub append_p99: Duration,
    /// Median cost of appending one entry when the store holds about 1,000 entries, and
    /// about 200,000 (the search index must not make it grow with the store).
    pub append_at_1k: Duration,
    pub append_at_200k: Duration,
    pub load_2k: Duration,
    pub replay_10k: Duration,
    pub list_1k: Duration,
    pub list_10k: Duration,
    pub rss_per_idle_session_kb: Option<f64>,
}

/// The median time to append one entry, over `count` appends to a session of its own.
fn append_cost(
    store: &SqliteStore,
    session: &str,
    workspace: &Path,
    count: usize,
) -> anyhow::Result<Duration> {
    store.create(&meta(session, workspace, 3))?;
    let sample = conversation(count);
    let mut times = Vec::with_capacity(sample.len());
    for entry in sample.entries() {
        let started = Instant::now();
        store.append(session, std::slice::from_ref(entry))?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(percentile(&times, 0.5))
}

/// Append latency, sorted: 2,000 single-entry appends to a new session, as a session writes
/// them.
pub(crate) fn timed_appends(
    store: &dyn SessionStore,
    workspace: &Path,
) -> anyhow::Result<Vec<Duration>> {
    store.create(&meta("append", workspace, 1))?;
    let sample = conversation(2000);
    let mut appends = Vec::with_capacity(sample.len());
    for entry in sample.entries() {
        let started = Instant::now();
        store.append("append", std::slice::from_ref(entry))?;
        appends.push(started.elapsed());
    }
    appends.sort();
    Ok(appends)
}

/// A 2,000-message session to load (`two-k`), and 1,000 sessions to list.
pub(crate) fn to_load_and_list(store: &dyn SessionStore, workspace: &Path) -> anyhow::Result<()> {
    store.create(&meta("two-k", workspace, 5))?;
    store.append("two-k", conversation(2000).entries())?;
    for i in 0..1000 {
        store.create(&meta(&format!("s{i:05}"), workspace, 10 + i))?;
    }
    Ok(())
}

/// Grows the store by `entries` entries, in sessions of 1,000.
fn grow(store: &SqliteStore, workspace: &Path, entries: usize) -> anyhow::Result<()> {
    let chunk = conversation(1000);
    for n in 0..entries.div_ceil(1000) {
        let id = format!("grown{n:04}");
        store.create(&meta(&id, workspace, 4))?;
        store.append_batch(&[(id, talaria_store::EncodedEntry::all(chunk.entries())?)])?;
    }
    Ok(())
}

/// The median of 10 `session/list` calls.
pub(crate) async fn list_time(client: &mut AgentProcess) -> anyhow::Result<Duration> {
    let mut lists = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let page = client.call("session/list", json!({})).await?;
        lists.push(started.elapsed());
        anyhow::ensure!(page["sessions"].as_array().map(Vec::len) == Some(50));
    }
    lists.sort();
    Ok(lists[lists.len() / 2])
}

fn meta(id: &str, cwd: &Path, at: i64) -> SessionMeta {
    SessionMeta {
        id: id.into(),
        cwd: cwd.display().to_string(),
        model: "mock-model".into(),
        mode: "ask".into(),
        created_at: at,
        updated_at: at,
        ..SessionMeta::default()
    }
}

/// A conversation of `messages` entries: asks, tool calls with results, answers.
fn conversation(messages: usize) -> Transcript {
    let mut t = Transcript::with_system("You are Talaria.");
    let mut n = 0;
    while t.len() < messages {
        n += 1;
        t.push(user(&format!(
            "Question {n}: what does module {n} do? Please read it."
        )));
        let id = format!("call_{n}");
        t.push(assistant(
            "",
            &[(id.as_str(), "read_file", "{\"path\":\"src/lib.rs\"}")],
        ));
        t.push(result(
            &id,
            "read_file",
            &"     1|fn example() { /* code */ }\n".repeat(8),
        ));
        t.push(assistant(
            &format!("Module {n} defines one example function."),
            &[],
        ));
    }
    t
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub(crate) async fn agent(bin: &Path, vars: &[(String, String)]) -> anyhow::Result<AgentProcess> {
    let mut agent = AgentProcess::spawn(bin, &["acp"], vars, WireFraming::NewlineDelimited).await?;
    agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await?;
    Ok(agent)
}

/// How long `session/load` of `session` takes, its replay included.
pub(crate) async fn load_time(
    client: &mut AgentProcess,
    session: &str,
    workspace: &Path,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let loaded = client
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": workspace, "mcpServers": []}),
        )
        .await?;
    let took = started.elapsed();
    anyhow::ensure!(loaded.is_object(), "load of {session} failed: {loaded}");
    Ok(took)
}

/// How long loading the 10,000-message session takes, its replay included.
async fn replay_time(client: &mut AgentProcess, workspace: &Path) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let loaded = client
        .call(
            "session/load",
            json!({"sessionId": "big", "cwd": workspace, "mcpServers": []}),
        )
        .await?;
    let replay_10k = started.elapsed();
    anyhow::ensure!(loaded.is_object(), "load failed: {loaded}");
    let replayed = client
        .updates()
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .count();
    anyhow::ensure!(replayed == 2500, "replayed {replayed} user messages");
    Ok(replay_10k)
}

/// Memory per idle loaded session: resume 50 small sessions, compare resident memory.
async fn rss_per_idle_session(
    client: &mut AgentProcess,
    workspace: &Path,
) -> anyhow::Result<Option<f64>> {
    let pid = client.pid().context("pid")?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = vm_rss_kib(pid);
    for i in 0..50 {
        client
            .call(
                "session/resume",
                json!({"sessionId": format!("s{i:05}"), "cwd": workspace, "mcpServers": []}),
            )
            .await?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = vm_rss_kib(pid);
    Ok(before
        .zip(after)
        .map(|(before, after)| after.saturating_sub(before) as f64 / 50.0))
}

/// Runs every durable-session measurement with a private `TALARIA_HOME` (`home`).
pub async fn measure(
    bin: &Path,
    vars: &[(String, String)],
    home: &Path,
    workspace: &Path,
) -> anyhow::Result<SessionFigures> {
    let store = SqliteStore::open(&home.join("state.db")).context("store")?;
    let appends = timed_appends(&store, workspace)?;
    // Appends on a small store, then on one grown to 200,000 entries.
    let append_at_1k = append_cost(&store, "at-1k", workspace, 500)?;
    to_load_and_list(&store, workspace)?;
    let mut client = agent(bin, vars).await?;
    let list_1k = list_time(&mut client).await?;
    let load_2k = load_time(&mut client, "two-k", workspace).await?;
    client.close_stdin();
    let _ = client.wait_exit(Duration::from_secs(10)).await;
    grow(&store, workspace, 200_000)?;
    let append_at_200k = append_cost(&store, "at-200k", workspace, 500)?;
    // A 10,000-message session, and 10,000 sessions to list.
    store.create(&meta("big", workspace, 2))?;
    let big = conversation(10_000);
    for chunk in big.entries().chunks(500) {
        store.append("big", chunk)?;
    }
    for i in 1000..10_000 {
        store.create(&meta(&format!("s{i:05}"), workspace, 10 + i))?;
    }
    let small = conversation(20);
    for i in 0..50 {
        store.append(&format!("s{i:05}"), small.entries())?;
    }
    drop(store);

    let mut client = agent(bin, vars).await?;
    let replay_10k = replay_time(&mut client, workspace).await?;
    let list_10k = list_time(&mut client).await?;
    let rss_per_idle_session_kb = rss_per_idle_session(&mut client, workspace).await?;
    client.close_stdin();
    let _ = client.wait_exit(Duration::from_secs(10)).await;
    Ok(SessionFigures {
        append_p50: percentile(&appends, 0.5),
        append_p99: percentile(&appends, 0.99),
        append_at_1k,
        append_at_200k,
        load_2k,
        replay_10k,
        list_1k,
        list_10k,
        rss_per_idle_session_kb,
    })
}
