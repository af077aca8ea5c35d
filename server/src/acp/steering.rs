//! `_session/steering`: a message sent into the running turn instead of queued behind it, in
//! the contract the current Claude and Codex adapters ship. Request `{sessionId, prompt,
//! _meta?: {steering?: {idleBehavior?: "promptRequired"}}}`; answered `{outcome:
//! "injected"}` (the running turn took it), `{outcome: "startedNewTurn"}` (none ran: it runs
//! as a prompt, its updates streaming as usual) or `{outcome: "promptRequired", reason:
//! "noRunningTurn"}` (none ran and the client asked to be told).

use super::prompt_input;
use super::state::{Agent, Reply, session_not_found};
use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::json;
use talaria_engine::TurnId;
use talaria_engine::{IdleSteer, SteerOutcome};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;

/// The method's name on the wire.
pub(super) const METHOD: &str = "_session/steering";

/// The most text one steer may carry: a steer joins a running conversation; more than this
/// is a prompt (or a file) of its own.
const MAX_STEER_TEXT_BYTES: usize = 256 * 1024;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SteeringRequest {
    session_id: acp::SessionId,
    prompt: Vec<acp::ContentBlock>,
    #[serde(rename = "_meta", default)]
    meta: Option<SteeringMeta>,
}

#[derive(Debug, Default, Deserialize)]
struct SteeringMeta {
    #[serde(default)]
    steering: Option<SteeringOptions>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SteeringOptions {
    #[serde(default)]
    idle_behavior: Option<String>,
}

/// What the client asked for when no turn runs.
fn idle_behaviour(meta: Option<&SteeringMeta>) -> Result<IdleSteer, acp::Error> {
    let asked = meta
        .and_then(|m| m.steering.as_ref())
        .and_then(|s| s.idle_behavior.as_deref());
    match asked {
        None => Ok(IdleSteer::StartTurn),
        Some("promptRequired") => Ok(IdleSteer::PromptRequired),
        Some(other) => Err(errors::invalid_params(format!(
            "{METHOD}: unknown _meta.steering.idleBehavior {other:?} (known: \"promptRequired\")"
        ))),
    }
}

/// The answer for `outcome`.
fn reply(outcome: SteerOutcome) -> Reply {
    match outcome {
        SteerOutcome::Injected => Ok(json!({"outcome": "injected"})),
        SteerOutcome::StartedNewTurn => Ok(json!({"outcome": "startedNewTurn"})),
        SteerOutcome::PromptRequired => {
            Ok(json!({"outcome": "promptRequired", "reason": "noRunningTurn"}))
        }
        SteerOutcome::SessionEnded => Err(errors::internal_error(
            "the session ended before it could take the message",
        )),
        SteerOutcome::Full => Err(errors::unavailable(format!(
            "the session already has {} prompts waiting or running; send more as they end",
            talaria_engine::MAX_QUEUED_TURNS
        ))),
    }
}

/// The size of a prompt's text.
fn text_bytes(prompt: &[acp::ContentBlock]) -> usize {
    prompt
        .iter()
        .map(|block| match block {
            acp::ContentBlock::Text(text) => text.text.len(),
            _ => 0,
        })
        .sum()
}

/// The tag of a turn a steer started: no request answers it (the steer was answered).
fn started_turn(request: &RequestId) -> TurnId {
    TurnId(
        format!(
            "{STEERED_TURN_PREFIX}{}",
            serde_json::to_string(request).unwrap_or_default()
        )
        .into(),
    )
}

/// How the tag of a turn a steer started begins.
pub(super) const STEERED_TURN_PREFIX: &str = "steer:";

/// `_session/steering`: checked here; the session's actor says what became of it.
pub(super) fn steer(
    agent: &mut Agent,
    request: RequestId,
    params: &serde_json::value::RawValue,
) -> Option<Reply> {
    let params: SteeringRequest = match serde_json::from_str(params.get()) {
        Ok(params) => params,
        Err(e) => return Some(Err(errors::invalid_params(format!("{METHOD}: {e}")))),
    };
    let Some(session) = agent.sessions.get(params.session_id.0.as_ref()) else {
        return Some(Err(session_not_found(&params.session_id)));
    };
    let idle = match idle_behaviour(params.meta.as_ref()) {
        Ok(idle) => idle,
        Err(e) => return Some(Err(e)),
    };
    if params.prompt.is_empty() {
        return Some(Err(errors::invalid_params(format!(
            "{METHOD}: prompt must contain at least one content block"
        ))));
    }
    let size = text_bytes(&params.prompt);
    if size > MAX_STEER_TEXT_BYTES {
        return Some(Err(errors::invalid_params(format!(
            "{METHOD}: the message is {size} bytes of text; a steer carries at most \
             {MAX_STEER_TEXT_BYTES} (send a longer text as a prompt, or as a file)"
        ))));
    }
    let input = prompt_input::to_user_input(params.prompt, session.images_allowed);
    let handle = session.handle.clone();
    let turn = started_turn(&request);
    // The actor answers at once, but may be between turns (saving the last one): the
    // loop does not wait for it.
    let slow = async move { Ok(handle.steer(turn, input, idle).await) };
    agent.defer(request, METHOD, slow, |_, outcome| {
        async move { reply(outcome) }.boxed_local()
    });
    None
}
