//! What this agent says about itself in `initialize`: exactly what works, no more.

use talaria_protocol::ProtocolVersion;
use talaria_protocol::acp::{
    AgentCapabilities, AuthMethod, AuthMethodAgent, Implementation, InitializeRequest,
    InitializeResponse, PromptCapabilities, SessionAdditionalDirectoriesCapabilities,
    SessionCapabilities,
};

/// The one auth method: credentials come from the environment or config file.
pub const AUTH_METHOD_ID: &str = "talaria-config";

/// The answer to `initialize`.
pub fn initialize(request: &InitializeRequest) -> InitializeResponse {
    if request.protocol_version != ProtocolVersion::V1 {
        tracing::info!(
            requested = request.protocol_version.as_u16(),
            "client asked for another protocol version; answering with 1"
        );
    }
    let images = talaria_engine::Config::load().map_or(true, |c| c.supports_images);
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(false)
                .session_capabilities(
                    SessionCapabilities::new()
                        .additional_directories(SessionAdditionalDirectoriesCapabilities::new()),
                )
                .prompt_capabilities(
                    PromptCapabilities::new()
                        .image(images)
                        .audio(false)
                        .embedded_context(true),
                ),
        )
        .auth_methods(vec![AuthMethod::Agent(
            AuthMethodAgent::new(AUTH_METHOD_ID, "API key from environment or config").description(
                "Talaria reads credentials from its environment (OPENAI_API_KEY / \
                 ANTHROPIC_API_KEY, with OPENAI_BASE_URL / ANTHROPIC_BASE_URL) or from \
                 api_key in $TALARIA_HOME/config.toml. Set them and authenticate again.",
            ),
        )])
        .agent_info(Implementation::new("talaria", env!("CARGO_PKG_VERSION")).title("Talaria"))
}
