//! One turn: model call → tool calls → tool results → model call, until the model stops.
//!
//! Invariants:
//! - Every await is raced against the turn's cancellation token.
//! - History stays valid for the next call: an assistant message with tool calls is always
//!   followed by one result per call (a synthetic "cancelled" result if the turn was
//!   cancelled); a model call that fails leaves no partial assistant message behind.

use std::collections::HashSet;

use futures_util::StreamExt;
use talaria_provider::{
    ChatMessage, ChatProvider, ChatRequest, FinishReason, StreamEvent, ToolCallRequest, ToolSpec,
    UserPart,
};
use talaria_tools::{Registry, ToolContext, ToolOutcome, ToolStatus};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::events::{EngineEvent, StopReason, ToolCallView, TurnError};
use crate::session::SessionSettings;

#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnLimits {
    pub context_window: u64,
    pub max_requests: u32,
    pub max_output_tokens: Option<u32>,
}

pub(crate) struct Turn<'a> {
    pub settings: &'a SessionSettings,
    pub limits: TurnLimits,
    pub provider: &'a dyn ChatProvider,
    pub registry: &'a Registry,
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub cancel: &'a CancellationToken,
    pub history: &'a mut Vec<ChatMessage>,
    pub used_tool_ids: &'a mut HashSet<String>,
}

/// What one model call produced.
enum CallResult {
    Finished {
        text: String,
        reasoning: String,
        reason: FinishReason,
        tool_calls: Vec<ToolCallRequest>,
    },
    Cancelled {
        text: String,
    },
}

const CANCELLED_RESULT: &str = "The user cancelled this tool call before it ran.";

impl Turn<'_> {
    async fn emit(&self, event: EngineEvent) {
        // The receiver only goes away when the client is gone; nothing to report then.
        let _ = self.events.send(event).await;
    }

    pub(crate) async fn run(mut self, input: Vec<UserPart>) -> Result<StopReason, TurnError> {
        self.history.push(ChatMessage::User(input));
        let tools: Vec<ToolSpec> = self
            .registry
            .definitions()
            .map(|d| ToolSpec {
                name: d.name.to_string(),
                description: d.description.to_string(),
                parameters: d.parameters.clone(),
            })
            .collect();
        for _ in 0..self.limits.max_requests {
            let (text, reasoning, reason, tool_calls) = match self.call_model(&tools).await? {
                CallResult::Cancelled { text } => {
                    if !text.is_empty() {
                        self.history.push(ChatMessage::Assistant {
                            text,
                            reasoning: None,
                            tool_calls: Vec::new(),
                        });
                    }
                    return Ok(StopReason::Cancelled);
                }
                CallResult::Finished {
                    text,
                    reasoning,
                    reason,
                    tool_calls,
                } => (text, reasoning, reason, tool_calls),
            };
            self.history.push(ChatMessage::Assistant {
                text,
                reasoning: (!reasoning.is_empty()).then_some(reasoning),
                tool_calls: tool_calls.clone(),
            });
            if tool_calls.is_empty() {
                return Ok(match reason {
                    FinishReason::Length => StopReason::MaxTokens,
                    FinishReason::ContentFilter => StopReason::Refusal,
                    _ => StopReason::EndTurn,
                });
            }
            if self.run_tools(tool_calls).await {
                return Ok(StopReason::Cancelled);
            }
        }
        Ok(StopReason::MaxTurnRequests)
    }

    async fn call_model(&mut self, tools: &[ToolSpec]) -> Result<CallResult, TurnError> {
        let request = ChatRequest {
            model: &self.settings.model,
            messages: self.history,
            tools,
            max_tokens: self.limits.max_output_tokens,
        };
        let started = self.provider.stream(&request);
        let mut stream = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Ok(CallResult::Cancelled { text: String::new() }),
            result = started => result.map_err(|e| TurnError::Provider(e.to_string()))?,
        };
        let mut text = String::new();
        let mut reasoning = String::new();
        loop {
            let next = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Ok(CallResult::Cancelled { text }),
                next = stream.next() => next,
            };
            match next {
                None => {
                    return Err(TurnError::Provider(format!(
                        "{} stream ended without a final event",
                        self.provider.name()
                    )));
                }
                Some(Err(e)) => return Err(TurnError::Provider(e.to_string())),
                Some(Ok(event)) => match event {
                    StreamEvent::TextDelta(delta) => {
                        text.push_str(&delta);
                        self.emit(EngineEvent::AgentText(delta)).await;
                    }
                    StreamEvent::ReasoningDelta(delta) => {
                        reasoning.push_str(&delta);
                        self.emit(EngineEvent::AgentThought(delta)).await;
                    }
                    StreamEvent::ToolCallStarted { .. } => {}
                    StreamEvent::Usage(usage) => {
                        self.emit(EngineEvent::Usage {
                            used: usage.input_tokens + usage.output_tokens,
                            size: self.limits.context_window,
                        })
                        .await;
                    }
                    StreamEvent::Finished { reason, tool_calls } => {
                        return Ok(CallResult::Finished {
                            text,
                            reasoning,
                            reason,
                            tool_calls,
                        });
                    }
                },
            }
        }
    }

    /// Makes a tool-call id unique within the session (models sometimes repeat ids).
    fn unique_id(&mut self, id: &str) -> String {
        let base = if id.is_empty() { "call" } else { id };
        let mut candidate = base.to_string();
        let mut n = 1;
        while !self.used_tool_ids.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        candidate
    }

    /// Runs the calls in order. Returns true if the turn was cancelled.
    async fn run_tools(&mut self, calls: Vec<ToolCallRequest>) -> bool {
        let ctx = ToolContext {
            cwd: self.settings.cwd.clone(),
            cancel: self.cancel.clone(),
        };
        let mut cancelled = false;
        for call in calls {
            if cancelled || self.cancel.is_cancelled() {
                cancelled = true;
                self.history.push(ChatMessage::Tool {
                    call_id: call.id,
                    content: CANCELLED_RESULT.into(),
                });
                continue;
            }
            let id = self.unique_id(&call.id);
            let args = Registry::parse_args(&call.arguments);
            let description = self.registry.describe(&call.name, &args, &ctx);
            let kind = self
                .registry
                .definition(&call.name)
                .map_or(talaria_tools::ToolKind::Other, |d| d.kind);
            let raw_input = match &args {
                Ok(value) => value.clone(),
                Err(_) => serde_json::Value::String(call.arguments.clone()),
            };
            self.emit(EngineEvent::ToolCallStarted(ToolCallView {
                id: id.clone(),
                name: call.name.clone(),
                title: description.title,
                kind,
                locations: description
                    .locations
                    .into_iter()
                    .map(|l| (l.path, l.line))
                    .collect(),
                raw_input,
            }))
            .await;
            let outcome = tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    cancelled = true;
                    ToolOutcome::failed(CANCELLED_RESULT)
                }
                outcome = self.registry.dispatch(&call.name, args, &ctx) => outcome,
            };
            self.emit(EngineEvent::ToolCallFinished {
                id,
                status: outcome.status,
                content: outcome.content.clone(),
                raw_output: outcome.raw_output.clone(),
            })
            .await;
            let content = match outcome.status {
                ToolStatus::Completed => outcome.content,
                ToolStatus::Failed => format!("Error: {}", outcome.content),
            };
            self.history.push(ChatMessage::Tool {
                call_id: call.id,
                content,
            });
        }
        cancelled
    }
}
