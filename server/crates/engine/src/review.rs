//! The background review (the learning loop): after enough tool-using work or user turns, a
//! fork of the session reads its history and saves what is worth keeping as skills and
//! memory, without touching the chat.
//!
//! Invariants:
//! - It starts after the prompt response was sent and runs beside the session: the next
//!   prompt never waits for it. `cancel`, closing the session and exit stop it.
//! - It sends the session's own system prompt and tool definitions (the provider's prompt
//!   cache is reused), but its registry dispatches only the tools of its [`crate::ReviewKit`] (the
//!   skill and memory tools the edge hands it; the engine knows none of them by name): any
//!   other call is refused at dispatch, with no side effect, whatever the model asks.
//! - Its calls go through the one orchestrator (policy, result budget, the hard floor), in
//!   `accept-edits` with no rule remembered and no one to ask: what would need the user's
//!   permission is refused; its events go nowhere near the chat.
//! - It makes at most `max_review_calls` model calls, through the one model-call path with a
//!   silent sink, on `[auxiliary.review]` (else the session's model); its usage counts in the
//!   session's totals.
//! - Its writes are those of the skill and memory tools the session's [`crate::ReviewFactory`] gives
//!   it: staged as proposals by default, with provenance.

use std::sync::Arc;

use talaria_record::{EntryBody, Transcript};
use talaria_tools::Registry;
use tokio_util::sync::CancellationToken;

use crate::context::ContextState;
use crate::events::{StopReason, TurnError, TurnUsage};
use crate::model_call::{ModelCaller, SessionUsage};
use crate::router::ModelRouter;
use crate::settings::{SessionSettings, UserInput};
use crate::turn::{Turn, TurnSpec};

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

/// One review to run.
pub(crate) struct ReviewJob {
    /// The session's settings as the review runs under them ([`ReviewJob::settings_for`]).
    pub settings: SessionSettings,
    pub transcript: Transcript,
    /// The session's tools (definitions unchanged, so the prompt cache is reused), of which
    /// only the kit's may run.
    pub registry: Registry,
    pub router: Arc<ModelRouter>,
    pub context: ContextState,
    pub cancel: CancellationToken,
    pub max_calls: u32,
    pub staged: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
}

impl ReviewJob {
    /// The settings review `id` of a session with `settings` runs under, on `model`: the
    /// session's own tool set-up (roots, secrets, shell), its own id (where its oversized
    /// results go), without the nudges meant for a user's turn and with nothing delegated to
    /// the client (no one there answers a review).
    pub fn settings_for(settings: &SessionSettings, id: &str, model: &str) -> SessionSettings {
        SessionSettings {
            id: id.to_string(),
            model: model.to_string(),
            nudges: false,
            verify_after_edits: false,
            delegation: crate::client::Delegation::default(),
            // A review touches only the skill and memory stores, never the workspace.
            checkpoints: None,
            // Nor do the user's hooks see its calls: they are not the conversation's.
            hooks: Arc::default(),
            ..settings.clone()
        }
    }
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
/// (a permission question goes nowhere and is refused).
fn review_approval(model: &str) -> crate::session_state::ApprovalState {
    let (_, view) = tokio::sync::watch::channel(crate::session_state::SessionView {
        mode: crate::approval::Mode::AcceptEdits,
        model: model.to_string(),
        effort: None,
    });
    let (_, rules) = tokio::sync::watch::channel(crate::approval::RuleStore::in_memory());
    crate::session_state::ApprovalState::new(
        view,
        rules,
        Arc::new(crate::session_state::RememberNothing),
    )
}

/// Runs a review to its end: one [`Turn`] on the `review` side chain, under the review's own
/// policy, whose events reach no one.
pub(crate) async fn run(job: ReviewJob) -> ReviewOutcome {
    let ReviewJob {
        settings,
        mut transcript,
        registry,
        router,
        mut context,
        cancel,
        max_calls,
        staged,
    } = job;
    let approval = review_approval(&settings.model);
    // A channel nobody reads: the review's cards and questions never reach the chat.
    let (events, _) = tokio::sync::mpsc::channel(1);
    let (chain, _) = router.side_chain(REVIEW_TASK, &settings.model);
    let mut usage = SessionUsage::default();
    let started_at = transcript.entries().len();
    let caller = ModelCaller::new(
        router.as_ref(),
        chain,
        settings.retry,
        &cancel,
        &mut context,
        &mut usage,
    );
    let spec = TurnSpec {
        max_requests: max_calls,
        approval: &approval,
        sink: &events,
        session: None,
        journal: None,
        file_sides: None,
    };
    let turn = Turn::new(&settings, &registry, &mut transcript, caller, spec);
    let end = turn.run(UserInput::text(INSTRUCTION)).await;
    let calls = transcript.entries()[started_at..]
        .iter()
        .filter(|entry| matches!(entry.body, EntryBody::Assistant(_)))
        .count();
    let (error, cancelled) = match end.outcome {
        Err(TurnError::Model(error)) => (Some(error), false),
        Err(other) => {
            tracing::warn!(review = %settings.id, "the review failed: {other}");
            (None, false)
        }
        Ok(StopReason::Cancelled) => (None, true),
        Ok(_) => (None, false),
    };
    ReviewOutcome {
        id: settings.id,
        usage: end.usage,
        cost: usage.cost,
        priced: usage.priced,
        calls: u32::try_from(calls).unwrap_or(u32::MAX),
        proposals: staged(),
        error,
        cancelled,
    }
}
