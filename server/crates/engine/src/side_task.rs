//! A side task's model call (a title, a summary for later): on the `[auxiliary.<task>]`
//! model (else the session's), silent, with its own time limit and a copy of the session's
//! context state, owning everything it needs so it can run beside the session. Its usage is
//! returned for the session's totals.

use std::sync::Arc;

use talaria_record::{EntryBody, InputBlock, Transcript, UserPart};
use tokio_util::sync::CancellationToken;

use crate::config::RetryPolicy;
use crate::context::ContextState;
use crate::events::TurnUsage;
use crate::model_call::{CallResult, ModelCaller, SessionUsage, SilentSink};
use crate::router::ModelRouter;

/// A model call on the session's behalf that does not stream into the chat (a title, a
/// summary, a review): routed to `[auxiliary.<task>]` when configured, else the session's
/// model; its usage counts in the session's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SideRequest {
    /// The kind of task (`title`, `compression`, `review`, …): picks the auxiliary model.
    pub task: String,
    /// The system prompt when not working on the session's history.
    pub system: String,
    /// The instruction, sent as a user message.
    pub prompt: String,
    /// Work on a copy of the session's record (same system prompt, so a provider's prompt
    /// cache is reused) instead of a fresh one.
    pub with_history: bool,
    pub max_tokens: Option<u32>,
}

/// What a side task produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SideAnswer {
    pub text: String,
    pub usage: TurnUsage,
    /// Recovery steps taken (retries, fallbacks), for the caller to report its own way.
    pub notices: Vec<String>,
}

/// Why a side task has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SideTaskError {
    #[error("the {task} task took longer than {seconds} s")]
    TimedOut { task: String, seconds: u64 },
    #[error("cancelled")]
    Cancelled,
    #[error("the session has ended")]
    SessionEnded,
    #[error(transparent)]
    Model(#[from] crate::model_call::CallError),
}

/// What a side task needs from its session.
pub(crate) struct SideCall {
    pub router: Arc<ModelRouter>,
    /// The session's model (the task's own, when `[auxiliary.<task>]` names none).
    pub model: String,
    pub retry: RetryPolicy,
    /// A copy of the session's context state, for side work.
    pub context: ContextState,
    pub cancel: CancellationToken,
    /// The session's record, when the task works on a copy of it.
    pub history: Option<Transcript>,
}

/// Runs one side task; returns its answer and the usage to add to the session's totals.
pub(crate) async fn run(
    call: SideCall,
    request: SideRequest,
) -> (Result<SideAnswer, SideTaskError>, SessionUsage) {
    let SideCall {
        router,
        model,
        retry,
        mut context,
        cancel,
        history,
    } = call;
    let mut transcript = match history {
        Some(history) if request.with_history => history,
        _ => Transcript::with_system(request.system.clone()),
    };
    transcript.push(EntryBody::User {
        input: vec![InputBlock::Text {
            text: request.prompt.clone(),
        }],
        model_view: vec![UserPart::text(&request.prompt)],
    });
    let (chain, timeout) = router.side_chain(&request.task, &model);
    let mut session_usage = SessionUsage::default();
    let mut caller = ModelCaller::new(
        router.as_ref(),
        chain,
        retry,
        &cancel,
        &mut context,
        &mut session_usage,
    );
    let mut sink = SilentSink::default();
    let result = tokio::time::timeout(
        timeout,
        caller.call(&mut transcript, &[], request.max_tokens, &mut sink),
    )
    .await;
    let usage = caller.usage;
    let notices = sink.notices.into_iter().map(|(_, text)| text).collect();
    let answer = match result {
        Err(_) => Err(SideTaskError::TimedOut {
            task: request.task.clone(),
            seconds: timeout.as_secs(),
        }),
        Ok(Err(failure)) => Err(failure.into()),
        Ok(Ok(CallResult::Cancelled { .. })) => Err(SideTaskError::Cancelled),
        Ok(Ok(CallResult::Finished(crate::model_call::Answer { text, .. }))) => Ok(SideAnswer {
            text,
            usage,
            notices,
        }),
    };
    (answer, session_usage)
}
