//! Record a scenario once against a model (or the [`crate::MockLlm`]), replay it forever with
//! none: [`Tape`] says how `talaria acp` runs, [`run`] drives one scenario and returns what the
//! client saw, ready to compare between a recording and its replays.

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::{AgentProcess, WireFraming};

/// How the agent meets the cassettes in `dir`.
#[derive(Debug, Clone)]
pub enum Tape {
    /// Record each session's model and tool calls (`--record`).
    Record(PathBuf),
    /// Serve them back with no model (`--replay`); at the recorded pace when `recorded_pace`,
    /// and with the tools served from the cassette too (nothing runs) when `serve_tools`.
    Replay {
        dir: PathBuf,
        recorded_pace: bool,
        serve_tools: bool,
    },
}

impl Tape {
    /// A plain replay: as fast as possible, tools run for real.
    pub fn replay(dir: impl Into<PathBuf>) -> Self {
        Self::Replay {
            dir: dir.into(),
            recorded_pace: false,
            serve_tools: false,
        }
    }

    /// The arguments after `talaria`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["acp".to_string()];
        match self {
            Self::Record(dir) => {
                args.extend(["--record".into(), dir.display().to_string()]);
            }
            Self::Replay {
                dir,
                recorded_pace,
                serve_tools,
            } => {
                args.extend(["--replay".into(), dir.display().to_string()]);
                if *recorded_pace {
                    args.extend(["--replay-timing".into(), "recorded".into()]);
                }
                if *serve_tools {
                    args.push("--replay-tools".into());
                }
            }
        }
        args
    }
}

/// What the client saw of a run: every `session/update` and every response, in order, with
/// what differs between runs written the same way each time (the workspace as
/// `<workspace>`, session ids as `<session>`, request ids dropped).
pub fn client_view(agent: &AgentProcess, workspace: &Path) -> Vec<Value> {
    let workspace = workspace.display().to_string();
    agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/update" || m.get("result").is_some())
        .map(|message| {
            let mut message = message.clone();
            if let Some(map) = message.as_object_mut() {
                map.remove("id");
            }
            normalise(&mut message, &workspace);
            message
        })
        .collect()
}

fn normalise(value: &mut Value, workspace: &str) {
    match value {
        Value::String(text) => *text = text.replace(workspace, "<workspace>"),
        Value::Array(items) => items.iter_mut().for_each(|v| normalise(v, workspace)),
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                if key == "sessionId" {
                    *item = Value::String("<session>".into());
                } else {
                    normalise(item, workspace);
                }
            }
        }
        _ => {}
    }
}

/// A scenario: what a client does with the agent (it is started and `initialize`d).
pub type Scenario = for<'a> fn(&'a mut AgentProcess, &'a Path) -> BoxFuture<'a, anyhow::Result<()>>;

/// Runs `scenario` against `talaria` (at `program`) meeting `tape`, in `workspace`, with
/// `env`; ends the agent and returns what the client saw.
pub async fn run(
    program: &Path,
    tape: &Tape,
    env: &[(String, String)],
    workspace: &Path,
    scenario: Scenario,
) -> anyhow::Result<Vec<Value>> {
    let args = tape.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut agent = AgentProcess::spawn(program, &args, env, WireFraming::NewlineDelimited).await?;
    agent
        .call(
            "initialize",
            serde_json::json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await?;
    scenario(&mut agent, workspace).await?;
    agent.close_stdin();
    let status = agent.wait_exit(std::time::Duration::from_secs(20)).await?;
    anyhow::ensure!(status.success(), "the agent exited with {status}");
    Ok(client_view(&agent, workspace))
}
