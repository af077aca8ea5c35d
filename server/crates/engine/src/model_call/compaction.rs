//! Compaction on the model-call path: before a request that would exceed the threshold, on a
//! provider's context-overflow error, and on `/compact`. The pure compressor
//! (`talaria_compress`) rewrites the record; the summary is written by the `compression`
//! side model (`[auxiliary.compression]`, else the session's own) through a nested, silent
//! model call whose usage counts in the session's totals.
//!
//! Invariants:
//! - The record is replaced only by a compacted record that passed `validate`; on an
//!   authentication or quota failure of the summariser, or a cancel, it stays unchanged.
//! - The client sees every compaction start and end (`InProgress` → `Completed` | `Failed`),
//!   then the context use after it.

use talaria_compress::{CompressError, Prepared, Request, SummaryFailure, SummaryRequest, prepare};
use talaria_provider::{ErrorClass, Usage};
use talaria_record::{EntryBody, InputBlock, Transcript, UserPart};

use super::{CallResult, CallSink, ModelCaller, SilentSink};
use crate::context::{ContextState, INEFFECTIVE_SHARE};
use crate::events::{CompactionStatus, CompactionView, NoticeLevel};

/// Why a compaction runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The next request would exceed the threshold.
    Auto,
    /// The user asked (`/compact [focus]`).
    Manual { focus: Option<String> },
    /// The provider said the request does not fit.
    Overflow,
}

/// The side task whose model writes summaries.
pub(crate) const COMPRESSION_TASK: &str = "compression";

impl ModelCaller<'_> {
    /// The model the caller uses now.
    pub(super) fn model(&self) -> String {
        self.chain
            .get(self.active)
            .or_else(|| self.chain.first())
            .map(|target| target.model.clone())
            .unwrap_or_default()
    }

    /// Compacts before a request that would exceed the threshold, unless automatic compaction
    /// is off or paused.
    pub(crate) async fn compact_if_needed<S: CallSink>(
        &mut self,
        transcript: &mut Transcript,
        tools: &str,
        sink: &mut S,
    ) {
        if !self.context.settings.enabled || self.context.paused() {
            return;
        }
        let counted = self.context.count_request(transcript, tools).await;
        let estimated = self.context.accounting.correct(counted, &self.model());
        if self.context.budget().exceeded_by(estimated) {
            // A failure is reported to the client; the request goes ahead regardless.
            let _ = self.compact(transcript, tools, Trigger::Auto, sink).await;
        }
    }

    /// The session's `PreCompact` hooks, told what starts.
    async fn pre_compact_hooks(&self, trigger: &Trigger) {
        let Some((scope, events)) = self.hooks else {
            return;
        };
        let (trigger_name, focus) = match trigger {
            Trigger::Manual { focus } => ("manual", focus.clone()),
            _ => ("auto", None),
        };
        let payload = serde_json::json!({
            "trigger": trigger_name,
            "custom_instructions": focus.unwrap_or_default(),
        });
        scope
            .run(crate::hooks::HookEvent::PreCompact, payload, events)
            .await;
    }

    /// One compaction. `Err` says why the record is unchanged.
    pub(crate) async fn compact<S: CallSink>(
        &mut self,
        transcript: &mut Transcript,
        tools: &str,
        trigger: Trigger,
        sink: &mut S,
    ) -> Result<(), CompressError> {
        self.pre_compact_hooks(&trigger).await;
        self.context.ensure_exact().await;
        self.context.compactions += 1;
        // Unique in the session across restarts: the record's last id, then the count.
        let id = format!(
            "compaction-{}-{}",
            transcript.last_id(),
            self.context.compactions
        );
        sink.compaction(view(&id, CompactionStatus::InProgress, None, None))
            .await;
        let model = self.model();
        let ratio = self.context.accounting.ratio(&model);
        // The compressor works in counted tokens: the budget is scaled by the correction.
        let counted_window = ((self.context.window as f64) / ratio) as u64;
        let tools_tokens = u64::from(self.context.accounting.tools(tools));
        let focus = match &trigger {
            Trigger::Manual { focus } => focus.clone(),
            _ => None,
        };
        let request = Request {
            transcript,
            budget: talaria_compress::Budget::new(counted_window, &self.context.settings),
            settings: self.context.settings,
            tools_tokens,
            focus,
            force: trigger != Trigger::Auto,
        };
        let result = match prepare(&request, &mut self.context.accounting) {
            Err(error) => Err(error),
            Ok(Prepared::Done(outcome)) => Ok(outcome),
            Ok(Prepared::Summarise(pending)) => {
                let answer = self.summarise(pending.request()).await;
                pending.finish(answer, &mut self.context.accounting)
            }
        };
        match result {
            Ok(outcome) => {
                talaria_util::failpoint::step("compaction::replace::before");
                *transcript = outcome.transcript;
                talaria_util::failpoint::step("compaction::replace::after");
                let report = outcome.report;
                let effective = report.saved_share() >= INEFFECTIVE_SHARE;
                self.note_pass(&trigger, effective, sink).await;
                let (summary, error) = describe(&report);
                sink.compaction(view(&id, CompactionStatus::Completed, Some(summary), error))
                    .await;
                let used = self.context.accounting.correct(report.after, &model);
                let cost = self.session_usage.priced.then_some(self.session_usage.cost);
                sink.usage(&Usage::default(), used, self.context.window, cost)
                    .await;
                tracing::info!(
                    before = report.before,
                    after = report.after,
                    summarised = report.summary.as_ref().map_or(0, |s| s.messages),
                    "compacted the context"
                );
                Ok(())
            }
            Err(error) => {
                if matches!(error, CompressError::NothingToCompact) {
                    self.note_pass(&trigger, false, sink).await;
                }
                if let CompressError::Invalid(violations) = &error {
                    tracing::error!(?violations, "compaction produced an invalid record");
                }
                sink.compaction(view(
                    &id,
                    CompactionStatus::Failed,
                    None,
                    Some(error.to_string()),
                ))
                .await;
                Err(error)
            }
        }
    }

    /// Keeps the anti-thrash count: automatic passes that save little add up; a manual one
    /// starts afresh.
    async fn note_pass<S: CallSink>(&mut self, trigger: &Trigger, effective: bool, sink: &mut S) {
        match trigger {
            Trigger::Manual { .. } => self.context.ineffective = 0,
            Trigger::Auto | Trigger::Overflow if effective => self.context.ineffective = 0,
            Trigger::Auto | Trigger::Overflow => {
                self.context.ineffective += 1;
                if self.context.paused() {
                    let message = "Automatic compaction is paused: the last two passes saved less than 10 % of the context. Use /compact to compact on demand.".to_string();
                    sink.notice(NoticeLevel::Warning, message).await;
                }
            }
        }
    }

    /// Asks the compression model for the summary, silently, within its timeout.
    async fn summarise(&mut self, request: &SummaryRequest) -> Result<String, SummaryFailure> {
        if !self.context.summarise {
            return Err(SummaryFailure::Failed(
                "a side task does not call the summariser".into(),
            ));
        }
        let (chain, timeout) = self.router.side_chain(COMPRESSION_TASK, &self.model());
        let mut transcript = Transcript::with_system(request.system.clone());
        transcript.push(EntryBody::User {
            input: vec![InputBlock::Text {
                text: request.prompt.clone(),
            }],
            model_view: vec![UserPart::text(&request.prompt)],
        });
        let mut settings = self.context.settings;
        settings.enabled = false;
        let mut context = ContextState::new(
            self.context.window,
            settings,
            Default::default(),
            "summariser",
        );
        context.summarise = false;
        let mut caller = ModelCaller::new(
            self.router,
            chain,
            self.retry,
            self.cancel,
            &mut context,
            &mut *self.session_usage,
        );
        let mut sink = SilentSink::default();
        let call = Box::pin(caller.call(&mut transcript, &[], Some(request.max_tokens), &mut sink));
        let outcome = tokio::time::timeout(timeout, call).await;
        let failed_class = caller.last_failure;
        self.usage.merge(&caller.usage);
        match outcome {
            Err(_) => Err(SummaryFailure::Failed(format!(
                "the summary took longer than {} s",
                timeout.as_secs()
            ))),
            Ok(Ok(CallResult::Finished(answer))) => Ok(answer.text),
            Ok(Ok(CallResult::Cancelled { .. })) => Err(SummaryFailure::Abort("cancelled".into())),
            Ok(Err(failed)) => match failed_class {
                Some(ErrorClass::Auth | ErrorClass::Billing) => {
                    Err(SummaryFailure::Abort(failed.to_string()))
                }
                _ => Err(SummaryFailure::Failed(failed.to_string())),
            },
        }
    }
}

fn view(
    id: &str,
    status: CompactionStatus,
    summary: Option<String>,
    error: Option<String>,
) -> CompactionView {
    CompactionView {
        id: id.to_string(),
        status,
        summary,
        error,
    }
}

/// What the client is told a compaction left: the summary, or what the cheap pass did; and,
/// for a fallback summary, why the summariser failed.
fn describe(report: &talaria_compress::Report) -> (String, Option<String>) {
    let pruned = &report.pruned;
    let mut parts = Vec::new();
    if pruned.accounted > 0 {
        parts.push(format!(
            "{} old tool outputs shortened to one line",
            pruned.accounted
        ));
    }
    if pruned.deduplicated > 0 {
        parts.push(format!("{} duplicate outputs removed", pruned.deduplicated));
    }
    if pruned.arguments > 0 {
        parts.push(format!(
            "{} long tool arguments truncated",
            pruned.arguments
        ));
    }
    if pruned.images > 0 {
        parts.push(format!("{} old images dropped", pruned.images));
    }
    let cheap = format!(
        "Context compacted from {} to {} tokens{}{}.",
        report.before,
        report.after,
        if parts.is_empty() { "" } else { ": " },
        parts.join(", ")
    );
    match &report.summary {
        None => (cheap, None),
        Some(summary) => (
            format!(
                "{cheap} {} earlier messages are summarised:\n\n{}",
                summary.messages, summary.text
            ),
            summary.fallback.as_ref().map(|why| {
                format!("summary generation failed ({why}); a marked fallback summary was used")
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use talaria_compress::Settings;
    use talaria_record::testing::user;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::model_call::SessionUsage;
    use crate::router::ModelRouter;
    use crate::testkit::{ScriptedProvider, text};

    #[tokio::test]
    async fn automatic_compaction_pauses_after_two_ineffective_passes_and_a_manual_one_resumes_it()
    {
        let provider = Arc::new(ScriptedProvider::new(vec![text("a"), text("b"), text("c")]));
        let router = ModelRouter::single(provider);
        let cancel = CancellationToken::new();
        let mut context = ContextState::new(1024, Settings::default(), Arc::default(), "m");
        let mut usage = SessionUsage::default();
        // A system prompt over the threshold (but within the window): nothing can be
        // compacted.
        let mut transcript = Transcript::with_system("word ".repeat(850));
        transcript.push(user("q"));
        let mut sink = SilentSink::default();
        {
            let mut caller = crate::testkit::caller(&router, &cancel, &mut context, &mut usage);
            for _ in 0..3 {
                let result = caller.call(&mut transcript, &[], None, &mut sink).await;
                assert!(matches!(result, Ok(CallResult::Finished(_))));
            }
            let statuses: Vec<CompactionStatus> =
                sink.compactions.iter().map(|c| c.status).collect();
            assert_eq!(
                statuses,
                [
                    CompactionStatus::InProgress,
                    CompactionStatus::Failed,
                    CompactionStatus::InProgress,
                    CompactionStatus::Failed
                ],
                "the third call does not try again"
            );
            assert!(
                sink.notices.iter().any(|(_, n)| n.contains("paused")),
                "{:?}",
                sink.notices
            );
            let manual = Trigger::Manual { focus: None };
            let _ = caller.compact(&mut transcript, "", manual, &mut sink).await;
        }
        assert!(
            !context.paused(),
            "a manual compaction resumes automatic ones"
        );
    }

    #[tokio::test]
    async fn an_auth_failure_of_the_summariser_leaves_the_record_unchanged() {
        let unauthorised = talaria_provider::ProviderError::Http {
            provider: "openai".into(),
            status: 401,
            message: "invalid API key".into(),
            retry_after: None,
            limits: None,
        };
        let provider = Arc::new(ScriptedProvider::new(vec![
            crate::testkit::Step::FailAfter(Vec::new(), unauthorised),
        ]));
        let router = ModelRouter::single(provider);
        let cancel = CancellationToken::new();
        let mut context = ContextState::new(4000, Settings::default(), Arc::default(), "m");
        let mut usage = SessionUsage::default();
        let mut transcript = Transcript::with_system("s");
        for n in 0..12 {
            transcript.push(user(&format!("question {n}: {}", "detail ".repeat(150))));
            transcript.push(talaria_record::testing::assistant(
                &"answer ".repeat(150),
                &[],
            ));
        }
        transcript.push(user("latest"));
        let before = transcript.clone();
        let mut sink = SilentSink::default();
        let mut caller = crate::testkit::caller(&router, &cancel, &mut context, &mut usage);
        let result = caller
            .compact(&mut transcript, "", Trigger::Overflow, &mut sink)
            .await;
        assert!(
            result
                .as_ref()
                .is_err_and(|e| matches!(e, CompressError::Aborted(_))
                    && e.to_string().contains("abandoned")),
            "{result:?}"
        );
        assert_eq!(transcript, before);
        assert_eq!(
            sink.compactions.last().map(|c| c.status),
            Some(CompactionStatus::Failed)
        );
    }
}
