//! One turn: model call → tool calls → tool results → model call, until the model stops.
//!
//! Every model call goes through one recovery loop: classify the failure, then rotate the
//! key, shrink `max_tokens`, prune the context, back off and retry, or fall back to the next
//! model of the chain, telling the user each step.
//!
//! Invariants:
//! - Every await is raced against the turn's cancellation token (backoff waits included).
//! - History stays valid for the next call: an assistant message with tool calls is always
//!   followed by one result per call; a model call that fails leaves no partial assistant
//!   message behind (a cancelled one keeps the text already shown).
//! - A stream that breaks after output was shown is not retried (that would repeat text).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use talaria_provider::{
    ChatRequest, ErrorClass, FinishReason, ProviderError, StreamEvent, ToolCallRequest, ToolSpec,
    classify,
};
use talaria_record::{AssistantEntry, EntryBody, Reasoning, Transcript};
use talaria_tools::{Registry, SessionToolState, ToolContext};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::{Mode, RuleStore};
use crate::bridge::ClientBridge;
use crate::budget::ResultBudget;
use crate::config::RetryPolicy;
use crate::events::{EngineEvent, NoticeLevel, StopReason, TurnError, TurnUsage};
use crate::orchestrator::Orchestrator;
use crate::router::{ModelRouter, ModelTarget};
use crate::session::SessionSettings;
use crate::{backoff, compaction};

#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnLimits {
    pub max_requests: u32,
    pub max_output_tokens: Option<u32>,
}

/// What a session keeps across turns about its model use.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionUsage {
    pub tokens: TurnUsage,
    pub cost: f64,
    pub priced: bool,
}

pub(crate) struct Turn<'a> {
    pub settings: &'a SessionSettings,
    pub limits: TurnLimits,
    pub router: &'a ModelRouter,
    /// The session's current model.
    pub model: String,
    pub retry: RetryPolicy,
    pub registry: &'a Registry,
    pub bridge: &'a dyn ClientBridge,
    pub mode: &'a Mutex<Mode>,
    pub rules: &'a Mutex<RuleStore>,
    pub tool_state: &'a Arc<SessionToolState>,
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub cancel: &'a CancellationToken,
    pub history: &'a mut Transcript,
    pub used_tool_ids: &'a mut HashSet<String>,
    /// The effective context window (lowered when a provider states a smaller one).
    pub window: &'a mut u64,
    pub session_usage: &'a mut SessionUsage,
}

/// What one model call produced.
enum CallResult {
    Finished {
        text: String,
        reasoning: String,
        signature: Option<String>,
        reason: FinishReason,
        tool_calls: Vec<ToolCallRequest>,
    },
    Cancelled {
        text: String,
    },
}

/// One attempt at a model call.
enum Attempt {
    Done(CallResult),
    Failed { error: ProviderError, shown: bool },
}

/// The per-turn recovery state.
struct Recovery {
    chain: Vec<ModelTarget>,
    /// Index into `chain` of the model in use (kept for the rest of the turn).
    active: usize,
    announced_fallback: bool,
    usage: TurnUsage,
}

impl Turn<'_> {
    async fn emit(&self, event: EngineEvent) {
        // The receiver only goes away when the client is gone; nothing to report then.
        let _ = self.events.send(event).await;
    }

    async fn notice(&self, level: NoticeLevel, message: String) {
        tracing::info!(session = %self.settings.id, ?level, "{message}");
        self.emit(EngineEvent::Notice { level, message }).await;
    }

    pub(crate) async fn run(
        mut self,
        input: crate::session::UserInput,
    ) -> (Result<StopReason, TurnError>, TurnUsage) {
        let mut recovery = Recovery {
            chain: self.router.chain(&self.model),
            active: 0,
            announced_fallback: false,
            usage: TurnUsage::default(),
        };
        let outcome = self.run_loop(input, &mut recovery).await;
        (outcome, recovery.usage)
    }

    async fn run_loop(
        &mut self,
        input: crate::session::UserInput,
        recovery: &mut Recovery,
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
            *self.window,
            self.settings
                .home
                .join("tool-results")
                .join(&self.settings.id),
        );
        for _ in 0..self.limits.max_requests {
            let (text, reasoning, signature, reason, tool_calls) =
                match self.call_model(&tools, recovery).await? {
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
                    } => (text, reasoning, signature, reason, tool_calls),
                };
            self.history.push(EntryBody::Assistant(AssistantEntry {
                text,
                reasoning: (!reasoning.is_empty()).then_some(Reasoning {
                    text: reasoning,
                    signature,
                }),
                tool_calls: tool_calls.clone(),
                model: Some(recovery.chain[recovery.active].label()),
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

    /// One model call with classification, key rotation, max_tokens and context recovery,
    /// retries with backoff, and fallback.
    async fn call_model(
        &mut self,
        tools: &[ToolSpec],
        recovery: &mut Recovery,
    ) -> Result<CallResult, TurnError> {
        let mut attempts: u32 = 0;
        let mut overflow_retries = 0;
        let mut max_tokens_retries = 0;
        let mut max_tokens = self.limits.max_output_tokens;
        let mut failure: Option<String> = None;
        while recovery.active < recovery.chain.len() {
            let target = recovery.chain[recovery.active].clone();
            let lease = target.pool.lease();
            if lease.is_none() && !target.pool.is_empty() {
                failure = Some(format!(
                    "every API key of {} is cooling down after failures",
                    target.label()
                ));
                if self.fall_back(recovery, "its keys are cooling down").await {
                    attempts = 0;
                    continue;
                }
                break;
            }
            attempts += 1;
            let attempt = self
                .stream_once(
                    &target,
                    lease.as_ref().map(|l| l.key.as_str()),
                    tools,
                    max_tokens,
                    &mut recovery.usage,
                )
                .await;
            let (error, shown) = match attempt {
                Attempt::Done(result) => {
                    let answered = matches!(result, CallResult::Finished { .. });
                    if answered && recovery.active > 0 && !recovery.announced_fallback {
                        recovery.announced_fallback = true;
                        self.notice(
                            NoticeLevel::Info,
                            format!("Answered by the fallback model {}.", target.label()),
                        )
                        .await;
                    }
                    return Ok(result);
                }
                Attempt::Failed { error, shown } => (error, shown),
            };
            let classified = classify(&error);
            let class = classified.class;
            tracing::warn!(session = %self.settings.id, ?class, attempt = attempts, "model call failed: {error}");
            if shown {
                let message = format!(
                    "The answer from {} was interrupted after it had started ({error}). What was shown is incomplete; ask again to continue.",
                    target.label()
                );
                self.notice(NoticeLevel::Error, message.clone()).await;
                return Err(TurnError::Provider(message));
            }
            // Rotation needs another key; a lone key is never put aside (that would lock the
            // provider out), the retry policy handles it instead.
            if class.rotate_key()
                && let Some(lease) = &lease
                && target.pool.has_other(lease)
            {
                target.pool.cool_down(lease);
                self.notice(
                    NoticeLevel::Warning,
                    format!(
                        "{}: {} with key {} of {}; trying the next key.",
                        target.label(),
                        class.describe(),
                        lease.index + 1,
                        target.pool.len()
                    ),
                )
                .await;
                attempts -= 1;
                continue;
            }
            if class == ErrorClass::MaxTokensTooLarge && max_tokens_retries < 2 {
                max_tokens_retries += 1;
                let smaller = classified
                    .max_tokens_limit
                    .or_else(|| max_tokens.map(|m| m / 2))
                    .unwrap_or(4096)
                    .max(256);
                max_tokens = Some(smaller);
                self.notice(
                    NoticeLevel::Warning,
                    format!(
                        "{}: max_tokens too large; retrying with {smaller}.",
                        target.label()
                    ),
                )
                .await;
                attempts -= 1;
                continue;
            }
            if class.compress() {
                overflow_retries += 1;
                if overflow_retries > 3 {
                    failure = Some(format!(
                        "{}: the conversation still does not fit after 3 attempts to shrink it ({error})",
                        target.label()
                    ));
                    break;
                }
                if let Some(limit) = classified.context_limit
                    && limit < *self.window
                {
                    *self.window = limit;
                    self.notice(NoticeLevel::Info, format!("{} reports a context window of {limit} tokens; using that from now on.", target.label())).await;
                }
                match compaction::prune_old_tool_output(self.history) {
                    Ok(pruned) => {
                        self.notice(
                            NoticeLevel::Warning,
                            format!("Context window exceeded; cleared {} old tool outputs ({} characters) and retrying.", pruned.results, pruned.chars),
                        )
                        .await;
                        attempts -= 1;
                        continue;
                    }
                    Err(why) => {
                        failure = Some(format!("{}: {why}", target.label()));
                        break;
                    }
                }
            }
            if class.retryable() && attempts < self.retry.max_attempts {
                let wait = backoff::delay(&self.retry, attempts, classified.retry_after);
                self.notice(
                    NoticeLevel::Warning,
                    format!(
                        "{}: {} ({error}); retrying in {:.1} s (attempt {} of {}).",
                        target.label(),
                        class.describe(),
                        wait.as_secs_f64(),
                        attempts + 1,
                        self.retry.max_attempts
                    ),
                )
                .await;
                tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => return Ok(CallResult::Cancelled { text: String::new() }),
                    () = tokio::time::sleep(wait) => {}
                }
                continue;
            }
            failure = Some(format!(
                "{}: {} — {error}",
                target.label(),
                class.describe()
            ));
            if class.fall_back() && self.fall_back(recovery, class.describe()).await {
                attempts = 0;
                continue;
            }
            break;
        }
        let message = failure.unwrap_or_else(|| "no model could be reached".to_string());
        self.notice(NoticeLevel::Error, format!("The turn failed: {message}"))
            .await;
        Err(TurnError::Provider(message))
    }

    /// Moves to the next model of the chain, if there is one.
    async fn fall_back(&self, recovery: &mut Recovery, why: &str) -> bool {
        if recovery.active + 1 >= recovery.chain.len() {
            return false;
        }
        let from = recovery.chain[recovery.active].label();
        recovery.active += 1;
        let to = recovery.chain[recovery.active].label();
        self.notice(
            NoticeLevel::Warning,
            format!("{from} failed ({why}); falling back to {to}."),
        )
        .await;
        true
    }

    async fn stream_once(
        &mut self,
        target: &ModelTarget,
        credential: Option<&str>,
        tools: &[ToolSpec],
        max_tokens: Option<u32>,
        usage: &mut TurnUsage,
    ) -> Attempt {
        let request = ChatRequest {
            model: &target.model,
            transcript: self.history,
            tools,
            max_tokens,
            credential,
        };
        let started = target.provider.stream(&request);
        let mut stream = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Attempt::Done(CallResult::Cancelled { text: String::new() }),
            result = started => match result {
                Ok(stream) => stream,
                Err(error) => return Attempt::Failed { error, shown: false },
            },
        };
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut signature = None;
        let mut shown = false;
        loop {
            let next = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Attempt::Done(CallResult::Cancelled { text }),
                next = stream.next() => next,
            };
            match next {
                None => {
                    let error = ProviderError::Stream {
                        provider: target.provider.name().to_string(),
                        failure: talaria_provider::StreamFailure::EndedEarly,
                        detail: "the stream ended without a final event".into(),
                    };
                    return Attempt::Failed { error, shown };
                }
                Some(Err(error)) => return Attempt::Failed { error, shown },
                Some(Ok(event)) => match event {
                    StreamEvent::TextDelta(delta) => {
                        shown = true;
                        text.push_str(&delta);
                        self.emit(EngineEvent::AgentText(delta)).await;
                    }
                    StreamEvent::ReasoningDelta(delta) => {
                        shown = true;
                        reasoning.push_str(&delta);
                        self.emit(EngineEvent::AgentThought(delta)).await;
                    }
                    StreamEvent::ReasoningSignature(value) => signature = Some(value),
                    StreamEvent::ToolCallStarted { .. } => {}
                    StreamEvent::Usage(call_usage) => {
                        usage.add(&call_usage);
                        self.session_usage.tokens.add(&call_usage);
                        if let Some(price) = self.router.price(&target.model) {
                            self.session_usage.cost += price.cost(&call_usage);
                            self.session_usage.priced = true;
                        }
                        let cost = self.session_usage.priced.then_some(self.session_usage.cost);
                        self.emit(EngineEvent::Usage {
                            used: call_usage.input_tokens + call_usage.output_tokens,
                            size: *self.window,
                            cost,
                        })
                        .await;
                    }
                    StreamEvent::Finished { reason, tool_calls } => {
                        return Attempt::Done(CallResult::Finished {
                            text,
                            reasoning,
                            signature,
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
            sensitive: self.settings.secrets.paths.clone(),
            progress: None,
        };
        let mut orchestrator = Orchestrator {
            registry: self.registry,
            bridge: self.bridge,
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
