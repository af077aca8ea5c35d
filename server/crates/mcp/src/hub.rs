//! The MCP servers of one session: started together within a budget, and what the session
//! asks of them as a whole: status (`/mcp`), reconnection, resources by URI, prompts as
//! commands, and the resources updated since they were read.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::catalog::Catalog;
use crate::connect::ServerConfig;
use crate::oauth::SignInPrompt;
use crate::prompts::PromptCommand;
use crate::server::{McpCallError, Server};
use crate::tool::McpTool;
use tokio_util::sync::CancellationToken;

/// The MCP servers of one session.
#[derive(Default)]
pub struct Hub {
    pub servers: Vec<Arc<Server>>,
    /// Cancelled when the session's hub goes: sign-ins in progress stop.
    cancel: CancellationToken,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Hub {
    /// Starts every server concurrently, each within `budget`; `forms`: the client can show
    /// forms, so the servers' questions are forwarded to the user.
    pub async fn connect(configs: Vec<ServerConfig>, budget: Duration, forms: bool) -> Self {
        let cancel = CancellationToken::new();
        let started = futures_util::future::join_all(
            configs
                .into_iter()
                .map(|config| Server::start(config, budget, forms, cancel.clone())),
        )
        .await;
        Self {
            servers: started.into_iter().map(Arc::new).collect(),
            cancel,
        }
    }

    /// Gives the servers who shows the user where to sign in, and starts the sign-ins the
    /// servers asked for at start.
    pub fn offer_sign_in(&self, prompt: Arc<dyn SignInPrompt>) {
        for server in &self.servers {
            server.set_sign_in_prompt(prompt.clone());
            server.begin_sign_in(false);
        }
    }

    /// The servers whose tools changed since the last call (after a sign-in, a reconnection,
    /// or `tools/list_changed`): each as its toolset and its tools now.
    pub fn take_changed_tools(&self) -> Vec<(String, Vec<Arc<dyn talaria_tools::Tool>>)> {
        self.servers
            .iter()
            .filter(|s| s.take_tools_changed())
            .map(|s| (McpTool::toolset_of(&s.config.name), McpTool::of(s)))
            .collect()
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

    fn named(&self, name: &str) -> Result<&Arc<Server>, McpCallError> {
        self.servers
            .iter()
            .find(|s| s.config.name == name)
            .ok_or_else(|| {
                McpCallError::NoServer(format!(
                    "there is no MCP server named {name:?} in this session{}",
                    self.names()
                ))
            })
    }

    fn names(&self) -> String {
        if self.servers.is_empty() {
            return String::new();
        }
        let names: Vec<&str> = self
            .servers
            .iter()
            .map(|s| s.config.name.as_str())
            .collect();
        format!(" (its servers: {})", names.join(", "))
    }

    /// Whether some server offers resources (then the model gets the resource tools).
    pub fn offers_resources(&self) -> bool {
        self.servers.iter().any(|s| s.offers().resources)
    }

    /// Each server's lists (only `only`'s when given), fetched again where they changed.
    pub async fn catalogs(&self, only: Option<&str>) -> Vec<(String, Catalog)> {
        let mut catalogs = Vec::new();
        for server in &self.servers {
            if only.is_some_and(|name| name != server.config.name) || !server.offers().resources {
                continue;
            }
            catalogs.push((server.config.name.clone(), server.catalog().await));
        }
        catalogs
    }

    /// The server a resource URI belongs to: `named`, else the one that lists it or whose
    /// template makes it, else the only server with resources.
    fn owner(&self, uri: &str, named: Option<&str>) -> Result<&Arc<Server>, McpCallError> {
        if let Some(name) = named {
            return self.named(name);
        }
        let offering: Vec<&Arc<Server>> = self
            .servers
            .iter()
            .filter(|s| s.offers().resources)
            .collect();
        if let Some(server) = offering.iter().find(|s| s.claims(uri)) {
            return Ok(server);
        }
        match offering.as_slice() {
            [only] => Ok(only),
            [] => Err(McpCallError::NoServer(
                "no MCP server of this session offers resources".into(),
            )),
            _ => Err(McpCallError::NoServer(format!(
                "no server lists {uri}: name the server{}",
                self.names()
            ))),
        }
    }

    /// Whether some server lists `uri` or makes it from a template (a link the user attached
    /// is then read through it).
    pub fn claims(&self, uri: &str) -> bool {
        self.servers
            .iter()
            .any(|s| s.offers().resources && s.claims(uri))
    }

    /// Reads a resource: the server's name and the contents it sent.
    pub async fn read_resource(
        &self,
        uri: &str,
        server: Option<&str>,
    ) -> Result<(String, Vec<Value>), McpCallError> {
        let server = self.owner(uri, server)?;
        Ok((server.config.name.clone(), server.read(uri).await?))
    }

    /// Every server's prompts, as slash commands (the lists as last fetched).
    pub fn prompt_commands(&self) -> Vec<PromptCommand> {
        self.servers
            .iter()
            .flat_map(|s| s.prompt_commands())
            .collect()
    }

    /// A server's prompt's declared arguments, fetching the lists again where they changed.
    pub async fn prompt_arguments(
        &self,
        server: &str,
        prompt: &str,
    ) -> Result<Vec<rmcp::model::PromptArgument>, McpCallError> {
        let found = self.named(server)?;
        let catalog = found.catalog().await;
        let declared = catalog
            .prompts
            .iter()
            .find(|p| p.name == prompt)
            .ok_or_else(|| {
                McpCallError::NoServer(format!("the MCP server {server} has no prompt {prompt:?}"))
            })?;
        Ok(declared.arguments.clone().unwrap_or_default())
    }

    /// Fetches a server's prompt with its arguments.
    pub async fn get_prompt(
        &self,
        server: &str,
        prompt: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<Value, McpCallError> {
        self.named(server)?.prompt(prompt, arguments).await
    }

    /// Fetches again the lists servers said changed; `true` when some server's prompts (the
    /// client's commands) changed with them.
    pub async fn refresh_changed(&self) -> bool {
        let mut prompts_changed = false;
        for server in &self.servers {
            prompts_changed |= server.refresh_if_changed().await;
        }
        prompts_changed
    }

    /// The resources read this session that their servers say changed since the last call:
    /// `(server, uri)`.
    pub fn take_updated(&self) -> Vec<(String, String)> {
        self.servers
            .iter()
            .flat_map(|s| {
                let name = s.config.name.clone();
                s.notices()
                    .take_updated()
                    .into_iter()
                    .map(move |uri| (name.clone(), uri))
            })
            .collect()
    }

    /// `/mcp reconnect [name]`: connects the server (every server when none is named) again.
    pub async fn reconnect(&self, name: Option<&str>) -> Result<String, McpCallError> {
        let servers: Vec<&Arc<Server>> = match name {
            Some(name) => vec![self.named(name)?],
            None => self.servers.iter().collect(),
        };
        if servers.is_empty() {
            return Ok("No MCP servers are connected to this session.".into());
        }
        let mut lines = Vec::new();
        for server in servers {
            lines.push(match server.restart().await {
                Ok(()) => format!("- {}: reconnected", server.config.name),
                Err(McpCallError::NeedsSignIn { .. }) if server.begin_sign_in(true) => format!(
                    "- {}: needs sign-in; the address to sign in at was sent to you",
                    server.config.name
                ),
                Err(why) => format!("- {}: {why}", server.config.name),
            });
        }
        Ok(format!("{}\n\n{}", lines.join("\n"), self.report()))
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
                let state = if status.connected {
                    "ready"
                } else if status.signing_in {
                    "waiting for sign-in"
                } else if status.needs_sign_in {
                    "needs sign-in"
                } else {
                    "not running"
                };
                let mut line = format!("- {}: {state}, {} tools", status.name, status.tools);
                if s.offers().resources {
                    line.push_str(&format!(
                        ", {} resources, {} resource templates",
                        status.resources, status.templates
                    ));
                }
                if s.offers().prompts {
                    line.push_str(&format!(", {} prompts", status.prompts));
                }
                if let Some(error) = status.last_error {
                    line.push_str(&format!("; last error: {error}"));
                }
                line
            })
            .collect();
        format!(
            "MCP servers:\n{}\n\n`/mcp reconnect [name]` connects a server again.",
            lines.join("\n")
        )
    }
}
