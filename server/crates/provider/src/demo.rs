//! The built-in demo model (`provider = "demo"`, `TALARIA_PROVIDER=demo`, `talaria demo`): a
//! [`ChatProvider`] that answers from a small script keyed on the conversation, so that a
//! user sees Talaria work — a streamed answer, a plan, a file read, an edit that asks first —
//! with no key and no model server. It never touches the network. Every answer and every
//! title it writes says it is the demo.
//!
//! The script (a tour per prompt): a plan (`todo`) and a listing of the folder
//! (`search_files`); a file read (`read_file`, a README first); an edit proposed
//! (`write_file` of `TALARIA-DEMO.md`, which asks in the default mode); the plan completed;
//! a closing answer. Where it stands is read from the ids of its own calls since the last
//! user message (`demo-N-…`); a tool the session does not offer is left out. A later prompt
//! gets a short answer (or the tour again when it asks for it); a call with no tools (a
//! title, a summary, a check) gets a short labelled text.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::model::{ChatRequest, FinishReason, StreamEvent, ToolCallRequest, Usage, UserPart};
use crate::{ChatProvider, EventStream, ModelMessage, ProviderError};

/// The model's name, shown by clients in their model pickers.
pub const DEMO_MODEL: &str = "talaria-demo";

/// The file the tour proposes to write.
pub const DEMO_FILE: &str = "TALARIA-DEMO.md";

/// What opens every answer of the demo.
const LABEL: &str = "**Talaria demo**";

/// The time between two streamed pieces of an answer.
const PACE: Duration = Duration::from_millis(12);

/// The built-in demo model.
#[derive(Debug, Clone)]
pub struct DemoProvider {
    pace: Duration,
}

impl Default for DemoProvider {
    fn default() -> Self {
        Self { pace: PACE }
    }
}

impl DemoProvider {
    /// A demo that streams its pieces `pace` apart.
    pub fn with_pace(pace: Duration) -> Self {
        Self { pace }
    }
}

impl ChatProvider for DemoProvider {
    fn name(&self) -> &str {
        "demo"
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let reply = reply_to(request);
        let pace = self.pace;
        Box::pin(async move { Ok(reply.into_stream(pace)) })
    }
}

/// One answer of the script.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Reply {
    pub(crate) thought: String,
    pub(crate) text: String,
    pub(crate) calls: Vec<ToolCallRequest>,
    input_chars: usize,
}

impl Reply {
    fn into_stream(self, pace: Duration) -> EventStream {
        let mut events = Vec::new();
        if !self.thought.is_empty() {
            events.push(StreamEvent::ReasoningDelta(self.thought.clone()));
        }
        events.extend(pieces(&self.text).map(|p| StreamEvent::TextDelta(p.to_string())));
        for call in &self.calls {
            events.push(StreamEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
            });
        }
        let written = self.text.len() + self.calls.iter().map(|c| c.arguments.len()).sum::<usize>();
        events.push(StreamEvent::Usage(Usage {
            input_tokens: (self.input_chars / 4) as u64,
            output_tokens: (written / 4).max(1) as u64,
            ..Usage::default()
        }));
        let reason = if self.calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        events.push(StreamEvent::Finished {
            reason,
            tool_calls: self.calls,
        });
        let paced = futures_util::stream::unfold(events.into_iter(), move |mut rest| async move {
            let event = rest.next()?;
            if matches!(event, StreamEvent::TextDelta(_)) && !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
            Some((Ok(event), rest))
        });
        Box::pin(paced)
    }
}

/// The text in pieces of a word and what follows it, as a model streams.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive(' ')
}

/// The script's answer to the conversation so far.
pub(crate) fn reply_to(request: &ChatRequest<'_>) -> Reply {
    let messages = request.transcript.model_messages();
    let input_chars = messages.iter().map(message_chars).sum();
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    let mut reply = if offered.is_empty() {
        without_tools(&messages)
    } else {
        Conversation::read(&messages).next(&offered)
    };
    reply.input_chars = input_chars;
    reply
}

fn message_chars(message: &ModelMessage<'_>) -> usize {
    match message {
        ModelMessage::System(text) => text.len(),
        ModelMessage::User(parts) => UserPart::joined_text(parts, " ").len(),
        ModelMessage::Assistant { text, .. } => text.len(),
        ModelMessage::Tool { content, .. } => content.len(),
    }
}

/// A call with no tools offered: a title, a summary, a one-word check.
fn without_tools(messages: &[ModelMessage<'_>]) -> Reply {
    let system = messages.iter().find_map(|m| match m {
        ModelMessage::System(text) => Some(*text),
        _ => None,
    });
    let asked = last_user_text(messages).unwrap_or_default();
    let text = if system.is_some_and(|s| s.contains("name conversations")) {
        let words: Vec<&str> = asked.split_whitespace().take(5).collect();
        if words.is_empty() {
            "Talaria demo".to_string()
        } else {
            format!("Talaria demo: {}", words.join(" "))
        }
    } else {
        format!("{LABEL} · a scripted answer: the demo model has nothing more to say here.")
    };
    Reply {
        text,
        ..Reply::default()
    }
}

/// The user's own words in the latest user message (the environment Talaria puts in front
/// of the first one left out).
fn last_user_text(messages: &[ModelMessage<'_>]) -> Option<String> {
    messages.iter().rev().find_map(|m| match m {
        ModelMessage::User(parts) => parts.iter().rev().find_map(|part| match part {
            UserPart::Text { text } => Some(text.clone()),
            UserPart::Image { .. } => None,
        }),
        _ => None,
    })
}

/// A short, one-line quote of what the user asked.
fn excerpt(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut quoted: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        quoted.push('…');
    }
    quoted
}

/// What the conversation says about where the tour stands.
#[derive(Debug, Default)]
struct Conversation {
    asked: String,
    /// The step of the demo's latest calls since the last user message, and their results
    /// by tool name.
    step: Option<u32>,
    results: Vec<(String, String)>,
    /// A tour ran earlier in the conversation.
    toured_before: bool,
    /// The file the tour read since the last user message.
    read_path: Option<String>,
}

impl Conversation {
    fn read(messages: &[ModelMessage<'_>]) -> Self {
        let last_user = messages
            .iter()
            .rposition(|m| matches!(m, ModelMessage::User(_)))
            .unwrap_or(0);
        let mut seen = Conversation {
            asked: last_user_text(messages).unwrap_or_default(),
            toured_before: messages[..last_user].iter().any(is_tour_call),
            ..Conversation::default()
        };
        let mut names = std::collections::HashMap::new();
        for message in &messages[last_user..] {
            match message {
                ModelMessage::Assistant { tool_calls, .. } => {
                    for call in tool_calls.iter() {
                        if let Some(step) = step_of(&call.id) {
                            seen.step = Some(step);
                            seen.results.clear();
                        }
                        names.insert(call.id.as_str(), call.name.as_str());
                        if call.name == "read_file" {
                            seen.read_path = serde_json::from_str::<Value>(&call.arguments)
                                .ok()
                                .and_then(|a| a["path"].as_str().map(str::to_string));
                        }
                    }
                }
                ModelMessage::Tool { call_id, content } => {
                    let name = names.get(call_id).copied().unwrap_or_default();
                    seen.results.push((name.to_string(), content.to_string()));
                }
                _ => {}
            }
        }
        seen
    }

    /// The result of the latest call to `tool`.
    fn result(&self, tool: &str) -> Option<&str> {
        self.results
            .iter()
            .rev()
            .find(|(name, _)| name == tool)
            .map(|(_, content)| content.as_str())
    }

    /// The script's next answer.
    fn next(&self, offered: &[&str]) -> Reply {
        let wants_tour = !self.toured_before || {
            let asked = self.asked.to_lowercase();
            asked.contains("tour") || asked.contains("again") || asked.contains("demo")
        };
        match self.step {
            None if wants_tour => tour::start(&self.asked, offered),
            None => tour::later(&self.asked),
            Some(0) => tour::read(self, offered),
            Some(1) => tour::edit(self, offered),
            Some(2) => tour::edited(self, offered),
            Some(_) => tour::close(),
        }
    }
}

/// `demo-STEP-N`: a call of the tour's step STEP.
fn call_id(step: u32, n: usize) -> String {
    format!("demo-{step}-{n}")
}

fn step_of(id: &str) -> Option<u32> {
    let rest = id.strip_prefix("demo-")?;
    rest.split('-').next()?.parse().ok()
}

fn is_tour_call(message: &ModelMessage<'_>) -> bool {
    matches!(message, ModelMessage::Assistant { tool_calls, .. }
        if tool_calls.iter().any(|c| step_of(&c.id).is_some()))
}

/// A call of `step`, when the session offers `tool`.
fn call(
    step: u32,
    n: usize,
    tool: &str,
    offered: &[&str],
    arguments: Value,
) -> Option<ToolCallRequest> {
    offered.contains(&tool).then(|| ToolCallRequest {
        id: call_id(step, n),
        name: tool.to_string(),
        arguments: arguments.to_string(),
    })
}

mod tour;

#[cfg(test)]
mod tests;
