//! One model-call path for every caller: a call goes through the whole recovery stack
//! (classify → [`recovery::next_action`] → rotate key, shrink `max_tokens`, prune the context,
//! restart a broken answer, back off, fall back) and writes what arrives to a caller's
//! [`CallSink`]. The foreground turn streams to the chat; side tasks collect silently.
//!
//! Invariants:
//! - Every await races the cancellation token (backoff waits included).
//! - A failed call leaves nothing in the record; a cancelled one returns the text shown.
//! - A stream that breaks after output is restarted only for transient failures, after a
//!   notice that the partial answer is abandoned; only a complete answer is returned.

pub(crate) mod compaction;
mod error;
mod fit;
pub mod recovery;
pub(crate) mod sink;

use futures_util::StreamExt;
use talaria_provider::{
    ChatRequest, ErrorClass, FinishReason, ProviderError, StreamEvent, StreamFailure,
    ToolCallRequest, ToolSpec, classify,
};
use talaria_record::Transcript;
use tokio_util::sync::CancellationToken;

use crate::backoff;
use crate::config::RetryPolicy;
use crate::context::{ContextState, tools_text};
use crate::events::{NoticeLevel, TurnUsage};
use crate::router::{ModelRouter, ModelTarget};
use compaction::Trigger;
pub use error::CallError;
use recovery::{Action, GiveUp, RecoveryState, next_action};

pub(crate) use sink::{CallSink, ChatSink, SilentSink, TextHold};

/// What a session keeps across turns about its model use.
/// What a session (or one of its side tasks) used: tokens and, when priced, cost.
#[derive(Debug, Clone, Default)]
pub struct SessionUsage {
    pub tokens: TurnUsage,
    pub cost: f64,
    pub priced: bool,
}

impl SessionUsage {
    /// Adds what another caller (a side task beside the session) used.
    pub fn merge(&mut self, other: &SessionUsage) {
        self.tokens.merge(&other.tokens);
        if other.priced {
            self.cost += other.cost;
            self.priced = true;
        }
    }
}

/// What one model call produced.
#[derive(Debug)]
pub(crate) enum CallResult {
    Finished {
        text: String,
        reasoning: String,
        signature: Option<String>,
        reason: FinishReason,
        tool_calls: Vec<ToolCallRequest>,
        /// The model that answered (its label).
        model: String,
    },
    Cancelled {
        text: String,
    },
}

/// How waiting for a response to start ended.
enum Waited<T> {
    Done(T),
    Cancelled,
    TimedOut(ProviderError),
}

/// One attempt at a model call.
enum Attempt {
    Done(CallResult),
    Failed { error: ProviderError, shown: bool },
}

/// Calls models for one caller (a turn, a side task): the chain, the model in use (kept once
/// a fallback answered, for the rest of the caller's work), usage.
pub(crate) struct ModelCaller<'a> {
    pub router: &'a ModelRouter,
    pub chain: Vec<ModelTarget>,
    pub active: usize,
    announced_fallback: bool,
    pub retry: RetryPolicy,
    pub cancel: &'a CancellationToken,
    /// The window, token accounting and compaction state.
    pub context: &'a mut ContextState,
    /// Usage of this caller's calls.
    pub usage: TurnUsage,
    pub session_usage: &'a mut SessionUsage,
    /// The class of the last failed attempt.
    pub last_failure: Option<ErrorClass>,
    /// Where tool results too large for the window are stored (`None`: they cannot be).
    pub spill_dir: Option<std::path::PathBuf>,
}

impl<'a> ModelCaller<'a> {
    pub fn new(
        router: &'a ModelRouter,
        chain: Vec<ModelTarget>,
        retry: RetryPolicy,
        cancel: &'a CancellationToken,
        context: &'a mut ContextState,
        session_usage: &'a mut SessionUsage,
    ) -> Self {
        Self {
            router,
            chain,
            active: 0,
            announced_fallback: false,
            retry,
            cancel,
            context,
            usage: TurnUsage::default(),
            session_usage,
            last_failure: None,
            spill_dir: None,
        }
    }

    /// One model call through the whole recovery stack. `Err` is the failure to report (the
    /// sink has already been told).
    pub async fn call<S: CallSink>(
        &mut self,
        transcript: &mut Transcript,
        tools: &[ToolSpec],
        max_tokens: Option<u32>,
        sink: &mut S,
    ) -> Result<CallResult, CallError> {
        let mut state = RecoveryState {
            max_attempts: self.retry.max_attempts,
            ..RecoveryState::default()
        };
        let mut max_tokens = max_tokens;
        let mut failure: Option<CallError> = None;
        // Tools described in the prompt instead of sent natively: for the session once its
        // server rejected the model's calls twice, else for the rest of this call after once.
        let mut tools_in_prompt = self.context.tools_in_prompt && !tools.is_empty();
        let tools_text = tools_text(tools);
        self.compact_if_needed(transcript, &tools_text, sink).await;
        let answer_room = max_tokens.or_else(|| {
            self.chain
                .get(self.active)
                .and_then(|t| t.limits.default_max_tokens)
        });
        if let Err(why) = self
            .fit_to_window(transcript, &tools_text, answer_room, sink)
            .await
        {
            sink.notice(NoticeLevel::Error, format!("The turn failed: {why}"))
                .await;
            return Err(why);
        }
        while self.active < self.chain.len() {
            let target = self.chain[self.active].clone();
            let lease = target.pool.lease();
            if lease.is_none() && !target.pool.is_empty() {
                failure = Some(CallError::KeysCoolingDown {
                    label: target.label(),
                });
                if self.fall_back("its keys are cooling down", sink).await {
                    state = RecoveryState {
                        max_attempts: state.max_attempts,
                        ..RecoveryState::default()
                    };
                    continue;
                }
                break;
            }
            state.attempts += 1;
            let credential = lease.as_ref().map(|l| l.key.as_str());
            let prompted = tools_in_prompt
                .then(|| crate::text_calls::prompt::with_tools_in_prompt(transcript, tools));
            let (sent, sent_tools, sent_tools_text) = match &prompted {
                Some(prompted) => (prompted, &[][..], ""),
                None => (&*transcript, tools, tools_text.as_str()),
            };
            let counted = self.context.count_request(sent, sent_tools_text).await;
            let request = ChatRequest {
                model: &target.model,
                transcript: sent,
                tools: sent_tools,
                max_tokens: max_tokens.or(target.limits.default_max_tokens),
                credential,
            };
            sink.attempt_started().await;
            let attempt = self.stream_once(&target, &request, counted, sink).await;
            let (error, shown) = match attempt {
                Attempt::Done(result) => {
                    if matches!(result, CallResult::Finished { .. })
                        && self.active > 0
                        && !self.announced_fallback
                    {
                        self.announced_fallback = true;
                        let message = format!("Answered by the fallback model {}.", target.label());
                        sink.notice(NoticeLevel::Info, message).await;
                    }
                    return Ok(result);
                }
                Attempt::Failed { error, shown } => (error, shown),
            };
            let classified = classify(&error);
            let class = classified.class;
            self.last_failure = Some(class);
            tracing::warn!(
                ?class,
                attempt = state.attempts,
                "model call failed: {error}"
            );
            state.output_shown = shown;
            state.other_key = lease.as_ref().is_some_and(|l| target.pool.has_other(l));
            state.fallback_left = self.active + 1 < self.chain.len();
            let label = target.label();
            if !tools_in_prompt
                && !tools.is_empty()
                && talaria_provider::classify::is_malformed_output(&error)
            {
                tools_in_prompt = true;
                self.tools_rejected(&label);
                if sink.displayed() {
                    let message = format!(
                        "The answer from {label} broke off. Nothing was run; the partial answer above is abandoned and the answer restarts."
                    );
                    sink.notice(NoticeLevel::Warning, message).await;
                }
                state.attempts -= 1;
                continue;
            }
            match next_action(class, &state) {
                Action::RotateKey => {
                    if let Some(lease) = &lease {
                        target.pool.cool_down(lease);
                        let message = format!(
                            "{label}: {} with key {} of {}; trying the next key.",
                            class.describe(),
                            lease.index + 1,
                            target.pool.len()
                        );
                        sink.notice(NoticeLevel::Warning, message).await;
                    }
                    state.attempts -= 1;
                }
                Action::ShrinkMaxTokens => {
                    state.shrinks += 1;
                    let smaller = classified
                        .max_tokens_limit
                        .or_else(|| max_tokens.map(|m| m / 2))
                        .unwrap_or(4096)
                        .max(256);
                    max_tokens = Some(smaller);
                    let message =
                        format!("{label}: max_tokens too large; retrying with {smaller}.");
                    sink.notice(NoticeLevel::Warning, message).await;
                    state.attempts -= 1;
                }
                Action::Compress => {
                    state.compressions += 1;
                    if let Some(limit) = classified.context_limit
                        && limit < self.context.window
                    {
                        self.context.window = limit;
                        let message = format!(
                            "{label} reports a context window of {limit} tokens; using that from now on."
                        );
                        sink.notice(NoticeLevel::Info, message).await;
                    }
                    match self
                        .compact(transcript, &tools_text, Trigger::Overflow, sink)
                        .await
                    {
                        Ok(()) => {
                            let message = format!(
                                "{label} said the conversation does not fit its context window; it was compacted and the request is sent again."
                            );
                            sink.notice(NoticeLevel::Warning, message).await;
                            state.attempts -= 1;
                        }
                        Err(source) => {
                            failure = Some(CallError::CompactionFailed { label, source });
                            break;
                        }
                    }
                }
                Action::Restart => {
                    state.restarts += 1;
                    let message = format!(
                        "The answer from {label} broke off ({error}). Nothing was run; the partial answer above is abandoned and the answer restarts."
                    );
                    sink.notice(NoticeLevel::Warning, message).await;
                    state.attempts -= 1;
                }
                Action::Retry => {
                    let wait = backoff::delay(&self.retry, state.attempts, classified.retry_after);
                    let message = format!(
                        "{label}: {} ({error}); retrying in {:.1} s (attempt {} of {}).",
                        class.describe(),
                        wait.as_secs_f64(),
                        state.attempts + 1,
                        self.retry.max_attempts
                    );
                    sink.notice(NoticeLevel::Warning, message).await;
                    tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => return Ok(CallResult::Cancelled { text: String::new() }),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
                Action::FallBack => {
                    failure = Some(CallError::Provider {
                        label,
                        class,
                        source: error,
                    });
                    self.fall_back(class.describe(), sink).await;
                    state = RecoveryState {
                        max_attempts: state.max_attempts,
                        ..RecoveryState::default()
                    };
                }
                Action::Fail(GiveUp::CutAfterOutput) => {
                    let failed = CallError::CutAfterOutput {
                        label,
                        source: error,
                    };
                    sink.notice(NoticeLevel::Error, failed.to_string()).await;
                    return Err(failed);
                }
                Action::Fail(GiveUp::StillTooLarge) => {
                    failure = Some(CallError::StillTooLarge {
                        label,
                        attempts: recovery::MAX_COMPRESSIONS,
                        source: error,
                    });
                    break;
                }
                Action::Fail(GiveUp::Exhausted) => {
                    failure = Some(CallError::Provider {
                        label,
                        class,
                        source: error,
                    });
                    break;
                }
            }
        }
        let failed = failure.unwrap_or(CallError::NoModel);
        sink.notice(NoticeLevel::Error, format!("The turn failed: {failed}"))
            .await;
        Err(failed)
    }

    /// Notes that the server rejected the model's own output as a malformed tool call: this
    /// call is asked again with the tools in the prompt, and after the second time in a
    /// session every call is (said once, in the log).
    fn tools_rejected(&mut self, label: &str) {
        self.context.malformed_outputs += 1;
        if self.context.malformed_outputs >= 2 && !self.context.tools_in_prompt {
            self.context.tools_in_prompt = true;
            tracing::warn!(
                "{label}: the server rejected the model's tool calls twice in this session; \
                 from now on its tools are described in the prompt and calls are read from the \
                 answer's text"
            );
        } else {
            tracing::info!(
                "{label}: the server rejected the model's tool-call output; asking again with \
                 the tools described in the prompt"
            );
        }
    }

    /// Moves to the next model of the chain, if there is one.
    async fn fall_back<S: CallSink>(&mut self, why: &str, sink: &mut S) -> bool {
        if self.active + 1 >= self.chain.len() {
            return false;
        }
        let from = self.chain[self.active].label();
        self.active += 1;
        let to = self.chain[self.active].label();
        sink.notice(
            NoticeLevel::Warning,
            format!("{from} failed ({why}); falling back to {to}."),
        )
        .await;
        true
    }

    /// Waits for a response to start, telling the sink every `still_working_after` of
    /// silence, up to the target's first-byte timeout.
    async fn wait_for_start<F: std::future::Future, S: CallSink>(
        &self,
        started: F,
        target: &ModelTarget,
        sink: &mut S,
    ) -> Waited<F::Output> {
        let began = tokio::time::Instant::now();
        let deadline = began + target.limits.first_byte_timeout;
        let tick = target.limits.still_working_after;
        let mut next_tick = began + tick;
        tokio::pin!(started);
        loop {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Waited::Cancelled,
                output = &mut started => return Waited::Done(output),
                () = tokio::time::sleep_until(deadline) => {
                    return Waited::TimedOut(ProviderError::Stream {
                        provider: target.provider.name().to_string(),
                        failure: StreamFailure::Stalled,
                        detail: format!(
                            "no response within {} s (first_byte_timeout_secs)",
                            target.limits.first_byte_timeout.as_secs()
                        ),
                    });
                }
                () = tokio::time::sleep_until(next_tick) => {
                    next_tick += tick;
                    let message = format!(
                        "Still waiting for {} to start answering ({} s so far).",
                        target.label(),
                        began.elapsed().as_secs()
                    );
                    sink.notice(NoticeLevel::Info, message).await;
                }
            }
        }
    }

    async fn stream_once<S: CallSink>(
        &mut self,
        target: &ModelTarget,
        request: &ChatRequest<'_>,
        counted: u64,
        sink: &mut S,
    ) -> Attempt {
        let started = target.provider.stream(request);
        let waited = self.wait_for_start(started, target, sink).await;
        let mut stream = match waited {
            Waited::Cancelled => {
                return Attempt::Done(CallResult::Cancelled {
                    text: String::new(),
                });
            }
            Waited::TimedOut(error) => {
                return Attempt::Failed {
                    error,
                    shown: false,
                };
            }
            Waited::Done(Ok(stream)) => stream,
            Waited::Done(Err(error)) => {
                return Attempt::Failed {
                    error,
                    shown: false,
                };
            }
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
            let event = match next {
                None => {
                    let error = ProviderError::Stream {
                        provider: target.provider.name().to_string(),
                        failure: StreamFailure::EndedEarly,
                        detail: "the stream ended without a final event".into(),
                    };
                    return Attempt::Failed { error, shown };
                }
                Some(Err(error)) => return Attempt::Failed { error, shown },
                Some(Ok(event)) => event,
            };
            match event {
                StreamEvent::TextDelta(delta) => {
                    shown = true;
                    text.push_str(&delta);
                    sink.text(delta).await;
                }
                StreamEvent::ReasoningDelta(delta) => {
                    shown = true;
                    reasoning.push_str(&delta);
                    sink.thought(delta).await;
                }
                StreamEvent::ReasoningSignature(value) => signature = Some(value),
                StreamEvent::ToolCallStarted { id, name } => sink.tool_call_started(id, name).await,
                StreamEvent::Usage(call_usage) => {
                    self.usage.add(&call_usage);
                    self.session_usage.tokens.add(&call_usage);
                    if let Some(price) = self.router.price(&target.model) {
                        self.session_usage.cost += price.cost(&call_usage);
                        self.session_usage.priced = true;
                    }
                    let cost = self.session_usage.priced.then_some(self.session_usage.cost);
                    // The provider's prompt count corrects Talaria's for this model; the
                    // client sees Talaria's count, corrected.
                    let accounting = &mut self.context.accounting;
                    accounting.observe(&target.model, counted, call_usage.input_tokens);
                    let used =
                        accounting.correct(counted, &target.model) + call_usage.output_tokens;
                    sink.usage(&call_usage, used, self.context.window, cost)
                        .await;
                }
                StreamEvent::Finished { reason, tool_calls } => {
                    return Attempt::Done(CallResult::Finished {
                        text,
                        reasoning,
                        signature,
                        reason,
                        tool_calls,
                        model: target.label(),
                    });
                }
            }
        }
    }
}
