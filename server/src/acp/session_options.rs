//! Session options as ACP sees them: the approval mode (as legacy session modes and as the
//! `mode` config option, always in sync), the model (the `model` config option), and for
//! models that reason, the thought level (`thought_level`) and, for clients that show
//! boolean options, fast mode (`fast_mode`: the least thinking the model takes).

use talaria_engine::{Effort, Mode};
use talaria_protocol::acp::{
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption, SessionMode,
    SessionModeState,
};

/// The id of the mode config option.
pub const MODE_CONFIG_ID: &str = "mode";
/// The id of the model config option.
pub const MODEL_CONFIG_ID: &str = "model";
/// The id of the thought level config option.
pub const THOUGHT_LEVEL_CONFIG_ID: &str = "thought_level";
/// The id of the fast mode config option (boolean).
pub const FAST_MODE_CONFIG_ID: &str = "fast_mode";
/// The thought level value that leaves it to the model.
pub const DEFAULT_THOUGHT_LEVEL: &str = "default";

/// A session's settings as its options show them.
pub struct OptionsNow<'a> {
    pub mode: Mode,
    pub model: &'a str,
    /// Models offered for switching.
    pub models: &'a [String],
    pub effort: Option<Effort>,
    /// The client shows boolean options (`sessionCapabilities.configOptions.boolean`).
    pub booleans: bool,
}

/// The level fast mode picks for `model`: the least thinking it takes.
pub fn fast_effort(model: &str) -> Option<Effort> {
    Effort::levels_of(model).first().copied()
}

/// `modes` for session responses.
pub fn mode_state(current: Mode) -> SessionModeState {
    SessionModeState::new(
        current.id(),
        Mode::ALL
            .iter()
            .map(|m| SessionMode::new(m.id(), m.name()).description(m.description().to_string()))
            .collect(),
    )
}

/// `configOptions` for session responses (the complete list, with current values).
pub fn config_options(now: &OptionsNow<'_>) -> Vec<SessionConfigOption> {
    let (mode, model) = (now.mode, now.model);
    let mode_choices: Vec<SessionConfigSelectOption> = Mode::ALL
        .iter()
        .map(|m| {
            SessionConfigSelectOption::new(m.id(), m.name())
                .description(m.description().to_string())
        })
        .collect();
    let mut model_names: Vec<String> = now.models.to_vec();
    if !model_names.iter().any(|m| m == model) {
        model_names.insert(0, model.to_string());
    }
    let model_choices: Vec<SessionConfigSelectOption> = model_names
        .iter()
        .map(|m| SessionConfigSelectOption::new(m.clone(), m.clone()))
        .collect();
    let mut options = vec![
        SessionConfigOption::select(MODE_CONFIG_ID, "Mode", mode.id(), mode_choices)
            .description("How much Talaria may do without asking.".to_string())
            .category(SessionConfigOptionCategory::Mode),
        SessionConfigOption::select(MODEL_CONFIG_ID, "Model", model.to_string(), model_choices)
            .description("The model that answers from the next turn on.".to_string())
            .category(SessionConfigOptionCategory::Model),
    ];
    options.extend(thinking_options(now));
    options
}

/// The thought level and fast mode, for a model that takes levels (none for others).
fn thinking_options(now: &OptionsNow<'_>) -> Vec<SessionConfigOption> {
    let levels = Effort::levels_of(now.model);
    if levels.is_empty() {
        return Vec::new();
    }
    let mut choices = vec![
        SessionConfigSelectOption::new(DEFAULT_THOUGHT_LEVEL, "Default")
            .description("As the model decides by itself.".to_string()),
    ];
    choices.extend(
        levels
            .iter()
            .map(|level| SessionConfigSelectOption::new(level.id(), level.name())),
    );
    let current = now
        .effort
        .filter(|effort| levels.contains(effort))
        .map_or(DEFAULT_THOUGHT_LEVEL, Effort::id);
    let mut options = vec![
        SessionConfigOption::select(THOUGHT_LEVEL_CONFIG_ID, "Thinking", current, choices)
            .description("How hard the model thinks before it answers.".to_string())
            .category(SessionConfigOptionCategory::ThoughtLevel),
    ];
    if now.booleans {
        let fast = now.effort.is_some() && now.effort == fast_effort(now.model);
        options.push(
            SessionConfigOption::boolean(FAST_MODE_CONFIG_ID, "Fast mode", fast).description(
                "Answer with the least thinking the model takes (the thought level's lowest)."
                    .to_string(),
            ),
        );
    }
    options
}
