//! Steering's cost: from a steer's arrival to the model request that carries it while the
//! model streams text (the request in flight is ended, the next one sent), and, with no turn
//! running, a steer against a prompt (each to the model request it starts).

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use talaria_harness::{AgentProcess, MockLlm, MockReply, WireFraming};

/// The figures, in milliseconds: medians and minimums.
pub struct SteerFigures {
    pub to_request: (f64, f64),
    pub idle_steer: (f64, f64),
    pub prompt: (f64, f64),
}

const WAIT: Duration = Duration::from_secs(10);

/// Waits until the mock has `count` requests; when the last one arrived.
async fn request_arrival(mock: &MockLlm, count: usize) -> anyhow::Result<Instant> {
    anyhow::ensure!(
        mock.wait_until(WAIT, |r| r.len() >= count).await,
        "the mock saw no request {count}"
    );
    mock.requests()
        .get(count - 1)
        .and_then(|r| r.received_at)
        .context("the request's arrival")
}

fn steer_params(session: &str, text: &str) -> serde_json::Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// One run: a steer into a streaming answer, then an idle steer and a prompt.
async fn one_run(
    agent_path: &std::path::Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    cwd: &std::path::Path,
) -> anyhow::Result<(f64, f64, f64)> {
    let mut agent =
        AgentProcess::spawn(agent_path, &["acp"], vars, WireFraming::NewlineDelimited).await?;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await?;
    let session = agent
        .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .await?["sessionId"]
        .as_str()
        .context("session id")?
        .to_string();
    mock.push(MockReply::Hang {
        chunks: vec!["working".into()],
    });
    mock.push(MockReply::text(&["steered"]));
    let before = mock.requests().len();
    let id = agent
        .start_request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
        )
        .await?;
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await?;
    let sent = Instant::now();
    agent
        .start_request("_session/steering", steer_params(&session, "steer"))
        .await?;
    let to_request = request_arrival(mock, before + 2).await? - sent;
    agent.wait_response(id, WAIT).await?;

    mock.push(MockReply::text(&["idle"]));
    let sent = Instant::now();
    agent
        .start_request("_session/steering", steer_params(&session, "idle steer"))
        .await?;
    let idle_steer = request_arrival(mock, before + 3).await? - sent;
    agent
        .wait_for(WAIT, |m| m["params"]["update"]["content"]["text"] == "idle")
        .await?;
    // The steer's turn ends with no request to answer: wait until the session is idle.
    tokio::time::sleep(Duration::from_millis(50)).await;

    mock.push(MockReply::text(&["prompted"]));
    let sent = Instant::now();
    let id = agent
        .start_request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "a prompt"}]}),
        )
        .await?;
    let prompt = request_arrival(mock, before + 4).await? - sent;
    agent.wait_response(id, WAIT).await?;
    agent.close_stdin();
    agent.wait_exit(Duration::from_secs(5)).await?;
    Ok((
        crate::ms(to_request),
        crate::ms(idle_steer),
        crate::ms(prompt),
    ))
}

/// Runs `runs` times; medians and minimums.
pub async fn measure(
    agent: &std::path::Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    cwd: &std::path::Path,
    runs: usize,
) -> anyhow::Result<SteerFigures> {
    let (mut to_request, mut idle, mut prompt) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (a, b, c) = one_run(agent, mock, vars, cwd).await?;
        to_request.push(a);
        idle.push(b);
        prompt.push(c);
    }
    Ok(SteerFigures {
        to_request: crate::median(&mut to_request),
        idle_steer: crate::median(&mut idle),
        prompt: crate::median(&mut prompt),
    })
}
