//! One connection per MCP server, and the hub of a session's servers: connecting within a
//! budget, restarting a dead server once, and the status `/mcp` shows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;
use talaria_util::lock;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use rmcp::{RoleClient, ServiceError};
use tokio::sync::RwLock;

use crate::elicit::{Askers, Handler};

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    Http {
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
}

/// What `/mcp` shows of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    pub connected: bool,
    pub tools: usize,
    pub last_error: Option<String>,
}

type Client = RunningService<RoleClient, Handler>;

/// A connected (or failed) server.
pub struct Server {
    pub config: ServerConfig,
    client: RwLock<Option<Client>>,
    restarted: AtomicBool,
    status: Mutex<Status>,
    pub tools: Vec<Tool>,
    /// Who answers the server's questions during its calls.
    pub askers: Arc<Askers>,
    /// The client can show forms.
    forms: bool,
}

/// The `PATH` a server is found on and runs with (its own `PATH` setting, else the agent's),
/// without the entries that name no fixed folder: an empty or relative entry (`.`,
/// `node_modules/.bin`) is looked up from wherever the process stands, which a model can fill
/// with a program of its own; so is an entry inside the folder the agent runs in.
fn safe_path(env: &[(String, String)]) -> std::ffi::OsString {
    let given = env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| std::ffi::OsString::from(value))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    let here = std::env::current_dir()
        .ok()
        .filter(|dir| dir != std::path::Path::new("/"));
    let kept: Vec<std::path::PathBuf> = std::env::split_paths(&given)
        .filter(|entry| entry.is_absolute())
        .filter(|entry| here.as_ref().is_none_or(|here| !entry.starts_with(here)))
        .collect();
    std::env::join_paths(kept).unwrap_or_default()
}

/// The program a server's command names: a path as given, a bare name found on `path`.
fn program_on(command: &str, path: &std::ffi::OsStr) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if command.contains('/') {
        return Ok(std::path::PathBuf::from(command));
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(command))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{command} is not on PATH (its relative entries, and those inside the \
                     folder the agent runs in, are not searched)"
                ),
            )
        })
}

/// Starts (or reaches) a server and lists its tools.
async fn connect(
    config: &ServerConfig,
    handler: Handler,
) -> Result<(Client, Vec<Tool>), ConnectError> {
    let client = match &config.transport {
        Transport::Stdio { command, args, env } => {
            let path = safe_path(env);
            let program = program_on(command, &path).map_err(|source| ConnectError::Spawn {
                command: command.clone(),
                source: Arc::new(source),
            })?;
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args)
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
                .map_err(|source| ConnectError::Spawn {
                    command: command.clone(),
                    source: Arc::new(source),
                })?;
            handler
                .serve(transport)
                .await
                .map_err(|e| ConnectError::Handshake {
                    with: None,
                    detail: e.to_string(),
                })?
        }
        Transport::Http { url, headers } => {
            let mut default_headers = reqwest::header::HeaderMap::new();
            for (name, value) in headers {
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| ConnectError::Header(format!("header {name:?}: {e}")))?;
                let value = reqwest::header::HeaderValue::from_str(value)
                    .map_err(|e| ConnectError::Header(format!("header value for {name}: {e}")))?;
                default_headers.insert(name, value);
            }
            let http = reqwest::Client::builder()
                .default_headers(default_headers)
                .build()
                .map_err(|e| ConnectError::Http(e.to_string()))?;
            let transport = StreamableHttpClientTransport::with_client(
                crate::http::HttpClient(http),
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            handler
                .serve(transport)
                .await
                .map_err(|e| ConnectError::Handshake {
                    with: Some(url.to_string()),
                    detail: e.to_string(),
                })?
        }
    };
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| ConnectError::ListTools(e.to_string()))?;
    Ok((client, tools))
}

impl Server {
    /// Connects within the server's start-up timeout (and `budget`, whichever is shorter).
    async fn start(config: ServerConfig, budget: Duration, forms: bool) -> Self {
        let limit = config.startup_timeout.min(budget);
        let askers = Arc::new(Askers::default());
        let handler = Handler {
            server: config.name.clone(),
            forms,
            askers: askers.clone(),
        };
        let connected = tokio::time::timeout(limit, connect(&config, handler)).await;
        let (client, tools, error) = match connected {
            Ok(Ok((client, tools))) => (Some(client), tools, None),
            Ok(Err(why)) => (None, Vec::new(), Some(why.to_string())),
            Err(_) => (
                None,
                Vec::new(),
                Some(format!("it did not start within {} s", limit.as_secs_f32())),
            ),
        };
        let status = Status {
            name: config.name.clone(),
            connected: client.is_some(),
            tools: tools.len(),
            last_error: error,
        };
        Self {
            config,
            client: RwLock::new(client),
            restarted: AtomicBool::new(false),
            status: Mutex::new(status),
            tools,
            askers,
            forms,
        }
    }

    pub fn status(&self) -> Status {
        lock(&self.status).clone()
    }

    fn note_error(&self, why: &str, connected: bool) {
        let mut status = lock(&self.status);
        status.last_error = Some(why.to_string());
        status.connected = connected;
    }

    async fn peer(&self) -> Option<Peer<RoleClient>> {
        self.client.read().await.as_ref().map(|c| c.peer().clone())
    }

    /// Calls a tool; a server that died is restarted once and the call tried again.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallToolResult, McpCallError> {
        let server = || self.config.name.clone();
        for attempt in 0..2 {
            let Some(peer) = self.peer().await else {
                return Err(McpCallError::NotRunning {
                    server: server(),
                    last_error: lock(&self.status).last_error.clone(),
                });
            };
            let params =
                CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.clone());
            let called =
                tokio::time::timeout(self.config.tool_timeout, peer.call_tool(params)).await;
            match called {
                Err(_) => {
                    let failed = McpCallError::TimedOut {
                        server: server(),
                        seconds: self.config.tool_timeout.as_secs(),
                    };
                    self.note_error(&failed.to_string(), true);
                    return Err(failed);
                }
                Ok(Ok(result)) => return Ok(result),
                Ok(Err(error)) => {
                    let transport_closed = matches!(
                        error,
                        ServiceError::TransportClosed | ServiceError::TransportSend(_)
                    );
                    let failed = McpCallError::Failed {
                        server: server(),
                        detail: error.to_string(),
                    };
                    if !transport_closed
                        || attempt > 0
                        || self.restarted.swap(true, Ordering::SeqCst)
                    {
                        self.note_error(&failed.to_string(), !transport_closed);
                        return Err(failed);
                    }
                    tracing::warn!(server = %self.config.name, "{failed}; restarting it once");
                    self.restart().await?;
                }
            }
        }
        Err(McpCallError::Unreachable { server: server() })
    }

    async fn restart(&self) -> Result<(), McpCallError> {
        let mut client = self.client.write().await;
        *client = None;
        let handler = Handler {
            server: self.config.name.clone(),
            forms: self.forms,
            askers: self.askers.clone(),
        };
        match tokio::time::timeout(self.config.startup_timeout, connect(&self.config, handler))
            .await
        {
            Ok(Ok((fresh, _))) => {
                *client = Some(fresh);
                lock(&self.status).connected = true;
                Ok(())
            }
            Ok(Err(why)) => {
                let why = why.to_string();
                self.note_error(&why, false);
                Err(McpCallError::NotRestarted {
                    server: self.config.name.clone(),
                    why,
                })
            }
            Err(_) => {
                let why = format!(
                    "it gave no answer within {} s",
                    self.config.startup_timeout.as_secs()
                );
                self.note_error(&why, false);
                Err(McpCallError::NotRestarted {
                    server: self.config.name.clone(),
                    why,
                })
            }
        }
    }
}

/// The MCP servers of one session.
#[derive(Default)]
pub struct Hub {
    pub servers: Vec<Arc<Server>>,
}

impl Hub {
    /// Starts every server concurrently, each within `budget`; `forms`: the client can show
    /// forms, so the servers' questions are forwarded to the user.
    pub async fn connect(configs: Vec<ServerConfig>, budget: Duration, forms: bool) -> Self {
        let started = futures_util::future::join_all(
            configs
                .into_iter()
                .map(|config| Server::start(config, budget, forms)),
        )
        .await;
        Self {
            servers: started.into_iter().map(Arc::new).collect(),
        }
    }

    /// The servers that failed to start, with why.
    pub fn failures(&self) -> Vec<(String, String)> {
        self.servers
            .iter()
            .filter_map(|s| {
                let status = s.status();
                (!status.connected).then(|| (status.name, status.last_error.unwrap_or_default()))
            })
            .collect()
    }

    /// The `/mcp` report.
    pub fn report(&self) -> String {
        if self.servers.is_empty() {
            return "No MCP servers are connected to this session.".into();
        }
        let lines: Vec<String> = self
            .servers
            .iter()
            .map(|s| {
                let status = s.status();
                format!(
                    "- {}: {}, {} tools{}",
                    status.name,
                    if status.connected {
                        "connected"
                    } else {
                        "not running"
                    },
                    status.tools,
                    status
                        .last_error
                        .map(|e| format!("; last error: {e}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        format!("MCP servers:\n{}", lines.join("\n"))
    }
}

/// Why a call to an MCP server's tool failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpCallError {
    #[error(
        "the MCP server {server} is not running{}",
        .last_error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
    )]
    NotRunning {
        server: String,
        last_error: Option<String>,
    },
    #[error("the MCP server {server} did not answer within {seconds} s")]
    TimedOut { server: String, seconds: u64 },
    #[error("the MCP server {server} failed: {detail}")]
    Failed { server: String, detail: String },
    #[error("the MCP server {server} died and did not restart: {why}")]
    NotRestarted { server: String, why: String },
    #[error("the MCP server {server} could not be reached")]
    Unreachable { server: String },
}

/// Why a server could not be started or reached.
#[derive(Debug, Clone, thiserror::Error)]
enum ConnectError {
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
    #[error("listing its tools failed: {0}")]
    ListTools(String),
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
