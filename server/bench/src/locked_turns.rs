//! Answers while another program holds SQLite's write lock for the whole round: 40 sessions
//! each taking turns of 49 tool calls (1,960 file reads, then an answer each), against the
//! same round with the store free. Each round uses 40 fresh sessions (the same history), and
//! the n-th answer to come with the store locked is compared with the n-th without: each
//! is held to 2.5 s more than its healthy counterpart (the journal's deadline is 1.5 s).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use talaria_harness::{AgentProcess, MockReply, WireFraming};

use super::Env;
use super::waiting::LockHolder;

pub const SESSIONS: usize = 40;
pub const CALLS_PER_TURN: usize = 49;
/// What each answer may add to its healthy counterpart.
pub const TARGET: Duration = Duration::from_millis(2500);

pub struct LockedTurns {
    /// When each answer came, from the round's start, in order: free, then locked.
    pub free: Vec<Duration>,
    pub locked: Vec<Duration>,
}

impl LockedTurns {
    /// The most an answer added to its healthy counterpart.
    pub fn worst_added(&self) -> Duration {
        self.locked
            .iter()
            .zip(&self.free)
            .map(|(locked, free)| locked.saturating_sub(*free))
            .max()
            .unwrap_or_default()
    }
}

pub async fn measure(agent: &Path, env: &Env) -> anyhow::Result<LockedTurns> {
    let home = tempfile::tempdir()?;
    let cwd = tempfile::tempdir()?;
    std::fs::write(cwd.path().join("notes.txt"), "the notes\n")?;
    for _ in 0..2 {
        for call in 0..SESSIONS * CALLS_PER_TURN {
            env.mock.push(MockReply::tool_call(
                &format!("c{call}"),
                "read_file",
                json!({"path": "notes.txt"}),
            ));
        }
        for n in 0..SESSIONS {
            env.mock.push(MockReply::text(&[&format!("answer {n}")]));
        }
    }
    let vars = env.vars_with_home(home.path());
    let mut agent =
        AgentProcess::spawn_as(agent, &["acp"], &vars, WireFraming::NewlineDelimited, None).await?;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await?;
    let mut sessions = Vec::new();
    for _ in 0..2 * SESSIONS {
        let created = agent
            .call("session/new", json!({"cwd": cwd.path(), "mcpServers": []}))
            .await?;
        sessions.push(created["sessionId"].as_str().context("id")?.to_string());
    }
    let (free, held) = sessions.split_at(SESSIONS);
    let free = round(&mut agent, free).await?;
    let lock = LockHolder::take(&home.path().join("state.db"))?;
    let locked = round(&mut agent, held).await?;
    drop(lock);
    agent.close_stdin();
    let _ = agent.wait_exit(Duration::from_secs(30)).await;
    Ok(LockedTurns { free, locked })
}

/// Prompts every session at once; when each answer came, in order.
async fn round(agent: &mut AgentProcess, sessions: &[String]) -> anyhow::Result<Vec<Duration>> {
    let started = Instant::now();
    let mut ids = Vec::new();
    for session in sessions {
        let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": "go on"}]});
        ids.push(agent.start_request("session/prompt", prompt).await?);
    }
    let mut answered = Vec::new();
    for _ in 0..ids.len() {
        let answer = agent
            .wait_for(Duration::from_secs(600), |m| {
                m.get("method").is_none() && m["id"].as_i64().is_some_and(|id| ids.contains(&id))
            })
            .await?;
        anyhow::ensure!(
            answer["result"]["stopReason"] == "end_turn",
            "a turn failed: {answer}"
        );
        answered.push(started.elapsed());
    }
    Ok(answered)
}
