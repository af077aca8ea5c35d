//! One MCP server of a session: connected within a budget, its calls, reads and prompts, its
//! lists kept fresh, and a server that dies restarted with backoff (calls fail at once,
//! "restarting", while it waits) or on `/mcp reconnect`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, GetPromptRequestParams, ReadResourceRequestParams,
    SubscribeRequestParams, Tool,
};
use rmcp::service::Peer;
use rmcp::{RoleClient, ServiceError};
use serde_json::Value;
use talaria_util::lock;
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;

use crate::catalog::{Catalog, Notices, Offers};
use crate::connect::{Client, ConnectError, Connected, ServerConfig, connect};
use crate::elicit::{Askers, Handler};
use crate::oauth::Credentials;
use crate::oauth::SignInState;

/// The longest wait between restarts of a server that keeps dying.
const LONGEST_BACKOFF: Duration = Duration::from_secs(60);

/// What `/mcp` shows of a server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    pub name: String,
    pub connected: bool,
    pub tools: usize,
    pub resources: usize,
    pub templates: usize,
    pub prompts: usize,
    pub last_error: Option<String>,
    /// It asked for sign-in, and no sign-in has passed yet.
    pub needs_sign_in: bool,
    /// A sign-in is waiting for the user.
    pub signing_in: bool,
}

/// Restarts so far, and when the next may be tried.
#[derive(Debug, Default)]
struct Restarts {
    count: u32,
    not_before: Option<Instant>,
}

/// A connected (or failed) server.
pub struct Server {
    pub config: ServerConfig,
    client: RwLock<Option<Client>>,
    restarts: Mutex<Restarts>,
    status: Mutex<Status>,
    tools: Mutex<Vec<Tool>>,
    /// The tools are not those the session was last given.
    tools_changed: std::sync::atomic::AtomicBool,
    /// A request found the connection gone (an HTTP session the server dropped answers 404
    /// while the transport still looks open): the next request connects again.
    broken: std::sync::atomic::AtomicBool,
    /// Held while connecting again: a reconnection racing a restart waits, never doubles.
    connecting: tokio::sync::Mutex<()>,
    /// The sign-in of an HTTP server that may ask for one.
    pub(crate) credentials: Option<Arc<Credentials>>,
    pub(crate) sign_in: Mutex<SignInState>,
    /// The session's hub is gone: a sign-in in progress stops.
    pub(crate) cancel: CancellationToken,
    offers: Mutex<Offers>,
    catalog: Mutex<Catalog>,
    notices: Arc<Notices>,
    /// Who answers the server's questions during its calls.
    pub askers: Arc<Askers>,
    /// The client can show forms.
    forms: bool,
}

impl Server {
    /// Connects within the server's start-up timeout (and `budget`, whichever is shorter).
    pub(crate) async fn start(
        config: ServerConfig,
        budget: Duration,
        forms: bool,
        cancel: CancellationToken,
    ) -> Self {
        let limit = config.startup_timeout.min(budget);
        let credentials = match (&config.transport, &config.auth) {
            (crate::connect::Transport::Http { url, .. }, Some(auth)) => {
                Some(Arc::new(Credentials::new(url, auth.clone())))
            }
            _ => None,
        };
        let server = Self {
            status: Mutex::new(Status {
                name: config.name.clone(),
                ..Status::default()
            }),
            config,
            client: RwLock::new(None),
            restarts: Mutex::new(Restarts::default()),
            tools: Mutex::new(Vec::new()),
            tools_changed: std::sync::atomic::AtomicBool::new(false),
            broken: std::sync::atomic::AtomicBool::new(false),
            connecting: tokio::sync::Mutex::new(()),
            credentials,
            sign_in: Mutex::new(SignInState::default()),
            cancel,
            offers: Mutex::new(Offers::default()),
            catalog: Mutex::new(Catalog::default()),
            notices: Arc::new(Notices::default()),
            askers: Arc::new(Askers::default()),
            forms,
        };
        let connecting = connect(
            &server.config,
            server.handler(),
            server.credentials.as_ref(),
        );
        match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(connected)) => {
                server.adopt(connected).await;
                server.tools_changed.store(false, Ordering::SeqCst);
                server
            }
            Ok(Err(ConnectError::NeedsSignIn)) => {
                server.note_needs_sign_in();
                server
            }
            Ok(Err(why)) => {
                server.note_error(&why.to_string(), false);
                server
            }
            Err(_) => {
                let why = format!("it did not start within {} s", limit.as_secs_f32());
                server.note_error(&why, false);
                server
            }
        }
    }

    fn handler(&self) -> Handler {
        Handler {
            server: self.config.name.clone(),
            forms: self.forms,
            askers: self.askers.clone(),
            notices: self.notices.clone(),
        }
    }

    /// A fresh connection in place of the old one, its lists with it.
    async fn adopt(&self, connected: Connected) {
        {
            let mut status = lock(&self.status);
            status.connected = true;
            status.needs_sign_in = false;
            status.tools = connected.tools.len();
            status.resources = connected.catalog.resources.len();
            status.templates = connected.catalog.templates.len();
            status.prompts = connected.catalog.prompts.len();
        }
        *lock(&self.offers) = connected.offers;
        *lock(&self.catalog) = connected.catalog;
        self.set_tools(connected.tools);
        *self.client.write().await = Some(connected.client);
    }

    /// The server's tools now; noted as changed when they differ from before.
    fn set_tools(&self, tools: Vec<Tool>) {
        let mut held = lock(&self.tools);
        if *held != tools {
            *held = tools;
            self.tools_changed.store(true, Ordering::SeqCst);
        }
    }

    /// The server's tools as last listed.
    pub fn tools(&self) -> Vec<Tool> {
        lock(&self.tools).clone()
    }

    /// Whether the tools changed since the last call (and from now on, not).
    pub fn take_tools_changed(&self) -> bool {
        self.tools_changed.swap(false, Ordering::SeqCst)
    }

    pub fn status(&self) -> Status {
        lock(&self.status).clone()
    }

    pub(crate) fn status_cell(&self) -> &Mutex<Status> {
        &self.status
    }

    pub fn offers(&self) -> Offers {
        *lock(&self.offers)
    }

    pub(crate) fn notices(&self) -> &Notices {
        &self.notices
    }

    pub(crate) fn note_error(&self, why: &str, connected: bool) {
        let mut status = lock(&self.status);
        status.last_error = Some(why.to_string());
        status.connected = connected;
    }

    async fn peer(&self) -> Option<Peer<RoleClient>> {
        self.client.read().await.as_ref().map(|c| c.peer().clone())
    }

    /// The lists as last fetched (sync: for the slash commands).
    pub fn catalog_now(&self) -> Catalog {
        lock(&self.catalog).clone()
    }

    /// Whether the lists as last fetched hold `uri` (without copying them).
    pub fn claims(&self, uri: &str) -> bool {
        lock(&self.catalog).claims(uri)
    }

    /// The prompts as last fetched, as slash commands.
    pub fn prompt_commands(&self) -> Vec<crate::prompts::PromptCommand> {
        lock(&self.catalog)
            .prompts
            .iter()
            .map(|p| crate::prompts::PromptCommand::of(&self.config.name, p))
            .collect()
    }

    /// The lists, fetched again first when the server said one changed.
    pub async fn catalog(&self) -> Catalog {
        self.refresh_if_changed().await;
        self.catalog_now()
    }

    /// Fetches the lists again when the server said one changed; `true` when its prompts
    /// (the client's commands) are not what they were.
    pub async fn refresh_if_changed(&self) -> bool {
        if self.notices.take_tools_changed()
            && let Some(peer) = self.peer().await
        {
            match self.bounded(peer.list_all_tools()).await {
                Ok(tools) => {
                    lock(&self.status).tools = tools.len();
                    self.set_tools(tools);
                }
                Err(e) => {
                    tracing::warn!(server = %self.config.name, "listing its tools again failed: {e:?}")
                }
            }
        }
        if !self.notices.take_list_changed() {
            return false;
        }
        let Some(peer) = self.peer().await else {
            return false;
        };
        let fresh = Catalog::fetch(&self.config.name, &peer, self.offers()).await;
        {
            let mut status = lock(&self.status);
            status.resources = fresh.resources.len();
            status.templates = fresh.templates.len();
            status.prompts = fresh.prompts.len();
        }
        let names = |catalog: &Catalog| -> Vec<String> {
            catalog.prompts.iter().map(|p| p.name.clone()).collect()
        };
        let new_names = names(&fresh);
        let old = std::mem::replace(&mut *lock(&self.catalog), fresh);
        names(&old) != new_names
    }

    /// A peer to send to, the server restarted first when it died (and the backoff allows).
    async fn live_peer(&self) -> Result<Peer<RoleClient>, McpCallError> {
        if self.status().needs_sign_in {
            return Err(self.sign_in_needed());
        }
        let closed = match self.client.read().await.as_ref() {
            Some(client)
                if !client.is_transport_closed() && !self.broken.load(Ordering::SeqCst) =>
            {
                return Ok(client.peer().clone());
            }
            Some(_) => true,
            None => false,
        };
        if !closed && lock(&self.restarts).count == 0 && self.status().last_error.is_some() {
            // It never started: its start-up error says why.
            return Err(McpCallError::NotRunning {
                server: self.config.name.clone(),
                last_error: self.status().last_error,
            });
        }
        self.restart_with_backoff().await?;
        self.peer().await.ok_or_else(|| McpCallError::Unreachable {
            server: self.config.name.clone(),
        })
    }

    /// Restarts a dead server unless its backoff has not passed (then it fails at once).
    async fn restart_with_backoff(&self) -> Result<(), McpCallError> {
        let _one = self.connecting.lock().await;
        if self.alive().await {
            // Connected again by another request while this one waited.
            return Ok(());
        }
        {
            let mut restarts = lock(&self.restarts);
            if let Some(not_before) = restarts.not_before
                && Instant::now() < not_before
            {
                return Err(McpCallError::Restarting {
                    server: self.config.name.clone(),
                    seconds: not_before
                        .saturating_duration_since(Instant::now())
                        .as_secs()
                        + 1,
                });
            }
            restarts.count += 1;
            let wait = Duration::from_secs(1 << restarts.count.min(6)).min(LONGEST_BACKOFF);
            restarts.not_before = Some(Instant::now() + wait);
        }
        tracing::warn!(server = %self.config.name, "the MCP server stopped; restarting it");
        self.connect_again().await
    }

    /// Whether the connection is up and no request found it gone.
    async fn alive(&self) -> bool {
        self.client
            .read()
            .await
            .as_ref()
            .is_some_and(|c| !c.is_transport_closed() && !self.broken.load(Ordering::SeqCst))
    }

    /// Connects again, now (`/mcp reconnect`, a sign-in that passed); one connection at a time.
    pub async fn restart(&self) -> Result<(), McpCallError> {
        let _one = self.connecting.lock().await;
        self.connect_again().await
    }

    /// Connects again (the caller holds `connecting`).
    async fn connect_again(&self) -> Result<(), McpCallError> {
        let failed = |why: String| {
            self.note_error(&why, false);
            McpCallError::NotRestarted {
                server: self.config.name.clone(),
                why,
            }
        };
        if let Some(old) = self.client.write().await.take() {
            let _ = old.cancel().await;
        }
        match tokio::time::timeout(
            self.config.startup_timeout,
            connect(&self.config, self.handler(), self.credentials.as_ref()),
        )
        .await
        {
            Ok(Ok(connected)) => {
                self.adopt(connected).await;
                lock(&self.status).last_error = None;
                self.broken.store(false, Ordering::SeqCst);
                Ok(())
            }
            Ok(Err(ConnectError::NeedsSignIn)) => {
                self.note_needs_sign_in();
                Err(self.sign_in_needed())
            }
            Ok(Err(why)) => Err(failed(why.to_string())),
            Err(_) => Err(failed(format!(
                "it gave no answer within {} s",
                self.config.startup_timeout.as_secs()
            ))),
        }
    }

    /// Calls a tool; a server that died is restarted (as its backoff allows) and the call
    /// tried once more.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<CallToolResult, McpCallError> {
        for attempt in 0..2 {
            let peer = self.live_peer().await?;
            let params =
                CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.clone());
            match self.bounded(peer.call_tool(params)).await {
                Ok(result) => {
                    lock(&self.restarts).count = 0;
                    return Ok(result);
                }
                Err(Failure::Closed(_)) if attempt == 0 => {
                    self.broken.store(true, Ordering::SeqCst);
                    continue;
                }
                Err(failure) => return Err(self.failed(failure)),
            }
        }
        Err(McpCallError::Unreachable {
            server: self.config.name.clone(),
        })
    }

    /// Reads a resource; subscribes to it when the server offers subscriptions, so that its
    /// updates are told. Returns its contents as the server sent them.
    pub async fn read(&self, uri: &str) -> Result<Vec<Value>, McpCallError> {
        let peer = self.live_peer().await?;
        let read = self
            .bounded(peer.read_resource(ReadResourceRequestParams::new(uri)))
            .await
            .map_err(|failure| self.failed(failure))?;
        if self.offers().subscribe && self.notices.subscribed(uri) {
            // `resources/subscribe`: what servers before protocol 2026-07-28 (all deployed
            // ones today) take; newer ones answer it too.
            #[allow(deprecated)]
            let subscribe = peer.subscribe(SubscribeRequestParams::new(uri));
            if let Err(e) = self.bounded(subscribe).await {
                tracing::debug!(server = %self.config.name, uri, "subscribing failed: {e:?}");
            }
        }
        let value = serde_json::to_value(&read).unwrap_or(Value::Null);
        Ok(value["contents"].as_array().cloned().unwrap_or_default())
    }

    /// Fetches a prompt with its arguments; the result as the server sent it.
    pub async fn prompt(
        &self,
        name: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<Value, McpCallError> {
        let peer = self.live_peer().await?;
        let params = GetPromptRequestParams::new(name).with_arguments(arguments);
        let result = self
            .bounded(peer.get_prompt(params))
            .await
            .map_err(|failure| self.failed(failure))?;
        Ok(serde_json::to_value(&result).unwrap_or(Value::Null))
    }

    /// A request within the server's tool timeout.
    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.config.tool_timeout, request).await {
            Err(_) => Err(Failure::TimedOut),
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
                Err(Failure::Closed(error.to_string()))
            }
            Ok(Err(ServiceError::UnexpectedResponse)) => Err(Failure::Answered(
                "its answer is not a valid MCP result (a malformed message, or a content type \
                 MCP does not define)"
                    .into(),
            )),
            Ok(Err(error)) => Err(Failure::Answered(error.to_string())),
        }
    }

    fn failed(&self, failure: Failure) -> McpCallError {
        let server = self.config.name.clone();
        let (error, connected) = match failure {
            Failure::TimedOut => (
                McpCallError::TimedOut {
                    server,
                    seconds: self.config.tool_timeout.as_secs(),
                },
                true,
            ),
            Failure::Closed(detail) => {
                self.broken.store(true, Ordering::SeqCst);
                (McpCallError::Failed { server, detail }, false)
            }
            Failure::Answered(detail) => (McpCallError::Failed { server, detail }, true),
        };
        self.note_error(&error.to_string(), connected);
        error
    }
}

/// How a request to a server failed.
#[derive(Debug)]
enum Failure {
    TimedOut,
    /// The connection is gone (the process died, the HTTP session ended).
    Closed(String),
    /// The server answered with an error.
    Answered(String),
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
    #[error("the MCP server {server} is restarting; try again in {seconds} s")]
    Restarting { server: String, seconds: u64 },
    #[error("the MCP server {server} could not be reached")]
    Unreachable { server: String },
    #[error("{0}")]
    NoServer(String),
    #[error("the MCP server {server} needs sign-in: {next}")]
    NeedsSignIn { server: String, next: String },
}
