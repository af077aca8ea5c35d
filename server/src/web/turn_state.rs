//! Where each session's turn stands, as the transport sees it go by: a `session/prompt` the
//! client sent and the agent has not answered is a running turn; a permission question or a
//! form the agent asked and the client has not answered means the turn waits for the user.
//! This is what a resumed (or refused) stream reports as `_meta["acp/turnState"]` (the
//! durable-transport draft's shim for ACP v1), so a client learns whether its turn survived.
//! A client attached to a session another client prompts learns of that turn from the
//! `session_info_update`s whose `_meta["talaria/turn"]` says where it stands.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::rpc_id::id_key;

/// The `_meta` key of a turn's state.
pub const META_KEY: &str = "acp/turnState";

/// Agent requests that wait for the user, not for the client's machinery.
const QUESTIONS: &[&str] = &["session/request_permission", "elicitation/create"];

#[derive(Debug, Default)]
struct Turn {
    /// The open `session/prompt` requests (their ids), oldest first.
    prompts: Vec<Value>,
    /// Questions asked and not answered (request id keys).
    questions: HashSet<String>,
    /// How the last answered prompt ended.
    last_stop: Option<Value>,
    /// Another client's turn runs (who prompted it), as this client was told.
    others: Option<Value>,
}

/// The `_meta` key of another client's turn's state (see `acp/audience.rs`).
const OTHERS_TURN_KEY: &str = "talaria/turn";

/// Every session's turn on one connection.
#[derive(Debug, Default)]
pub struct TurnStates {
    turns: HashMap<String, Turn>,
    /// Prompt request ids (keys) and their session.
    prompt_of: HashMap<String, String>,
    /// Question request ids (keys) and their session.
    question_of: HashMap<String, String>,
    /// The session whose turn moved last.
    latest: Option<String>,
}

impl TurnStates {
    /// A message the client sent.
    pub fn client_sent(&mut self, message: &Value) {
        let key = id_key(&message["id"]);
        match (message["method"].as_str(), key) {
            (Some("session/prompt"), Some(key)) => {
                let Some(session) = message["params"]["sessionId"].as_str() else {
                    return;
                };
                self.prompt_of.insert(key, session.to_string());
                self.turns
                    .entry(session.to_string())
                    .or_default()
                    .prompts
                    .push(message["id"].clone());
                self.latest = Some(session.to_string());
            }
            // The answer to one of the agent's requests.
            (None, Some(key)) => self.answered(&key),
            _ => {}
        }
    }

    /// A message the agent sent (parsed).
    pub fn agent_sent(&mut self, message: &Value) {
        let key = id_key(&message["id"]);
        match (message["method"].as_str(), key) {
            (Some(method), Some(key)) if QUESTIONS.contains(&method) => {
                let Some(session) = message["params"]["sessionId"].as_str() else {
                    return;
                };
                self.question_of.insert(key.clone(), session.to_string());
                self.turns
                    .entry(session.to_string())
                    .or_default()
                    .questions
                    .insert(key);
            }
            (Some("session/update"), None) => self.others_turn(message),
            (Some("$/cancel_request"), _) => {
                if let Some(key) = id_key(&message["params"]["requestId"]) {
                    self.answered(&key);
                }
            }
            (None, Some(key)) => {
                let Some(session) = self.prompt_of.remove(&key) else {
                    return;
                };
                let turn = self.turns.entry(session.clone()).or_default();
                turn.prompts
                    .retain(|id| id_key(id).as_deref() != Some(&key));
                turn.last_stop = Some(
                    message["result"]["stopReason"]
                        .as_str()
                        .map_or_else(|| json!("error"), |s| json!(s)),
                );
                self.latest = Some(session);
            }
            _ => {}
        }
    }

    /// Another client's turn started or ended, as an update said.
    fn others_turn(&mut self, message: &Value) {
        let said = &message["params"]["update"]["_meta"][OTHERS_TURN_KEY];
        let Some(session) = message["params"]["sessionId"].as_str() else {
            return;
        };
        if !said.is_object() {
            return;
        }
        let turn = self.turns.entry(session.to_string()).or_default();
        if said["state"] == "running" {
            turn.others = Some(said["promptedBy"].clone());
        } else {
            turn.others = None;
            turn.last_stop = Some(said.get("stopReason").cloned().unwrap_or(json!("error")));
        }
        self.latest = Some(session.to_string());
    }

    fn answered(&mut self, key: &str) {
        if let Some(session) = self.question_of.remove(key)
            && let Some(turn) = self.turns.get_mut(&session)
        {
            turn.questions.remove(key);
        }
    }

    /// `session`'s turn: `running` (with the prompt's request id), `requires_action` (a
    /// question waits for the user), or `idle` (with how the last turn ended).
    pub fn of(&self, session: &str) -> Value {
        let Some(turn) = self.turns.get(session) else {
            return json!({"state": "idle"});
        };
        let state = if !turn.questions.is_empty() {
            "requires_action"
        } else if !turn.prompts.is_empty() || turn.others.is_some() {
            "running"
        } else {
            "idle"
        };
        let mut said = json!({"state": state, "sessionId": session});
        if let Some(prompt) = turn.prompts.first() {
            said["promptRequestId"] = prompt.clone();
        } else if let Some(by) = &turn.others {
            said["promptedBy"] = by.clone();
        } else if let Some(stop) = &turn.last_stop {
            said["stopReason"] = stop.clone();
        }
        said
    }

    /// For a stream of no one session (the connection's): the turn of the session that
    /// moved last, if any.
    pub fn latest(&self) -> Value {
        self.latest
            .as_deref()
            .map_or_else(|| json!({"state": "idle"}), |session| self.of(session))
    }
}

/// Whether an agent message may move a turn (so is worth parsing on a WebSocket, where
/// nothing else needs it parsed): anything but a notification other than a cancel or the
/// state of another client's turn (a small `session_info_update`).
pub fn may_move_a_turn(text: &str) -> bool {
    !text.starts_with(r#"{"jsonrpc":"2.0","method":"#)
        || text.starts_with(r#"{"jsonrpc":"2.0","method":"$/cancel_request""#)
        || (text.len() < 1024 && text.contains(OTHERS_TURN_KEY))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_runs_until_answered_and_a_question_waits_for_the_user() {
        let mut turns = TurnStates::default();
        assert_eq!(turns.of("s")["state"], "idle");
        turns.client_sent(
            &json!({"id": 3, "method": "session/prompt", "params": {"sessionId": "s"}}),
        );
        assert_eq!(turns.of("s")["state"], "running");
        assert_eq!(turns.of("s")["promptRequestId"], 3);
        turns.agent_sent(
            &json!({"id": 0, "method": "session/request_permission", "params": {"sessionId": "s"}}),
        );
        assert_eq!(turns.of("s")["state"], "requires_action");
        turns.client_sent(&json!({"id": 0, "result": {"outcome": {"outcome": "cancelled"}}}));
        assert_eq!(turns.of("s")["state"], "running");
        turns.agent_sent(
            &json!({"id": 1, "method": "elicitation/create", "params": {"sessionId": "s"}}),
        );
        turns.agent_sent(&json!({"method": "$/cancel_request", "params": {"requestId": 1}}));
        assert_eq!(turns.of("s")["state"], "running");
        turns.agent_sent(&json!({"id": 3, "result": {"stopReason": "end_turn"}}));
        assert_eq!(
            turns.of("s"),
            json!({"state": "idle", "sessionId": "s", "stopReason": "end_turn"})
        );
        assert_eq!(turns.latest(), turns.of("s"));
        // Another session's answer with the same id does not end this one's turn.
        turns.client_sent(
            &json!({"id": 9, "method": "session/prompt", "params": {"sessionId": "t"}}),
        );
        turns.agent_sent(&json!({"id": 8, "result": {}}));
        assert_eq!(turns.of("t")["state"], "running");
        assert!(may_move_a_turn(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        // Another client's turn, told to this one.
        let others = |state: Value| json!({"method": "session/update", "params": {"sessionId": "u", "update": {"sessionUpdate": "session_info_update", "_meta": {"talaria/turn": state}}}});
        let running = others(json!({"state": "running", "promptedBy": "client-2"}));
        assert!(may_move_a_turn(&running.to_string()));
        turns.agent_sent(&running);
        assert_eq!(turns.of("u")["state"], "running");
        assert_eq!(turns.of("u")["promptedBy"], "client-2");
        turns.agent_sent(&others(json!({"state": "idle", "stopReason": "cancelled"})));
        assert_eq!(turns.of("u")["stopReason"], "cancelled");
        assert!(!may_move_a_turn(
            r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#
        ));
    }
}
