//! The connections of `talaria serve`: each one a whole ACP agent (the same dispatch as
//! stdio, with its own sessions and its own hold on the store, so the store's claim rules
//! decide between two connections as between two processes), its input fed through an
//! in-memory pipe, its output handed over as whole messages.
//! A connection outlives its transport: while no client is attached, what the agent sends
//! waits (bounded) and a question waits for a client; one left alone longer than the
//! reconnect window is ended (its sessions saved), as is one the client deletes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_util::lock;
use tokio::io::AsyncWriteExt;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::outbound::{Outbound, Stream, id_key};

/// How each connection is bounded.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connections: usize,
    pub sessions_per_connection: usize,
    pub message_bytes: usize,
    /// How long a connection with no client attached is kept.
    pub reconnect_window: Duration,
}

/// Which profile a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    WebSocket,
    Http,
}

/// How long a connection that went away has to close a session another one loads.
const HAND_OVER_WAIT: Duration = Duration::from_secs(5);

/// Methods that open a session on a connection.
const OPENS: &[&str] = &[
    "session/new",
    "session/load",
    "session/resume",
    "session/fork",
];

/// The sessions a connection has open, and those being opened.
#[derive(Default)]
struct Sessions {
    open: HashSet<String>,
    /// Requests opening one, by id: the session a load or resume names.
    opening: HashMap<String, Option<String>>,
    /// `session/close` requests, by id: the session they close.
    closing: HashMap<String, String>,
}

/// One client connection and its agent.
pub struct Connection {
    pub id: String,
    pub kind: Kind,
    pub outbound: Arc<Outbound>,
    input: tokio::sync::Mutex<tokio::io::DuplexStream>,
    /// Ends the agent (DELETE, the reconnect window, the server's stop).
    pub stop: CancellationToken,
    /// Fires once the agent has ended.
    pub ended: CancellationToken,
    sessions: Mutex<Sessions>,
    /// Receivers attached to the connection's own stream (or its socket).
    attached: AtomicUsize,
    alone_since: Mutex<Option<Instant>>,
    limits: Limits,
}

/// Why a client message was not passed on.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("the connection has ended")]
    Ended,
    /// Answered to the client as a JSON-RPC error (already queued for it).
    #[error("{0}")]
    Answered(String),
}

impl Connection {
    /// Passes a client message on to the agent: one JSON object (checked), one line.
    pub async fn deliver(&self, message: &Value) -> Result<(), Refused> {
        if let Some(why) = self.over_session_limit(message) {
            let answer = json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32000, "message": why}});
            let _ = self.outbound.push(answer.to_string());
            return Err(Refused::Answered(why));
        }
        let mut line = message.to_string();
        line.push('\n');
        let mut input = self.input.lock().await;
        input
            .write_all(line.as_bytes())
            .await
            .map_err(|_| Refused::Ended)
    }

    /// Notes a session being opened or closed; why not, when the connection has its fill.
    fn over_session_limit(&self, message: &Value) -> Option<String> {
        let method = message["method"].as_str()?;
        let key = id_key(&message["id"])?;
        let mut sessions = lock(&self.sessions);
        if method == "session/close" {
            let id = message["params"]["sessionId"].as_str()?.to_string();
            sessions.closing.insert(key, id);
            return None;
        }
        if !OPENS.contains(&method) {
            return None;
        }
        let named = message["params"]["sessionId"].as_str().map(str::to_string);
        let already = named.as_ref().is_some_and(|id| sessions.open.contains(id));
        let most = self.limits.sessions_per_connection;
        if !already && sessions.open.len() + sessions.opening.len() >= most {
            return Some(format!(
                "this connection has {most} sessions open, the most one may have: close one \
                 (`session/close`) or open another connection"
            ));
        }
        sessions.opening.insert(key, named);
        None
    }

    /// Notes what the agent's answers among `messages` opened or closed.
    pub fn note_answers(&self, messages: &[String]) {
        let mut sessions = lock(&self.sessions);
        for text in messages {
            if sessions.opening.is_empty() && sessions.closing.is_empty() {
                return;
            }
            note_answer(&mut sessions, text);
        }
    }

    /// Whether the connection has `session` open.
    fn has_open(&self, session: &str) -> bool {
        lock(&self.sessions).open.contains(session)
    }

    /// Closes `session` in this connection's agent (saved as `session/close` saves it), for
    /// another connection to load; whether it closed in time.
    async fn hand_over(&self, session: &str) -> bool {
        let id = json!(format!("_talaria/hand-over-{}", uuid::Uuid::new_v4()));
        let answer = self.outbound.await_answer(&id);
        let close = json!({"jsonrpc": "2.0", "id": id, "method": "session/close", "params": {"sessionId": session}});
        if self.deliver(&close).await.is_err() {
            return false;
        }
        let Ok(Ok(text)) = tokio::time::timeout(HAND_OVER_WAIT, answer).await else {
            return false;
        };
        serde_json::from_str::<Value>(&text).is_ok_and(|answer| answer.get("result").is_some())
    }

    /// A receiver took (or gave up) the connection's own stream.
    pub fn attached(&self, on: bool) {
        if on {
            self.attached.fetch_add(1, Ordering::SeqCst);
            *lock(&self.alone_since) = None;
        } else if self.attached.fetch_sub(1, Ordering::SeqCst) == 1 {
            *lock(&self.alone_since) = Some(Instant::now());
        }
    }

    /// Left alone longer than the reconnect window.
    fn abandoned(&self, now: Instant) -> bool {
        lock(&self.alone_since)
            .is_some_and(|since| now.duration_since(since) > self.limits.reconnect_window)
    }
}

/// Every connection of the server.
pub struct Registry {
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    pub limits: Limits,
    /// The server's stop: every connection's agent ends.
    pub stop: CancellationToken,
    /// Where agents are started: the dispatch loop is not `Send`, so every connection's loop
    /// runs on the server's local task set (their sessions run on the runtime's threads).
    agents: mpsc::UnboundedSender<AgentStart>,
    /// What every connection's agent shares with the others (routers, window probes).
    shared: crate::acp::ProcessShared,
}

/// An agent to start for a connection, with its ends of the pipe.
pub struct AgentStart {
    registry: Arc<Registry>,
    connection: Arc<Connection>,
    input: tokio::io::DuplexStream,
    output: talaria_protocol::MessageSink,
}

impl AgentStart {
    /// Runs the agent until it ends (on the local task set).
    pub async fn run(self) {
        run_agent(self.registry, self.connection, self.input, self.output).await;
    }
}

impl Registry {
    /// The registry, and where the agents it opens are to be started (see [`AgentStart`]).
    pub fn new(
        limits: Limits,
        stop: CancellationToken,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<AgentStart>) {
        let (agents, starts) = mpsc::unbounded_channel();
        let registry = Arc::new(Self {
            connections: Mutex::new(HashMap::new()),
            limits,
            stop,
            agents,
            shared: crate::acp::ProcessShared::many_connections(),
        });
        tokio::spawn(reap(Arc::downgrade(&registry)));
        (registry, starts)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Connection>> {
        lock(&self.connections).get(id).cloned()
    }

    /// A new connection with its agent started; `None` when the server has its fill.
    pub fn open(self: &Arc<Self>, kind: Kind) -> Option<Arc<Connection>> {
        let mut connections = lock(&self.connections);
        if connections.len() >= self.limits.connections {
            return None;
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (to_agent, agent_in) = tokio::io::duplex(64 * 1024);
        let connection = Arc::new(Connection {
            id: id.clone(),
            kind,
            outbound: Arc::new(Outbound::new(kind == Kind::Http)),
            input: tokio::sync::Mutex::new(to_agent),
            stop: self.stop.child_token(),
            ended: CancellationToken::new(),
            sessions: Mutex::new(Sessions::default()),
            attached: AtomicUsize::new(0),
            alone_since: Mutex::new(Some(Instant::now())),
            limits: self.limits,
        });
        connections.insert(id, connection.clone());
        drop(connections);
        let start = AgentStart {
            registry: self.clone(),
            connection: connection.clone(),
            input: agent_in,
            output: into_mailboxes(connection.clone()),
        };
        if self.agents.send(start).is_err() {
            // The server is stopping: no agent will read this connection.
            lock(&self.connections).remove(&connection.id);
            return None;
        }
        Some(connection)
    }

    /// Before `to` loads or resumes a session another connection has open with no client
    /// attached (it went away and may not come back), that connection closes it, so the
    /// session moves; one whose client is there keeps it, and the store's claim refuses the
    /// load, as between two processes.
    pub async fn hand_over_for(&self, to: &Connection, message: &Value) {
        let reopens = matches!(
            message["method"].as_str(),
            Some("session/load" | "session/resume")
        );
        let Some(session) = message["params"]["sessionId"].as_str().filter(|_| reopens) else {
            return;
        };
        let holder = lock(&self.connections)
            .values()
            .find(|c| {
                c.id != to.id && c.has_open(session) && c.attached.load(Ordering::SeqCst) == 0
            })
            .cloned();
        if let Some(holder) = holder {
            let moved = holder.hand_over(session).await;
            tracing::info!(session, from = %holder.id, to = %to.id, moved, "a session moves to a new connection");
        }
    }

    /// Ends a connection (its agent saves and stops); `false` when there is none.
    pub fn close(&self, id: &str) -> bool {
        match self.get(id) {
            Some(connection) => {
                connection.stop.cancel();
                true
            }
            None => false,
        }
    }

    /// Waits until every connection's agent has ended (after the server's stop).
    pub async fn all_ended(&self) {
        let waiting: Vec<Arc<Connection>> = lock(&self.connections).values().cloned().collect();
        for connection in waiting {
            connection.ended.cancelled().await;
        }
    }
}

/// The agent of one connection, until it ends; then the connection goes.
async fn run_agent(
    registry: Arc<Registry>,
    connection: Arc<Connection>,
    input: tokio::io::DuplexStream,
    output: talaria_protocol::MessageSink,
) {
    let shared = registry.shared.clone();
    let served = crate::acp::serve_connection(input, output, connection.stop.clone(), shared).await;
    if let Err(error) = served {
        tracing::error!(connection = %connection.id, "the connection's agent failed: {error:#}");
    }
    lock(&registry.connections).remove(&connection.id);
    connection.outbound.close();
    connection.ended.cancel();
    tracing::info!(connection = %connection.id, "connection ended");
}

/// Where the agent's messages go: each batch of whole messages it sends (no framing, no
/// pipe) into the connection's mailboxes at once, one lock and one wake-up, after noting
/// the sessions its answers opened or closed. A connection whose mailboxes are full (its
/// client reads nothing) is closed.
fn into_mailboxes(connection: Arc<Connection>) -> talaria_protocol::MessageSink {
    Box::new(move |batch: &mut Vec<String>| {
        connection.note_answers(batch);
        connection.outbound.push_all(batch).map_err(|full| {
            tracing::warn!(connection = %connection.id, "closing the connection: {full}");
            connection.stop.cancel();
            std::io::Error::other(full.to_string())
        })
    })
}

/// Ends, every few seconds, the connections left alone longer than the reconnect window.
async fn reap(registry: std::sync::Weak<Registry>) {
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let now = Instant::now();
        let abandoned: Vec<Arc<Connection>> = lock(&registry.connections)
            .values()
            .filter(|c| c.abandoned(now))
            .cloned()
            .collect();
        for connection in abandoned {
            tracing::info!(connection = %connection.id, "no client came back within the reconnect window; ending the connection");
            connection.stop.cancel();
        }
    }
}

/// The stream a client message's answer goes back on, over HTTP.
pub fn answer_stream(message: &Value, session_header: Option<&str>) -> Stream {
    if message["method"] == "session/load" {
        return Stream::Connection;
    }
    session_header
        .map(str::to_string)
        .or_else(|| message["params"]["sessionId"].as_str().map(str::to_string))
        .map_or(Stream::Connection, Stream::Session)
}

/// Notes what one agent answer opened or closed.
fn note_answer(sessions: &mut Sessions, text: &str) {
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        return;
    };
    if message.get("method").is_some() {
        return;
    }
    let Some(key) = id_key(&message["id"]) else {
        return;
    };
    let succeeded = message.get("result").is_some();
    if let Some(named) = sessions.opening.remove(&key) {
        let opened = message["result"]["sessionId"]
            .as_str()
            .map(str::to_string)
            .or(named);
        if let (true, Some(id)) = (succeeded, opened) {
            sessions.open.insert(id);
        }
    }
    if let Some(id) = sessions.closing.remove(&key)
        && succeeded
    {
        sessions.open.remove(&id);
    }
}
