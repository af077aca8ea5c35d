//! The background review (the learning loop): after enough tool-using work or user turns, a
//! fork of the session reads its history and saves what is worth keeping as skills and
//! memory, without touching the chat.
//!
//! Invariants:
//! - It starts after the prompt response was sent and runs beside the session: the next
//!   prompt never waits for it. `cancel`, closing the session and exit stop it.
//! - It sends the session's own system prompt and tool definitions (the provider's prompt
//!   cache is reused), but its registry dispatches only the tools of its [`ReviewKit`] (the
//!   skill and memory tools the edge hands it; the engine knows none of them by name): any
//!   other call is refused at dispatch, with no side effect, whatever the model asks.
//! - Its calls go through the one orchestrator (policy, result budget, the hard floor), in
//!   `accept-edits` with no rule remembered and no one to ask: what would need the user's
//!   permission is refused; its events go nowhere near the chat.
//! - It makes at most `max_review_calls` model calls, through the one model-call path with a
//!   silent sink, on `[auxiliary.review]` (else the session's model); its usage counts in the
//!   session's totals.
//! - Its writes are those of the skill and memory tools the session's [`ReviewFactory`] gives
//!   it: staged as proposals by default, with provenance.

use std::path::PathBuf;
use std::sync::Arc;

use talaria_provider::ToolSpec;
use talaria_record::{AssistantEntry, EntryBody, InputBlock, Transcript, UserPart};
use talaria_tools::{Registry, Tool, ToolContext};
use tokio_util::sync::CancellationToken;

use crate::config::RetryPolicy;
use crate::context::ContextState;
use crate::events::TurnUsage;
use crate::model_call::{CallResult, ModelCaller, SessionUsage, SilentSink};
use crate::router::ModelRouter;

/// The side task whose model runs reviews.
pub const REVIEW_TASK: &str = "review";

/// What the review is told.
pub const INSTRUCTION: &str = "[Background review — the user does not see this] Look back over \
    the conversation above. If it holds something worth keeping for future sessions, save it \
    now: a reusable procedure (a solved problem, a hard-won debugging path, a workflow the user \
    corrected) as a skill with skill_manage — check skills_list first and view a skill with \
    skill_view before you patch it, rather than writing a duplicate; durable facts about the \
    environment or the user's preferences with memory. Only skills_list, skill_view, \
    skill_manage and memory work here. Keep skills short, general and free of secrets. When \
    you are done, or if nothing is worth saving, answer with one line saying what you saved.";

/// The skill and memory tools for one review, and what it staged.
pub struct ReviewKit {
    /// Tools registered over the session's (same names and definitions).
    pub tools: Vec<Arc<dyn Tool>>,
    /// One line per proposal (or live write) the review made so far.
    pub staged: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
}

/// Builds a review's kit from its id.
#[derive(Clone)]
pub struct ReviewFactory(pub Arc<dyn Fn(&str) -> ReviewKit + Send + Sync>);

impl std::fmt::Debug for ReviewFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReviewFactory")
    }
}

/// One review to run.
pub(crate) struct ReviewJob {
    pub id: String,
    pub transcript: Transcript,
    pub registry: Registry,
    pub tools: Vec<ToolSpec>,
    pub router: Arc<ModelRouter>,
    pub model: String,
    pub retry: RetryPolicy,
    pub context: ContextState,
    pub cancel: CancellationToken,
    pub max_calls: u32,
    pub cwd: PathBuf,
    /// The session's workspace roots and secret-read policy (the orchestrator's policy).
    pub roots: Vec<PathBuf>,
    pub secrets: crate::approval::SecretReads,
    /// Where results too large for the window are stored.
    pub results_dir: PathBuf,
    pub staged: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
}

/// How a review ended.
#[derive(Debug, Default)]
pub struct ReviewOutcome {
    pub id: String,
    pub usage: TurnUsage,
    pub cost: f64,
    pub priced: bool,
    pub calls: u32,
    /// One line per proposal it staged.
    pub proposals: Vec<String>,
    pub error: Option<crate::model_call::CallError>,
    pub cancelled: bool,
}

/// How a review's calls are decided: `accept-edits`, no remembered rule, and no one to ask
/// (a permission question goes nowhere and is refused); its events reach no one.
struct ReviewPolicy {
    approval: crate::session_state::ApprovalState,
    roots: Vec<PathBuf>,
    secrets: crate::approval::SecretReads,
    budget: crate::budget::ResultBudget,
    failures: std::collections::HashMap<(String, String), u32>,
    /// A channel nobody reads: the review's cards and questions never reach the chat.
    events: tokio::sync::mpsc::Sender<crate::events::EngineEvent>,
}

impl ReviewPolicy {
    fn new(
        model: &str,
        roots: Vec<PathBuf>,
        secrets: crate::approval::SecretReads,
        window: u64,
        results_dir: PathBuf,
    ) -> Self {
        let (_, view) = tokio::sync::watch::channel(crate::session_state::SessionView {
            mode: crate::approval::Mode::AcceptEdits,
            model: model.to_string(),
            effort: None,
        });
        let (_, rules) = tokio::sync::watch::channel(crate::approval::RuleStore::in_memory());
        let (events, _) = tokio::sync::mpsc::channel(1);
        Self {
            approval: crate::session_state::ApprovalState::new(
                view,
                rules,
                std::sync::Arc::new(crate::session_state::RememberNothing),
            ),
            roots,
            secrets,
            budget: crate::budget::ResultBudget::new(window, results_dir),
            failures: std::collections::HashMap::new(),
            events,
        }
    }

    /// Runs the review's calls through the orchestrator, each result recorded; `false` when
    /// it was cancelled part-way.
    async fn run_calls(
        &mut self,
        calls: &[talaria_provider::ToolCallRequest],
        registry: &Registry,
        ctx: &ToolContext,
        transcript: &mut Transcript,
    ) -> bool {
        let mut orchestrator = crate::orchestrator::Orchestrator {
            registry,
            approval: &self.approval,
            roots: &self.roots,
            secrets: &self.secrets,
            events: &self.events,
            cancel: &ctx.cancel,
            ctx: ctx.clone(),
            budget: &mut self.budget,
            failures: &self.failures,
            images: false,
        };
        let batch = calls
            .iter()
            .map(|call| (call.id.clone(), call.clone(), false))
            .collect();
        let report = orchestrator.run_batch(batch).await;
        let (results, cancelled) = (report.results, report.cancelled);
        crate::orchestrator::count_failures(&results, &report.repeated, &mut self.failures);
        for call in calls {
            if registry.refusal(&call.name).is_some() {
                tracing::info!(tool = %call.name, "the review asked for a tool outside its whitelist; refused");
            }
        }
        for entry in results {
            transcript.push(EntryBody::ToolResult(Box::new(entry)));
        }
        !cancelled
    }
}

/// Runs a review to its end.
pub(crate) async fn run(job: ReviewJob) -> ReviewOutcome {
    let ReviewJob {
        id,
        mut transcript,
        registry,
        tools,
        router,
        model,
        retry,
        mut context,
        cancel,
        max_calls,
        cwd,
        roots,
        secrets,
        results_dir,
        staged,
    } = job;
    let mut policy = ReviewPolicy::new(&model, roots, secrets, context.window, results_dir);
    transcript.push(EntryBody::User {
        input: vec![InputBlock::Text {
            text: INSTRUCTION.into(),
        }],
        model_view: vec![UserPart::text(INSTRUCTION)],
    });
    let (chain, _) = router.side_chain(REVIEW_TASK, &model);
    let mut usage = SessionUsage::default();
    let mut outcome = ReviewOutcome {
        id,
        ..ReviewOutcome::default()
    };
    let ctx = ToolContext::local(cwd, cancel.clone(), Arc::default());
    {
        let mut caller = ModelCaller::new(
            router.as_ref(),
            chain,
            retry,
            &cancel,
            &mut context,
            &mut usage,
        );
        while outcome.calls < max_calls {
            outcome.calls += 1;
            let mut sink = SilentSink::default();
            let called = caller.call(&mut transcript, &tools, None, &mut sink).await;
            let (text, tool_calls) = match called {
                Err(error) => {
                    outcome.error = Some(error);
                    break;
                }
                Ok(CallResult::Cancelled { .. }) => {
                    outcome.cancelled = true;
                    break;
                }
                Ok(CallResult::Finished(answer)) => (answer.text, answer.tool_calls),
            };
            transcript.push(EntryBody::Assistant(AssistantEntry {
                text,
                tool_calls: tool_calls.clone(),
                ..AssistantEntry::default()
            }));
            if tool_calls.is_empty() {
                break;
            }
            if !policy
                .run_calls(&tool_calls, &registry, &ctx, &mut transcript)
                .await
            {
                outcome.cancelled = true;
                break;
            }
        }
        outcome.usage = caller.usage;
    }
    outcome.cost = usage.cost;
    outcome.priced = usage.priced;
    outcome.proposals = staged();
    outcome
}
