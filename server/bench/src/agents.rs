//! What Talaria adds to another agent's turn (`delegate_task {agent}`), with the scripted
//! ACP child: per forwarded update (a delegation whose child streams N words, less one whose
//! child streams none, divided by N), and at the child's start (from the call's start to its
//! first forwarded word, less the same child started and asked directly), broken down: the
//! session's model call until the `delegate_task` card, the call's start until the agent's
//! session is announced (its checkpoint), and from there the child's start and first word
//! (through the helper, `initialize`, `session/new`, the prompt, the forwarding); and a second
//! delegation's, on the kept child.

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
    /// The prompt until the `delegate_task` card (the session's own model call).
    pub to_card: f64,
    /// The card until the agent's session is announced (approval, checkpoint).
    pub to_announced: f64,
    /// The announcement until the first word: the child started and asked.
    pub to_first_word: f64,
    /// A second delegation's announcement until its first word, on the kept child.
    pub kept_first_word: f64,
    pub updates: usize,
    pub runs: usize,
}

fn child_bin() -> std::path::PathBuf {
    talaria_harness::binary::workspace_bin("talaria-harness", "talaria-acp-child")
}

/// A home whose config names the scripted child, playing two prompts of `words` words.
fn home_with_child(words: usize) -> anyhow::Result<tempfile::TempDir> {
    let home = tempfile::tempdir()?;
    let steps: Vec<Value> = (0..words)
        .map(|i| json!({"say": format!("w{i} ")}))
        .collect();
    let script = home.path().join("script.json");
    std::fs::write(&script, json!({"prompts": [steps, steps]}).to_string())?;
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

/// When a delegated turn's steps came, in ms from its prompt.
#[derive(Debug, Clone, Copy, Default)]
struct Timeline {
    card: f64,
    announced: f64,
    first: f64,
    whole: f64,
}

/// The session's model: a delegation to the child, then its answer.
fn script_delegation(env: &Env) {
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
}

/// One session's delegated turns (`turns` of them, each `words` words): each turn's
/// timeline.
async fn delegated(
    agent: &Path,
    env: &Env,
    words: usize,
    turns: usize,
) -> anyhow::Result<Vec<Timeline>> {
    let home = home_with_child(words)?;
    let workspace = tempfile::tempdir()?;
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
    let mut timelines = Vec::new();
    for _ in 0..turns {
        script_delegation(env);
        timelines.push(turn(&mut process, &session, words).await?);
    }
    Ok(timelines)
}

/// One delegated turn of `session` and when its steps came.
async fn turn(process: &mut AgentProcess, session: &str, words: usize) -> anyhow::Result<Timeline> {
    let wait = std::time::Duration::from_secs(60);
    let sent = Instant::now();
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1000.0;
    let id = process
        .start_request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
        )
        .await?;
    let mut timeline = Timeline::default();
    process
        .wait_for(wait, |m| {
            m["params"]["update"]["sessionUpdate"] == "tool_call"
        })
        .await?;
    timeline.card = ms(sent);
    process
        .wait_for(wait, |m| {
            m["params"]["update"]["sessionUpdate"] == "subagent_update"
        })
        .await?;
    timeline.announced = ms(sent);
    if words > 0 {
        process
            .wait_for(wait, |m| m["params"]["update"]["content"]["text"] == "w0 ")
            .await?;
    }
    timeline.first = ms(sent);
    process.wait_response(id, wait).await?;
    timeline.whole = ms(sent);
    Ok(timeline)
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
    let mut per_update = Vec::new();
    let (mut start, mut baseline) = (Vec::new(), Vec::new());
    let (mut card, mut announced, mut first_word, mut kept) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let none = delegated(agent, env, 0, 1).await?[0].whole;
        let many = delegated(agent, env, updates, 1).await?[0].whole;
        per_update.push((many - none) / updates as f64);
        let own = direct(1).await?;
        let turns = delegated(agent, env, 1, 2).await?;
        let (one, again) = (turns[0], turns[1]);
        start.push(one.first - own);
        baseline.push(own);
        card.push(one.card);
        announced.push(one.announced - one.card);
        first_word.push(one.first - one.announced);
        kept.push(again.first - again.announced);
    }
    Ok(AgentFigures {
        per_update: median(&mut per_update).0,
        start_overhead: median(&mut start).0,
        direct_start: median(&mut baseline).0,
        to_card: median(&mut card).0,
        to_announced: median(&mut announced).0,
        to_first_word: median(&mut first_word).0,
        kept_first_word: median(&mut kept).0,
        updates,
        runs,
    })
}
