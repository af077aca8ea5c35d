//! Session starts as the client sees them: `session/new` (its slow part off the dispatch
//! loop, in the session room's `ready_session`), and the registration of a session the room
//! assembled — its forwarder, its first notices, its MCP sign-ins, the modes and options it
//! answers with.

use std::sync::Arc;

use futures_util::FutureExt;
use talaria_protocol::acp::{self, RequestId, SessionNotification};
use tokio::sync::mpsc;

use super::state::{Agent, Audience, EdgeUpdates, LiveSession, Reply, member_of, to_value};
use super::{
    client_bridge, client_prompt, forwarder, mcp_sign_in, quota, session_options, updates,
};
use crate::sessions::{Assembled, Launch, Ready, SessionTaps, ready_session};

/// The modes and options a started session answers with.
pub(super) struct Launched {
    pub(super) modes: acp::SessionModeState,
    pub(super) options: Vec<acp::SessionConfigOption>,
    /// `_meta` for the response: `{"talaria": {"sandbox": "enforced" | "off" | "unavailable"}}`
    /// (clients' banners show it).
    pub(super) meta: acp::Meta,
}

/// What a response about `session` says now (its current mode and model).
pub(super) fn launched(session: &LiveSession) -> Launched {
    let (mode, model) = (session.handle.mode(), session.handle.model());
    Launched {
        modes: session_options::mode_state(mode),
        options: session_options::config_options(&session_options::OptionsNow {
            mode,
            model: &model,
            models: &session.models,
            effort: session.handle.effort(),
            booleans: session.booleans,
        }),
        meta: session.meta.clone(),
    }
}

/// A request that starts a session: where it works and which MCP servers it brings.
pub(super) trait StartsSession: Send + Sync + 'static {
    fn place(&self) -> crate::sessions::Place<'_>;
}

/// The requests' fields have the same names; only their types differ.
macro_rules! starts_session {
    ($($request:ty),*) => {$(
        impl StartsSession for $request {
            fn place(&self) -> crate::sessions::Place<'_> {
                crate::sessions::Place {
                    cwd: &self.cwd,
                    additional_directories: &self.additional_directories,
                    mcp_servers: &self.mcp_servers,
                }
            }
        }
    )*};
}
starts_session!(
    acp::NewSessionRequest,
    acp::ForkSessionRequest,
    acp::LoadSessionRequest,
    acp::ResumeSessionRequest
);

/// `session/new`: the start's slow part off the loop, then the store and the launch on it.
pub(super) fn start_new_session(agent: &mut Agent, id: RequestId, params: acp::NewSessionRequest) {
    let context = super::trust::start_context(agent, &id);
    let slow = async move {
        let client = client_prompt::parse(params.system_prompt.as_ref())?;
        let taps = SessionTaps::asked(params.meta.as_ref())?;
        let mut ready = ready_session(context, params.place())
            .await?
            .with_client_prompt(client);
        if let Some(most) = taps.max_turn_requests {
            ready.config.max_turn_requests = most;
        }
        // The store opens in the background from `initialize`; nothing the client asked
        // for needs it yet, so the answer does not wait for it: the session's entries
        // wait in the journal's backlog, and the session itself says whether it is saved.
        Ok((params, ready, taps))
    };
    agent.defer(id, "session/new", slow, |agent, (params, ready, taps)| {
        async move { new_session(agent, params, ready, taps) }.boxed_local()
    });
}

fn new_session(
    agent: &mut Agent,
    params: acp::NewSessionRequest,
    ready: Ready,
    taps: SessionTaps,
) -> Reply {
    let (id, start) = agent
        .room
        .create(&ready.config, &params.cwd, &params.additional_directories);
    let assembled = agent.room.assemble(
        Launch {
            id: id.clone(),
            cwd: params.cwd,
            ready,
            model: None,
            mode: None,
            start,
            taps,
        },
        agent.client_caps.abilities(),
    )?;
    let launched = register(agent, &id, assembled);
    to_value(
        acp::NewSessionResponse::new(id)
            .modes(launched.modes)
            .config_options(launched.options)
            .meta(launched.meta),
    )
}

/// Serves a session the room assembled: its forwarder, its slash commands and first
/// notices after the answer, its MCP sign-ins, and its place among the open sessions.
pub(super) fn register(agent: &mut Agent, id: &str, assembled: Assembled) -> Launched {
    let Assembled {
        handle,
        events,
        commands,
        commands_now,
        warnings,
        sign_ins,
        models,
        images_allowed,
        sandbox,
        shell,
        cwd,
        trust,
    } = assembled;
    let session_id = acp::SessionId::new(id.to_string());
    let audience = Arc::new(Audience::with_controller(member_of(agent)));
    let updates = start_forwarder(agent, &session_id, events, commands_now, &audience);
    agent
        .outbox
        .push(SessionNotification::new(session_id.clone(), commands));
    for warning in warnings {
        agent.outbox.push(SessionNotification::new(
            session_id.clone(),
            updates::notice_update(
                talaria_engine::NoticeLevel::Warning,
                warning,
                agent.client_caps.notices,
            ),
        ));
    }
    // The session's MCP sign-ins start after the answer: the client knows the session
    // before it is asked anything of it.
    let sign_in = Arc::new(mcp_sign_in::ClientSignIn::new(
        agent.peer.clone(),
        session_id,
        agent.client_caps.elicitation_url,
        agent.client_caps.notices,
    ));
    agent
        .after_answer
        .push(Box::new(move || sign_ins.offer(sign_in)));
    let live = LiveSession {
        handle,
        updates,
        images_allowed,
        models,
        booleans: agent.client_caps.booleans,
        meta: session_meta(sandbox, &trust),
        shell,
        cwd,
        audience,
        journal: agent.room.store().cloned(),
        opened_here: true,
        trust: Arc::new(trust),
    };
    let launched = launched(&live);
    // Any connection of the process may attach to it.
    agent.room.live().publish(id, Arc::new(live.clone()));
    agent.sessions.insert(id.to_string(), live);
    super::handover::watch_once(agent);
    launched
}

/// Starts the task that turns the session's events into `session/update`s (and the
/// edge's own updates, sent through the returned queue).
fn start_forwarder(
    agent: &Agent,
    session_id: &acp::SessionId,
    events: mpsc::Receiver<talaria_engine::EngineEvent>,
    commands: Arc<dyn Fn() -> acp::SessionUpdate + Send + Sync>,
    audience: &Arc<Audience>,
) -> mpsc::UnboundedSender<EdgeUpdates> {
    // Unbounded: the edge's own updates (a load's replay, option changes), a batch per
    // request answered; the loop never waits on a session's writer.
    let (updates, edge_rx) = mpsc::unbounded_channel();
    let questions = super::questions::Askers {
        audience: audience.clone(),
        edge: Some(updates.clone()),
    };
    let bridge = Arc::new(client_bridge::AcpBridge::new(
        (agent.peer.clone(), agent.member),
        session_id.clone(),
        agent.client_caps,
        questions,
    ));
    let forwarder = forwarder::Forwarder {
        audience: audience.clone(),
        journal: agent.room.store().cloned(),
        // Only a process serving many connections (`talaria serve`) has clients that attach.
        turn: if agent.room.transport().is_some() {
            super::audience::TurnSoFar::default()
        } else {
            super::audience::TurnSoFar::never()
        },
        session_id: session_id.clone(),
        client: bridge,
        commands,
        chunks: forwarder::ChunkTemplates::new(session_id, None),
        prompt_message: None,
        quota: quota::SessionQuota::new(agent.quotas.clone(), session_id),
    };
    tokio::spawn(forwarder.run(events, edge_rx));
    updates
}

/// What a session response says about Talaria's own state (under `_meta.talaria`) and the
/// folder's trust (`_meta.workspaceTrust`, the ACP draft's shape).
fn session_meta(sandbox: &str, trust: &talaria_engine::TrustAssessment) -> acp::Meta {
    let mut meta = acp::Meta::new();
    meta.insert("talaria".into(), serde_json::json!({"sandbox": sandbox}));
    meta.insert(
        "workspaceTrust".into(),
        super::trust::workspace_trust(trust),
    );
    meta
}
