//! What this agent says about itself in `initialize`: exactly what works, no more.

use talaria_protocol::ProtocolVersion;
use talaria_protocol::acp::{
    AgentAuthCapabilities, AgentCapabilities, AuthMethod, AuthMethodAgent, AuthMethodTerminal,
    Implementation, InitializeRequest, InitializeResponse, LogoutCapabilities, McpCapabilities,
    PromptCapabilities, ProvidersCapabilities, SessionAdditionalDirectoriesCapabilities,
    SessionCapabilities, SessionCloseCapabilities, SessionDeleteCapabilities,
    SessionForkCapabilities, SessionListCapabilities, SessionResumeCapabilities,
    SessionSystemPromptCapabilities, SessionSystemPromptModeCapabilities,
    SessionSystemPromptOverrideCapabilities, SessionTitleCapabilities,
};

/// The agent auth method: credentials come from the environment or config file.
pub const AUTH_METHOD_ID: &str = "talaria-config";

/// The terminal auth method: the client runs `talaria setup` in a terminal.
pub const SETUP_METHOD_ID: &str = "talaria-setup";

/// The auth methods, in words, for errors that ask the client to authenticate.
pub fn auth_methods_hint() -> String {
    format!(
        "authenticate with \"{SETUP_METHOD_ID}\" (runs `talaria setup` in a terminal: choose a \
         provider, model and key) or \"{AUTH_METHOD_ID}\" (set OPENAI_API_KEY / ANTHROPIC_API_KEY \
         or api_key in config.toml, then authenticate)"
    )
}

/// What a client shows, as it is, when it must authenticate.
pub const SETUP_HINT: &str = "run `talaria setup` in a terminal";

/// ACP's `auth_required`, short enough for any client to show as it is: `Authentication
/// required: {short}; run `talaria setup` in a terminal`. The whole story — what is missing,
/// every way to authenticate — is in `data.talaria.detail` (with `data.talaria.reason`: why,
/// and `data.talaria.fix`: the one thing to do), the methods' ids in `data.authMethods`, so a
/// client that has room shows more.
pub fn auth_required(reason: &str, short: &str, detail: &str) -> talaria_protocol::acp::Error {
    talaria_protocol::errors::auth_required(format!("{short}; {SETUP_HINT}")).data(
        serde_json::json!({
            "talaria": {
                "reason": reason,
                "detail": format!("{detail}; {}", auth_methods_hint()),
                "fix": SETUP_HINT,
            },
            "authMethods": [AUTH_METHOD_ID, SETUP_METHOD_ID],
        }),
    )
}

/// `auth_required` for a configuration with no key for its provider.
pub fn no_credentials(config: &talaria_engine::Config) -> Option<talaria_protocol::acp::Error> {
    let missing = config.missing_credentials()?;
    Some(credentials_missing(config.provider.as_str(), &missing))
}

/// `auth_required` for no key for `provider` (`missing`: what is missing, and where).
pub fn credentials_missing(provider: &str, missing: &str) -> talaria_protocol::acp::Error {
    auth_required(
        "no_credentials",
        &format!("no API key for the {provider} provider"),
        missing,
    )
}

/// Makes `initialize` liberal in the version it accepts, as the spec's negotiation asks: a
/// number stays, a numeric string (`"1"`) becomes that number, and anything else (a missing
/// field, `"1.0"`, `null`) is answered with version 1 rather than an error.
pub fn negotiate_version(params: &mut serde_json::Value) {
    let Some(object) = params.as_object_mut() else {
        return;
    };
    let version = object.get("protocolVersion");
    let normalized = match version {
        Some(serde_json::Value::Number(n))
            if n.as_u64().is_some_and(|v| v <= u64::from(u16::MAX)) =>
        {
            return;
        }
        Some(serde_json::Value::String(text)) => match text.trim().parse::<u16>() {
            Ok(number) => number,
            Err(_) => {
                tracing::info!(received = %text, "initialize: protocolVersion is not a number; answering with 1");
                1
            }
        },
        other => {
            tracing::info!(received = ?other, "initialize: unusable protocolVersion; answering with 1");
            1
        }
    };
    object.insert(
        "protocolVersion".into(),
        serde_json::Value::from(normalized),
    );
}

/// Whether the client may be offered a terminal auth method: it announced
/// `clientCapabilities.auth.terminal`, or the ACP registry's older `_meta["terminal-auth"]`
/// (the schema says a terminal method is offered to no other client).
fn announces_terminal_auth(request: &InitializeRequest) -> bool {
    let capabilities = &request.client_capabilities;
    capabilities.auth.terminal
        || capabilities
            .meta
            .as_ref()
            .and_then(|meta| meta.get("terminal-auth"))
            .is_some_and(|value| value.as_bool() != Some(false) && !value.is_null())
}

/// The auth methods this client may be offered.
fn auth_methods(request: &InitializeRequest) -> Vec<AuthMethod> {
    let mut methods = vec![AuthMethod::Agent(
        AuthMethodAgent::new(AUTH_METHOD_ID, "API key from environment or config").description(
            "Talaria reads credentials from its environment (OPENAI_API_KEY / \
             ANTHROPIC_API_KEY, with OPENAI_BASE_URL / ANTHROPIC_BASE_URL) or from api_key in \
             $TALARIA_HOME/config.toml; `talaria setup`, run in a terminal, writes them. Set \
             them and authenticate again.",
        ),
    )];
    if announces_terminal_auth(request) {
        methods.push(AuthMethod::Terminal(
            AuthMethodTerminal::new(SETUP_METHOD_ID, "Set up in a terminal")
                .description(
                    "Runs `talaria setup`: choose a hosted provider or a local server \
                     (llama.cpp, Ollama, LM Studio), the model and the key; it is checked with \
                     a one-token call and written to $TALARIA_HOME/config.toml.",
                )
                .args(vec!["setup".to_string()]),
        ));
    }
    methods
}

/// The answer to `initialize`.
pub fn initialize(
    request: &InitializeRequest,
    images: bool,
    transport: Option<serde_json::Value>,
) -> InitializeResponse {
    if request.protocol_version != ProtocolVersion::V1 {
        tracing::info!(
            requested = request.protocol_version.as_u16(),
            "client asked for another protocol version; answering with 1"
        );
    }
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .auth(AgentAuthCapabilities::new().logout(LogoutCapabilities::new()))
                .mcp_capabilities(McpCapabilities::new().http(true).sse(true))
                .providers(ProvidersCapabilities::new())
                .session_capabilities(
                    SessionCapabilities::new()
                        .additional_directories(SessionAdditionalDirectoriesCapabilities::new())
                        .list(SessionListCapabilities::new())
                        .resume(SessionResumeCapabilities::new())
                        .close(SessionCloseCapabilities::new())
                        .delete(SessionDeleteCapabilities::new())
                        .fork(SessionForkCapabilities::new())
                        .title(SessionTitleCapabilities::new())
                        .system_prompt(
                            SessionSystemPromptCapabilities::new().mode(
                                SessionSystemPromptModeCapabilities::new()
                                    .override_(SessionSystemPromptOverrideCapabilities::new()),
                            ),
                        ),
                )
                .prompt_capabilities(
                    PromptCapabilities::new()
                        .image(images)
                        .audio(false)
                        .embedded_context(true),
                )
                .meta(agent_capability_extensions()),
        )
        .auth_methods(auth_methods(request))
        .agent_info(Implementation::new("talaria", env!("CARGO_PKG_VERSION")).title("Talaria"))
        .meta(extensions(transport))
}

/// The drafts Talaria speaks that ACP 1.20 has no field for, in `agentCapabilities._meta`:
/// `quota` (the quotas draft: `quota_update`, `quota/read`, `quotaExceeded`) and
/// `workspaceTrust` (the workspace-trust draft: `workspaceTrust` in session answers,
/// `trust/apply`) and `toolInterception` (the tool-interception draft: both checkpoints).
fn agent_capability_extensions() -> talaria_protocol::acp::Meta {
    let mut meta = talaria_protocol::acp::Meta::new();
    let (name, marker) = super::quota::advertised();
    meta.insert(name, marker);
    meta.insert("workspaceTrust".into(), serde_json::json!({}));
    let (name, marker) = super::interception::advertised();
    meta.insert(name, marker);
    meta
}

/// The extensions Talaria speaks, as the peers advertise them (top-level `_meta`):
/// `_session/steering`, `_session/rewind` (with Talaria's `restoreFiles`), `_session/attach`,
/// and what the
/// transport offers (`capabilities.transport`, from `talaria serve`: resumable streams).
fn extensions(transport: Option<serde_json::Value>) -> talaria_protocol::acp::Meta {
    let mut meta = talaria_protocol::acp::Meta::new();
    if let Some(transport) = transport {
        meta.insert(
            "capabilities".into(),
            serde_json::json!({ "transport": transport }),
        );
    }
    meta.insert("steering".into(), serde_json::json!({"supported": true}));
    // Many clients on one session: `_session/attach`, `_session/detach` (attach.rs).
    meta.insert("sessionAttach".into(), super::audience::advertised());
    meta.insert(
        "sessionRewind".into(),
        serde_json::json!({"supported": true, "restoreFiles": true}),
    );
    meta
}
