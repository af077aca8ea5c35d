//! The batch's side of the ACP connection to the agent: requests out, and what the agent
//! sends in answered here — permission questions by the stated policy, anything else
//! refused — and each session's updates counted (tool calls, cost).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use talaria_protocol::{Framing, IncomingMessage, Peer, PeerOptions, errors};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::choice::BadChoice;
use crate::pacing::Pacer;

/// How permission questions are answered (`--approve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Approve {
    /// Every question is refused (the safe default).
    #[default]
    Reject,
    /// Each is allowed once.
    Once,
    /// Each is allowed for the rest of the session.
    Always,
}

impl std::str::FromStr for Approve {
    type Err = BadChoice;
    fn from_str(text: &str) -> Result<Self, BadChoice> {
        match text {
            "reject" => Ok(Self::Reject),
            "once" => Ok(Self::Once),
            "always" => Ok(Self::Always),
            other => Err(BadChoice {
                flag: "--approve",
                given: other.to_string(),
                expected: "reject, once, always",
            }),
        }
    }
}

/// What a session's updates told so far.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub tool_calls: u64,
    /// The session's cost so far, as the agent reports it.
    pub cost: Option<f64>,
    pub permissions_asked: u64,
}

/// A connection to an agent, shared by the tasks that run on it.
#[derive(Clone)]
pub struct AgentLink {
    peer: Peer,
    tallies: Arc<Mutex<HashMap<String, Tally>>>,
    closed: CancellationToken,
    /// The rate limits the sessions' updates report, pacing the tasks.
    pacer: Arc<Pacer>,
}

/// A request the agent answered with an error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{method}: {message}")]
pub struct AgentError {
    pub method: String,
    pub message: String,
    /// The kind of failure when the agent says (`data.talaria.class` or `kind`).
    pub class: Option<String>,
    /// When a limit that refused the request resets, when the agent says (`data.resetsAt`,
    /// or `data.talaria.retryAfterSecs` from now).
    pub resets_at: Option<std::time::SystemTime>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AgentLink {
    /// Speaks ACP over `reader`/`writer` (the agent's output and input) and initializes.
    pub async fn connect<R, W>(reader: R, writer: W, approve: Approve) -> Result<Self, AgentError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let options = PeerOptions {
            framing: Some(Framing::NewlineDelimited),
            ..PeerOptions::default()
        };
        let connection = talaria_protocol::connect(reader, writer, options);
        let link = Self {
            peer: connection.peer.clone(),
            tallies: Arc::default(),
            closed: connection.peer.closed(),
            pacer: Arc::default(),
        };
        let answering = link.clone();
        let mut incoming = connection.incoming;
        tokio::spawn(async move {
            while let Some(message) = incoming.recv().await {
                answering.take(message, approve).await;
            }
        });
        let capabilities = json!({"protocolVersion": 1, "clientCapabilities": {},
            "clientInfo": {"name": "talaria-batch", "version": env!("CARGO_PKG_VERSION")}});
        link.call("initialize", capabilities).await?;
        Ok(link)
    }

    /// Sends a request; its result, or the agent's error.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, AgentError> {
        self.call_until(method, params, &CancellationToken::new())
            .await
    }

    /// As [`AgentLink::call`], withdrawn when `cancel` fires.
    pub async fn call_until(
        &self,
        method: &str,
        params: Value,
        cancel: &CancellationToken,
    ) -> Result<Value, AgentError> {
        self.peer
            .request(method, &params, cancel)
            .await
            .map_err(|error| {
                let data = error.data.clone().unwrap_or(Value::Null);
                let class = data["talaria"]["class"]
                    .as_str()
                    .or(data["talaria"]["kind"].as_str())
                    .map(str::to_string);
                AgentError {
                    method: method.to_string(),
                    message: error.message.clone(),
                    class,
                    resets_at: resets_at(&data),
                }
            })
    }

    pub async fn notify(&self, method: &str, params: Value) {
        self.peer.notify(method, &params).await;
    }

    /// What a session's updates told so far.
    pub fn tally(&self, session: &str) -> Tally {
        lock(&self.tallies)
            .get(session)
            .cloned()
            .unwrap_or_default()
    }

    /// Forgets a finished session's tally.
    pub fn forget(&self, session: &str) {
        lock(&self.tallies).remove(session);
    }

    /// Fires when the agent's output ends.
    pub fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }

    /// The run's pacing before the provider's limits.
    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    async fn take(&self, message: IncomingMessage, approve: Approve) {
        match message {
            IncomingMessage::Notification { method, params } if method == "session/update" => {
                self.count(&params);
            }
            IncomingMessage::Notification { .. } => {}
            IncomingMessage::Request(request) if request.method == "session/request_permission" => {
                if let Some(session) = request.params["sessionId"].as_str() {
                    lock(&self.tallies)
                        .entry(session.to_string())
                        .or_default()
                        .permissions_asked += 1;
                }
                let answer = permission_answer(&request.params, approve);
                self.peer.respond(&request.id, Ok(answer)).await;
            }
            IncomingMessage::Request(request) => {
                let refused = errors::method_not_found(&format!(
                    "{} (a batch run offers no client capabilities)",
                    request.method
                ));
                self.peer.respond::<Value>(&request.id, Err(refused)).await;
            }
        }
    }

    fn count(&self, params: &Value) {
        let Some(session) = params["sessionId"].as_str() else {
            return;
        };
        let update = &params["update"];
        let mut tallies = lock(&self.tallies);
        let tally = tallies.entry(session.to_string()).or_default();
        match update["sessionUpdate"].as_str() {
            Some("tool_call") => tally.tool_calls += 1,
            Some("usage_update") => {
                if let Some(amount) = update["cost"]["amount"].as_f64() {
                    tally.cost = Some(amount);
                }
                self.pacer.observe(update);
            }
            _ => {}
        }
    }
}

/// When the limit an error names resets: the quotas draft's `data.resetsAt`, else Talaria's
/// `data.talaria.retryAfterSecs` from now.
fn resets_at(data: &Value) -> Option<std::time::SystemTime> {
    data["resetsAt"]
        .as_str()
        .and_then(crate::pacing::parse_time)
        .or_else(|| {
            let seconds = data["talaria"]["retryAfterSecs"].as_f64()?;
            let wait = std::time::Duration::try_from_secs_f64(seconds).ok()?;
            std::time::SystemTime::now().checked_add(wait)
        })
}

/// The option of the policy's kind; refusing when the question offers none of it.
fn permission_answer(params: &Value, approve: Approve) -> Value {
    let wanted: &[&str] = match approve {
        Approve::Reject => &["reject_once", "reject_always"],
        Approve::Once => &["allow_once", "allow_always"],
        Approve::Always => &["allow_always", "allow_once"],
    };
    let options = params["options"].as_array().cloned().unwrap_or_default();
    let chosen = wanted.iter().find_map(|kind| {
        options
            .iter()
            .find(|o| o["kind"] == *kind)
            .and_then(|o| o["optionId"].as_str())
    });
    match chosen {
        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_picks_its_kind_and_refuses_when_it_is_not_offered() {
        let asked = json!({"options": [
            {"optionId": "y", "kind": "allow_once", "name": "Allow"},
            {"optionId": "a", "kind": "allow_always", "name": "Always"},
            {"optionId": "n", "kind": "reject_once", "name": "Reject"},
        ]});
        let picked = |approve| permission_answer(&asked, approve)["outcome"]["optionId"].clone();
        assert_eq!(picked(Approve::Reject), "n");
        assert_eq!(picked(Approve::Once), "y");
        assert_eq!(picked(Approve::Always), "a");
        let only_allow = json!({"options": [{"optionId": "y", "kind": "allow_once"}]});
        assert_eq!(
            permission_answer(&only_allow, Approve::Reject)["outcome"]["outcome"],
            "cancelled"
        );
    }
}
