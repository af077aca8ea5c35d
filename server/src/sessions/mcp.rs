//! MCP servers at the edge: the servers a client passes (`mcpServers` of `session/new`,
//! `session/load`, `session/resume`) and those configured for every session
//! (`[mcp_servers.<name>]`), connected concurrently within a short budget so starting a
//! session never waits long; failures become notices naming the server.

use std::sync::Arc;
use std::time::Duration;

use talaria_engine::Config;
use talaria_engine::McpServerEntry;
use talaria_mcp::{Hub, ServerConfig, Transport};
use talaria_protocol::acp;

/// The longest a session start waits for its MCP servers.
pub const START_BUDGET: Duration = Duration::from_secs(5);
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const TOOL_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the user has to sign in to a server.
const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(600);
/// Where sign-ins are kept, under the home (hidden from commands with the rest of it).
pub const SIGN_IN_FOLDER: &str = "mcp-auth";

/// A client's HTTP headers as name and value.
fn pairs(headers: &[acp::HttpHeader]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect()
}

fn from_client(server: &acp::McpServer) -> Option<ServerConfig> {
    let (name, transport) = match server {
        acp::McpServer::Stdio(stdio) => (
            stdio.name.clone(),
            Transport::Stdio {
                command: stdio.command.display().to_string(),
                args: stdio.args.clone(),
                env: stdio
                    .env
                    .iter()
                    .map(|v| (v.name.clone(), v.value.clone()))
                    .collect(),
            },
        ),
        acp::McpServer::Sse(sse) => (
            sse.name.clone(),
            Transport::Sse {
                url: sse.url.clone(),
                headers: pairs(&sse.headers),
            },
        ),
        acp::McpServer::Http(http) => (
            http.name.clone(),
            Transport::Http {
                url: http.url.clone(),
                headers: pairs(&http.headers),
            },
        ),
        _ => return None,
    };
    Some(ServerConfig {
        name,
        transport,
        startup_timeout: STARTUP_TIMEOUT,
        tool_timeout: TOOL_TIMEOUT,
        inherited_env: Vec::new(),
        auth: None,
    })
}

fn from_config(entry: &McpServerEntry) -> ServerConfig {
    let transport = match (&entry.command, &entry.url) {
        (Some(command), _) => Transport::Stdio {
            command: command.clone(),
            args: entry.args.clone(),
            env: entry
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        },
        (None, Some(url)) => {
            let headers = entry
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            match entry.transport.as_deref() {
                Some("sse") => Transport::Sse {
                    url: url.clone(),
                    headers,
                },
                _ => Transport::Http {
                    url: url.clone(),
                    headers,
                },
            }
        }
        // Reported as a server that cannot start.
        (None, None) => Transport::Stdio {
            command: String::new(),
            args: Vec::new(),
            env: Vec::new(),
        },
    };
    ServerConfig {
        name: entry.name.clone(),
        transport,
        startup_timeout: entry
            .startup_timeout_secs
            .map_or(STARTUP_TIMEOUT, Duration::from_secs),
        tool_timeout: entry
            .tool_timeout_secs
            .map_or(TOOL_TIMEOUT, Duration::from_secs),
        inherited_env: Vec::new(),
        auth: None,
    }
}

/// How a session signs in to an HTTP server that asks for it: kept in the user's own
/// folder under the home, with the client and scopes configured for the server's name.
fn auth_settings(name: &str, config: &Config) -> talaria_mcp::oauth::AuthSettings {
    let entry = config.mcp_servers.iter().find(|e| e.name == name);
    talaria_mcp::oauth::AuthSettings {
        store: talaria_mcp::oauth::TokenStore::new(config.home.join(SIGN_IN_FOLDER)),
        client_id: entry.and_then(|e| e.oauth_client_id.clone()),
        client_secret: None,
        scope: entry.and_then(|e| e.oauth_scope.clone()),
        timeout: SIGN_IN_TIMEOUT,
    }
}

/// Connects the session's servers: the configured ones, then the client's (a client's server
/// with a configured name replaces it). `forms`: the client shows forms, so the servers' own
/// questions are forwarded to it.
pub async fn connect(
    servers: &[acp::McpServer],
    config: &Config,
    forms: bool,
) -> (Arc<Hub>, Vec<String>) {
    let mut configs: Vec<ServerConfig> = config.mcp_servers.iter().map(from_config).collect();
    let mut warnings = Vec::new();
    for server in servers {
        match from_client(server) {
            Some(server) => {
                configs.retain(|c| c.name != server.name);
                configs.push(server);
            }
            None => warnings
                .push("An MCP server of a transport Talaria does not know was left out.".into()),
        }
    }
    if configs.is_empty() {
        return (Arc::new(Hub::default()), warnings);
    }
    // Stdio servers inherit what commands do: no provider keys, no other secrets.
    let inherited = talaria_engine::env_rules(config).apply(std::env::vars_os());
    for server in &mut configs {
        server.inherited_env = inherited.clone();
        if matches!(server.transport, Transport::Http { .. }) {
            server.auth = Some(auth_settings(&server.name, config));
        }
    }
    let hub = Hub::connect(configs, START_BUDGET, forms).await;
    for (name, why) in hub.failures() {
        tracing::warn!(server = %name, "MCP server not started: {why}");
        let needs_sign_in = hub
            .servers
            .iter()
            .any(|s| s.config.name == name && s.status().needs_sign_in);
        warnings.push(if needs_sign_in {
            format!(
                "The MCP server {name} needs sign-in: you are shown where to sign in, and its \
                 tools are offered once you have."
            )
        } else {
            format!(
                "The MCP server {name} is not available: {why}. The session works without its tools."
            )
        });
    }
    (Arc::new(hub), warnings)
}
