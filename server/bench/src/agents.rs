//! What Talaria adds to another agent's turn (`delegate_task {agent}`), with the scripted
//! ACP child: per forwarded update (a delegation whose child streams N words, less one whose
//! child streams none, divided by N), and at the child's start (from the call's start to its
//! first forwarded word, less the same child started and asked directly).

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply, MockToolCall, WireFraming};

use super::{Env, median};

/// The medians over the runs, in ms.
pub struct AgentFigures {
    pub per_update: f64,
    pub start_overhead: f64,
    pub direct_start: f64,
    pub updates: usize,
    pub runs: usize,
}

fn child_bin() -> std::path::PathBuf {
    talaria_harness::binary::workspace_bin("talaria-harness", "talaria-acp-child")
}

/// A home whose config names the scripted child, playing one prompt of `words` words.
fn home_with_child(words: usize) -> anyhow::Result<tempfile::TempDir> {
    let home = tempfile::tempdir()?;
    let steps: Vec<Value> = (0..words)
        .map(|i| json!({"say": format!("w{i} ")}))
        .collect();
    let script = home.path().join("script.json");
    std::fs::write(&script, json!({"prompts": [steps]}).to_string())?;
    let talaria = home.path().join("talaria");
    std::fs::create_dir_all(&talaria)?;
    std::fs::write(
        talaria.join("config.toml"),
        format!(
            "[agents.child]\ncommand = \"{}\"\ntools = \"acp\"\nenv = {{ TALARIA_CHILD_SCRIPT = \"{}\" }}\n",
            child_bin().display(),
            script.display()
        ),
    )?;
    Ok(home)
}

/// One delegated turn: from the prompt to the first forwarded word, and to the answer (ms).
async fn delegated(agent: &Path, env: &Env, words: usize) -> anyhow::Result<(f64, f64)> {
    let home = home_with_child(words)?;
    let workspace = tempfile::tempdir()?;
    env.mock.push(MockReply::ToolCalls {
        calls: vec![MockToolCall {
            id: "d1".into(),
            name: "delegate_task".into(),
            arguments: json!({"goal": "go", "agent": "child"}).to_string(),
        }],
        text: None,
        fragment_chars: None,
        usage: None,
        delay_ms: 0,
    });
    env.mock.push(MockReply::text(&["done"]));
    let vars = env.vars_with_home(&home.path().join("talaria"));
    let mut process =
        AgentProcess::spawn(agent, &["acp"], &vars, WireFraming::NewlineDelimited).await?;
    // A client that shows subagents: the child's words are forwarded as they come.
    let caps = json!({"protocolVersion": 1, "clientCapabilities": {"subagents": {}}});
    process.call("initialize", caps).await?;
    let created = process
        .call(
            "session/new",
            json!({"cwd": workspace.path(), "mcpServers": []}),
        )
        .await?;
    let session = created["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let sent = Instant::now();
    let id = process
        .start_request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
        )
        .await?;
    let mut first = None;
    if words > 0 {
        process
            .wait_for(std::time::Duration::from_secs(60), |m| {
                m["params"]["update"]["content"]["text"] == "w0 "
            })
            .await?;
        first = Some(sent.elapsed().as_secs_f64() * 1000.0);
    }
    process
        .wait_response(id, std::time::Duration::from_secs(60))
        .await?;
    let whole = sent.elapsed().as_secs_f64() * 1000.0;
    Ok((first.unwrap_or(whole), whole))
}

/// The child started and asked directly: to its first word (ms).
async fn direct(words: usize) -> anyhow::Result<f64> {
    let home = home_with_child(words)?;
    let vars = vec![(
        "TALARIA_CHILD_SCRIPT".to_string(),
        home.path().join("script.json").display().to_string(),
    )];
    let started = Instant::now();
    let mut child =
        AgentProcess::spawn(&child_bin(), &[], &vars, WireFraming::NewlineDelimited).await?;
    child
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await?;
    let created = child
        .call("session/new", json!({"cwd": home.path(), "mcpServers": []}))
        .await?;
    let session = created["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let id = child
        .start_request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
        )
        .await?;
    child
        .wait_for(std::time::Duration::from_secs(60), |m| {
            m.to_string().contains("w0 ")
        })
        .await?;
    let first = started.elapsed().as_secs_f64() * 1000.0;
    child
        .wait_response(id, std::time::Duration::from_secs(60))
        .await?;
    Ok(first)
}

pub async fn measure(agent: &Path, env: &Env, runs: usize) -> anyhow::Result<AgentFigures> {
    let updates = 2000;
    let (mut per_update, mut start, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (_, none) = delegated(agent, env, 0).await?;
        let (first, many) = delegated(agent, env, updates).await?;
        per_update.push((many - none) / updates as f64);
        let own = direct(1).await?;
        let (first_one, _) = delegated(agent, env, 1).await?;
        start.push(first_one - own);
        baseline.push(own);
        let _ = first;
    }
    Ok(AgentFigures {
        per_update: median(&mut per_update).0,
        start_overhead: median(&mut start).0,
        direct_start: median(&mut baseline).0,
        updates,
        runs,
    })
}
