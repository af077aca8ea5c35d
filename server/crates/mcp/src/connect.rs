//! Reaching one MCP server: the process of a stdio server (found on a `PATH` without
//! relative entries, in a process group of its own), or an HTTP server over streamable HTTP
//! or the older HTTP+SSE transport; then the handshake and the lists of what it offers.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use rmcp::{RoleClient, ServiceExt};

use crate::catalog::{Catalog, Offers};
use crate::elicit::Handler;
use crate::http::HttpClient;
use crate::oauth::Credentials;
use crate::sse::SseTransport;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// Streamable HTTP; a server that answers the first message as an SSE-only server
    /// does is reached over HTTP+SSE instead.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
    /// The older HTTP+SSE transport (`type = "sse"`).
    Sse {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// One server of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
    /// What a stdio server inherits of the agent's environment (the edge leaves out
    /// provider keys and other secrets, as for commands); its own `env` comes on top.
    pub inherited_env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// How to sign in to an HTTP server that asks for it (`None`: a 401 is a failure).
    pub auth: Option<crate::oauth::AuthSettings>,
}

pub(crate) type Client = RunningService<RoleClient, Handler>;

/// One variable of an environment, as the OS has it.
type EnvVar = (std::ffi::OsString, std::ffi::OsString);

/// A server reached: its connection, tools, and what else it offers.
pub(crate) struct Connected {
    pub client: Client,
    pub tools: Vec<Tool>,
    pub offers: Offers,
    pub catalog: Catalog,
}

/// The `PATH` a server is found on and runs with (its own `PATH` setting, else the agent's),
/// only its fixed entries (`talaria_util::search_path`): none relative, none inside the
/// folder the agent runs in.
fn safe_path(env: &[(String, String)]) -> std::ffi::OsString {
    let given = env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| std::ffi::OsString::from(value))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    let here = std::env::current_dir().unwrap_or_default();
    talaria_util::search_path::fixed_entries(&given, &[here.as_path()])
}

use talaria_util::search_path::program_on;

/// Starts (or reaches) a server and lists its tools, resources and prompts.
pub(crate) async fn connect(
    config: &ServerConfig,
    handler: Handler,
    credentials: Option<&Arc<Credentials>>,
) -> Result<Connected, ConnectError> {
    let client = match &config.transport {
        Transport::Stdio { command, args, env } => {
            stdio(command, args, (&config.inherited_env, env), handler).await?
        }
        Transport::Http { url, headers } => {
            let http = HttpClient::new(http_client(headers)?, credentials.cloned());
            let transport = StreamableHttpClientTransport::with_client(
                http.clone(),
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            match handler.clone().serve(transport).await {
                Ok(client) => client,
                Err(e) if http.looks_sse_only() => {
                    tracing::info!(server = %config.name, "{url} answered as an HTTP+SSE server does ({e}): connecting over HTTP+SSE");
                    sse(url, http.client, handler).await?
                }
                Err(_) if http.needs_sign_in() => {
                    return Err(match credentials {
                        Some(_) => ConnectError::NeedsSignIn,
                        None => ConnectError::Handshake {
                            with: Some(url.to_string()),
                            detail: "it asks for sign-in (401), and this session cannot sign in"
                                .into(),
                        },
                    });
                }
                Err(e) => {
                    return Err(ConnectError::Handshake {
                        with: Some(url.to_string()),
                        detail: e.to_string(),
                    });
                }
            }
        }
        Transport::Sse { url, headers } => sse(url, http_client(headers)?, handler).await?,
    };
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| ConnectError::ListTools(e.to_string()))?;
    let offers = Offers::of(client.peer());
    let catalog = Catalog::fetch(&config.name, client.peer(), offers).await;
    Ok(Connected {
        client,
        tools,
        offers,
        catalog,
    })
}

async fn stdio(
    command: &str,
    args: &[String],
    (inherited, env): (&[EnvVar], &[(String, String)]),
    handler: Handler,
) -> Result<Client, ConnectError> {
    let path = safe_path(env);
    let spawn_error = |source| ConnectError::Spawn {
        command: command.to_string(),
        source: Arc::new(source),
    };
    let program = program_on(command, &path).map_err(spawn_error)?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(inherited.iter().cloned())
        .envs(env.iter().cloned())
        .env("PATH", &path)
        .kill_on_drop(true);
    let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
    // Its own process group, killed whole with the hub (no orphans).
    wrapped
        .wrap(process_wrap::tokio::ProcessGroup::leader())
        .wrap(process_wrap::tokio::KillOnDrop);
    let (transport, _stderr) = TokioChildProcess::builder(wrapped)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(spawn_error)?;
    handler
        .serve(transport)
        .await
        .map_err(|e| ConnectError::Handshake {
            with: None,
            detail: e.to_string(),
        })
}

async fn sse(url: &str, http: reqwest::Client, handler: Handler) -> Result<Client, ConnectError> {
    let transport = SseTransport::connect(http, url)
        .await
        .map_err(|e| ConnectError::Sse(e.to_string()))?;
    handler
        .serve(transport)
        .await
        .map_err(|e| ConnectError::Handshake {
            with: Some(url.to_string()),
            detail: e.to_string(),
        })
}

/// The HTTP client of one server, with its configured headers on every request.
fn http_client(headers: &[(String, String)]) -> Result<reqwest::Client, ConnectError> {
    let mut default_headers = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| ConnectError::Header(format!("header {name:?}: {e}")))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|e| ConnectError::Header(format!("header value for {name}: {e}")))?;
        default_headers.insert(name, value);
    }
    reqwest::Client::builder()
        .default_headers(default_headers)
        .build()
        .map_err(|e| ConnectError::Http(e.to_string()))
}

/// Why a server could not be started or reached.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("cannot start {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "the MCP handshake{} failed: {detail}",
        .with.as_ref().map(|url| format!(" with {url}")).unwrap_or_default()
    )]
    Handshake {
        with: Option<String>,
        detail: String,
    },
    #[error("{0}")]
    Header(String),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
    #[error("cannot reach it over HTTP+SSE: {0}")]
    Sse(String),
    #[error("listing its tools failed: {0}")]
    ListTools(String),
    #[error("it needs sign-in")]
    NeedsSignIn,
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn relative_path_entries_are_never_searched() {
        let dir = tempfile::tempdir().expect("dir");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        let tool = bin.join("planted-server");
        std::fs::write(&tool, "#!/bin/sh\n").expect("tool");
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let env = vec![(
            "PATH".to_string(),
            format!(".:bin::relative/dir:{}", bin.display()),
        )];
        let path = safe_path(&env);
        let entries: Vec<_> = std::env::split_paths(&path).collect();
        assert_eq!(entries, std::slice::from_ref(&bin));
        assert_eq!(program_on("planted-server", &path).expect("found"), tool);
        let without = safe_path(&[("PATH".into(), ".:bin".into())]);
        assert!(program_on("planted-server", &without).is_err());
        assert_eq!(
            program_on("./x", &without).expect("a path as given"),
            std::path::PathBuf::from("./x")
        );
    }
}
