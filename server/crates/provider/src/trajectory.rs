//! A session's trajectory, as a harness keeps it for evaluation or training: the messages the
//! model saw in its last call (OpenAI chat format, exactly as `openai::request_body` sends
//! them), that call's answer appended, the tools offered, and counts over every call. A
//! provider wrapper ([`TrajectoryTap`]) keeps it and rewrites the file after each call
//! (written aside, then renamed: a reader never sees half a file).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
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

/// A session's trajectory file and what it holds so far.
#[derive(Debug, Clone)]
pub struct TrajectoryLog {
    path: PathBuf,
    seen: Arc<Mutex<Seen>>,
}

impl TrajectoryLog {
    /// A trajectory written to `path` (an absolute file path).
    pub fn writing_to(path: PathBuf) -> Self {
        Self {
            path,
            seen: Arc::default(),
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

    fn event(&self, event: &StreamEvent) {
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
                let document = seen.document();
                drop(seen);
                self.write(&document);
            }
            _ => {}
        }
    }

    /// Written aside and renamed, readable by this user only; not synced (the batch runner
    /// copies it into its output and syncs that), so the call's stream waits on no flush.
    fn write(&self, document: &Value) {
        let aside = self.path.with_extension("json.partial");
        let text = match serde_json::to_vec_pretty(document) {
            Ok(text) => text,
            Err(error) => {
                tracing::warn!("the trajectory could not be serialized: {error}");
                return;
            }
        };
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&aside)
            .and_then(|mut file| file.write_all(&text))
            .and_then(|()| std::fs::rename(&aside, &self.path));
        if let Err(error) = written {
            tracing::warn!(path = %self.path.display(), "cannot write the trajectory: {error}");
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
            let tapped = stream.inspect(move |item| {
                if let Ok(event) = item {
                    log.event(event);
                }
            });
            Ok(Box::pin(tapped) as EventStream)
        })
    }
}
