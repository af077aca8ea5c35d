//! One turn: model call → tool calls → tool results → model call, until the model stops.
//!
//! Invariants:
//! - Every await is raced against the turn's cancellation token.
//! - History stays valid for the next call: an assistant message with tool calls is always
//!   followed by one result per call (a synthetic "cancelled" result if the turn was
//!   cancelled); a model call that fails leaves no partial assistant message behind.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use talaria_provider::{
    ChatMessage, ChatProvider, ChatRequest, FinishReason, StreamEvent, ToolCallRequest, ToolSpec,
    UserPart,
};
use talaria_tools::{Registry, SessionToolState, ToolContext};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::{Mode, RuleStore};
use crate::bridge::ClientBridge;
use crate::budget::ResultBudget;
use crate::events::{EngineEvent, StopReason, TurnError};
use crate::orchestrator::Orchestrator;
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
    pub bridge: &'a dyn ClientBridge,
    pub mode: &'a Mutex<Mode>,
    pub rules: &'a Mutex<RuleStore>,
    pub tool_state: &'a Arc<SessionToolState>,
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
        let mut budget = ResultBudget::new(
            self.limits.context_window,
            self.settings
                .home
                .join("tool-results")
                .join(&self.settings.id),
        );
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
            if self.run_tools(tool_calls, &mut budget).await {
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

    /// Runs the calls through the orchestrator and records one result per call. Returns true
    /// if the turn was cancelled.
    async fn run_tools(&mut self, calls: Vec<ToolCallRequest>, budget: &mut ResultBudget) -> bool {
        let calls: Vec<(String, ToolCallRequest)> = calls
            .into_iter()
            .map(|call| (self.unique_id(&call.id), call))
            .collect();
        let ctx = ToolContext {
            cwd: self.settings.cwd.clone(),
            cancel: self.cancel.clone(),
            files: self.bridge.files(),
            commands: self.bridge.commands(),
            state: self.tool_state.clone(),
            progress: None,
        };
        let mut orchestrator = Orchestrator {
            registry: self.registry,
            bridge: self.bridge,
            mode: self.mode,
            rules: self.rules,
            roots: &self.settings.roots,
            events: self.events,
            cancel: self.cancel,
            ctx,
            budget,
        };
        let (results, cancelled) = orchestrator.run_batch(calls).await;
        for (call_id, content) in results {
            self.history.push(ChatMessage::Tool { call_id, content });
        }
        cancelled
    }
}
