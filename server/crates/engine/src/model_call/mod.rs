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

mod attempts;
pub(crate) mod compaction;
mod fit;
pub mod recovery;
mod repetition;
pub(crate) mod sink;

use futures_util::StreamExt;
use talaria_provider::{
    ChatRequest, ErrorClass, FinishReason, ProviderError, StreamEvent, StreamFailure,
    ToolCallRequest,
};
use tokio_util::sync::CancellationToken;

pub use crate::call_error::CallError;
use crate::config::RetryPolicy;
use crate::context::ContextState;
use crate::events::{ContextUse, LimitsView, NoticeLevel, TurnUsage};
use crate::router::{ModelRouter, ModelTarget};

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
    Finished(Answer),
    Cancelled { text: String },
}

/// A complete answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub text: String,
    pub reasoning: String,
    pub signature: Option<String>,
    pub reason: FinishReason,
    pub tool_calls: Vec<ToolCallRequest>,
    /// The model that answered (its label).
    pub model: String,
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
    Failed {
        error: ProviderError,
        shown: bool,
        /// What had streamed when the stream failed after tool calls arrived (the calls'
        /// arguments as far as they came).
        arrived: Option<Box<Answer>>,
    },
}

/// How often a stream's sink hears time pass.
const TICK: std::time::Duration = std::time::Duration::from_millis(250);

/// What an attempt's stream has brought so far.
struct Streamed {
    text: String,
    reasoning: String,
    signature: Option<String>,
    /// The user has seen some of it.
    shown: bool,
    /// Calls the provider said had streamed when its stream failed.
    before_failure: Vec<ToolCallRequest>,
    model: String,
    guard: repetition::RepetitionGuard,
    /// When the first output came, and the output tokens the provider counted (for the
    /// server's measured speed).
    first_output: Option<std::time::Instant>,
    output_tokens: u64,
    /// A tool call of the answer started (a steer no longer cuts the request).
    calls_started: bool,
}

impl Streamed {
    fn new(model: String) -> Self {
        Self {
            text: String::new(),
            reasoning: String::new(),
            signature: None,
            shown: false,
            before_failure: Vec::new(),
            model,
            guard: repetition::RepetitionGuard::default(),
            first_output: None,
            output_tokens: 0,
            calls_started: false,
        }
    }

    fn answer(self, reason: FinishReason, tool_calls: Vec<ToolCallRequest>) -> Answer {
        Answer {
            text: self.text,
            reasoning: self.reasoning,
            signature: self.signature,
            reason,
            tool_calls,
            model: self.model,
        }
    }

    /// The attempt failed with `error`; what had arrived goes with it when calls had.
    fn failed(mut self, error: ProviderError) -> Attempt {
        let shown = self.shown;
        let calls = std::mem::take(&mut self.before_failure);
        let arrived =
            (!calls.is_empty()).then(|| Box::new(self.answer(FinishReason::ToolCalls, calls)));
        Attempt::Failed {
            error,
            shown,
            arrived,
        }
    }
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
    /// Ends the request in flight for a steer ([`crate::steering`]): while it waits for the
    /// response, or streams before any tool call of its answer started; the call then
    /// returns as cancelled, with what streamed.
    pub steer_cut: Option<CancellationToken>,
    /// The session's thought level, sent to the models that take it (a fallback of another
    /// family gets none).
    pub effort: Option<talaria_provider::Effort>,
    /// The session's hooks, run before a compaction (`PreCompact`), and where they report.
    pub hooks: Option<(
        crate::hooks::HookScope<'a>,
        &'a tokio::sync::mpsc::Sender<crate::events::EngineEvent>,
    )>,
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
            steer_cut: None,
            effort: None,
            hooks: None,
        }
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
                () = steered(self.steer_cut.as_ref()) => return Waited::Cancelled,
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

    /// Adds a call's usage (and cost) to the caller's and the session's, corrects the token
    /// count for the model, and tells the sink.
    async fn count_usage<S: CallSink>(
        &mut self,
        call_usage: &talaria_provider::Usage,
        target: &ModelTarget,
        counted: u64,
        sink: &mut S,
    ) {
        self.usage.add(call_usage);
        self.session_usage.tokens.add(call_usage);
        if let Some(price) = self.router.price(&target.model) {
            self.session_usage.cost += price.cost(call_usage);
            self.session_usage.priced = true;
        }
        let cost = self.session_usage.priced.then_some(self.session_usage.cost);
        // The provider's prompt count corrects Talaria's for this model; the client sees
        // Talaria's count, corrected.
        let accounting = &mut self.context.accounting;
        accounting.observe(&target.model, counted, call_usage.input_tokens);
        let used = accounting.correct(counted, &target.model) + call_usage.output_tokens;
        sink.usage(call_usage, used, self.context.window, cost)
            .await;
    }

    /// What the sink is told of a call's rate limits.
    fn limits_view(
        target: &ModelTarget,
        limits: talaria_provider::RateLimits,
        refused: Option<ContextUse>,
    ) -> LimitsView {
        LimitsView {
            provider: target.provider.name().to_string(),
            model: target.model.clone(),
            limits,
            refused,
        }
    }

    /// The answer of a stream stopped in a loop: kept up to the loop's first copy, as a
    /// finished answer (a call in it runs once).
    async fn stopped_loop<S: CallSink>(
        mut streamed: Streamed,
        cut: usize,
        sink: &mut S,
    ) -> Attempt {
        streamed.text.truncate(cut);
        let message = format!(
            "The model wrote the same thing {} times in a row; Talaria stopped it there and kept it once.",
            repetition::REPEATS
        );
        sink.notice(NoticeLevel::Warning, message).await;
        Attempt::Done(CallResult::Finished(
            streamed.answer(FinishReason::Stop, Vec::new()),
        ))
    }

    /// One stream event: what was streamed so far to go on with, or the attempt's end.
    async fn on_event<S: CallSink>(
        &mut self,
        mut streamed: Streamed,
        event: StreamEvent,
        target: &ModelTarget,
        counted: u64,
        sink: &mut S,
    ) -> Result<Streamed, Attempt> {
        let now = std::time::Instant::now;
        match event {
            StreamEvent::TextDelta(delta) => {
                streamed.first_output.get_or_insert_with(now);
                streamed.shown = true;
                streamed.text.push_str(&delta);
                sink.text(delta).await;
                if let Some(cut) = streamed.guard.check(&streamed.text) {
                    // Dropping the stream ends the request: the server stops generating.
                    return Err(Self::stopped_loop(streamed, cut, sink).await);
                }
            }
            StreamEvent::ReasoningDelta(delta) => {
                streamed.first_output.get_or_insert_with(now);
                streamed.shown = true;
                streamed.reasoning.push_str(&delta);
                sink.thought(delta).await;
            }
            StreamEvent::ReasoningSignature(value) => streamed.signature = Some(value),
            StreamEvent::ToolCallStarted { id, name } => {
                streamed.first_output.get_or_insert_with(now);
                streamed.calls_started = true;
                sink.tool_call_started(id, name).await;
            }
            StreamEvent::CallsBeforeFailure(calls) => streamed.before_failure = calls,
            StreamEvent::RateLimits(limits) => {
                sink.rate_limits(Self::limits_view(target, limits, None))
                    .await;
            }
            StreamEvent::Usage(call_usage) => {
                streamed.output_tokens = call_usage.output_tokens;
                self.count_usage(&call_usage, target, counted, sink).await;
            }
            StreamEvent::Finished { reason, tool_calls } => {
                if let (Some(pace), Some(first)) = (&target.limits.pace, streamed.first_output) {
                    pace.observe(streamed.output_tokens, first.elapsed());
                }
                let answer = streamed.answer(reason, tool_calls);
                return Err(Attempt::Done(CallResult::Finished(answer)));
            }
        }
        Ok(streamed)
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
            Waited::TimedOut(error) | Waited::Done(Err(error)) => {
                if let Some(limits) = error.limits() {
                    // Any answer's headers tell the limits; only a limit's refusal is one.
                    let class = talaria_provider::classify(&error).class;
                    let refusal = crate::call_error::is_limit(class);
                    let refused = refusal.then(|| ContextUse {
                        used: self.context.accounting.correct(counted, &target.model),
                        size: self.context.window,
                    });
                    let view = Self::limits_view(target, limits.clone(), refused);
                    sink.rate_limits(view).await;
                }
                return Attempt::Failed {
                    error,
                    shown: false,
                    arrived: None,
                };
            }
            Waited::Done(Ok(stream)) => stream,
        };
        let mut streamed = Streamed::new(target.label());
        // One waiter for the whole stream, not one registered and dropped per delta.
        let cancelled = self.cancel.clone().cancelled_owned();
        tokio::pin!(cancelled);
        let cut = self.steer_cut.clone();
        let steer = steered(cut.as_ref());
        tokio::pin!(steer);
        let mut cut_armed = cut.is_some();
        // The sink hears time pass while a model writes (held-back text shows progress).
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                biased;
                () = &mut cancelled => {
                    return Attempt::Done(CallResult::Cancelled { text: streamed.text });
                }
                () = &mut steer, if cut_armed => {
                    if streamed.calls_started {
                        // Its calls run first; the steer follows them.
                        cut_armed = false;
                        continue;
                    }
                    return Attempt::Done(CallResult::Cancelled { text: streamed.text });
                }
                next = stream.next() => next,
                _ = ticks.tick(), if sink.holding() => {
                    sink.tick().await;
                    continue;
                }
            };
            let event = match next {
                None => {
                    let error = ProviderError::Stream {
                        provider: target.provider.name().to_string(),
                        failure: StreamFailure::EndedEarly,
                        detail: "the stream ended without a final event".into(),
                    };
                    return streamed.failed(error);
                }
                Some(Err(error)) => return streamed.failed(error),
                Some(Ok(event)) => event,
            };
            streamed = match self.on_event(streamed, event, target, counted, sink).await {
                Ok(going_on) => going_on,
                Err(ended) => return ended,
            };
        }
    }
}

/// Ends when a steer cuts the request (never, when nothing may cut it).
async fn steered(cut: Option<&CancellationToken>) {
    match cut {
        Some(cut) => cut.cancelled().await,
        None => std::future::pending().await,
    }
}
