//! The approval modes as ACP sees them: legacy session modes and a `mode` config option,
//! always describing the same setting.

use talaria_engine::Mode;
use talaria_protocol::acp::{
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption, SessionMode,
    SessionModeState,
};

/// The id of the mode config option.
pub const MODE_CONFIG_ID: &str = "mode";

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

/// `configOptions` for session responses (complete list, with current values).
pub fn config_options(current: Mode) -> Vec<SessionConfigOption> {
    let choices: Vec<SessionConfigSelectOption> = Mode::ALL
        .iter()
        .map(|m| {
            SessionConfigSelectOption::new(m.id(), m.name())
                .description(m.description().to_string())
        })
        .collect();
    vec![
        SessionConfigOption::select(MODE_CONFIG_ID, "Mode", current.id(), choices)
            .description("How much Talaria may do without asking.".to_string())
            .category(SessionConfigOptionCategory::Mode),
    ]
}
