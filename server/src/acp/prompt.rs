//! `session/prompt`: the request becomes the session's op, tagged with the request's id; the
//! session's forwarder answers it when the turn ends.

use super::state::{Agent, Reply, session_not_found};
use super::{compaction, prompt_input, settings};
use crate::sessions::{PLAN_COMMAND, slash};
use talaria_engine::TurnId;
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;
use tokio_util::sync::CancellationToken;

/// The task of a `/plan TASK` prompt (one text block); `Some("")` when none was given.
fn plan_task(prompt: &[acp::ContentBlock]) -> Option<String> {
    let [acp::ContentBlock::Text(text)] = prompt else {
        return None;
    };
    let rest = text
        .text
        .trim()
        .strip_prefix('/')?
        .strip_prefix(PLAN_COMMAND)?;
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim().to_string())
}

pub(super) fn prompt(
    agent: &mut Agent,
    request: RequestId,
    cancel: CancellationToken,
    mut params: acp::PromptRequest,
) -> Option<Reply> {
    if let Some(task) = plan_task(&params.prompt) {
        if task.is_empty() {
            return Some(Err(errors::invalid_params(
                "/plan takes the task to plan: /plan TASK",
            )));
        }
        // Plan mode first (ops run in order: the turn starts in it), the client told.
        if let Err(error) = settings::set_mode(agent, &params.session_id, "plan", true) {
            return Some(Err(error));
        }
        params.prompt = vec![acp::ContentBlock::from(task)];
    }
    let Some(session) = agent.sessions.get(params.session_id.0.as_ref()) else {
        return Some(Err(session_not_found(&params.session_id)));
    };
    if params.prompt.is_empty() {
        return Some(Err(errors::invalid_params(
            "prompt must contain at least one content block",
        )));
    }
    // The turn's tag is the request's id: the forwarder answers it from the tag alone.
    let turn = turn_of(&request);
    let queued = if let Some(focus) = compaction::parse_command(&params.prompt) {
        session.handle.compact(turn, cancel, focus)
    } else {
        // `/name` is expanded by the session's commands when its turn comes.
        let slash = slash(&params.prompt);
        let typed = prompt_input::to_user_input(params.prompt, session.images_allowed);
        let input = match slash {
            Some((name, args)) => {
                talaria_engine::PromptInput::Slash(talaria_engine::SlashCommand {
                    name,
                    args,
                    typed,
                })
            }
            None => talaria_engine::PromptInput::Typed(typed),
        };
        session.handle.prompt(turn, cancel, input)
    };
    if queued.is_err() {
        return Some(Err(errors::internal_error("the session has ended")));
    }
    None
}

/// A prompt's turn tag: its request's id, as JSON.
fn turn_of(request: &RequestId) -> TurnId {
    TurnId(serde_json::to_string(request).unwrap_or_default().into())
}

/// The request a turn answers (the inverse of [`turn_of`]).
pub(super) fn request_of(turn: &TurnId) -> Option<RequestId> {
    serde_json::from_str(&turn.0).ok()
}
