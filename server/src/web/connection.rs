//! The connections of `talaria serve`: each one a whole ACP agent (the same dispatch as
//! stdio, with its own sessions and its own hold on the store, so the store's claim rules
//! decide between two connections as between two processes), its input fed through an
//! in-memory pipe, its output handed over as whole messages.
//! A connection outlives its transport: while no client is attached, what the agent sends
//! waits (bounded) and a question waits for a client; one left alone longer than the
//! reconnect window is ended (its sessions saved), as is one the client deletes.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_util::lock;
use tokio::io::AsyncWriteExt;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::outbound::{Busy, Outbound, Stream, id_key, turn_meta};

/// How each connection is bounded.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connections: usize,
    pub sessions_per_connection: usize,
    pub message_bytes: usize,
    /// The most a connection's client may leave unread before the agent's output waits.
    pub unread_bytes: usize,
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

/// The transport's own method: hand a stream's messages after a cursor again.
pub const RESUME_STREAM: &str = "_session/resume_stream";

/// The JSON-RPC error of a resume whose point is gone (its data says where the turn stands).
const STREAM_GONE: i64 = -32011;

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
    /// Why it was ended, for the agent's log (unset: the server's stop).
    why_stopped: Arc<OnceLock<&'static str>>,
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
    /// Passes a client message on to the agent: one JSON object (checked), one line. A
    /// `_session/resume_stream` is the transport's, answered here.
    pub async fn deliver(&self, message: &Value) -> Result<(), Refused> {
        if message["method"] == RESUME_STREAM {
            self.resume_stream(message);
            return Ok(());
        }
        if let Some(why) = self.over_session_limit(message) {
            let answer = json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32000, "message": why}});
            self.outbound.push(answer.to_string());
            return Err(Refused::Answered(why));
        }
        self.outbound.client_sent(message);
        let mut line = message.to_string();
        line.push('\n');
        let mut input = self.input.lock().await;
        input
            .write_all(line.as_bytes())
            .await
            .map_err(|_| Refused::Ended)
    }

    /// `_session/resume_stream {after, sessionId?}`: the stream the cursor `after` names is
    /// handed again, from there, what its receiver missed; the answer follows what is
    /// handed again, saying where the turn stands, or says the point is gone.
    fn resume_stream(&self, message: &Value) {
        let params = &message["params"];
        let answer = match params["after"]
            .as_str()
            .map(str::to_string)
            .or_else(|| params["after"].as_u64().map(|n| n.to_string()))
        {
            None => {
                json!({"code": -32602, "message": "`after` (the cursor of the last message you processed) is required"})
            }
            Some(after) => match self
                .outbound
                .resume_named(&after, params["sessionId"].as_str())
            {
                Ok((_, turn)) => {
                    let result = json!({"resumedAfter": after, "_meta": turn_meta(turn)});
                    self.answer(message, Ok(result));
                    return;
                }
                Err(Busy::Gone { why, turn }) => json!({
                    "code": STREAM_GONE,
                    "message": format!("the messages after {after} are no longer kept ({}): load the session again (`session/load`) to see all of it", why.says()),
                    "data": {"_meta": turn_meta(turn)},
                }),
                Err(Busy::Held) => json!({"code": -32603, "message": "the stream is held"}),
            },
        };
        self.answer(message, Err(answer));
    }

    /// Answers a client request the transport handles itself.
    fn answer(&self, request: &Value, outcome: Result<Value, Value>) {
        if request.get("id").is_none() {
            return;
        }
        let answer = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": request["id"], "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": request["id"], "error": error}),
        };
        self.outbound.push(answer.to_string());
    }

    /// Ends the connection's agent, saying why in its log.
    pub fn end(&self, why: &'static str) {
        let _ = self.why_stopped.set(why);
        self.stop.cancel();
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

/// Why a connection was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOpened {
    /// The server has as many as it takes (or is stopping).
    Full,
    /// A live connection has the address it is named by.
    NameTaken,
}

/// Every connection of the server.
pub struct Registry {
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    /// Connections named by their address (`/acp/NAME`): name to id.
    names: Mutex<HashMap<String, String>>,
    pub limits: Limits,
    /// The server's stop: every connection's agent ends.
    pub stop: CancellationToken,
    /// Where agents are started: the dispatch loop is not `Send`, so every connection's loop
    /// runs on the server's local task set (their sessions run on the runtime's threads).
    agents: mpsc::UnboundedSender<AgentStart>,
    /// What every connection's agent shares with the others (routers, window probes).
    shared: crate::sessions::ProcessShared,
}

/// An agent to start for a connection, with its ends of the pipe.
pub struct AgentStart {
    registry: Arc<Registry>,
    connection: Arc<Connection>,
    input: tokio::io::DuplexStream,
    output: Box<dyn talaria_protocol::MessageSink>,
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
        // Unbounded: one start per connection opened, and `limits.connections` caps those.
        let (agents, starts) = mpsc::unbounded_channel();
        let registry = Arc::new(Self {
            connections: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            limits,
            stop,
            agents,
            shared: crate::sessions::ProcessShared::many_connections(transport_offer(&limits)),
        });
        tokio::spawn(reap(Arc::downgrade(&registry)));
        (registry, starts)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Connection>> {
        lock(&self.connections).get(id).cloned()
    }

    /// The connection named by its address (`/acp/NAME`).
    pub fn by_name(&self, name: &str) -> Option<Arc<Connection>> {
        let id = lock(&self.names).get(name).cloned()?;
        self.get(&id)
    }

    /// A new connection with its agent started, named by its address when `name` is given.
    pub fn open(
        self: &Arc<Self>,
        kind: Kind,
        name: Option<&str>,
    ) -> Result<Arc<Connection>, NotOpened> {
        let mut connections = lock(&self.connections);
        if connections.len() >= self.limits.connections {
            return Err(NotOpened::Full);
        }
        let id = uuid::Uuid::new_v4().to_string();
        if let Some(name) = name {
            let mut names = lock(&self.names);
            if names
                .get(name)
                .is_some_and(|held| connections.contains_key(held))
            {
                return Err(NotOpened::NameTaken);
            }
            names.insert(name.to_string(), id.clone());
        }
        let (to_agent, agent_in) = tokio::io::duplex(64 * 1024);
        let connection = Arc::new(Connection {
            id: id.clone(),
            kind,
            outbound: Arc::new(
                Outbound::new(kind == Kind::Http).most_waiting(self.limits.unread_bytes),
            ),
            input: tokio::sync::Mutex::new(to_agent),
            stop: self.stop.child_token(),
            why_stopped: Arc::default(),
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
            output: Box::new(IntoMailboxes(connection.clone())),
        };
        if self.agents.send(start).is_err() {
            // The server is stopping: no agent will read this connection.
            self.forget(&connection.id);
            return Err(NotOpened::Full);
        }
        Ok(connection)
    }

    /// The connection `id` is gone (and its name, if it had one).
    fn forget(&self, id: &str) {
        lock(&self.connections).remove(id);
        lock(&self.names).retain(|_, held| held != id);
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

    /// Ends a connection (its agent saves and stops), saying why; `false` when there is none.
    pub fn close(&self, id: &str, why: &'static str) -> bool {
        match self.get(id) {
            Some(connection) => {
                connection.end(why);
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
    output: Box<dyn talaria_protocol::MessageSink>,
) {
    let shared = registry.shared.clone();
    let stop = crate::acp::ConnectionStop {
        token: connection.stop.clone(),
        why: connection.why_stopped.clone(),
    };
    let served = crate::acp::serve_connection(input, output, stop, shared).await;
    if let Err(error) = served {
        tracing::error!(connection = %connection.id, "the connection's agent failed: {error:#}");
    }
    registry.forget(&connection.id);
    connection.outbound.close();
    connection.ended.cancel();
    tracing::info!(connection = %connection.id, "connection ended");
}

/// Where the agent's messages go: each batch of whole messages it sends (no framing, no
/// pipe) into the connection's streams at once, one lock and one wake-up, after noting the
/// sessions its answers opened or closed; before each batch, room: the agent waits while
/// its client has too much unread, and a client that takes nothing for long ends it.
struct IntoMailboxes(Arc<Connection>);

impl talaria_protocol::MessageSink for IntoMailboxes {
    fn put(&mut self, batch: &mut Vec<String>) -> std::io::Result<()> {
        self.0.note_answers(batch);
        self.0.outbound.push_all(batch);
        Ok(())
    }

    fn room(
        &mut self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send + '_>> {
        Box::pin(async move {
            self.0.outbound.room().await.map_err(|stalled| {
                tracing::warn!(connection = %self.0.id, "ending the connection: {stalled}");
                self.0.end("its client stopped reading");
                std::io::Error::other(stalled.to_string())
            })
        })
    }
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
            connection.end("no client came back within the reconnect window");
        }
    }
}

/// What the transport offers, advertised at `initialize` (`_meta.capabilities.transport`):
/// resumable streams, with how much is kept (the durable-transport draft's retention: each
/// stream's last messages, for as long as a connection waits for its client) and the method
/// that resumes a stream on either profile.
fn transport_offer(limits: &Limits) -> Value {
    json!({"resumable": {
        "retentionMessages": super::outbound::RETAIN_MESSAGES,
        "retentionSeconds": limits.reconnect_window.as_secs(),
        "retentionBytes": super::outbound::RETAIN_BYTES,
        "resumeMethod": RESUME_STREAM,
    }})
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
