//! A client of one agent process that keeps what it sent, so what it was told can be read
//! as promises ([`crate::ledger`]), and answers the agent's questions as a user would.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::AgentProcess;

use crate::ledger::Ledger;

/// How long one answer may take before the client gives up on it.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// An agent process and what was sent to it.
pub struct Client {
    pub agent: AgentProcess,
    sent: Ledger,
    /// The option a permission question is answered with (`allow_once`, `keep_planning`, …).
    pub choose: String,
    /// How long a load is tried again while the store answers "try again later".
    pub load_patience: Duration,
}

impl Client {
    pub fn new(agent: AgentProcess) -> Client {
        Client {
            agent,
            sent: Ledger::default(),
            choose: "allow_once".into(),
            load_patience: ANSWER_WITHIN,
        }
    }

    /// Sends a request; its id.
    pub async fn start(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        let id = self.agent.start_request(method, params.clone()).await?;
        self.sent.sent(id, method, &params);
        Ok(id)
    }

    /// Waits for request `id`'s answer, answering the agent's questions meanwhile.
    pub async fn finish(&mut self, id: i64) -> anyhow::Result<Value> {
        let choose = self.choose.clone();
        self.agent
            .drive(id, ANSWER_WITHIN, move |method, params| {
                Ok(Some(answer_question(method, params, &choose)))
            })
            .await
    }

    /// Sends a request and waits for its answer.
    pub async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.start(method, params).await?;
        self.finish(id).await
    }

    /// `session/prompt` with one text block; the answer.
    pub async fn prompt(&mut self, session: &str, text: &str) -> anyhow::Result<Value> {
        self.request("session/prompt", prompt_params(session, text))
            .await
    }

    /// `session/new` in `cwd`; the session's id.
    pub async fn new_session(&mut self, cwd: &std::path::Path) -> anyhow::Result<String> {
        let answer = self
            .request("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await?;
        answer["result"]["sessionId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("session/new failed: {answer}"))
    }

    /// `session/load` until the store answers (a restarted process may still be opening it).
    pub async fn load(&mut self, session: &str, cwd: &std::path::Path) -> anyhow::Result<Value> {
        let until = std::time::Instant::now() + self.load_patience;
        loop {
            let answer = self
                .request(
                    "session/load",
                    json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
                )
                .await?;
            if answer["error"]["code"] != -32010 || std::time::Instant::now() > until {
                // The replay is in the transcript; what waits next is the session's news.
                self.agent.drain_backlog();
                return Ok(answer);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the agent's store is open (`session/list` answers, not "try again
    /// later"): what a test does before another program takes the store's lock.
    pub async fn store_open(&mut self) -> anyhow::Result<()> {
        let until = std::time::Instant::now() + ANSWER_WITHIN;
        loop {
            let listed = self.request("session/list", json!({})).await?;
            if listed.get("result").is_some() {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < until,
                "the store never opened: {listed}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `session` streams an answer chunk holding `text`.
    pub async fn streamed(&mut self, session: &str, text: &str) -> anyhow::Result<()> {
        self.agent
            .wait_for(ANSWER_WITHIN, |m| {
                m["params"]["sessionId"] == session
                    && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                    && m["params"]["update"]["content"]["text"]
                        .as_str()
                        .is_some_and(|t| t.contains(text))
            })
            .await?;
        Ok(())
    }

    /// Waits until a tool call of `session` runs (its card is `in_progress`).
    pub async fn call_runs(&mut self, session: &str) -> anyhow::Result<()> {
        self.agent
            .wait_for(ANSWER_WITHIN, |m| {
                m["params"]["sessionId"] == session
                    && m["params"]["update"]["status"] == "in_progress"
            })
            .await?;
        Ok(())
    }

    /// A notification.
    pub async fn notify(&mut self, method: &str, params: Value) -> anyhow::Result<()> {
        self.agent.notify(method, params).await
    }

    /// The promises made to this client so far.
    pub fn ledger(&self) -> Ledger {
        let mut ledger = self.sent.clone();
        ledger.read(&self.agent.transcript);
        ledger
    }

    /// Takes every message the agent sent by now (after a crash: what it sent before it).
    pub async fn collect(&mut self) {
        self.agent.collect_remaining().await;
    }
}

/// A prompt's params.
pub fn prompt_params(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// The user's answer to a question of the agent: a permission question gets `choose` when it
/// is offered (else the first allowing option); anything else is refused.
fn answer_question(method: &str, params: &Value, choose: &str) -> Value {
    if method != "session/request_permission" {
        return json!({"outcome": {"outcome": "cancelled"}});
    }
    let options = params["options"].as_array().cloned().unwrap_or_default();
    let picked = options
        .iter()
        .find(|o| o["optionId"] == choose)
        .or_else(|| {
            options
                .iter()
                .find(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("allow")))
        })
        .or_else(|| options.first());
    match picked {
        Some(option) => {
            json!({"outcome": {"outcome": "selected", "optionId": option["optionId"]}})
        }
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}
