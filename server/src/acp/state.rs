//! The wire room's shared state: the agent one connection serves (`Agent`), its open
//! sessions, what its client can do, and the values the handlers hand each other (a deferred
//! request's second half, a session's edge updates, the quota board). A leaf: it imports
//! none of its siblings (a source rule checks), so every handler can use it without a
//! circle. What sessions are made from lives in the session room (`crate::sessions`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::LocalBoxFuture;
use serde_json::Value;
use talaria_engine::{Delegation, SessionHandle};
use talaria_protocol::acp::{self, RequestId, SessionNotification};
use talaria_protocol::{Peer, errors};
use talaria_record::Transcript;
use talaria_util::lock;
use tokio::sync::mpsc;

use crate::sessions::{ClientAbilities, SessionRoom};

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

/// A session open in this connection.
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
}

impl LiveSession {
    /// Hands updates to the session's writer; the receiver fires once they are queued for
    /// output (so a response sent after it follows them), or is dropped with the writer.
    pub fn write_soon(&self, updates: EdgePayload) -> tokio::sync::oneshot::Receiver<()> {
        let (written, queued) = tokio::sync::oneshot::channel();
        let _ = self.updates.send(EdgeUpdates {
            updates,
            written: Some(written),
        });
        queued
    }

    /// Hands an update to the session's writer, to follow whatever it writes now.
    pub fn write_later(&self, update: acp::SessionUpdate) {
        let _ = self.updates.send(EdgeUpdates {
            updates: EdgePayload::Updates(vec![update]),
            written: None,
        });
    }
}

/// Updates the edge itself has for a session (a replay, the slash commands, notices at start,
/// the other view of a changed setting): written by the session's forwarder, its one writer,
/// in order with the engine's events; `written` fires once they are queued for output.
pub struct EdgeUpdates {
    pub updates: EdgePayload,
    pub written: Option<tokio::sync::oneshot::Sender<()>>,
}

/// What the edge hands its writer: updates made, or a stored record the writer turns into
/// updates itself, entry by entry (so a long replay is neither built on the dispatch loop nor
/// held whole in memory).
pub enum EdgePayload {
    Updates(Vec<acp::SessionUpdate>),
    Replay(Box<Replay>),
}

/// A record to show a client as it saw it live, built entry by entry by the session's writer
/// (never on the dispatch loop, never whole in memory): compaction summaries where they were
/// made when the client shows compactions, subagent cards when it shows subagents.
pub struct Replay {
    pub transcript: Transcript,
    pub compaction: bool,
    pub subagents: bool,
}

/// What the client said it can do, from `initialize`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientCaps {
    pub read_text_file: bool,
    pub write_text_file: bool,
    pub terminal: bool,
    /// The client shows `notice` updates.
    pub notices: bool,
    /// The client shows `compaction_update`s.
    pub compaction: bool,
    /// The client shows forms (`elicitation/create` in form mode).
    pub elicitation_form: bool,
    /// The client sends the user to an address (`elicitation/create` in URL mode).
    pub elicitation_url: bool,
    /// The client shows subagents as sessions of their own.
    pub subagents: bool,
    /// The client takes plan operations (`plan_update`, `plan_removed`).
    pub plans: bool,
    /// The client shows boolean config options.
    pub booleans: bool,
    /// The client takes `quota_update`s (the quotas draft's opt-in, read from `initialize`
    /// as it came: see `quota::wants_quota`).
    pub quota: bool,
    /// The checkpoints the client intercepts (the tool-interception draft's opt-in, read
    /// from `initialize` as it came: see `interception::wanted`).
    pub interception: talaria_engine::Interception,
}

impl ClientCaps {
    /// What the engine hands to the client.
    pub fn delegation(self) -> Delegation {
        Delegation {
            read_files: self.read_text_file,
            write_files: self.write_text_file,
            terminal: self.terminal,
            interception: self.interception,
        }
    }

    pub fn from_initialize(caps: &acp::ClientCapabilities) -> Self {
        Self {
            read_text_file: caps.fs.read_text_file,
            write_text_file: caps.fs.write_text_file,
            terminal: caps.terminal,
            notices: caps.session.as_ref().is_some_and(|s| s.notices.is_some()),
            compaction: caps
                .session
                .as_ref()
                .is_some_and(|s| s.compaction.is_some()),
            elicitation_form: caps.elicitation.as_ref().is_some_and(|e| e.form.is_some()),
            elicitation_url: caps.elicitation.as_ref().is_some_and(|e| e.url.is_some()),
            subagents: caps.subagents.is_some(),
            plans: caps.plan.is_some(),
            booleans: caps
                .session
                .as_ref()
                .and_then(|s| s.config_options.as_ref())
                .is_some_and(|c| c.boolean.is_some()),
            quota: false,
            interception: talaria_engine::Interception::default(),
        }
    }
}

impl ClientCaps {
    /// What a session's assembly needs to know of the client.
    pub fn abilities(self) -> ClientAbilities {
        ClientAbilities {
            forms: self.elicitation_form,
            delegation: self.delegation(),
            subagents: self.subagents,
        }
    }
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
