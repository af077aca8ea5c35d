//! [`ModelCaller::call`]: one model call through the whole recovery stack — make the request
//! fit, then attempt, and after each failed attempt take the step the recovery table says
//! (rotate the key, shrink `max_tokens`, compact, restart, retry after a wait, fall back, or
//! give up with a [`CallError`]).

use talaria_provider::classify::classify;
use talaria_provider::{ChatRequest, FinishReason, ProviderError, ToolSpec};
use talaria_record::Transcript;

use super::compaction::Trigger;
use super::recovery::{self, Action, GiveUp, RecoveryState, next_action};
use super::{Answer, Attempt, CallError, CallResult, CallSink, ModelCaller};
use crate::backoff;
use crate::context::tools_text;
use crate::credentials::Lease;
use crate::events::NoticeLevel;
use crate::router::ModelTarget;

/// What one call carries from attempt to attempt.
struct Attempts {
    state: RecoveryState,
    max_tokens: Option<u32>,
    /// Why the call fails if nothing more is tried.
    failure: Option<CallError>,
    /// Tools are described in the prompt instead of sent natively.
    tools_in_prompt: bool,
}

impl Attempts {
    /// Starts over with the next model of the chain (the settings carry on).
    fn next_model(&mut self) {
        self.state = RecoveryState {
            max_attempts: self.state.max_attempts,
            ..RecoveryState::default()
        };
    }
}

/// What the call sends: the record and the tools it works with.
struct Sending<'t> {
    transcript: &'t mut Transcript,
    tools: &'t [ToolSpec],
    tools_text: String,
}

/// A failed attempt, as recovery sees it.
struct Failed<'f> {
    target: &'f ModelTarget,
    lease: Option<&'f Lease>,
    error: ProviderError,
    label: String,
}

/// What a refusal by a limit is told with: the pool of limits of the model that refused, and
/// the retry budget in seconds when the provider's wait was beyond it.
struct Refused {
    pool: String,
    budget: Option<u64>,
}

/// What follows a failed attempt.
enum Flow {
    /// Attempt again (same model, or the next after a fallback).
    Again,
    /// Nothing more to try: the call fails with the recorded failure.
    Stop,
    /// The call ends now.
    End(Result<CallResult, CallError>),
}

impl ModelCaller<'_> {
    /// One model call through the whole recovery stack. `Err` is the failure to report (the
    /// sink has already been told).
    pub async fn call<S: CallSink>(
        &mut self,
        transcript: &mut Transcript,
        tools: &[ToolSpec],
        max_tokens: Option<u32>,
        sink: &mut S,
    ) -> Result<CallResult, CallError> {
        let mut attempts = Attempts {
            state: RecoveryState {
                max_attempts: self.retry.max_attempts,
                ..RecoveryState::default()
            },
            max_tokens,
            failure: None,
            // For the session once its server rejected the model's calls twice, else for
            // the rest of this call after once.
            tools_in_prompt: self.context.tools_in_prompt && !tools.is_empty(),
        };
        let mut sending = Sending {
            transcript,
            tools,
            tools_text: tools_text(tools),
        };
        if let Err(failed) = self.ready_to_send(&mut sending, max_tokens, sink).await {
            return Err(Self::fail(failed, sink).await);
        }
        while self.active < self.chain.len() {
            let target = self.chain[self.active].clone();
            let lease = target.pool.lease();
            if lease.is_none() && !target.pool.is_empty() {
                attempts.failure = Some(CallError::KeysCoolingDown {
                    label: target.label(),
                });
                if self.fall_back("its keys are cooling down", sink).await {
                    attempts.next_model();
                    continue;
                }
                break;
            }
            attempts.state.attempts += 1;
            let attempt = self
                .attempt(&target, lease.as_ref(), &sending, &attempts, sink)
                .await;
            let (error, shown, arrived) = match attempt {
                Attempt::Done(result) => {
                    let result = Self::whole_calls_of_a_cut_answer(result, tools, sink).await;
                    return Ok(self.answered(result, &target, sink).await);
                }
                Attempt::Failed {
                    error,
                    shown,
                    arrived,
                } => (error, shown, arrived),
            };
            if let Some(kept) = arrived.and_then(|a| Self::calls_that_arrived(*a, tools, sink)) {
                let names: Vec<String> = kept
                    .tool_calls
                    .iter()
                    .map(|c| format!("`{}`", c.name))
                    .collect();
                let message = format!(
                    "{}'s stream failed after the model's {} call had arrived whole ({error}); Talaria runs it.",
                    target.label(),
                    names.join(", ")
                );
                sink.notice(NoticeLevel::Info, message).await;
                let result = CallResult::Finished(kept);
                return Ok(self.answered(result, &target, sink).await);
            }
            let failed = Failed {
                target: &target,
                lease: lease.as_ref(),
                error,
                label: target.label(),
            };
            match self
                .after_failure(failed, shown, &mut attempts, &mut sending, sink)
                .await
            {
                Flow::Again => {}
                Flow::Stop => break,
                Flow::End(ended) => return ended,
            }
        }
        Err(Self::fail(attempts.failure.unwrap_or(CallError::NoModel), sink).await)
    }

    /// The answer that had arrived when its stream failed, with only its calls of offered
    /// tools whose arguments are whole and pass the schema; `None` when no call did.
    fn calls_that_arrived<S: CallSink>(
        mut arrived: Answer,
        tools: &[ToolSpec],
        sink: &S,
    ) -> Option<Answer> {
        arrived
            .tool_calls
            .retain(|call| offered_and_runnable(tools, sink, call));
        (!arrived.tool_calls.is_empty()).then_some(arrived)
    }

    /// An answer the output limit cut after whole tool calls: those calls run (the cut one,
    /// whose arguments never closed, is dropped and the user told).
    async fn whole_calls_of_a_cut_answer<S: CallSink>(
        result: CallResult,
        tools: &[ToolSpec],
        sink: &mut S,
    ) -> CallResult {
        let CallResult::Finished(mut answer) = result else {
            return result;
        };
        if answer.reason != FinishReason::Length || answer.tool_calls.is_empty() {
            return CallResult::Finished(answer);
        }
        let before = answer.tool_calls.len();
        answer
            .tool_calls
            .retain(|call| offered_and_runnable(tools, sink, call));
        if answer.tool_calls.is_empty() {
            return CallResult::Finished(answer);
        }
        answer.reason = FinishReason::ToolCalls;
        if answer.tool_calls.len() < before {
            let message = format!(
                "The output limit cut the answer inside a tool call; that call was dropped and the {} whole one(s) before it run.",
                answer.tool_calls.len()
            );
            sink.notice(NoticeLevel::Warning, message).await;
        }
        CallResult::Finished(answer)
    }

    /// Compacts when due and fits the request to the window before anything is sent.
    async fn ready_to_send<S: CallSink>(
        &mut self,
        sending: &mut Sending<'_>,
        max_tokens: Option<u32>,
        sink: &mut S,
    ) -> Result<(), CallError> {
        self.compact_if_needed(sending.transcript, &sending.tools_text, sink)
            .await;
        let answer_room = max_tokens.or_else(|| {
            self.chain
                .get(self.active)
                .and_then(|t| t.limits.default_cap())
        });
        self.fit_to_window(sending.transcript, &sending.tools_text, answer_room, sink)
            .await
    }

    /// Tells the sink the call failed; returns the failure.
    async fn fail<S: CallSink>(failed: CallError, sink: &mut S) -> CallError {
        sink.notice(NoticeLevel::Error, format!("The turn failed: {failed}"))
            .await;
        failed
    }

    /// One attempt with `target`: the request as the attempt's settings say, streamed.
    async fn attempt<S: CallSink>(
        &mut self,
        target: &ModelTarget,
        lease: Option<&Lease>,
        sending: &Sending<'_>,
        attempts: &Attempts,
        sink: &mut S,
    ) -> Attempt {
        let prompted = attempts.tools_in_prompt.then(|| {
            crate::text_calls::prompt::with_tools_in_prompt(sending.transcript, sending.tools)
        });
        let (sent, sent_tools, sent_tools_text) = match &prompted {
            Some(prompted) => (prompted, &[][..], ""),
            None => (
                &*sending.transcript,
                sending.tools,
                sending.tools_text.as_str(),
            ),
        };
        let counted = self.context.count_request(sent, sent_tools_text).await;
        let request = ChatRequest {
            model: &target.model,
            transcript: sent,
            tools: sent_tools,
            max_tokens: attempts.max_tokens.or_else(|| target.limits.default_cap()),
            credential: lease.map(|l| l.key.as_str()),
            effort: self.effort.filter(|effort| {
                talaria_provider::Effort::levels_of(&target.model).contains(effort)
            }),
        };
        sink.attempt_started().await;
        self.stream_once(target, &request, counted, sink).await
    }

    /// An attempt that ended: a fallback's first answer is announced once.
    async fn answered<S: CallSink>(
        &mut self,
        result: CallResult,
        target: &ModelTarget,
        sink: &mut S,
    ) -> CallResult {
        if matches!(result, CallResult::Finished(_)) && self.active > 0 && !self.announced_fallback
        {
            self.announced_fallback = true;
            let message = format!("Answered by the fallback model {}.", target.label());
            sink.notice(NoticeLevel::Info, message).await;
        }
        result
    }

    /// Classifies a failed attempt and takes the recovery step for it.
    async fn after_failure<S: CallSink>(
        &mut self,
        failed: Failed<'_>,
        shown: bool,
        attempts: &mut Attempts,
        sending: &mut Sending<'_>,
        sink: &mut S,
    ) -> Flow {
        let class = classify(&failed.error).class;
        self.last_failure = Some(class);
        tracing::warn!(
            ?class,
            attempt = attempts.state.attempts,
            "model call failed: {}",
            failed.error
        );
        let state = &mut attempts.state;
        state.output_shown = shown;
        state.other_key = failed
            .lease
            .is_some_and(|l| failed.target.pool.has_other(l));
        state.fallback_left = self.active + 1 < self.chain.len();
        let budget = std::time::Duration::from_secs(self.retry.retry_after_cap_secs);
        state.wait_beyond_budget = classify(&failed.error)
            .retry_after
            .is_some_and(|wait| wait > budget);
        if !attempts.tools_in_prompt
            && !sending.tools.is_empty()
            && talaria_provider::classify::is_malformed_output(&failed.error)
        {
            attempts.tools_in_prompt = true;
            self.tools_rejected(&failed.label);
            if sink.displayed() {
                let message = format!(
                    "The answer from {} broke off. Nothing was run; the partial answer above is abandoned and the answer restarts.",
                    failed.label
                );
                sink.notice(NoticeLevel::Warning, message).await;
            }
            attempts.state.attempts -= 1;
            return Flow::Again;
        }
        let action = next_action(class, &attempts.state);
        self.recover(action, failed, attempts, sending, sink).await
    }

    /// Takes one recovery step.
    async fn recover<S: CallSink>(
        &mut self,
        action: Action,
        failed: Failed<'_>,
        attempts: &mut Attempts,
        sending: &mut Sending<'_>,
        sink: &mut S,
    ) -> Flow {
        let class = classify(&failed.error).class;
        let Failed {
            target,
            lease,
            error,
            label,
        } = failed;
        match action {
            Action::RotateKey => {
                if let Some(lease) = lease {
                    target.pool.cool_down(lease);
                    let message = format!(
                        "{label}: {} with key {} of {}; trying the next key.",
                        class.describe(),
                        lease.index + 1,
                        target.pool.len()
                    );
                    sink.notice(NoticeLevel::Warning, message).await;
                }
                attempts.state.attempts -= 1;
                Flow::Again
            }
            Action::ShrinkMaxTokens => {
                self.shrink_max_tokens(&error, &label, attempts, sink).await;
                Flow::Again
            }
            Action::Compress => {
                self.compress_after_overflow(&error, label, attempts, sending, sink)
                    .await
            }
            Action::Restart => {
                attempts.state.restarts += 1;
                let message = format!(
                    "The answer from {label} broke off ({error}). Nothing was run; the partial answer above is abandoned and the answer restarts."
                );
                sink.notice(NoticeLevel::Warning, message).await;
                attempts.state.attempts -= 1;
                Flow::Again
            }
            Action::Retry => self.wait_to_retry(&error, &label, attempts, sink).await,
            Action::FallBack => {
                attempts.failure = Some(CallError::Provider {
                    label,
                    class,
                    source: error,
                });
                self.fall_back(class.describe(), sink).await;
                attempts.next_model();
                Flow::Again
            }
            Action::Fail(give_up) => {
                let refused = Refused {
                    pool: crate::events::limits_pool(target.provider.name(), &target.model),
                    budget: attempts
                        .state
                        .wait_beyond_budget
                        .then_some(self.retry.retry_after_cap_secs),
                };
                Self::give_up(give_up, label, class, error, refused, attempts, sink).await
            }
        }
    }

    /// The provider said `max_tokens` is too large: the next attempt asks for less.
    async fn shrink_max_tokens<S: CallSink>(
        &mut self,
        error: &ProviderError,
        label: &str,
        attempts: &mut Attempts,
        sink: &mut S,
    ) {
        attempts.state.shrinks += 1;
        let smaller = classify(error)
            .max_tokens_limit
            .or_else(|| attempts.max_tokens.map(|m| m / 2))
            .unwrap_or(4096)
            .max(256);
        attempts.max_tokens = Some(smaller);
        let message = format!("{label}: max_tokens too large; retrying with {smaller}.");
        sink.notice(NoticeLevel::Warning, message).await;
        attempts.state.attempts -= 1;
    }

    /// The provider said the conversation does not fit: learn its window, compact, send again.
    async fn compress_after_overflow<S: CallSink>(
        &mut self,
        error: &ProviderError,
        label: String,
        attempts: &mut Attempts,
        sending: &mut Sending<'_>,
        sink: &mut S,
    ) -> Flow {
        attempts.state.compressions += 1;
        if let Some(limit) = classify(error).context_limit
            && limit < self.context.window
        {
            self.context.window = limit;
            let message = format!(
                "{label} reports a context window of {limit} tokens; using that from now on."
            );
            sink.notice(NoticeLevel::Info, message).await;
        }
        let compacted = self
            .compact(
                sending.transcript,
                &sending.tools_text,
                Trigger::Overflow,
                sink,
            )
            .await;
        match compacted {
            Ok(()) => {
                let message = format!(
                    "{label} said the conversation does not fit its context window; it was compacted and the request is sent again."
                );
                sink.notice(NoticeLevel::Warning, message).await;
                attempts.state.attempts -= 1;
                Flow::Again
            }
            Err(source) => {
                attempts.failure = Some(CallError::CompactionFailed { label, source });
                Flow::Stop
            }
        }
    }

    /// Waits (with jittered backoff, honouring `Retry-After`) before the next attempt; a
    /// cancel ends the call at once.
    async fn wait_to_retry<S: CallSink>(
        &mut self,
        error: &ProviderError,
        label: &str,
        attempts: &Attempts,
        sink: &mut S,
    ) -> Flow {
        let classified = classify(error);
        let wait = backoff::delay(&self.retry, attempts.state.attempts, classified.retry_after);
        let message = format!(
            "{label}: {} ({error}); retrying in {:.1} s (attempt {} of {}).",
            classified.class.describe(),
            wait.as_secs_f64(),
            attempts.state.attempts + 1,
            self.retry.max_attempts
        );
        sink.notice(NoticeLevel::Warning, message).await;
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Flow::End(Ok(CallResult::Cancelled { text: String::new() })),
            () = tokio::time::sleep(wait) => Flow::Again,
        }
    }

    /// Recovery gave up: the failure that ends the call.
    async fn give_up<S: CallSink>(
        give_up: GiveUp,
        label: String,
        class: talaria_provider::classify::ErrorClass,
        error: ProviderError,
        refused: Refused,
        attempts: &mut Attempts,
        sink: &mut S,
    ) -> Flow {
        match give_up {
            GiveUp::CutAfterOutput => {
                let failed = CallError::CutAfterOutput {
                    label,
                    source: error,
                };
                sink.notice(NoticeLevel::Error, failed.to_string()).await;
                Flow::End(Err(failed))
            }
            GiveUp::StillTooLarge => {
                attempts.failure = Some(CallError::StillTooLarge {
                    label,
                    attempts: recovery::MAX_COMPRESSIONS,
                    source: error,
                });
                Flow::Stop
            }
            GiveUp::Exhausted if crate::call_error::is_limit(class) => {
                attempts.failure = Some(CallError::limit_reached(
                    label,
                    refused.pool,
                    class,
                    error,
                    refused.budget,
                ));
                Flow::Stop
            }
            GiveUp::Exhausted => {
                attempts.failure = Some(CallError::Provider {
                    label,
                    class,
                    source: error,
                });
                Flow::Stop
            }
        }
    }
}

/// Whether `call` names an offered tool and its arguments pass that tool's schema.
fn offered_and_runnable<S: CallSink>(
    tools: &[ToolSpec],
    sink: &S,
    call: &talaria_provider::ToolCallRequest,
) -> bool {
    tools.iter().any(|t| t.name == call.name) && sink.runnable(call)
}
