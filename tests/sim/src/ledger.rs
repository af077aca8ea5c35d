//! What a client was told, read from the messages it received: each answer it got is a
//! promise about the record (an answered turn's messages, tool results and steered messages
//! are entries with the ids it was shown; an answered fork holds its parent's conversation;
//! an answered delete removed the session; an answered rewind is in the record).

use std::collections::HashMap;

use serde_json::Value;

/// One promise an answer made.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// An answer of `session` with this text, streamed as message `message` (`agent-<N>`,
    /// or `agent-<N>.<k>` for a call tried again; `entry` is N: the record entry it was
    /// expected to become, its place in the order of the session's entries). The record
    /// keeps the id with the answer, so a replay names it the same.
    Said {
        session: String,
        entry: u64,
        message: String,
        text: String,
    },
    /// Entry `entry` of `session` is a user message holding this text.
    Asked {
        session: String,
        entry: u64,
        text: String,
    },
    /// `session`'s record has the result of the tool call the client saw as `client_id`.
    ToolDone { session: String, client_id: String },
    /// A message steered into a running turn (answered `injected`) is in `session`'s record.
    Steered { session: String, text: String },
    /// `fork` is a copy of `parent`: it holds these of the parent's promises (on its path
    /// when forked), as its own.
    Forked {
        parent: String,
        fork: String,
        holds: Vec<Fact>,
    },
    /// `session` was deleted: it loads no more.
    Deleted { session: String },
    /// `session` was rewound (`restore_files`: with its files).
    Rewound {
        session: String,
        /// The user message the conversation was cut before (`beforeMessage`): entries from
        /// it on left the path.
        cut: Option<u64>,
        restore_files: bool,
        restored: Vec<String>,
        /// Files the answer said could not be put back.
        failed: Vec<String>,
    },
    /// `session`'s context was compacted: its record has a summary.
    Compacted { session: String },
    /// `session` is absent, or holds all of these (a delete or fork that was not answered).
    WholeOrGone { session: String, holds: Vec<Fact> },
    /// Every session forked from `parent` that exists starts with exactly these entries (the
    /// parent's path when it was forked, as JSON): a fork is whole or absent.
    CopiesOf { parent: String, path: Vec<String> },
}

impl Fact {
    /// The session the promise is about.
    pub fn session(&self) -> &str {
        match self {
            Fact::Said { session, .. }
            | Fact::Asked { session, .. }
            | Fact::ToolDone { session, .. }
            | Fact::Steered { session, .. }
            | Fact::Deleted { session }
            | Fact::Rewound { session, .. }
            | Fact::Compacted { session }
            | Fact::WholeOrGone { session, .. } => session,
            Fact::Forked { fork, .. } => fork,
            Fact::CopiesOf { parent, .. } => parent,
        }
    }

    /// Whether the promise says the session exists.
    pub fn requires_session(&self) -> bool {
        !matches!(
            self,
            Fact::Deleted { .. } | Fact::WholeOrGone { .. } | Fact::CopiesOf { .. }
        )
    }

    /// The same promise about `session` (a fork's copy of its parent's).
    fn moved_to(&self, session: &str) -> Fact {
        let mut fact = self.clone();
        match &mut fact {
            Fact::Said { session: s, .. }
            | Fact::Asked { session: s, .. }
            | Fact::ToolDone { session: s, .. }
            | Fact::Steered { session: s, .. } => *s = session.to_string(),
            _ => {}
        }
        fact
    }
}

/// What one client sent (by request id) and was told.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// Requests sent, by id: method and params.
    pub sent: HashMap<i64, (String, Value)>,
    /// The promises, in the order they were made.
    pub facts: Vec<Fact>,
}

/// What a session streamed since its last answer, not yet promised.
#[derive(Default)]
struct Streamed {
    /// `agent-<entry>` chunks, by message id, in order.
    said: Vec<(String, String)>,
    /// `user-<entry>` chunks (steered messages echoed), by entry.
    asked: Vec<(u64, String)>,
    tools_done: Vec<String>,
    /// Cards that are not the model's tool calls (the plan hand-over's question).
    not_calls: Vec<String>,
    compacted: bool,
}

impl Streamed {
    fn said(&mut self, message: &str, text: &str) {
        match self.said.iter_mut().find(|(m, _)| m == message) {
            Some((_, all)) => all.push_str(text),
            None => self.said.push((message.to_string(), text.to_string())),
        }
    }

    fn asked(&mut self, entry: u64, text: &str) {
        match self.asked.iter_mut().find(|(e, _)| *e == entry) {
            Some((_, all)) => all.push_str(text),
            None => self.asked.push((entry, text.to_string())),
        }
    }
}

/// The entry an `agent-<N>` / `user-<N>` message id names (`agent-<N>.<k>`: N).
pub fn entry_of(message_id: &str, prefix: &str) -> Option<u64> {
    let number = message_id.strip_prefix(prefix)?;
    number.split('.').next()?.parse().ok()
}

impl Ledger {
    /// Notes a request sent with `id`.
    pub fn sent(&mut self, id: i64, method: &str, params: &Value) {
        self.sent.insert(id, (method.to_string(), params.clone()));
    }

    /// The promises the messages of `transcript` (everything the client received, in order)
    /// made, given what was sent; replaces those read before.
    pub fn read(&mut self, transcript: &[Value]) {
        let mut streams: HashMap<String, Streamed> = HashMap::new();
        let mut facts = Vec::new();
        for message in transcript {
            if message["method"] == "session/update" {
                let session = message["params"]["sessionId"].as_str().unwrap_or_default();
                note_update(
                    streams.entry(session.to_string()).or_default(),
                    &message["params"]["update"],
                );
                continue;
            }
            if message.get("method").is_some() {
                continue;
            }
            let Some((method, params)) = message["id"].as_i64().and_then(|id| self.sent.get(&id))
            else {
                continue;
            };
            answered(method, params, message, &mut streams, &mut facts);
        }
        self.facts = facts;
    }

    /// The live promises about `session` (those of a deleted session are void).
    pub fn about(&self, session: &str) -> Vec<&Fact> {
        let about: Vec<&Fact> = self
            .facts
            .iter()
            .filter(|f| f.session() == session)
            .collect();
        match about.iter().find(|f| matches!(f, Fact::Deleted { .. })) {
            Some(deleted) => vec![*deleted],
            None => about,
        }
    }
}

fn note_update(stream: &mut Streamed, update: &Value) {
    let kind = update["sessionUpdate"].as_str().unwrap_or_default();
    let id = update["messageId"].as_str().unwrap_or_default();
    let text = update["content"]["text"].as_str().unwrap_or_default();
    match kind {
        "agent_message_chunk" if entry_of(id, "agent-").is_some() => stream.said(id, text),
        "user_message_chunk" => {
            if let Some(entry) = entry_of(id, "user-") {
                stream.asked(entry, text);
            }
        }
        "tool_call_update" | "tool_call" => {
            if update["name"] == "plan"
                && let Some(call) = update["toolCallId"].as_str()
            {
                stream.not_calls.push(call.to_string());
            }
            let status = update["status"].as_str().unwrap_or_default();
            if matches!(status, "completed" | "failed")
                && let Some(call) = update["toolCallId"].as_str()
            {
                stream.tools_done.push(call.to_string());
            }
        }
        "compaction_update" if update["status"] == "completed" => stream.compacted = true,
        _ => {}
    }
}

/// The promises an answer to `method` makes.
fn answered(
    method: &str,
    params: &Value,
    answer: &Value,
    streams: &mut HashMap<String, Streamed>,
    facts: &mut Vec<Fact>,
) {
    let session = params["sessionId"].as_str().unwrap_or_default().to_string();
    let result = &answer["result"];
    match method {
        "session/prompt" => {
            let stream = streams.remove(&session).unwrap_or_default();
            promise_streamed(&session, stream, facts);
            if let Some(entry) = result["_meta"]["userMessageId"]
                .as_str()
                .and_then(|id| entry_of(id, "user-"))
            {
                let text = prompt_text(params);
                if !text.starts_with('/') {
                    facts.push(Fact::Asked {
                        session,
                        entry,
                        text,
                    });
                }
            }
        }
        "session/load" => {
            // A replay repeats what the record holds: no new promise, but nothing pending.
            streams.remove(&session);
        }
        "_session/steering" if result["outcome"] == "injected" => {
            facts.push(Fact::Steered {
                session,
                text: prompt_text(params),
            });
        }
        "session/fork" => {
            if let Some(fork) = result["sessionId"].as_str() {
                let holds = on_path(facts, &session)
                    .into_iter()
                    .map(|f| f.moved_to(fork))
                    .collect();
                facts.push(Fact::Forked {
                    parent: session,
                    fork: fork.to_string(),
                    holds,
                });
            }
        }
        "session/delete" if answer.get("result").is_some() => {
            // Voids the session's promises (`live` facts leave them out).
            facts.push(Fact::Deleted { session });
        }
        "_session/rewind" if result["rewound"] == true => {
            let restored = result["files"]["restored"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let cut = params["beforeMessage"]["messageId"]
                .as_str()
                .and_then(|id| entry_of(id, "user-"));
            let failed = result["files"]["failed"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["path"].as_str())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            facts.push(Fact::Rewound {
                session,
                cut,
                restore_files: params["restoreFiles"] == true,
                restored,
                failed,
            });
        }
        _ => {}
    }
}

/// `session`'s messages on its path now: its `Said` and `Asked` promises, less those a later
/// rewind cut off (a fork copies the path).
pub fn on_path<'a>(facts: &'a [Fact], session: &str) -> Vec<&'a Fact> {
    let mut path: Vec<&Fact> = Vec::new();
    for fact in facts.iter().filter(|f| f.session() == session) {
        match fact {
            Fact::Said { .. } | Fact::Asked { .. } => path.push(fact),
            Fact::Forked { holds, .. } => path.extend(
                holds
                    .iter()
                    .filter(|h| matches!(h, Fact::Said { .. } | Fact::Asked { .. })),
            ),
            Fact::Rewound { cut: Some(cut), .. } => path.retain(|f| match f {
                Fact::Said { entry, .. } | Fact::Asked { entry, .. } => entry < cut,
                _ => true,
            }),
            _ => {}
        }
    }
    path
}

/// What an answered turn streamed becomes promises.
fn promise_streamed(session: &str, stream: Streamed, facts: &mut Vec<Fact>) {
    for (message, text) in stream.said {
        facts.push(Fact::Said {
            session: session.to_string(),
            entry: entry_of(&message, "agent-").unwrap_or_default(),
            message,
            text,
        });
    }
    for (entry, text) in stream.asked {
        facts.push(Fact::Asked {
            session: session.to_string(),
            entry,
            text,
        });
    }
    for client_id in stream
        .tools_done
        .into_iter()
        .filter(|id| !stream.not_calls.contains(id))
    {
        facts.push(Fact::ToolDone {
            session: session.to_string(),
            client_id,
        });
    }
    if stream.compacted {
        facts.push(Fact::Compacted {
            session: session.to_string(),
        });
    }
}

/// The text blocks of a prompt's params, joined.
pub fn prompt_text(params: &Value) -> String {
    params["prompt"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(session: &str, update: Value) -> Value {
        json!({"method": "session/update", "params": {"sessionId": session, "update": update}})
    }

    #[test]
    fn an_answered_prompt_promises_what_it_streamed_and_an_unanswered_one_nothing() {
        let mut ledger = Ledger::default();
        ledger.sent(
            1,
            "session/prompt",
            &json!({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}),
        );
        ledger.sent(
            2,
            "session/prompt",
            &json!({"sessionId": "s", "prompt": [{"type": "text", "text": "again"}]}),
        );
        let chunk = |id: &str, text: &str| {
            update(
                "s",
                json!({"sessionUpdate": "agent_message_chunk", "messageId": id, "content": {"type": "text", "text": text}}),
            )
        };
        let transcript = vec![
            chunk("agent-3", "hel"),
            chunk("agent-3", "lo"),
            json!({"id": 1, "result": {"stopReason": "end_turn", "_meta": {"userMessageId": "user-2"}}}),
            chunk("agent-5", "cut"),
        ];
        ledger.read(&transcript);
        assert_eq!(
            ledger.facts,
            [
                Fact::Said {
                    session: "s".into(),
                    entry: 3,
                    message: "agent-3".into(),
                    text: "hello".into()
                },
                Fact::Asked {
                    session: "s".into(),
                    entry: 2,
                    text: "hi".into()
                },
            ]
        );
    }

    #[test]
    fn a_fork_holds_its_parents_promises_and_a_delete_voids_a_sessions() {
        let mut ledger = Ledger::default();
        ledger.sent(
            1,
            "session/prompt",
            &json!({"sessionId": "p", "prompt": []}),
        );
        ledger.sent(2, "session/fork", &json!({"sessionId": "p"}));
        ledger.sent(3, "session/delete", &json!({"sessionId": "p"}));
        let transcript = vec![
            update(
                "p",
                json!({"sessionUpdate": "agent_message_chunk", "messageId": "agent-3", "content": {"type": "text", "text": "x"}}),
            ),
            json!({"id": 1, "result": {"stopReason": "end_turn"}}),
            json!({"id": 2, "result": {"sessionId": "f"}}),
            json!({"id": 3, "result": {}}),
        ];
        ledger.read(&transcript);
        assert_eq!(
            ledger.about("p"),
            [&Fact::Deleted {
                session: "p".into()
            }]
        );
        let Fact::Forked { holds, .. } = ledger.about("f")[0] else {
            panic!("{:?}", ledger.facts)
        };
        assert_eq!(holds[0].session(), "f");
    }
}
