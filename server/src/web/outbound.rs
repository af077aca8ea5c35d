//! What the agent sends one connection, kept per stream until read and after: one stream for
//! a WebSocket; for HTTP, the connection's stream and one per session, routed as the
//! transport RFD routes them (a message naming a session to that session's stream, an answer
//! to the stream its request came on, the rest to the connection's), except that a session
//! whose stream was never opened has its messages on the connection's stream, so a client
//! that opens one stream runs whole sessions.
//!
//! Each stream is a log (`stream_log.rs`): numbered per stream, every message carrying its
//! cursor, kept after it is read for the connection's life within the retention bound
//! ([`RETAIN_MESSAGES`] per stream, [`RETAIN_BYTES`] per connection, the oldest dropped
//! first), so a receiver that comes back saying what it got misses nothing, and one asking
//! for a point that was dropped is told so. What waits unread is bounded too: past
//! [`MOST_WAITING`] the agent's output waits for room ([`Outbound::room`]), and a
//! connection whose client takes nothing for [`STALLED_AFTER`] is ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use talaria_util::failpoint;
use talaria_util::lock;
use tokio::sync::{oneshot, watch};

pub use super::rpc_id::id_key;
use super::stream_log::StreamLog;
pub use super::stream_log::{Queued, Unresumable};
use super::turn_state::{self, TurnStates};
use super::{cursor, turn_state::META_KEY as TURN_STATE};

/// The most the agent's output may hold unread before it waits for room, unless `serve
/// --max-unread-bytes` says otherwise (16 MiB). One message larger than this still goes,
/// alone.
pub const MOST_WAITING: usize = 16 << 20;
/// The handed-out messages each stream keeps for a receiver that comes back.
pub const RETAIN_MESSAGES: usize = 10_000;
/// The handed-out messages a connection keeps, in bytes, over all its streams.
pub const RETAIN_BYTES: usize = 8 << 20;
/// How long the agent's output may wait for room while the client takes nothing before the
/// connection is ended.
pub const STALLED_AFTER: Duration = Duration::from_secs(60);

/// Which stream of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stream {
    Connection,
    Session(String),
}

#[derive(Default)]
struct State {
    /// HTTP: routed by session; a WebSocket has one stream.
    routed: bool,
    connection: StreamLog,
    sessions: HashMap<String, StreamLog>,
    /// The stream each client request's answer goes to.
    answer_routes: HashMap<String, Stream>,
    /// The connection's order of the next message.
    next_order: u64,
    waiting_bytes: usize,
    history_bytes: usize,
    /// Counts every hand-out: a client that takes something is making progress.
    taken: u64,
    closed: bool,
    /// Answers that go to whoever waits for them instead of a stream, by request id: an
    /// HTTP `initialize`'s (its POST answers it), the server's own requests'.
    awaited: HashMap<String, oneshot::Sender<String>>,
    turns: TurnStates,
}

/// Why a stream cannot be held.
#[derive(Debug, Clone, PartialEq)]
pub enum Busy {
    /// Another receiver holds it.
    Held,
    /// The point asked for cannot be resumed from; where the turn stands.
    Gone { why: Unresumable, turn: Value },
}

/// Why the agent's output stops.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Stalled {
    #[error(
        "the most bytes allowed unread wait for a client that took none of them for {} s",
        STALLED_AFTER.as_secs()
    )]
    NoProgress,
}

/// A connection's streams.
pub struct Outbound {
    state: Mutex<State>,
    /// [`STALLED_AFTER`] (shorter in tests).
    stalled_after: Duration,
    /// [`MOST_WAITING`], or `serve --max-unread-bytes`.
    most_waiting: usize,
    /// Bumped on every change; receivers and the agent's output wait on it.
    changed: watch::Sender<u64>,
}

impl Outbound {
    pub fn new(routed: bool) -> Self {
        Self {
            state: Mutex::new(State {
                routed,
                ..State::default()
            }),
            stalled_after: STALLED_AFTER,
            most_waiting: MOST_WAITING,
            changed: watch::channel(0).0,
        }
    }

    /// The agent's output waits for room past `bytes` unread instead of [`MOST_WAITING`].
    pub fn most_waiting(mut self, bytes: usize) -> Self {
        self.most_waiting = bytes;
        self
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Something to wait on for the next change.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The answer to the request with this id goes to the receiver instead of a stream.
    pub fn await_answer(&self, id: &Value) -> oneshot::Receiver<String> {
        let (sender, receiver) = oneshot::channel();
        if let Some(key) = id_key(id) {
            lock(&self.state).awaited.insert(key, sender);
        }
        receiver
    }

    /// The answer to the client request `id` goes to `stream`.
    pub fn route_answer(&self, id: &Value, stream: Stream) {
        if let Some(key) = id_key(id) {
            lock(&self.state).answer_routes.insert(key, stream);
        }
    }

    /// Notes a message the client sent (where its session's turn stands).
    pub fn client_sent(&self, message: &Value) {
        lock(&self.state).turns.client_sent(message);
    }

    /// Queues what the agent sent (or the server answers for it).
    pub fn push(&self, text: String) {
        self.push_all(&mut vec![text]);
    }

    /// Queues a batch of what the agent sent, in order, with one wake-up for receivers;
    /// takes the messages out of `batch`.
    pub fn push_all(&self, batch: &mut Vec<String>) {
        let mut state = lock(&self.state);
        for text in batch.drain(..) {
            queue_one(&mut state, text);
        }
        drop(state);
        self.bump();
    }

    /// Waits until less than the most allowed ([`MOST_WAITING`]) waits unread (or the connection is closed);
    /// [`Stalled`] once the client took nothing for [`STALLED_AFTER`] while it was full.
    pub async fn room(&self) -> Result<(), Stalled> {
        let mut changes = self.watch();
        let mut progress = None;
        loop {
            let (full, taken) = {
                let state = lock(&self.state);
                (
                    state.waiting_bytes >= self.most_waiting && !state.closed,
                    state.taken,
                )
            };
            if !full {
                return Ok(());
            }
            let since = match progress {
                Some((seen, since)) if seen == taken => since,
                _ => tokio::time::Instant::now(),
            };
            progress = Some((taken, since));
            let left = self.stalled_after.saturating_sub(since.elapsed());
            if left.is_zero() {
                return Err(Stalled::NoProgress);
            }
            let _ = tokio::time::timeout(left, changes.changed()).await;
        }
    }

    /// Hands out up to `most` of the messages waiting on `stream` to its holder `hold` (in
    /// order, into `into`), kept awhile in case the receiver comes back; how many (`None`:
    /// `hold` holds the stream no more).
    fn take_up_to(
        &self,
        (stream, hold): (&Stream, u64),
        most: usize,
        into: &mut Vec<Queued>,
    ) -> Option<usize> {
        let before = into.len();
        let mut state = lock(&self.state);
        let log = stream_log(&mut state, stream);
        if log.holder != Some(hold) {
            return None;
        }
        failpoint::step("serve::mailbox::deliver::before");
        let bytes = log.take(most, into);
        let count = into.len() - before;
        if count > 0 {
            state.waiting_bytes -= bytes;
            state.history_bytes += bytes;
            state.taken += 1;
            release_history(&mut state, stream);
        }
        drop(state);
        if count > 0 {
            failpoint::step("serve::mailbox::deliver::after");
            // The agent's output may be waiting for room.
            self.bump();
        }
        Some(count)
    }

    /// Holds `stream` for one receiver; one that says what it got (`after`, a cursor) is
    /// handed again what came after it, exactly, or told it is gone. A receiver that resumes
    /// takes the stream over from one still holding it (a client comes back before the
    /// server noticed its old stream was dead); another without `after` is refused.
    pub fn attach(self: &Arc<Self>, stream: Stream, after: Option<&str>) -> Result<Held, Busy> {
        let mut state = lock(&self.state);
        if stream_log(&mut state, &stream).holder.is_some() && after.is_none() {
            return Err(Busy::Held);
        }
        if let Some(after) = after {
            resume(&mut state, &stream, after)?;
        }
        let log = stream_log(&mut state, &stream);
        let hold = log.hold();
        let tag = log.tag.clone();
        drop(state);
        self.bump();
        Ok(Held {
            outbound: self.clone(),
            stream,
            hold,
            tag,
        })
    }

    /// `_session/resume_stream`: the receiver of `stream` (now or next) is handed again what
    /// came after `after`; where the stream's turn stands.
    pub fn resume(&self, stream: &Stream, after: &str) -> Result<Value, Busy> {
        let mut state = lock(&self.state);
        resume(&mut state, stream, after)?;
        let turn = turn_of(&state, stream);
        drop(state);
        self.bump();
        Ok(turn)
    }

    /// `_session/resume_stream {after, sessionId?}`: the stream `after`'s tag names (else the
    /// session's, else the connection's) is handed again what came after it; which stream,
    /// and where its turn stands.
    pub fn resume_named(
        &self,
        after: &str,
        session: Option<&str>,
    ) -> Result<(Stream, Value), Busy> {
        let stream = {
            let state = lock(&self.state);
            let tagged = match cursor::parse(after) {
                cursor::Asked::At { tag: Some(tag), .. } => Some(tag),
                _ => None,
            };
            match tagged {
                Some(tag) if state.connection.tag == tag => Stream::Connection,
                Some(tag) => state
                    .sessions
                    .iter()
                    .find(|(_, log)| log.tag == tag)
                    .map_or(Stream::Connection, |(id, _)| Stream::Session(id.clone())),
                None => session.map_or(Stream::Connection, |id| Stream::Session(id.into())),
            }
        };
        self.resume(&stream, after).map(|turn| (stream, turn))
    }

    /// Where `stream`'s turn stands (`_meta["acp/turnState"]`).
    pub fn turn_state(&self, stream: &Stream) -> Value {
        turn_of(&lock(&self.state), stream)
    }

    /// The cursor of the last message handed out on `stream`.
    #[cfg(test)]
    pub fn read_cursor(&self, stream: &Stream) -> String {
        stream_log(&mut lock(&self.state), stream).read_cursor()
    }

    /// No more messages come; receivers end once they took what waits.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.bump();
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    fn release(&self, stream: &Stream, hold: u64) {
        let mut state = lock(&self.state);
        let log = stream_log(&mut state, stream);
        if log.holder == Some(hold) {
            log.holder = None;
        }
        drop(state);
        self.bump();
    }
}

/// Moves `stream`'s read position back to the cursor `after`.
fn resume(state: &mut State, stream: &Stream, after: &str) -> Result<(), Busy> {
    let log = stream_log(state, stream);
    let rewound = log
        .point(&cursor::parse(after))
        .and_then(|point| log.rewind(point));
    match rewound {
        Ok(again) => {
            state.waiting_bytes += again;
            state.history_bytes -= again;
            Ok(())
        }
        Err(why) => Err(Busy::Gone {
            why,
            turn: turn_of(state, stream),
        }),
    }
}

fn turn_of(state: &State, stream: &Stream) -> Value {
    match stream {
        Stream::Session(id) => state.turns.of(id),
        Stream::Connection => state.turns.latest(),
    }
}

/// Drops the oldest handed-out messages past the retention bound: `stream`'s beyond its
/// count, then the connection's oldest beyond its bytes.
fn release_history(state: &mut State, stream: &Stream) {
    let over = stream_log(state, stream).history_over(RETAIN_MESSAGES);
    if over == 0 && state.history_bytes <= RETAIN_BYTES {
        return;
    }
    failpoint::step("serve::mailbox::release::before");
    for _ in 0..over {
        let freed = stream_log(state, stream).drop_oldest();
        state.history_bytes -= freed;
    }
    while state.history_bytes > RETAIN_BYTES {
        let oldest = std::iter::once((Stream::Connection, state.connection.oldest_history()))
            .chain(
                state
                    .sessions
                    .iter()
                    .map(|(id, log)| (Stream::Session(id.clone()), log.oldest_history())),
            )
            .filter_map(|(stream, order)| order.map(|order| (order, stream)))
            .min_by_key(|(order, _)| *order);
        let Some((_, stream)) = oldest else {
            break;
        };
        let freed = stream_log(state, &stream).drop_oldest();
        state.history_bytes -= freed;
    }
    failpoint::step("serve::mailbox::release::after");
}

/// Queues one message where it goes, or hands it to whoever awaits it.
fn queue_one(state: &mut State, text: String) {
    let parsed = (state.routed || !state.awaited.is_empty() || turn_state::may_move_a_turn(&text))
        .then(|| serde_json::from_str::<Value>(&text).ok())
        .flatten();
    if let Some(message) = &parsed {
        state.turns.agent_sent(message);
        if message.get("method").is_none()
            && let Some(key) = id_key(&message["id"])
            && let Some(answer) = state.awaited.remove(&key)
        {
            let _ = answer.send(text);
            return;
        }
    }
    let stream = match &parsed {
        Some(message) if state.routed => route(state, message),
        _ => Stream::Connection,
    };
    failpoint::step("serve::mailbox::keep::before");
    let order = state.next_order;
    state.next_order += 1;
    state.waiting_bytes += stream_log(state, &stream).push(text, order);
    failpoint::step("serve::mailbox::keep::after");
}

fn stream_log<'a>(state: &'a mut State, stream: &Stream) -> &'a mut StreamLog {
    match stream {
        Stream::Connection => &mut state.connection,
        Stream::Session(id) => state.sessions.entry(id.clone()).or_default(),
    }
}

/// Where an agent message goes over HTTP: its session's stream once the client opened it,
/// else the connection's.
fn route(state: &mut State, message: &Value) -> Stream {
    let wanted = if message.get("method").is_none() {
        id_key(&message["id"])
            .and_then(|key| state.answer_routes.remove(&key))
            .unwrap_or(Stream::Connection)
    } else {
        message["params"]["sessionId"]
            .as_str()
            .map_or(Stream::Connection, |id| Stream::Session(id.to_string()))
    };
    match &wanted {
        Stream::Session(id) if state.sessions.get(id).is_some_and(|log| log.opened) => wanted,
        _ => Stream::Connection,
    }
}

/// A receiver's hold on a stream, given up when dropped (or lost to a receiver that resumes
/// the stream).
pub struct Held {
    outbound: Arc<Outbound>,
    pub stream: Stream,
    hold: u64,
    /// The stream's cursor tag (an SSE event's id is `TAG.N`).
    pub tag: String,
}

impl Held {
    /// The next message, waiting for one; `None` once the connection is closed and nothing
    /// waits.
    pub async fn next(&self) -> Option<Queued> {
        let mut one = Vec::with_capacity(1);
        self.next_batch(1, &mut one)
            .await
            .then(|| one.pop())
            .flatten()
    }

    /// Adds to `into` what waits now, until it holds `most`.
    pub fn take_more(&self, most: usize, into: &mut Vec<Queued>) {
        let room = most.saturating_sub(into.len());
        if room > 0 {
            self.outbound
                .take_up_to((&self.stream, self.hold), room, into);
        }
    }

    /// Whether another receiver took the stream over.
    pub fn taken_over(&self) -> bool {
        stream_log(&mut lock(&self.outbound.state), &self.stream).holder != Some(self.hold)
    }

    /// Up to `most` messages (into `into`), waiting for at least one; `false` once the
    /// connection is closed and nothing waits, or another receiver took the stream over.
    pub async fn next_batch(&self, most: usize, into: &mut Vec<Queued>) -> bool {
        let mut changes = self.outbound.watch();
        loop {
            match self
                .outbound
                .take_up_to((&self.stream, self.hold), most, into)
            {
                None => return false,
                Some(0) => {}
                Some(_) => return true,
            }
            if self.outbound.is_closed() {
                return false;
            }
            if changes.changed().await.is_err() {
                return false;
            }
        }
    }

    /// The cursor of a message of this stream.
    pub fn cursor(&self, queued: &Queued) -> String {
        cursor::text(&self.tag, queued.seq)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.outbound.release(&self.stream, self.hold);
    }
}

/// `_meta` saying where a turn stands.
pub fn turn_meta(turn: Value) -> Value {
    serde_json::json!({ TURN_STATE: turn })
}

#[cfg(test)]
mod tests;
