//! Record and replay: a 50-turn session recorded against the mock (which takes its time, as a
//! model would), then replayed from its cassette with no model, as fast as possible.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::{AgentProcess, MockLlm, MockReply, WireFraming};

/// The session's turns.
const TURNS: usize = 50;

/// How long the recorded run and its replay took, first prompt to last answer.
pub(crate) struct ReplayTimes {
    pub recorded: Duration,
    pub replayed: Duration,
}

/// Runs `TURNS` prompts in one session of `talaria acp ARGS`; the time they took.
async fn turns(
    agent: &Path,
    args: &[&str],
    vars: &[(String, String)],
    cwd: &Path,
) -> anyhow::Result<Duration> {
    let mut client = AgentProcess::spawn(agent, args, vars, WireFraming::NewlineDelimited).await?;
    let session = client.start_session(cwd).await?;
    let started = Instant::now();
    for n in 0..TURNS {
        let answer = client
            .call(
                "session/prompt",
                json!({"sessionId": session, "prompt": [{"type": "text", "text": format!("turn {n}")}]}),
            )
            .await?;
        anyhow::ensure!(answer["stopReason"] == "end_turn", "turn {n}: {answer}");
    }
    let took = started.elapsed();
    client.close_stdin();
    client.wait_exit(Duration::from_secs(20)).await?;
    Ok(took)
}

pub(crate) async fn measure(
    agent: &Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    cwd: &Path,
) -> anyhow::Result<ReplayTimes> {
    let cassettes = tempfile::tempdir()?;
    let dir = cassettes.path().display().to_string();
    for n in 0..TURNS {
        mock.push(MockReply::Text {
            chunks: (0..20).map(|i| format!("answer {n} word {i} ")).collect(),
            reasoning: Vec::new(),
            delay_ms: 2,
            usage: None,
            finish_reason: None,
        });
    }
    let recorded = turns(agent, &["acp", "--record", &dir], vars, cwd).await?;
    let replayed = turns(agent, &["acp", "--replay", &dir], vars, cwd).await?;
    Ok(ReplayTimes { recorded, replayed })
}
