//! A session's trajectory, as a harness keeps it for evaluation or training: the messages the
//! model saw in its last call (OpenAI chat format, exactly as `openai::request_body` sends
//! them), that call's answer appended, the tools offered, and counts over every call. A
//! provider wrapper ([`TrajectoryTap`]) keeps it and rewrites the file after each call
//! (written aside, then renamed: a reader never sees half a file). The file is written on a
//! blocking thread, never on the stream's; the call's end is passed on once it is written, so
//! whoever waits for the turn finds the file complete.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::model::{ChatRequest, StreamEvent};
use crate::{ChatProvider, EventStream, ProviderError};

/// The format's name and version, the file's `format` field.
pub const TRAJECTORY_FORMAT: &str = "talaria-trajectory/1";

/// What was seen so far, shared by the session's providers.
#[derive(Debug, Default)]
struct Seen {
    model: String,
    messages: Vec<Value>,
    tools: Vec<Value>,
    answer: String,
    reasoning: String,
    tool_calls: Vec<Value>,
    model_calls: u64,
    tool_calls_total: u64,
    input_tokens: u64,
    output_tokens: u64,
    reasoning_tokens: u64,
}

impl Seen {
    fn document(&self) -> Value {
        let mut messages = self.messages.clone();
        let mut answer = json!({"role": "assistant", "content": self.answer});
        if !self.tool_calls.is_empty() {
            answer["tool_calls"] = Value::Array(self.tool_calls.clone());
        }
        if !self.reasoning.is_empty() {
            answer["reasoning_content"] = json!(self.reasoning);
        }
        messages.push(answer);
        json!({
            "format": TRAJECTORY_FORMAT,
            "model": self.model,
            "messages": messages,
            "tools": self.tools,
            "stats": {
                "model_calls": self.model_calls,
                "tool_calls": self.tool_calls_total,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "reasoning_tokens": self.reasoning_tokens,
            },
        })
    }
}

/// Another agent's turn, for [`TrajectoryLog::another_agents_turn`].
#[derive(Debug, Clone, Default)]
pub struct AgentTurn {
    /// What the document names as its model (`agent:NAME`).
    pub model: String,
    /// The messages before its final answer (OpenAI chat format).
    pub messages: Vec<Value>,
    pub answer: String,
    pub tool_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A session's trajectory file and what it holds so far.
#[derive(Debug, Clone)]
pub struct TrajectoryLog {
    path: PathBuf,
    seen: Arc<Mutex<Seen>>,
    /// The number of the last document written: held while writing, so that of two calls'
    /// writes the later document always wins.
    written: Arc<Mutex<u64>>,
}

/// A document to write, numbered in the order the calls finished.
struct Snapshot {
    number: u64,
    document: Value,
}

impl TrajectoryLog {
    /// A trajectory written to `path` (an absolute file path).
    pub fn writing_to(path: PathBuf) -> Self {
        Self {
            path,
            seen: Arc::default(),
            written: Arc::default(),
        }
    }

    fn call_started(&self, request: &ChatRequest<'_>) {
        let body = crate::openai::request_body(request);
        let mut seen = talaria_util::lock(&self.seen);
        seen.model = request.model.to_string();
        seen.messages = as_array(&body["messages"]);
        seen.tools = as_array(&body["tools"]);
        seen.answer.clear();
        seen.reasoning.clear();
        seen.tool_calls.clear();
        seen.model_calls += 1;
    }

    /// Makes the document another agent's turn (a task handed to it as the whole turn):
    /// its messages as the caller built them from what that agent said and did, no tools
    /// offered, its counts added; written before this returns.
    pub async fn another_agents_turn(&self, turn: AgentTurn) {
        let snapshot = {
            let mut seen = talaria_util::lock(&self.seen);
            seen.model = turn.model;
            seen.messages = turn.messages;
            seen.tools.clear();
            seen.answer = turn.answer;
            seen.reasoning.clear();
            seen.tool_calls.clear();
            seen.tool_calls_total += turn.tool_calls;
            seen.input_tokens += turn.input_tokens;
            seen.output_tokens += turn.output_tokens;
            Snapshot {
                number: seen.model_calls,
                document: seen.document(),
            }
        };
        self.write_off_thread(snapshot).await;
    }

    /// Notes an event; the document to write when a call has finished.
    fn event(&self, event: &StreamEvent) -> Option<Snapshot> {
        let mut seen = talaria_util::lock(&self.seen);
        match event {
            StreamEvent::TextDelta(text) => seen.answer.push_str(text),
            StreamEvent::ReasoningDelta(text) => seen.reasoning.push_str(text),
            StreamEvent::Usage(usage) => {
                seen.input_tokens += usage.input_tokens;
                seen.output_tokens += usage.output_tokens;
                seen.reasoning_tokens += usage.reasoning_tokens;
            }
            StreamEvent::Finished { tool_calls, .. } => {
                seen.tool_calls = tool_calls
                    .iter()
                    .map(|call| {
                        json!({"id": call.id, "type": "function",
                               "function": {"name": call.name, "arguments": call.arguments}})
                    })
                    .collect();
                seen.tool_calls_total += tool_calls.len() as u64;
                return Some(Snapshot {
                    number: seen.model_calls,
                    document: seen.document(),
                });
            }
            _ => {}
        }
        None
    }

    /// Writes `snapshot` on a blocking thread and waits (without holding the stream's
    /// thread) until it is written.
    async fn write_off_thread(&self, snapshot: Snapshot) {
        let log = self.clone();
        let writing = tokio::task::spawn_blocking(move || log.write(snapshot));
        if let Err(error) = writing.await {
            tracing::warn!("the trajectory writer stopped: {error}");
        }
    }

    /// Written aside and renamed, readable by this user only, unless a later call's document
    /// was written already; not synced (the batch runner copies it into its output and syncs
    /// that).
    fn write(&self, snapshot: Snapshot) {
        let mut written = talaria_util::lock(&self.written);
        if *written > snapshot.number {
            return;
        }
        let text = match serde_json::to_vec_pretty(&snapshot.document) {
            Ok(text) => text,
            Err(error) => {
                tracing::warn!("the trajectory could not be serialized: {error}");
                return;
            }
        };
        talaria_util::failpoint::step("trajectory::write::before");
        // Through the one way to files: the folder may be in a task's workspace, where a
        // command could plant a link at the name written.
        let done = match (self.path.parent(), self.path.file_name()) {
            (Some(folder), Some(name)) => talaria_files::Root::open_making(
                folder,
                std::sync::Arc::new(talaria_files::Unguarded),
            )
            .and_then(|folder| {
                let how = talaria_files::Replace {
                    mode: Some(0o600),
                    sync: false,
                };
                folder.as_dir().replace(name, &text, &how)
            }),
            _ => Err(talaria_files::FileError::Outside(self.path.clone())),
        };
        match done {
            Ok(()) => {
                talaria_util::failpoint::step("trajectory::write::after");
                *written = snapshot.number;
            }
            Err(error) => {
                tracing::warn!(path = %self.path.display(), "cannot write the trajectory: {error}")
            }
        }
    }
}

fn as_array(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// Forwards every call to `inner` and keeps the trajectory in `log`.
pub struct TrajectoryTap {
    inner: Arc<dyn ChatProvider>,
    log: TrajectoryLog,
}

impl TrajectoryTap {
    pub fn new(inner: Arc<dyn ChatProvider>, log: TrajectoryLog) -> Self {
        Self { inner, log }
    }
}

impl ChatProvider for TrajectoryTap {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        self.log.call_started(request);
        let log = self.log.clone();
        let starting = self.inner.stream(request);
        Box::pin(async move {
            let stream = starting.await?;
            let tapped = stream.then(move |item| {
                let log = log.clone();
                async move {
                    if let Ok(event) = &item
                        && let Some(snapshot) = log.event(event)
                    {
                        log.write_off_thread(snapshot).await;
                    }
                    item
                }
            });
            Ok(Box::pin(tapped) as EventStream)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FinishReason, Transcript};
    use talaria_record::testing::user;

    use crate::scripted::Scripted;

    fn answer(text: &str) -> Vec<StreamEvent> {
        vec![
            StreamEvent::TextDelta(text.to_string()),
            StreamEvent::Finished {
                reason: FinishReason::Stop,
                tool_calls: Vec::new(),
            },
        ]
    }

    fn read(path: &std::path::Path) -> Value {
        serde_json::from_slice(&std::fs::read(path).expect("written")).expect("whole JSON")
    }

    #[tokio::test]
    async fn a_calls_end_is_passed_on_once_its_trajectory_is_written_and_the_last_call_wins() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("t.json");
        let scripted = Arc::new(Scripted(Mutex::new(vec![
            answer("first"),
            answer("second"),
        ])));
        let tap = TrajectoryTap::new(scripted, TrajectoryLog::writing_to(path.clone()));
        let mut transcript = Transcript::with_system_and_environment("sys", "env".to_string());
        transcript.push(user("hello"));
        let request = ChatRequest {
            model: "m",
            transcript: &transcript,
            tools: &[],
            max_tokens: None,
            credential: None,
            effort: None,
        };
        for (call, answer) in [(1, "first"), (2, "second")] {
            let mut stream = tap.stream(&request).await.expect("stream");
            while let Some(event) = stream.next().await {
                if matches!(event, Ok(StreamEvent::Finished { .. })) {
                    // The file is complete as soon as the end is seen.
                    let document = read(&path);
                    assert_eq!(document["format"], TRAJECTORY_FORMAT);
                    assert_eq!(document["stats"]["model_calls"], call);
                    let messages = document["messages"].as_array().expect("messages");
                    assert_eq!(messages.last().expect("answer")["content"], answer);
                    let asked = messages.iter().find(|m| m["role"] == "user");
                    assert!(asked.expect("user").to_string().contains("hello"));
                }
            }
        }
        assert!(!path.with_extension("json.partial").exists());
        // An older call's document never overwrites a newer one's.
        let log = tap.log.clone();
        log.write(Snapshot {
            number: 1,
            document: json!({"stale": true}),
        });
        assert_eq!(read(&path)["stats"]["model_calls"], 2);
    }
}
