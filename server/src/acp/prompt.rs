//! `session/prompt`: the request becomes the session's op, tagged with the request's id; the
//! session's forwarder answers it when the turn ends.

use super::state::{Agent, MemberId, Reply, session_not_found};
use super::{prompt_input, settings};
use talaria_engine::{TurnId, TypedCommand};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;
use tokio_util::sync::CancellationToken;

/// A prompt's slash command (one text block), parsed once by the engine's declared table.
fn slash_command(
    prompt: &[acp::ContentBlock],
) -> Option<Result<TypedCommand, talaria_engine::CommandArgError>> {
    let [acp::ContentBlock::Text(text)] = prompt else {
        return None;
    };
    talaria_engine::parse_command(&text.text)
}

pub(super) fn prompt(
    agent: &mut Agent,
    request: RequestId,
    cancel: CancellationToken,
    mut params: acp::PromptRequest,
) -> Option<Reply> {
    let command = match slash_command(&params.prompt) {
        Some(Err(why)) => return Some(Err(errors::invalid_params(why.to_string()))),
        parsed => parsed.and_then(Result::ok),
    };
    let Some(session) = agent.sessions.get(params.session_id.0.as_ref()) else {
        return Some(Err(session_not_found(&params.session_id)));
    };
    if params.prompt.is_empty() {
        return Some(Err(errors::invalid_params(
            "prompt must contain at least one content block",
        )));
    }
    // The turn's tag is the client's and the request's id: the forwarder answers it from
    // the tag alone.
    let turn = turn_of(agent.member, &request);
    // Its slot first: a prompt refused for room changes nothing (no mode, nobody shown it).
    let room = match session.handle.reserve(&turn) {
        Ok(room) => room,
        Err(full) => return Some(Err(errors::unavailable(full))),
    };
    let command = match command {
        Some(TypedCommand::Plan { task }) => {
            // Plan mode first (ops run in order: the turn starts in it), the client told.
            if let Err(error) = settings::set_mode(agent, &params.session_id, "plan", true) {
                return Some(Err(error));
            }
            params.prompt = vec![acp::ContentBlock::from(task)];
            None
        }
        other => other,
    };
    let Some(session) = agent.sessions.get(params.session_id.0.as_ref()) else {
        return Some(Err(session_not_found(&params.session_id)));
    };
    super::audience::show_prompt(session, (agent.member, &agent.peer), &params.prompt);
    let queued = match command {
        Some(TypedCommand::Compact { focus }) => session.handle.compact(room, turn, cancel, focus),
        command => {
            // The other commands run in the session when their turn comes.
            let typed = prompt_input::to_user_input(params.prompt, session.images_allowed);
            let input = match command {
                Some(command) => talaria_engine::PromptInput::Slash(talaria_engine::SlashCommand {
                    command,
                    typed,
                }),
                None => talaria_engine::PromptInput::Typed(typed),
            };
            session.handle.prompt_in(room, turn, cancel, input)
        }
    };
    if queued.is_err() {
        // No turn will answer it: the prompt is answered here.
        session.audience.take_asker(agent.member);
    }
    match queued {
        Ok(()) => None,
        Err(full @ talaria_engine::NotQueued::Full(_)) => Some(Err(errors::unavailable(full))),
        Err(ended) => Some(Err(errors::internal_error(ended))),
    }
}

/// A prompt's turn tag: the client that sent it and its request's id, as JSON
/// (`"3|\"abc\""`).
fn turn_of(asker: MemberId, request: &RequestId) -> TurnId {
    let id = serde_json::to_string(request).unwrap_or_default();
    TurnId(format!("{asker}|{id}").into())
}

/// The client and request a turn answers (the inverse of [`turn_of`]).
pub(super) fn request_of(turn: &TurnId) -> Option<(MemberId, RequestId)> {
    let (asker, id) = turn.0.split_once('|')?;
    Some((asker.parse().ok()?, serde_json::from_str(id).ok()?))
}
