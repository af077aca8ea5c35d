//! One turn: model call → tool calls → tool results → model call, until the model stops.
//! Model calls go through the one model-call path ([`crate::model_call`]) with a sink that
//! streams to the chat; tool calls through the orchestrator.
//!
//! Invariants:
//! - Every await is raced against the turn's cancellation token.
//! - The record stays valid for the next call: an assistant entry with tool calls is always
//!   followed by one result per call; a failed model call leaves no assistant entry (a
//!   cancelled one keeps the text already shown).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use talaria_provider::{FinishReason, ToolCallRequest, ToolSpec};
use talaria_record::{AssistantEntry, EntryBody, Reasoning, Transcript};
use talaria_tools::{Registry, SessionToolState, ToolContext};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::{Mode, RuleStore};
use crate::budget::ResultBudget;
use crate::events::{EngineEvent, StopReason, TurnError, TurnUsage};
use crate::model_call::{CallResult, ChatSink, ModelCaller};
use crate::orchestrator::Orchestrator;
use crate::session::SessionSettings;

#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnLimits {
    pub max_requests: u32,
    pub max_output_tokens: Option<u32>,
}

pub(crate) struct Turn<'a> {
    pub settings: &'a SessionSettings,
    pub limits: TurnLimits,
    pub registry: &'a Registry,
    pub mode: &'a Mutex<Mode>,
    pub rules: &'a Mutex<RuleStore>,
    pub tool_state: &'a Arc<SessionToolState>,
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub cancel: &'a CancellationToken,
    pub history: &'a mut Transcript,
    pub used_tool_ids: &'a mut HashSet<String>,
    /// The model-call path for this turn (its chain and the fallback held for the turn).
    pub caller: ModelCaller<'a>,
}

impl Turn<'_> {
    pub(crate) async fn run(
        mut self,
        input: crate::session::UserInput,
    ) -> (Result<StopReason, TurnError>, TurnUsage) {
        let outcome = self.run_loop(input).await;
        (outcome, self.caller.usage)
    }

    async fn run_loop(
        &mut self,
        input: crate::session::UserInput,
    ) -> Result<StopReason, TurnError> {
        self.history.push(EntryBody::User {
            input: input.blocks,
            model_view: input.model_view,
        });
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
            *self.caller.window,
            self.settings
                .home
                .join("tool-results")
                .join(&self.settings.id),
        );
        for _ in 0..self.limits.max_requests {
            let mut sink = ChatSink {
                events: self.events,
                session_id: &self.settings.id,
            };
            let result = self
                .caller
                .call(
                    self.history,
                    &tools,
                    self.limits.max_output_tokens,
                    &mut sink,
                )
                .await
                .map_err(TurnError::Provider)?;
            let (text, reasoning, signature, reason, tool_calls, model) = match result {
                CallResult::Cancelled { text } => {
                    if !text.is_empty() {
                        self.history.push(EntryBody::Assistant(AssistantEntry {
                            text,
                            ..AssistantEntry::default()
                        }));
                    }
                    return Ok(StopReason::Cancelled);
                }
                CallResult::Finished {
                    text,
                    reasoning,
                    signature,
                    reason,
                    tool_calls,
                    model,
                } => (text, reasoning, signature, reason, tool_calls, model),
            };
            self.history.push(EntryBody::Assistant(AssistantEntry {
                text,
                reasoning: (!reasoning.is_empty()).then_some(Reasoning {
                    text: reasoning,
                    signature,
                }),
                tool_calls: tool_calls.clone(),
                model: Some(model),
            }));
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
            files: Arc::new(crate::client::ClientFiles {
                events: self.events.clone(),
                delegation: self.settings.delegation,
            }),
            commands: Arc::new(crate::client::ClientCommands {
                events: self.events.clone(),
                delegation: self.settings.delegation,
            }),
            state: self.tool_state.clone(),
            sensitive: self.settings.secrets.paths.clone(),
            progress: None,
        };
        let mut orchestrator = Orchestrator {
            registry: self.registry,
            mode: self.mode,
            rules: self.rules,
            roots: &self.settings.roots,
            secrets: &self.settings.secrets,
            events: self.events,
            cancel: self.cancel,
            ctx,
            budget,
        };
        let (results, cancelled) = orchestrator.run_batch(calls).await;
        for entry in results {
            self.history.push(EntryBody::ToolResult(Box::new(entry)));
        }
        cancelled
    }
}
