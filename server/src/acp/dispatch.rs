//! The dispatch loop: reads requests and notifications, routes each ACP method to its
//! handler, answers what is answered at once, and finishes requests whose slow part ran on a
//! task of its own (`defer`).
//!
//! Invariants:
//! - The loop never waits on a turn or a session's start; a panic while handling one request
//!   is answered with `-32603` and the loop goes on.
//! - At end of input, or on SIGTERM, SIGINT or SIGHUP, every session is closed as a cancel
//!   closes it and `serve` returns once output is flushed, within 2.5 s (`shutdown.rs`).

use std::collections::HashMap;
use std::time::Duration;

use super::quota;
use super::session_errors::config_error;
use super::state::{Agent, ClientCaps, Deferred, Finish, Reply, session_not_found, to_value};
use super::trust_apply;
use super::{
    attach, audience, capabilities, follow, lifecycle, logout, prompt, providers, rewind,
    run_command, settings, shutdown, start, steering,
};
use crate::sessions::{CassetteOptions, ProcessShared, SessionRoom, load_config};
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::Value;
use talaria_protocol::acp::{self, ClientNotification, ClientRequest, RequestId};
use talaria_protocol::{IncomingMessage, IncomingRequest, PeerOptions, errors};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// The configuration checked at start-up, each problem logged once (sessions then show
/// warnings as notices without logging them again); refusal logs of processes that are gone
/// swept.
async fn check_config_at_start() {
    match load_config().await {
        Ok(config) => {
            for warning in &config.warnings {
                tracing::warn!("{warning}");
            }
            // Refusal logs of processes that are gone.
            let refusals = talaria_engine::refusals_dir(&config);
            tokio::task::spawn_blocking(move || talaria_sandbox::refusals::sweep_logs(&refusals));
        }
        Err(error) => tracing::error!("configuration: {error}"),
    }
}

/// Serves ACP on the given streams until the input ends (or a stop signal).
pub async fn serve<R, W>(input: R, output: W, cassettes: CassetteOptions) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let room = SessionRoom::open(ProcessShared::single_client(), cassettes).await?;
    prepare_process();
    let signals = shutdown::StopSignals::install();
    let connection = talaria_protocol::connect(input, output, PeerOptions::default());
    serve_until(connection, room, signals).await
}

/// What a process serving ACP does once, in the background from the start: whether commands
/// can be sandboxed here is probed (`main` also starts the namespaces' probe), so no session
/// waits for it; the private temporary directories of processes that are gone are removed;
/// the configuration is checked and each problem logged.
pub fn prepare_process() {
    tokio::task::spawn_blocking(|| {
        talaria_sandbox::availability();
        talaria_tools::sweep_private_tmps();
    });
    tokio::spawn(check_config_at_start());
}

/// Serves one connection of `talaria serve` until its input ends or `stop` fires: what the
/// client sends is read from `input`, what the agent sends goes whole to `output` (the
/// transport frames it); the engine does not know which transport it is. `shared` is what
/// the process's connections share.
pub async fn serve_connection<R>(
    input: R,
    output: Box<dyn talaria_protocol::MessageSink>,
    stop: shutdown::ConnectionStop,
    shared: ProcessShared,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let room = SessionRoom::open(shared, CassetteOptions::default()).await?;
    let connection = talaria_protocol::connect_to_sink(input, output, PeerOptions::default());
    let stop = shutdown::StopSignals::told_by(stop);
    serve_until(connection, room, stop).await
}

/// Serves one in-process connection on byte streams (`talaria batch`'s own agent) until its
/// input ends or `stop` fires; `shared` as for [`serve_connection`].
pub async fn serve_connection_on_streams<R, W>(
    input: R,
    output: W,
    stop: tokio_util::sync::CancellationToken,
    shared: ProcessShared,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let room = SessionRoom::open(shared, CassetteOptions::default()).await?;
    let connection = talaria_protocol::connect(input, output, PeerOptions::default());
    let stop = shutdown::StopSignals::told_by(shutdown::ConnectionStop::by(stop));
    serve_until(connection, room, stop).await
}

async fn serve_until(
    connection: talaria_protocol::Connection,
    room: SessionRoom,
    mut stop_signals: shutdown::StopSignals,
) -> anyhow::Result<()> {
    let mut incoming = connection.incoming;
    // Unbounded: one answer per deferred request, sent once when its slow part ends, so it
    // holds at most `MAX_DEFERRED`; a send never waits the task.
    let (deferred, mut finished) = mpsc::unbounded_channel();
    let mut agent = Agent {
        deferred,
        running_deferred: Vec::new(),
        answer_after: None,
        quotas: std::sync::Arc::default(),
        peer: connection.peer,
        client_caps: ClientCaps::default(),
        outbox: Vec::new(),
        after_answer: Vec::new(),
        sessions: HashMap::new(),
        room,
        member: super::state::next_member_id(),
        client_name: None,
        following: HashMap::new(),
        followings_ended: std::sync::Arc::default(),
    };
    loop {
        tokio::select! {
            name = stop_signals.next() => {
                tracing::info!("stopping ({name}): ending the turns and saving the sessions");
                break;
            }
            // Until `initialize` is answered nothing else is read: its answer comes first,
            // as a client that pipes its requests reads them.
            message = incoming.recv(), if !agent.initializing() => match message {
                None => {
                    tracing::info!("input closed; ending the turns and saving the sessions");
                    agent.finish_deferred(&mut finished, &mut stop_signals).await;
                    break;
                }
                Some(IncomingMessage::Request(request)) => agent.take_request(request).await,
                Some(IncomingMessage::Notification { method, params }) => {
                    agent.handle_notification(&method, params);
                }
            },
            Some(deferred) = finished.recv() => agent.finish_one(deferred).await,
        }
    }
    // Sessions other clients are attached to go on without this one.
    let held: Vec<String> = agent.sessions.keys().cloned().collect();
    let (mut handed_on, mut goes_on) = (false, false);
    for id in held {
        let opened_here = agent.sessions.get(&id).is_some_and(|s| s.opened_here);
        let left = audience::leave(&mut agent, &id);
        goes_on |= left;
        handed_on |= left && opened_here;
    }
    // What those sessions asked of this client will not be answered now (its files and
    // terminals are this machine's from here on): it fails, and their turns go on.
    if goes_on {
        agent.peer.give_up_answers();
    }
    // Spooled and named before a second signal can end the process.
    shutdown::spool_and_name_what_waits(&agent.sessions, agent.room.store(), true).await;
    let stop = shutdown::Stop::begin(stop_signals);
    // Nothing more is read: the reader's handle on the output goes with it, so the output
    // ends as soon as the sessions' last messages are written, input closed or not.
    connection.reader.abort();
    let Agent {
        peer,
        sessions,
        room,
        ..
    } = agent;
    // A session handed on may still write through this connection's journal: it is left
    // running (dropped, not shut down) for them.
    let store = room.into_store().filter(|_| !handed_on);
    // Sessions this connection attached to and was the last client of close through the
    // journal they write through (their claim is released there).
    let (attached, opened): (HashMap<_, _>, HashMap<_, _>) =
        sessions.into_iter().partition(|(_, s)| !s.opened_here);
    let budget = stop.sessions_and_store();
    let attached_closed = futures_util::future::join_all(attached.into_iter().map(|(id, s)| {
        s.handle.cancel();
        crate::sessions::Closing {
            handle: s.handle.clone(),
            journal: s.journal.clone(),
            id,
        }
        .run()
    }));
    let _ = tokio::join!(
        shutdown::close_everything(opened, store, budget),
        tokio::time::timeout(budget, attached_closed)
    );
    drop(peer);
    // The forwarders send their last messages and drop their handles; then the output is
    // flushed and ends (within what is left of the budget).
    let _ = tokio::time::timeout(stop.left(), connection.writer).await;
    Ok(())
}

/// Requests whose slow part may run at once (session starts, loads, steers, rewinds,
/// attaches): past it, a new request is refused before anything of it runs, so the deferred
/// answers, and the ops they send a session, stay bounded whatever a client pipelines.
pub(super) const MAX_DEFERRED: usize = 256;

/// The refusal of a request while [`MAX_DEFERRED`] are being answered.
fn too_many(running: usize) -> acp::Error {
    errors::unavailable(format!(
        "{running} requests of this connection are still being answered; send more as they end"
    ))
}

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

/// How long end of input waits for the requests whose slow part is still running (session
/// starts, `initialize`); each one still running then is answered with an error.
const DEFERRED_AT_END: Duration = Duration::from_secs(5);

impl Agent {
    /// Handles and answers one request; while [`MAX_DEFERRED`] are being answered it is
    /// refused before anything of it runs.
    async fn take_request(&mut self, request: IncomingRequest) {
        let id = request.id.clone();
        let method = request.method.clone();
        let handled = match self.running_deferred.len() {
            running if running >= MAX_DEFERRED => Some(Err(too_many(running))),
            _ => guarded(&method, self.handle_request(request)).await,
        };
        self.answer(id, handled).await;
    }

    /// Finishes a request whose slow part is done, and answers it.
    async fn finish_one(&mut self, Deferred { id, method, finish }: Deferred) {
        self.running_deferred.retain(|(running, _)| *running != id);
        let handled = guarded(&method, async { Some(finish(self).await) }).await;
        match (self.answer_after.take(), handled) {
            (Some(written), Some(reply)) => self.answer_when(written, id, method, reply),
            (_, handled) => self.answer(id, handled).await,
        }
    }

    /// Answers `id` with `reply` once `written` fires (what it must follow is queued for
    /// output), back on the loop as a deferred request: the loop serves other requests while
    /// a slow client reads, and end of input still waits for the answer.
    fn answer_when(
        &mut self,
        written: tokio::sync::oneshot::Receiver<()>,
        id: RequestId,
        method: String,
        reply: Reply,
    ) {
        let sender = self.deferred.clone();
        self.running_deferred.push((id.clone(), method.clone()));
        tokio::spawn(async move {
            let _ = written.await;
            let finish: Finish = Box::new(move |_: &mut Agent| async move { reply }.boxed_local());
            let _ = sender.send(Deferred { id, method, finish });
        });
    }

    /// Whether an `initialize` is being answered.
    fn initializing(&self) -> bool {
        self.running_deferred
            .iter()
            .any(|(_, method)| method == "initialize")
    }

    /// At end of input: every request read before it is answered before the agent stops
    /// (a script that pipes its requests and closes its end gets every answer). Waits for
    /// the slow parts still running, within [`DEFERRED_AT_END`] (a stop signal ends the
    /// wait); answers each one left with an error saying so.
    async fn finish_deferred(
        &mut self,
        finished: &mut mpsc::UnboundedReceiver<Deferred>,
        stop_signals: &mut shutdown::StopSignals,
    ) {
        let deadline = tokio::time::Instant::now() + DEFERRED_AT_END;
        while !self.running_deferred.is_empty() {
            tokio::select! {
                Some(deferred) = finished.recv() => self.finish_one(deferred).await,
                () = tokio::time::sleep_until(deadline) => break,
                name = stop_signals.next() => {
                    tracing::info!("stopping ({name}) while finishing the last requests");
                    break;
                }
            }
        }
        for (id, method) in std::mem::take(&mut self.running_deferred) {
            tracing::warn!("{method} was still running when the agent stopped");
            let error = errors::internal_error(format!(
                "{method} did not finish before the agent stopped (its input ended)"
            ));
            self.peer.respond::<Value>(&id, Err(error)).await;
        }
    }

    /// Answers a request (unless it is answered later), then sends what its handling queued
    /// for after its answer.
    async fn answer(&mut self, id: RequestId, handled: Option<Reply>) {
        // Whatever this answer must follow is queued first (off a deferred request, the
        // wait happens off the loop instead: `answer_when`).
        if let Some(written) = self.answer_after.take() {
            let _ = written.await;
        }
        if let Some(reply) = handled {
            self.peer.respond(&id, reply).await;
        }
        // Each session's updates go through its one writer; a session gone meanwhile gets
        // nothing more.
        for notification in std::mem::take(&mut self.outbox) {
            if let Some(session) = self.sessions.get(notification.session_id.0.as_ref()) {
                session.write_later(notification.update);
            }
        }
        for start in std::mem::take(&mut self.after_answer) {
            start();
        }
    }

    /// Runs `slow` on a task of its own (the loop serves other requests meanwhile), then
    /// `finish` with its result back on the loop; the request is answered then.
    pub(super) fn defer<T, S>(
        &mut self,
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
        self.running_deferred.push((id.clone(), method.clone()));
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
        if self
            .followings_ended
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            follow::forget_deleted(self);
        }
        if request.method == "initialize" {
            capabilities::negotiate_version(&mut request.params);
        }
        if let Some(refused) = self.refused_to_observer(&request.method, &request.params) {
            return Some(Err(refused));
        }
        if request.method == trust_apply::APPLY_METHOD {
            return trust_apply::apply_trust(self, request.id, &request.params);
        }
        if request.method == quota::READ_METHOD {
            return Some(self.read_quota(&request.params));
        }
        if request.method == settings::LEGACY_SET_MODEL {
            return Some(settings::set_model_legacy(self, &request.params));
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
            ClientRequest::NewSessionRequest(params) => {
                start::start_new_session(self, request.id, params);
                None
            }
            ClientRequest::LoadSessionRequest(params) => {
                lifecycle::load_session(self, request.id, params)
            }
            ClientRequest::ResumeSessionRequest(params) => {
                lifecycle::resume_session(self, request.id, params)
            }
            ClientRequest::ListSessionsRequest(params) => {
                lifecycle::list_sessions(self, request.id, params)
            }
            ClientRequest::CloseSessionRequest(params) => {
                lifecycle::close_session(self, request.id, params)
            }
            ClientRequest::DeleteSessionRequest(params) => {
                lifecycle::delete_session(self, request.id, params)
            }
            ClientRequest::ForkSessionRequest(params) => {
                lifecycle::start_fork(self, request.id, params);
                None
            }
            other => self.route(request, other),
        }
    }

    /// Routes a parsed request other than a session's start, load or end.
    fn route(&mut self, request: IncomingRequest, parsed: ClientRequest) -> Option<Reply> {
        match parsed {
            ClientRequest::InitializeRequest(params) => {
                self.initialize(request.id, params);
                // The quotas draft's opt-in is no field of ACP 1.20's types: read from the
                // parameters as they came.
                self.client_caps.quota = quota::wants_quota(&request.params);
                // Nor the tool-interception draft's.
                self.client_caps.interception = super::interception::wanted(&request.params);
                None
            }
            ClientRequest::SetSessionModeRequest(params) => Some(settings::set_mode(
                self,
                &params.session_id,
                &params.mode_id.0,
                false,
            )),
            ClientRequest::SetSessionConfigOptionRequest(params) => {
                Some(settings::set_config_option(self, params))
            }
            ClientRequest::AuthenticateRequest(params) => self.authenticate(request.id, &params),
            ClientRequest::PromptRequest(params) => {
                prompt::prompt(self, request.id, request.cancel, params)
            }
            ClientRequest::LogoutRequest(_) => logout::logout(self, request.id),
            ClientRequest::SetSessionTitleRequest(params) => {
                Some(settings::set_title(self, &params))
            }
            ClientRequest::ListProvidersRequest(_) => providers::list_providers(self, request.id),
            ClientRequest::SetProviderRequest(params) => {
                Some(providers::set_provider(self, &params))
            }
            ClientRequest::DisableProviderRequest(params) => {
                providers::disable_provider(self, request.id, params)
            }
            ClientRequest::ExtMethodRequest(ext) if ext.method.as_ref() == steering::METHOD => {
                steering::steer(self, request.id, &ext.params)
            }
            ClientRequest::ExtMethodRequest(ext) if ext.method.as_ref() == rewind::METHOD => {
                rewind::rewind(self, request.id, &ext.params)
            }
            ClientRequest::ExtMethodRequest(ext)
                if ext.method.as_ref() == audience::ATTACH_METHOD =>
            {
                attach::attach(self, request.id, &request.params)
            }
            ClientRequest::ExtMethodRequest(ext)
                if ext.method.as_ref() == audience::DETACH_METHOD =>
            {
                attach::detach(self, request.id, &request.params)
            }
            ClientRequest::ExtMethodRequest(ext) if ext.method.as_ref() == run_command::METHOD => {
                run_command::run_command(self, request.id, request.cancel, &ext.params)
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
                let id = cancel.session_id.0.as_ref();
                if let Err(refused) = audience::only_the_controller(self, id, "session/cancel") {
                    tracing::warn!(session = id, "{}", refused.message);
                    return;
                }
                match self.sessions.get(id) {
                    Some(session) => session.handle.cancel(),
                    // A subagent's session (announced with the cancel capability): its work
                    // ends, its parent's turn goes on.
                    None if talaria_engine::cancel_subagent(&cancel.session_id.0) => {
                        tracing::info!(session = %cancel.session_id, "a subagent's work cancelled");
                    }
                    None => {
                        tracing::warn!(session = %cancel.session_id, "cancel for an unknown session")
                    }
                }
            }
            Ok(_) => tracing::debug!(method, "notification ignored"),
            Err(e) => tracing::debug!(method, "notification ignored: {e}"),
        }
    }

    /// What only a session's controller may do (prompt, steer, set modes, options, the
    /// model, the title; rewind; run a command), asked by a client that observes it: the
    /// error that says to take control first.
    fn refused_to_observer(&self, method: &str, params: &Value) -> Option<acp::Error> {
        const CONTROLLER_ONLY: &[&str] = &[
            "session/prompt",
            "session/set_mode",
            "session/set_config_option",
            "session/set_model",
            "session/set_title",
            steering::METHOD,
            rewind::METHOD,
            run_command::METHOD,
        ];
        if !CONTROLLER_ONLY.contains(&method) {
            return None;
        }
        let id = params["sessionId"].as_str()?;
        audience::only_the_controller(self, id, method).err()
    }

    /// `initialize`: the client's capabilities now; the configuration is read off the loop,
    /// then the store, the local server's probe and the router start while the client reads
    /// the answer.
    fn initialize(&mut self, id: RequestId, params: acp::InitializeRequest) {
        self.client_caps = ClientCaps::from_initialize(&params.client_capabilities);
        self.client_name = params.client_info.as_ref().map(|info| info.name.clone());
        let slow = async move { Ok((params, load_config().await)) };
        self.defer(id, "initialize", slow, |agent, (params, config)| {
            let images = config
                .as_ref()
                .map_or(true, |c| c.settings.supports_images());
            if let Ok(config) = &config {
                agent.room.initialized(config);
            }
            let transport = agent.room.transport();
            // Which client this connection is among a session's attached clients.
            let client_id = format!("client-{}", agent.member);
            async move {
                let mut answer = to_value(capabilities::initialize(&params, images, transport))?;
                answer["_meta"]["sessionAttach"]["clientId"] = client_id.into();
                Ok(answer)
            }
            .boxed_local()
        });
    }

    /// `quota/read` (the quotas draft): the snapshot of the session named, or of the newest
    /// session when none is.
    fn read_quota(&self, params: &Value) -> Reply {
        match params.get("sessionId") {
            None | Some(Value::Null) => Ok(quota::read(&self.quotas, None)),
            Some(Value::String(id)) if self.sessions.contains_key(id) => {
                Ok(quota::read(&self.quotas, Some(id)))
            }
            Some(Value::String(id)) => Err(session_not_found(&acp::SessionId::new(id.as_str()))),
            Some(other) => Err(errors::invalid_params(format!(
                "{}: sessionId must be a string, not {other}",
                quota::READ_METHOD
            ))),
        }
    }

    /// `authenticate`: whether the configuration (read off the loop) now has what it needs.
    fn authenticate(&mut self, id: RequestId, params: &acp::AuthenticateRequest) -> Option<Reply> {
        let method = params.method_id.0.as_ref();
        if method != capabilities::AUTH_METHOD_ID && method != capabilities::SETUP_METHOD_ID {
            return Some(Err(errors::invalid_params(format!(
                "unknown auth method {method:?}; this agent offers {:?} and {:?}",
                capabilities::AUTH_METHOD_ID,
                capabilities::SETUP_METHOD_ID
            ))));
        }
        // A terminal method is run by the client (`talaria setup`); either way, what counts
        // is whether the configuration now has what it needs.
        let slow = async move {
            let config = load_config().await.map_err(config_error)?;
            match capabilities::no_credentials(&config) {
                None => Ok(()),
                Some(error) => Err(error),
            }
        };
        self.defer(id, "authenticate", slow, |agent, ()| {
            agent.room.logged_out = false;
            async move { to_value(acp::AuthenticateResponse::new()) }.boxed_local()
        });
        None
    }
}
