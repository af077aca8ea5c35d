//! The wire room's shared state: the agent one connection serves (`Agent`), its open
//! sessions, what its client can do, and the values the handlers hand each other (a deferred
//! request's second half, a session's edge updates, the quota board, the clients attached to
//! a session and which of them has control: `Audience`). A leaf: it imports
//! none of its siblings (a source rule checks), so every handler can use it without a
//! circle; its children (`state/clients.rs`, `state/attached.rs`) hold the clients and the
//! audience, and import nothing of the wire room either. What sessions are made from lives
//! in the session room (`crate::sessions`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::LocalBoxFuture;
use serde_json::Value;
use talaria_engine::SessionHandle;
use talaria_protocol::acp::{self, RequestId, SessionNotification};
use talaria_protocol::{Peer, errors};
use talaria_record::{EntryId, Transcript};
use talaria_util::lock;
use tokio::sync::mpsc;

use crate::sessions::SessionRoom;

mod attached;
mod clients;
pub use attached::*;
pub use clients::*;

/// A request's answer: its result, or the JSON-RPC error.
pub type Reply = Result<Value, acp::Error>;

pub fn to_value<T: serde::Serialize>(value: T) -> Reply {
    serde_json::to_value(value).map_err(|e| errors::internal_error(format!("serializing: {e}")))
}

pub fn session_not_found(id: &acp::SessionId) -> acp::Error {
    acp::Error::new(
        acp::ErrorCode::ResourceNotFound.into(),
        format!("Session not found: {id}"),
    )
}

/// The agent of one connection: the dispatch loop's state.
pub struct Agent {
    pub peer: Peer,
    pub client_caps: ClientCaps,
    /// Notifications to send after the current request's answer.
    pub outbox: Vec<SessionNotification>,
    /// What to start after the current request's answer (and its notifications) is sent.
    pub after_answer: Vec<Box<dyn FnOnce() + Send>>,
    pub sessions: HashMap<String, LiveSession>,
    /// What this connection's sessions are made from and kept with.
    pub room: SessionRoom,
    /// Where requests whose slow part ran off the loop come back to be finished.
    pub deferred: mpsc::UnboundedSender<Deferred>,
    /// The requests whose slow part is running (answered when it comes back; at end of
    /// input, waited for).
    pub running_deferred: Vec<(RequestId, String)>,
    /// Set by a request whose answer must follow updates still going out (a load's replay):
    /// fires once they are queued for output. The answer waits for it off the loop.
    pub answer_after: Option<tokio::sync::oneshot::Receiver<()>>,
    /// The sessions' rate-limit snapshots, for `quota/read`.
    pub quotas: Arc<QuotaBoard>,
    /// This connection among the clients attached to a session (process-unique).
    pub member: MemberId,
    /// What its client calls itself (`clientInfo.name` at `initialize`), for the others.
    pub client_name: Option<String>,
    /// Sessions of other processes this client follows (`follow.rs`): each followed until
    /// its guard is dropped.
    pub following: HashMap<String, Followed>,
    /// Set by a follower of this client that found its session deleted (and told it).
    pub followings_ended: Arc<std::sync::atomic::AtomicBool>,
}

/// This connection as one of a session's attached clients.
pub fn member_of(agent: &Agent) -> Member {
    Member {
        id: agent.member,
        name: agent.client_name.clone(),
        peer: agent.peer.clone(),
        caps: agent.client_caps,
        followings_ended: agent.followings_ended.clone(),
    }
}

/// The second half of a request whose slow part ran on a task of its own: it runs on the
/// dispatch loop (it may change the agent's state), and its reply answers the request.
pub type Finish = Box<dyn for<'a> FnOnce(&'a mut Agent) -> LocalBoxFuture<'a, Reply> + Send>;

/// A request whose slow part is done.
pub struct Deferred {
    pub id: RequestId,
    pub method: String,
    pub finish: Finish,
}

/// A session open in this connection (created here or attached to: every connection holding
/// it holds a clone).
#[derive(Clone)]
pub struct LiveSession {
    pub handle: SessionHandle,
    /// The session's one writer of `session/update`s (its forwarder).
    pub updates: mpsc::UnboundedSender<EdgeUpdates>,
    pub images_allowed: bool,
    /// Models offered for switching.
    pub models: Vec<String>,
    /// The client shows boolean config options.
    pub booleans: bool,
    /// What session responses say under `_meta`.
    pub meta: acp::Meta,
    /// How its commands start (sandbox, environment), and where: for `_talaria/run_command`.
    pub shell: Arc<talaria_tools::Shell>,
    pub cwd: std::path::PathBuf,
    /// The clients attached to it, and the one with control.
    pub audience: Arc<Audience>,
    /// The journal it writes through (the room's of the connection that opened it): its
    /// claim is released there when it closes.
    pub journal: Option<talaria_engine::Journal>,
    /// Opened by this connection (not attached to): its room's journal is the session's.
    pub opened_here: bool,
    /// Its folder's trust as assessed and shown when it started (`trust/apply` decides on
    /// exactly these files).
    pub trust: Arc<talaria_engine::TrustAssessment>,
}

impl LiveSession {
    /// Hands updates to the session's writer; the receiver fires once they are queued for
    /// output (so a response sent after it follows them), or is dropped with the writer.
    pub fn write_soon(&self, updates: EdgePayload) -> tokio::sync::oneshot::Receiver<()> {
        let (written, queued) = tokio::sync::oneshot::channel();
        let _ = self.updates.send(EdgeUpdates {
            updates,
            written: Some(written),
            outcome: None,
        });
        queued
    }

    /// Hands an update to the session's writer, to follow whatever it writes now.
    pub fn write_later(&self, update: acp::SessionUpdate) {
        let _ = self.updates.send(EdgeUpdates {
            updates: EdgePayload::Updates(vec![update]),
            written: None,
            outcome: None,
        });
    }
}

/// Updates the edge itself has for a session (a replay, the slash commands, notices at start,
/// the other view of a changed setting): written by the session's forwarder, its one writer,
/// in order with the engine's events; `written` fires once they are queued for output.
pub struct EdgeUpdates {
    pub updates: EdgePayload,
    pub written: Option<tokio::sync::oneshot::Sender<()>>,
    /// An attach's outcome: who is attached now and who has control, or why it failed.
    pub outcome: Option<tokio::sync::oneshot::Sender<Reply>>,
}

/// What the edge hands its writer: updates made, or a stored record the writer turns into
/// updates itself, entry by entry (so a long replay is neither built on the dispatch loop nor
/// held whole in memory).
pub enum EdgePayload {
    Updates(Vec<acp::SessionUpdate>),
    Replay(Box<Replay>),
    /// A client attaches: it is shown the session so far, then joins the others.
    Attach(Box<Attaching>),
    /// Updates for every attached client but one (a prompt, shown to those that did not
    /// send it).
    ToOthers {
        except: MemberId,
        updates: Vec<acp::SessionUpdate>,
    },
    /// Told once no turn runs (after everything queued before it is written).
    WhenIdle(tokio::sync::oneshot::Sender<()>),
}

/// A client attaching to a session, and how its replay is shaped.
pub struct Attaching {
    pub member: Member,
    /// Take control once attached.
    pub controller: bool,
    /// Shown the session so far (`historyPolicy: "full"`), or only what waits for an answer
    /// (`"pending_only"`, `"none"`: the open questions are asked of it either way).
    pub history: bool,
    /// The record was shown up to this entry already (it followed the session from another
    /// process): only what came after it.
    pub after: Option<EntryId>,
}

/// A record to show a client as it saw it live, built entry by entry by the session's writer
/// (never on the dispatch loop, never whole in memory): compaction summaries where they were
/// made when the client shows compactions, subagent cards when it shows subagents.
pub struct Replay {
    pub transcript: Transcript,
    pub compaction: bool,
    pub subagents: bool,
    /// The client that asked for it (a load): the others attached are not shown it again.
    pub to: Option<MemberId>,
}

/// The snapshots of a connection's sessions, for `quota/read`.
#[derive(Default)]
pub struct QuotaBoard {
    snapshots: Mutex<Board>,
}

#[derive(Default)]
struct Board {
    by_session: HashMap<String, Value>,
    /// The newest snapshot of any session: what a read without a session gets.
    latest: Option<Value>,
}

impl QuotaBoard {
    pub fn publish(&self, session: &str, snapshot: &Value) {
        let mut board = lock(&self.snapshots);
        board
            .by_session
            .insert(session.to_string(), snapshot.clone());
        board.latest = Some(snapshot.clone());
    }

    /// The snapshot that applies to `session` (or, without one, the newest of any session),
    /// when one was reported.
    pub fn snapshot(&self, session: Option<&str>) -> Option<Value> {
        let board = lock(&self.snapshots);
        match session {
            Some(session) => board.by_session.get(session).cloned(),
            None => board.latest.clone(),
        }
    }

    /// Forgets a closed session's snapshot.
    pub fn forget(&self, session: &str) {
        lock(&self.snapshots).by_session.remove(session);
    }
}
