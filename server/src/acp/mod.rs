//! The protocol edge: the only place that knows ACP. It turns requests into engine commands
//! and engine events into `session/update` notifications and prompt responses.
//!
//! Invariants:
//! - The dispatch loop never waits on a turn: `session/prompt` is queued and answered later by
//!   the session's forwarder, after every update of that turn has been sent.
//! - A panic while handling one request is answered with `-32603`; the loop goes on.
//! - At end of input every session is cancelled and `serve` returns once output is flushed.

mod capabilities;
mod client_bridge;
mod commands;
mod compaction;
mod forwarder;
mod lifecycle;
mod mcp;
mod prompt_input;
mod replay;
mod server_window;
mod session_options;
mod skills;
mod updates;

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use talaria_engine::{Config, ModelRouter, SessionHandle, SessionSettings, TurnId};
use talaria_protocol::acp::{
    self, ClientNotification, ClientRequest, RequestId, SessionNotification,
};
use talaria_protocol::{IncomingMessage, IncomingRequest, Peer, PeerOptions, errors};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What starting a session needs.
struct Launch {
    id: String,
    cwd: std::path::PathBuf,
    /// The configuration, prompt, commands, MCP servers, roots and shell prepared for it.
    ready: Ready,
    /// The session's own model and mode (a stored session's), else the configuration's.
    model: Option<String>,
    mode: Option<talaria_engine::Mode>,
    start: talaria_engine::SessionStart,
}

/// The modes and options a started session answers with.
struct Launched {
    modes: acp::SessionModeState,
    options: Vec<acp::SessionConfigOption>,
    /// `_meta` for the response: `{"talaria": {"sandbox": "enforced" | "off" | "unavailable"}}`
    /// (clients' banners show it).
    meta: acp::Meta,
}

/// The durable store, opened with the first session.
enum StoreState {
    Unopened,
    /// Being opened on the blocking pool (started by `initialize`).
    Opening(tokio::task::JoinHandle<Result<talaria_store::SqliteStore, talaria_store::StoreError>>),
    Ready(talaria_engine::journal::Journal),
    /// It could not be opened; sessions run unsaved (said once per session).
    Unavailable(String),
}

struct LiveSession {
    handle: SessionHandle,
    images_allowed: bool,
    /// Models offered for switching.
    models: Vec<String>,
    /// What session responses say under `_meta`.
    meta: acp::Meta,
}

impl LiveSession {
    /// What a response about this session says now (its current mode and model).
    fn launched(&self) -> Launched {
        let (mode, model) = (self.handle.mode(), self.handle.model());
        Launched {
            modes: session_options::mode_state(mode),
            options: session_options::config_options(mode, &model, &self.models),
            meta: self.meta.clone(),
        }
    }
}

/// The model router (providers, key pools, fallbacks) and the configuration it was built
/// from; rebuilt when the configuration changes, shared by sessions otherwise (so key
/// cooldowns apply across sessions).
struct RouterCache {
    fingerprint: String,
    router: Arc<ModelRouter>,
}

struct Agent {
    peer: Peer,
    client_caps: client_bridge::ClientCaps,
    /// Configuration warnings were logged and shown (once per process).
    config_warned: bool,
    /// Notifications to send after the current request's answer.
    outbox: Vec<SessionNotification>,
    sessions: HashMap<String, LiveSession>,
    router: Option<RouterCache>,
    registry: talaria_tools::Registry,
    store: StoreState,
    /// Context windows local model servers report.
    windows: server_window::WindowProbes,
    /// Where requests whose slow part ran off the loop come back to be finished.
    deferred: mpsc::UnboundedSender<Deferred>,
}

/// The second half of a request whose slow part ran on a task of its own: it runs on the
/// dispatch loop (it may change the agent's state), and its reply answers the request.
type Finish = Box<dyn for<'a> FnOnce(&'a mut Agent) -> LocalBoxFuture<'a, Reply> + Send>;

/// A request whose slow part is done.
struct Deferred {
    id: RequestId,
    method: String,
    finish: Finish,
}

/// What the slow part of starting a session needs from the agent (cloned off the loop).
#[derive(Clone)]
struct StartContext {
    windows: server_window::WindowProbes,
    caps: client_bridge::ClientCaps,
}

/// Serves ACP on the given streams until the input ends.
pub async fn serve<R, W>(input: R, output: W) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let connection = talaria_protocol::connect(input, output, PeerOptions::default());
    let mut incoming = connection.incoming;
    // Whether commands can be sandboxed here is probed once, in the background from the
    // start (a thread of its own enters a sandbox and ends), so no session waits for it; the
    // private temporary directories of processes that are gone are removed meanwhile.
    tokio::task::spawn_blocking(|| {
        talaria_sandbox::availability();
        talaria_tools::shell::sweep_private_tmps();
    });
    // The configuration is checked at start-up, and each problem logged once (sessions then
    // show warnings as notices without logging them again).
    tokio::spawn(async {
        match load_config().await {
            Ok(config) => {
                for warning in &config.warnings {
                    tracing::warn!("{warning}");
                }
            }
            Err(error) => tracing::error!("configuration: {error}"),
        }
    });
    let (deferred, mut finished) = mpsc::unbounded_channel();
    let mut agent = Agent {
        deferred,
        peer: connection.peer,
        client_caps: client_bridge::ClientCaps::default(),
        config_warned: false,
        outbox: Vec::new(),
        sessions: HashMap::new(),
        router: None,
        registry: talaria_tools::builtin_registry(),
        store: StoreState::Unopened,
        windows: server_window::WindowProbes::default(),
    };
    loop {
        tokio::select! {
            message = incoming.recv() => match message {
                None => break,
                Some(IncomingMessage::Request(request)) => {
                    let id = request.id.clone();
                    let method = request.method.clone();
                    let handled = guarded(&method, agent.handle_request(request)).await;
                    agent.answer(id, handled).await;
                }
                Some(IncomingMessage::Notification { method, params }) => {
                    agent.handle_notification(&method, params);
                }
            },
            Some(Deferred { id, method, finish }) = finished.recv() => {
                let handled = guarded(&method, async { Some(finish(&mut agent).await) }).await;
                agent.answer(id, handled).await;
            }
        }
    }
    tracing::info!("input closed; shutting down");
    for session in agent.sessions.values() {
        session.handle.cancel();
    }
    let Agent {
        peer,
        sessions,
        store,
        ..
    } = agent;
    // Each actor records its cancelled turn and commits what it recorded; then the store is
    // checkpointed, before the process exits.
    let closed = futures_util::future::join_all(
        sessions
            .values()
            .map(|session| session.handle.close_and_wait()),
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), closed).await;
    drop(sessions);
    if let StoreState::Ready(journal) = store {
        let _ = tokio::time::timeout(Duration::from_secs(10), journal.shutdown()).await;
    }
    drop(peer);
    // Give forwarders a moment to send their last messages, then flush.
    let _ = tokio::time::timeout(Duration::from_secs(2), connection.writer).await;
    Ok(())
}

type Reply = Result<Value, acp::Error>;

/// Runs a request's handling; a panic in it is answered with `-32603` and the loop goes on.
async fn guarded(
    method: &str,
    handling: impl std::future::Future<Output = Option<Reply>>,
) -> Option<Reply> {
    match std::panic::AssertUnwindSafe(handling).catch_unwind().await {
        Ok(handled) => handled,
        Err(_) => Some(Err(errors::internal_error(format!(
            "handling {method} failed unexpectedly"
        )))),
    }
}

fn to_value<T: serde::Serialize>(value: T) -> Reply {
    serde_json::to_value(value).map_err(|e| errors::internal_error(format!("serializing: {e}")))
}

impl Agent {
    /// Answers a request (unless it is answered later), then sends what its handling queued
    /// for after its answer.
    async fn answer(&mut self, id: RequestId, handled: Option<Reply>) {
        if let Some(reply) = handled {
            self.peer.respond(&id, reply).await;
        }
        for notification in std::mem::take(&mut self.outbox) {
            self.peer.notify("session/update", &notification).await;
        }
    }

    /// What a session's slow start needs, cloned for a task of its own.
    fn start_context(&self) -> StartContext {
        StartContext {
            windows: self.windows.clone(),
            caps: self.client_caps,
        }
    }

    /// Runs `slow` on a task of its own (the loop serves other requests meanwhile), then
    /// `finish` with its result back on the loop; the request is answered then.
    fn defer<T, S>(
        &self,
        id: RequestId,
        method: &str,
        slow: S,
        finish: for<'a> fn(&'a mut Agent, T) -> LocalBoxFuture<'a, Reply>,
    ) where
        T: Send + 'static,
        S: std::future::Future<Output = Result<T, acp::Error>> + Send + 'static,
    {
        let sender = self.deferred.clone();
        let method = method.to_string();
        tokio::spawn(async move {
            let done = std::panic::AssertUnwindSafe(slow).catch_unwind().await;
            let finish: Finish = match done {
                Ok(Ok(value)) => Box::new(move |agent: &mut Agent| finish(agent, value)),
                Ok(Err(error)) => {
                    Box::new(move |_: &mut Agent| async move { Err(error) }.boxed_local())
                }
                Err(_) => {
                    let failed =
                        errors::internal_error(format!("handling {method} failed unexpectedly"));
                    Box::new(move |_: &mut Agent| async move { Err(failed) }.boxed_local())
                }
            };
            let _ = sender.send(Deferred { id, method, finish });
        });
    }

    /// Handles a request; `None` means it will be answered later (prompts, session starts).
    async fn handle_request(&mut self, mut request: IncomingRequest) -> Option<Reply> {
        if request.method == "initialize" {
            capabilities::negotiate_version(&mut request.params);
        }
        let parsed = match ClientRequest::from_method_and_params(&request.method, &request.params) {
            Ok(parsed) => parsed,
            Err(talaria_protocol::schema::MethodDispatchError::UnknownMethod { method }) => {
                return Some(Err(errors::method_not_found(&method)));
            }
            Err(talaria_protocol::schema::MethodDispatchError::InvalidPayload {
                method,
                source,
            }) => {
                return Some(Err(errors::invalid_params(format!("{method}: {source}"))));
            }
            Err(other) => return Some(Err(errors::invalid_params(other))),
        };
        match parsed {
            ClientRequest::InitializeRequest(params) => {
                self.client_caps =
                    client_bridge::ClientCaps::from_initialize(&params.client_capabilities);
                let config = load_config().await;
                let images = config.as_ref().map_or(true, |c| c.supports_images);
                if let Ok(config) = &config {
                    // The store opens while the client reads the answer.
                    self.start_opening_store(config);
                    self.windows.start(config);
                    let _ = self.router_for(config);
                }
                Some(to_value(capabilities::initialize(&params, images)))
            }
            ClientRequest::SetSessionModeRequest(params) => {
                Some(self.set_mode(&params.session_id, &params.mode_id.0, false))
            }
            ClientRequest::SetSessionConfigOptionRequest(params) => {
                Some(self.set_config_option(params))
            }
            ClientRequest::AuthenticateRequest(params) => Some(self.authenticate(&params).await),
            ClientRequest::NewSessionRequest(params) => {
                self.start_new_session(request.id, params);
                None
            }
            ClientRequest::PromptRequest(params) => self.prompt(request.id, request.cancel, params),
            ClientRequest::LoadSessionRequest(params) => {
                self.load_session(request.id, params).await
            }
            ClientRequest::ResumeSessionRequest(params) => {
                self.resume_session(request.id, params).await
            }
            ClientRequest::ListSessionsRequest(params) => Some(self.list_sessions(params).await),
            ClientRequest::CloseSessionRequest(params) => Some(self.close_session(params).await),
            ClientRequest::DeleteSessionRequest(params) => Some(self.delete_session(params).await),
            ClientRequest::ForkSessionRequest(params) => {
                self.start_fork(request.id, params);
                None
            }
            _ => Some(Err(errors::method_not_found(&format!(
                "{} (not supported by this agent; see agentCapabilities)",
                request.method
            )))),
        }
    }

    fn handle_notification(&mut self, method: &str, params: Value) {
        match ClientNotification::from_method_and_params(method, &params) {
            Ok(ClientNotification::CancelNotification(cancel)) => {
                match self.sessions.get(cancel.session_id.0.as_ref()) {
                    Some(session) => session.handle.cancel(),
                    None => {
                        tracing::warn!(session = %cancel.session_id, "cancel for an unknown session")
                    }
                }
            }
            Ok(_) => tracing::debug!(method, "notification ignored"),
            Err(e) => tracing::debug!(method, "notification ignored: {e}"),
        }
    }

    async fn authenticate(&self, params: &acp::AuthenticateRequest) -> Reply {
        if params.method_id.0.as_ref() != capabilities::AUTH_METHOD_ID {
            return Err(errors::invalid_params(format!(
                "unknown auth method {:?}; this agent offers {:?}",
                params.method_id.0,
                capabilities::AUTH_METHOD_ID
            )));
        }
        let config = load_config().await.map_err(config_error)?;
        match config.missing_credentials() {
            None => to_value(acp::AuthenticateResponse::new()),
            Some(missing) => Err(errors::auth_required(missing)),
        }
    }

    fn router_for(&mut self, config: &Config) -> Result<Arc<ModelRouter>, acp::Error> {
        let fingerprint = format!("{config:?}");
        if let Some(cache) = &self.router
            && cache.fingerprint == fingerprint
        {
            return Ok(cache.router.clone());
        }
        let router = Arc::new(
            talaria_engine::provider_factory::build_router(config)
                .map_err(errors::internal_error)?,
        );
        self.router = Some(RouterCache {
            fingerprint,
            router: router.clone(),
        });
        Ok(router)
    }

    /// `session/new`: the slow part (configuration, prompt, window, MCP servers) off the
    /// loop, then the store and the launch on it.
    fn start_new_session(&self, id: RequestId, params: acp::NewSessionRequest) {
        let context = self.start_context();
        let slow = async move {
            let ready = ready_session(
                context,
                &params.cwd,
                &params.additional_directories,
                &params.mcp_servers,
            )
            .await?;
            Ok((params, ready))
        };
        self.defer(id, "session/new", slow, |agent, (params, ready)| {
            agent.new_session(params, ready).boxed_local()
        });
    }

    async fn new_session(&mut self, params: acp::NewSessionRequest, ready: Ready) -> Reply {
        let config = &ready.config;
        let id = uuid::Uuid::new_v4().to_string();
        let journal = self.ensure_store(config).await;
        let start = match &journal {
            Some(journal) => {
                journal.create(talaria_store::SessionMeta {
                    id: id.clone(),
                    cwd: params.cwd.display().to_string(),
                    additional_directories: params
                        .additional_directories
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect(),
                    model: config.model.clone(),
                    mode: config.mode.id().into(),
                    created_at: talaria_store::now_ms(),
                    updated_at: talaria_store::now_ms(),
                    ..Default::default()
                });
                // Held before anyone can know its id (a read-only store holds nothing).
                let (store, claimed) = (journal.store().clone(), id.clone());
                let _ = tokio::task::spawn_blocking(move || store.claim(&claimed)).await;
                talaria_engine::SessionStart {
                    history: None,
                    journal: Some(talaria_engine::journal::SessionJournal::new(
                        journal.clone(),
                        &id,
                        0,
                    )),
                    title: None,
                    commands: None,
                }
            }
            None => talaria_engine::SessionStart::default(),
        };
        let launched = self.launch(Launch {
            id: id.clone(),
            cwd: params.cwd,
            ready,
            model: None,
            mode: None,
            start,
        })?;
        to_value(
            acp::NewSessionResponse::new(id)
                .modes(launched.modes)
                .config_options(launched.options)
                .meta(launched.meta),
        )
    }

    /// Starts a session's actor and forwarder and registers it.
    fn launch(&mut self, launch: Launch) -> Result<Launched, acp::Error> {
        let Launch {
            id,
            cwd,
            ready:
                Ready {
                    config,
                    system_prompt,
                    commands,
                    mcp: (hub, mcp_warnings),
                    roots,
                    shell,
                },
            model,
            mode,
            start,
        } = launch;
        let router = self.router_for(&config)?;
        let model = model.unwrap_or_else(|| config.model.clone());
        let mode = mode.unwrap_or(config.mode);
        let mut models = config.models.clone();
        if !models.contains(&model) {
            models.insert(0, model.clone());
        }
        let stores = skills::context(&config, &cwd, &id);
        let settings = SessionSettings {
            id: id.clone(),
            cwd: cwd.clone(),
            model: model.clone(),
            system_prompt: system_prompt.instructions,
            environment: system_prompt.environment,
            context_window: config.context_window,
            retry: config.retry,
            max_turn_requests: config.max_turn_requests,
            max_output_tokens: config.max_output_tokens,
            home: config.home.clone(),
            roots,
            mode,
            secrets: talaria_engine::approval::SecretReads::for_home(
                &config.home,
                config.ask_for_credential_reads,
            ),
            delegation: self.client_caps.delegation(),
            titles: config.model_titles(),
            single_slot: config.single_slot(),
            nudges: config.nudges,
            compression: config.compression,
            tokenizers: Arc::new(config.tokenizers.clone()),
            learning: config.learning,
            review: config
                .reviews()
                .then(|| skills::review_factory(stores.clone(), config.learning.stage_reviews)),
            // `delegate_task` is in the `delegation` toolset, like any tool a config can leave out.
            subagents: (config.max_subagents > 0
                && config
                    .toolsets
                    .as_ref()
                    .is_none_or(|sets| sets.iter().any(|s| s == "delegation")))
            .then_some(config.max_subagents),
            announce_subagents: self.client_caps.subagents,
            images: config.supports_images,
            shell: shell.clone(),
        };
        let (events_tx, events_rx) = mpsc::channel(256);
        let bridge = Arc::new(client_bridge::AcpBridge::new(
            self.peer.clone(),
            acp::SessionId::new(id.clone()),
            self.client_caps,
        ));
        let mut registry = self.registry.clone();
        for tool in talaria_skills::tools::tools(stores.clone()) {
            registry.register(tool);
        }
        for server in &hub.servers {
            for tool in talaria_mcp::McpTool::of(server) {
                registry.register(tool);
            }
        }
        // Questions to the user only when the client can show them.
        if self.client_caps.elicitation_form {
            registry.register(Arc::new(talaria_tools::clarify::Clarify));
        }
        if let StoreState::Ready(journal) = &self.store {
            registry.register(Arc::new(
                talaria_engine::session_search::SessionSearch::new(journal.store().clone()),
            ));
        }
        let registry = match &config.toolsets {
            Some(toolsets) => {
                let names: Vec<&str> = toolsets.iter().map(String::as_str).collect();
                registry.with_toolsets(&names)
            }
            None => registry,
        };
        let start = talaria_engine::SessionStart {
            commands: Some(Arc::new(commands::SessionCommands {
                skills: stores.clone(),
                mcp: hub.clone(),
            })),
            ..start
        };
        let handle =
            talaria_engine::spawn_session_with(settings, router, registry, events_tx, start);
        let listed = stores.clone();
        tokio::spawn(forwarder::forward_events(
            self.peer.clone(),
            acp::SessionId::new(id.clone()),
            events_rx,
            bridge,
            Arc::new(move || skills::commands(&listed.catalog())),
        ));
        tracing::info!(session = %id, cwd = %cwd.display(), model = %model, "session started");
        let session_id = acp::SessionId::new(id.clone());
        let mut warnings = Vec::new();
        if !self.config_warned {
            self.config_warned = true;
            warnings.extend(config.warnings.iter().cloned());
        }
        if let StoreState::Unavailable(why) = &self.store {
            warnings.push(format!("This session is not saved: {why}"));
        }
        warnings.extend(talaria_engine::sandbox::notice(&shell));
        warnings.extend(mcp_warnings);
        self.outbox
            .push(SessionNotification::new(session_id.clone(), commands));
        for warning in warnings {
            self.outbox.push(SessionNotification::new(
                session_id.clone(),
                forwarder::notice_update(
                    talaria_engine::NoticeLevel::Warning,
                    warning,
                    self.client_caps.notices,
                ),
            ));
        }
        let launched = Launched {
            modes: session_options::mode_state(mode),
            options: session_options::config_options(mode, &model, &models),
            meta: session_meta(&shell),
        };
        self.sessions.insert(
            id,
            LiveSession {
                handle,
                images_allowed: config.supports_images,
                models,
                meta: launched.meta.clone(),
            },
        );
        Ok(launched)
    }

    /// The session's options once a change just asked of it applies (the actor takes the
    /// op a moment later; the answer already shows it).
    fn options_with(
        session: &LiveSession,
        mode: Option<talaria_engine::Mode>,
        model: Option<&str>,
    ) -> Vec<acp::SessionConfigOption> {
        session_options::config_options(
            mode.unwrap_or_else(|| session.handle.mode()),
            model.unwrap_or(&session.handle.model()),
            &session.models,
        )
    }

    /// `session/set_mode` (and the mode config option): changes the approval mode and tells
    /// the client about the other view of the same setting.
    fn set_mode(
        &mut self,
        session_id: &acp::SessionId,
        mode_id: &str,
        from_config_option: bool,
    ) -> Reply {
        let Some(session) = self.sessions.get(session_id.0.as_ref()) else {
            return Err(session_not_found(session_id));
        };
        let Some(mode) = talaria_engine::Mode::from_id(mode_id) else {
            let known: Vec<&str> = talaria_engine::Mode::ALL.iter().map(|m| m.id()).collect();
            return Err(errors::invalid_params(format!(
                "unknown mode {mode_id:?}; available modes: {}",
                known.join(", ")
            )));
        };
        session.handle.set_mode(mode);
        tracing::info!(session = %session_id, mode = mode.id(), "mode changed");
        let options = Self::options_with(session, Some(mode), None);
        if from_config_option {
            self.outbox.push(SessionNotification::new(
                session_id.clone(),
                acp::SessionUpdate::CurrentModeUpdate(acp::CurrentModeUpdate::new(mode.id())),
            ));
            to_value(acp::SetSessionConfigOptionResponse::new(options))
        } else {
            self.outbox.push(SessionNotification::new(
                session_id.clone(),
                acp::SessionUpdate::ConfigOptionUpdate(acp::ConfigOptionUpdate::new(options)),
            ));
            to_value(acp::SetSessionModeResponse::new())
        }
    }

    /// Switches the session's model (from the next turn).
    fn set_model(&mut self, session_id: &acp::SessionId, model: &str) -> Reply {
        let Some(session) = self.sessions.get(session_id.0.as_ref()) else {
            return Err(session_not_found(session_id));
        };
        if !session.models.iter().any(|m| m == model) && session.handle.model() != model {
            return Err(errors::invalid_params(format!(
                "unknown model {model:?}; available models: {} (configure more with `models` in config.toml)",
                session.models.join(", ")
            )));
        }
        session.handle.set_model(model);
        tracing::info!(session = %session_id, model, "model changed");
        to_value(acp::SetSessionConfigOptionResponse::new(
            Self::options_with(session, None, Some(model)),
        ))
    }

    fn set_config_option(&mut self, params: acp::SetSessionConfigOptionRequest) -> Reply {
        let acp::SessionConfigOptionValue::ValueId { value } = &params.value else {
            return Err(errors::invalid_params(format!(
                "the {:?} option takes a value id, not a boolean",
                params.config_id.0
            )));
        };
        match params.config_id.0.as_ref() {
            session_options::MODE_CONFIG_ID => self.set_mode(&params.session_id, &value.0, true),
            session_options::MODEL_CONFIG_ID => self.set_model(&params.session_id, &value.0),
            other => Err(errors::invalid_params(format!(
                "unknown config option {other:?}; this agent offers \"{}\" and \"{}\"",
                session_options::MODE_CONFIG_ID,
                session_options::MODEL_CONFIG_ID
            ))),
        }
    }

    fn prompt(
        &mut self,
        request: RequestId,
        cancel: CancellationToken,
        params: acp::PromptRequest,
    ) -> Option<Reply> {
        let Some(session) = self.sessions.get(params.session_id.0.as_ref()) else {
            return Some(Err(session_not_found(&params.session_id)));
        };
        if params.prompt.is_empty() {
            return Some(Err(errors::invalid_params(
                "prompt must contain at least one content block",
            )));
        }
        // The turn's tag is the request's id: the forwarder answers it from the tag alone.
        let turn = turn_of(&request);
        let queued = if let Some(focus) = compaction::parse_command(&params.prompt) {
            session.handle.compact(turn, cancel, focus)
        } else {
            // `/name` is expanded by the session's commands when its turn comes.
            let slash = skills::slash(&params.prompt);
            let typed = prompt_input::to_user_input(params.prompt, session.images_allowed);
            let input = match slash {
                Some((name, args)) => {
                    talaria_engine::PromptInput::Slash(talaria_engine::SlashCommand {
                        name,
                        args,
                        typed,
                    })
                }
                None => talaria_engine::PromptInput::Typed(typed),
            };
            session.handle.prompt(turn, cancel, input)
        };
        if queued.is_err() {
            return Some(Err(errors::internal_error("the session has ended")));
        }
        None
    }
}

/// A prompt's turn tag: its request's id, as JSON.
fn turn_of(request: &RequestId) -> TurnId {
    TurnId(serde_json::to_string(request).unwrap_or_default().into())
}

/// The request a turn answers (the inverse of [`turn_of`]).
pub(super) fn request_of(turn: &TurnId) -> Option<RequestId> {
    serde_json::from_str(&turn.0).ok()
}

fn session_not_found(id: &acp::SessionId) -> acp::Error {
    acp::Error::new(
        acp::ErrorCode::ResourceNotFound.into(),
        format!("Session not found: {id}"),
    )
}

/// What a session response says about Talaria's own state (under `_meta.talaria`).
fn session_meta(shell: &talaria_tools::shell::Shell) -> acp::Meta {
    let mut meta = acp::Meta::new();
    meta.insert(
        "talaria".into(),
        serde_json::json!({"sandbox": talaria_engine::sandbox::state(shell)}),
    );
    meta
}

/// Checks `session/new`-style paths: an absolute cwd and absolute additional directories;
/// returns the workspace roots.
fn check_roots(
    cwd: &std::path::Path,
    additional: &[std::path::PathBuf],
) -> Result<Vec<std::path::PathBuf>, acp::Error> {
    if !cwd.is_absolute() {
        return Err(errors::invalid_params(format!(
            "cwd must be an absolute path, got {:?}",
            cwd.display().to_string()
        )));
    }
    let mut roots = vec![cwd.to_path_buf()];
    for directory in additional {
        if !directory.is_absolute() {
            return Err(errors::invalid_params(format!(
                "additionalDirectories must be absolute paths, got {:?}",
                directory.display().to_string()
            )));
        }
        roots.push(directory.clone());
    }
    Ok(roots)
}

/// A configuration problem as the client sees it: invalid params naming the file (and, for
/// a bad value, the key and line), never an internal error.
fn config_error(error: talaria_engine::ConfigError) -> acp::Error {
    tracing::error!("configuration: {error}");
    errors::invalid_params(format!("configuration problem: {error}"))
}

/// Reads the configuration on the blocking pool (the runtime thread never waits on disk).
async fn load_config() -> Result<Config, talaria_engine::ConfigError> {
    tokio::task::spawn_blocking(Config::load)
        .await
        .unwrap_or_else(|e| {
            Err(talaria_engine::ConfigError::Invalid(format!(
                "reading the configuration failed: {e}"
            )))
        })
}

/// What every session start needs, in order: the configuration and the prompt's parts
/// (off the runtime thread), credentials checked before anything is started, the local
/// server's window (which may narrow the toolsets), the prompt for those toolsets, then the
/// session's MCP servers. Runs off the dispatch loop: a slow server delays only its session.
async fn ready_session(
    context: StartContext,
    cwd: &std::path::Path,
    additional_directories: &[std::path::PathBuf],
    mcp_servers: &[acp::McpServer],
) -> Result<Ready, acp::Error> {
    let roots = check_roots(cwd, additional_directories)?;
    let Prepared {
        mut config,
        system_prompt,
        commands,
        shell,
    } = prepare_session(cwd, &roots, &chrono_today()).await?;
    if let Some(missing) = config.missing_credentials() {
        return Err(errors::auth_required(missing));
    }
    context.windows.apply(&mut config).await;
    let system_prompt = system_prompt.assemble(&config);
    let mcp = mcp::connect(mcp_servers, &config, context.caps.elicitation_form).await;
    Ok(Ready {
        config,
        system_prompt,
        commands,
        mcp,
        roots,
        shell,
    })
}

/// The disk work of `session/new` in one trip to the blocking pool: the cwd is a directory,
/// the configuration, and the system prompt (which reads the project's instruction files).
/// What starting a session needs, read off the runtime thread: the configuration, the system
/// prompt (with the skill index and the memory snapshot, frozen now) and the slash commands.
struct Prepared {
    config: Config,
    system_prompt: PromptParts,
    commands: acp::SessionUpdate,
    shell: Arc<talaria_tools::shell::Shell>,
}

/// A session ready to launch.
struct Ready {
    config: Config,
    system_prompt: AssembledPrompt,
    commands: acp::SessionUpdate,
    mcp: (Arc<talaria_mcp::Hub>, Vec<String>),
    /// The workspace roots: the cwd and the additional directories.
    roots: Vec<std::path::PathBuf>,
    /// How its commands start (the OS sandbox, the clean environment).
    shell: Arc<talaria_tools::shell::Shell>,
}

/// The system prompt's parts, assembled once the session's toolsets are known.
struct PromptParts {
    base: talaria_engine::system_prompt::SessionPrompt,
    /// The skill index: only when the skills toolset is offered.
    skill_index: String,
    /// The frozen memory snapshot.
    memory: String,
}

/// A session's prompt, assembled: the instructions, most stable first (what every session
/// shares, then what every session of this project shares), and the environment.
struct AssembledPrompt {
    instructions: String,
    environment: String,
}

impl PromptParts {
    fn assemble(self, config: &Config) -> AssembledPrompt {
        let skills_offered = config
            .toolsets
            .as_ref()
            .is_none_or(|sets| sets.iter().any(|s| s == "skills"));
        let mut instructions = self.base.identity;
        if skills_offered {
            instructions.push_str(&self.skill_index);
        }
        instructions.push_str(&self.memory);
        instructions.push_str(&self.base.project);
        AssembledPrompt {
            instructions,
            environment: self.base.environment,
        }
    }
}

async fn prepare_session(
    cwd: &std::path::Path,
    roots: &[std::path::PathBuf],
    today: &str,
) -> Result<Prepared, acp::Error> {
    let (cwd, roots, today) = (cwd.to_path_buf(), roots.to_vec(), today.to_string());
    let prepared = tokio::task::spawn_blocking(move || {
        if !cwd.is_dir() {
            return Err(errors::invalid_params(format!(
                "cwd {} is not an existing directory",
                cwd.display()
            )));
        }
        let config = Config::load().map_err(config_error)?;
        let base = talaria_engine::system_prompt::build(&cwd, &config.model, &today);
        let stores = skills::context(&config, &cwd, "");
        // One scan of the skill folders serves the prompt's index and the slash commands.
        let catalog = stores.catalog();
        let (skill_index, memory) = skills::prompt_additions(&stores, &catalog);
        let system_prompt = PromptParts {
            base,
            skill_index,
            memory,
        };
        let commands = skills::commands(&catalog);
        let shell = Arc::new(talaria_engine::sandbox::shell(
            &config,
            &roots,
            talaria_engine::sandbox::Helper::this_binary(),
        ));
        Ok(Prepared {
            config,
            system_prompt,
            commands,
            shell,
        })
    })
    .await;
    prepared.unwrap_or_else(|e| {
        Err(errors::internal_error(format!(
            "preparing the session failed: {e}"
        )))
    })
}

fn chrono_today() -> String {
    chrono::Local::now().format("%Y-%m-%d (%A)").to_string()
}
