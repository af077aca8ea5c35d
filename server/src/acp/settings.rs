//! `session/set_mode`, `session/set_config_option` and the legacy `session/set_model`: the
//! mode and the model, changed through the session's actor and answered with the options as
//! they now stand.

use super::session_options;
use super::state::{Agent, LiveSession, Reply, session_not_found, to_value};
use talaria_protocol::acp::{self, SessionNotification};
use talaria_protocol::errors;

/// The longest title a client may set (longer ones are cut).
const MAX_TITLE_CHARS: usize = 200;

/// The legacy method's name (no longer in the schema; 16 of 30 registry agents answer it).
pub(super) const LEGACY_SET_MODEL: &str = "session/set_model";

/// The session's options once a change just asked of it applies (the actor takes the
/// op a moment later; the answer already shows it).
fn options_with(session: &LiveSession, pending: Pending<'_>) -> Vec<acp::SessionConfigOption> {
    let model = pending
        .model
        .map_or_else(|| session.handle.model(), str::to_string);
    session_options::config_options(&session_options::OptionsNow {
        mode: pending.mode.unwrap_or_else(|| session.handle.mode()),
        model: &model,
        models: &session.models,
        effort: pending.effort.unwrap_or_else(|| session.handle.effort()),
        booleans: session.booleans,
    })
}

/// A set is refused while the session has not read `MAX_PENDING_SETS` earlier ones (it
/// reads none during a `/compact` or a command's expansion).
fn room_for_a_set(session: &super::state::LiveSession) -> Result<(), acp::Error> {
    if session.handle.sets_full() {
        return Err(errors::unavailable(format!(
            "the session has not yet taken the {} settings sent before; send more as it does",
            talaria_engine::MAX_PENDING_SETS
        )));
    }
    Ok(())
}

/// `session/set_mode` (and the mode config option): changes the approval mode and tells
/// the client about the other view of the same setting.
pub(super) fn set_mode(
    agent: &mut Agent,
    session_id: &acp::SessionId,
    mode_id: &str,
    from_config_option: bool,
) -> Reply {
    let Some(session) = agent.sessions.get(session_id.0.as_ref()) else {
        return Err(session_not_found(session_id));
    };
    room_for_a_set(session)?;
    let Some(mode) = talaria_engine::Mode::from_id(mode_id) else {
        let known: Vec<&str> = talaria_engine::Mode::ALL.iter().map(|m| m.id()).collect();
        return Err(errors::invalid_params(format!(
            "unknown mode {mode_id:?}; available modes: {}",
            known.join(", ")
        )));
    };
    session.handle.set_mode(mode);
    tracing::info!(session = %session_id, mode = mode.id(), "mode changed");
    let options = options_with(
        session,
        Pending {
            mode: Some(mode),
            ..Pending::default()
        },
    );
    if from_config_option {
        agent.outbox.push(SessionNotification::new(
            session_id.clone(),
            acp::SessionUpdate::CurrentModeUpdate(acp::CurrentModeUpdate::new(mode.id())),
        ));
        to_value(acp::SetSessionConfigOptionResponse::new(options))
    } else {
        agent.outbox.push(SessionNotification::new(
            session_id.clone(),
            acp::SessionUpdate::ConfigOptionUpdate(acp::ConfigOptionUpdate::new(options)),
        ));
        to_value(acp::SetSessionModeResponse::new())
    }
}

/// Switches the session's model (from the next turn).
fn set_model(agent: &mut Agent, session_id: &acp::SessionId, model: &str) -> Reply {
    let Some(session) = agent.sessions.get(session_id.0.as_ref()) else {
        return Err(session_not_found(session_id));
    };
    room_for_a_set(session)?;
    if !session.models.iter().any(|m| m == model) && session.handle.model() != model {
        return Err(errors::invalid_params(format!(
            "unknown model {model:?}; available models: {} (configure more with `models` in config.toml)",
            session.models.join(", ")
        )));
    }
    session.handle.set_model(model);
    tracing::info!(session = %session_id, model, "model changed");
    // A thought level the new model does not take goes back to its default.
    let effort = session.handle.effort();
    let kept = effort.filter(|e| talaria_engine::Effort::levels_of(model).contains(e));
    if kept != effort {
        session.handle.set_effort(kept);
    }
    to_value(acp::SetSessionConfigOptionResponse::new(options_with(
        session,
        Pending {
            model: Some(model),
            effort: Some(kept),
            ..Pending::default()
        },
    )))
}

/// The thought level (`default`, or one the session's model takes), from the next turn.
fn set_effort(
    agent: &mut Agent,
    session_id: &acp::SessionId,
    effort: Option<talaria_engine::Effort>,
) -> Reply {
    let Some(session) = agent.sessions.get(session_id.0.as_ref()) else {
        return Err(session_not_found(session_id));
    };
    room_for_a_set(session)?;
    session.handle.set_effort(effort);
    tracing::info!(session = %session_id, effort = ?effort, "thought level changed");
    to_value(acp::SetSessionConfigOptionResponse::new(options_with(
        session,
        Pending {
            effort: Some(effort),
            ..Pending::default()
        },
    )))
}

/// The thought level a `thought_level` value names, if the session's model takes it.
fn effort_named(
    agent: &Agent,
    session_id: &acp::SessionId,
    id: &str,
) -> Result<Option<talaria_engine::Effort>, acp::Error> {
    let Some(session) = agent.sessions.get(session_id.0.as_ref()) else {
        return Err(session_not_found(session_id));
    };
    let model = session.handle.model();
    let levels = talaria_engine::Effort::levels_of(&model);
    if levels.is_empty() {
        return Err(errors::invalid_params(format!(
            "{model} takes no thought level; this session offers no \"{}\" option",
            session_options::THOUGHT_LEVEL_CONFIG_ID
        )));
    }
    if id == session_options::DEFAULT_THOUGHT_LEVEL {
        return Ok(None);
    }
    match talaria_engine::Effort::from_id(id).filter(|e| levels.contains(e)) {
        Some(effort) => Ok(Some(effort)),
        None => {
            let known: Vec<&str> = std::iter::once(session_options::DEFAULT_THOUGHT_LEVEL)
                .chain(levels.iter().map(|l| l.id()))
                .collect();
            Err(errors::invalid_params(format!(
                "unknown thought level {id:?} for {model}; available: {}",
                known.join(", ")
            )))
        }
    }
}

/// The legacy `session/set_model` (`{sessionId, modelId}`, answered `{}`), which older
/// clients still send: sets the model config option and tells the client the options.
pub(super) fn set_model_legacy(agent: &mut Agent, params: &serde_json::Value) -> Reply {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct SetModel {
        session_id: acp::SessionId,
        model_id: String,
    }
    let params: SetModel = serde_json::from_value(params.clone())
        .map_err(|e| errors::invalid_params(format!("{LEGACY_SET_MODEL}: {e}")))?;
    set_model(agent, &params.session_id, &params.model_id)?;
    if let Some(session) = agent.sessions.get(params.session_id.0.as_ref()) {
        let options = options_with(
            session,
            Pending {
                model: Some(&params.model_id),
                ..Pending::default()
            },
        );
        agent.outbox.push(SessionNotification::new(
            params.session_id.clone(),
            acp::SessionUpdate::ConfigOptionUpdate(acp::ConfigOptionUpdate::new(options)),
        ));
    }
    Ok(serde_json::json!({}))
}

/// `session/set_title`: trimmed, at most [`MAX_TITLE_CHARS`] characters, never empty.
pub(super) fn set_title(agent: &mut Agent, params: &acp::SetSessionTitleRequest) -> Reply {
    let Some(session) = agent.sessions.get(params.session_id.0.as_ref()) else {
        return Err(session_not_found(&params.session_id));
    };
    room_for_a_set(session)?;
    let trimmed = params
        .title
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if trimmed.is_empty() {
        return Err(errors::invalid_params(
            "session/set_title: the title is empty once trimmed",
        ));
    }
    let title: String = trimmed.chars().take(MAX_TITLE_CHARS).collect();
    session.handle.set_title(title.clone());
    to_value(acp::SetSessionTitleResponse::new(title))
}

pub(super) fn set_config_option(
    agent: &mut Agent,
    params: acp::SetSessionConfigOptionRequest,
) -> Reply {
    let id = params.config_id.0.as_ref();
    match (&params.value, id) {
        (
            acp::SessionConfigOptionValue::Boolean { value },
            session_options::FAST_MODE_CONFIG_ID,
        ) => set_fast_mode(agent, &params.session_id, *value),
        (acp::SessionConfigOptionValue::ValueId { value }, _) => match id {
            session_options::MODE_CONFIG_ID => set_mode(agent, &params.session_id, &value.0, true),
            session_options::MODEL_CONFIG_ID => set_model(agent, &params.session_id, &value.0),
            session_options::THOUGHT_LEVEL_CONFIG_ID => {
                let effort = effort_named(agent, &params.session_id, &value.0)?;
                set_effort(agent, &params.session_id, effort)
            }
            session_options::FAST_MODE_CONFIG_ID => Err(errors::invalid_params(
                "the \"fast_mode\" option takes a boolean (type \"boolean\")",
            )),
            other => Err(unknown_option(other)),
        },
        (
            _,
            session_options::MODE_CONFIG_ID
            | session_options::MODEL_CONFIG_ID
            | session_options::THOUGHT_LEVEL_CONFIG_ID,
        ) => Err(errors::invalid_params(format!(
            "the {id:?} option takes a value id, not a boolean"
        ))),
        (_, other) => Err(unknown_option(other)),
    }
}

/// Fast mode on: the least thinking the model takes; off: the model's default.
fn set_fast_mode(agent: &mut Agent, session_id: &acp::SessionId, on: bool) -> Reply {
    let Some(session) = agent.sessions.get(session_id.0.as_ref()) else {
        return Err(session_not_found(session_id));
    };
    let model = session.handle.model();
    let Some(fast) = session_options::fast_effort(&model) else {
        return Err(errors::invalid_params(format!(
            "{model} takes no thought level, so it has no fast mode"
        )));
    };
    set_effort(agent, session_id, on.then_some(fast))
}

/// A change asked of the session that its answer already shows.
#[derive(Default)]
struct Pending<'a> {
    mode: Option<talaria_engine::Mode>,
    model: Option<&'a str>,
    /// `Some(None)`: back to the model's default.
    effort: Option<Option<talaria_engine::Effort>>,
}

fn unknown_option(id: &str) -> acp::Error {
    errors::invalid_params(format!(
        "unknown config option {id:?}; this agent offers \"{}\", \"{}\" and, for models \
         that reason, \"{}\" (and \"{}\" to clients that show boolean options)",
        session_options::MODE_CONFIG_ID,
        session_options::MODEL_CONFIG_ID,
        session_options::THOUGHT_LEVEL_CONFIG_ID,
        session_options::FAST_MODE_CONFIG_ID
    ))
}
