//! Session options as ACP sees them: the approval mode (as legacy session modes and as the
//! `mode` config option, always in sync) and the model (the `model` config option).

use talaria_engine::Mode;
use talaria_protocol::acp::{
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption, SessionMode,
    SessionModeState,
};

/// The id of the mode config option.
pub const MODE_CONFIG_ID: &str = "mode";
/// The id of the model config option.
pub const MODEL_CONFIG_ID: &str = "model";

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
pub fn config_options(mode: Mode, model: &str, models: &[String]) -> Vec<SessionConfigOption> {
    let mode_choices: Vec<SessionConfigSelectOption> = Mode::ALL
        .iter()
        .map(|m| {
            SessionConfigSelectOption::new(m.id(), m.name())
                .description(m.description().to_string())
        })
        .collect();
    let mut model_names: Vec<String> = models.to_vec();
    if !model_names.iter().any(|m| m == model) {
        model_names.insert(0, model.to_string());
    }
    let model_choices: Vec<SessionConfigSelectOption> = model_names
        .iter()
        .map(|m| SessionConfigSelectOption::new(m.clone(), m.clone()))
        .collect();
    vec![
        SessionConfigOption::select(MODE_CONFIG_ID, "Mode", mode.id(), mode_choices)
            .description("How much Talaria may do without asking.".to_string())
            .category(SessionConfigOptionCategory::Mode),
        SessionConfigOption::select(MODEL_CONFIG_ID, "Model", model.to_string(), model_choices)
            .description("The model that answers from the next turn on.".to_string())
            .category(SessionConfigOptionCategory::Model),
    ]
}
