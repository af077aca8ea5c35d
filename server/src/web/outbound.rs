//! What the agent sends one connection, held until a receiver takes it: one mailbox for a
//! WebSocket; for HTTP, the connection's stream and one per session, routed as the transport
//! RFD routes them (a message naming a session goes to that session's stream, an answer to
//! the stream its request came on, the rest to the connection's). A mailbox keeps what it
//! handed out last, so a receiver that comes back saying what it got (`after`,
//! `Last-Event-ID`) misses nothing; what waits is bounded, and a connection over the bound
//! is closed rather than let grow.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use talaria_util::lock;
use tokio::sync::{oneshot, watch};
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// The most a connection's mailboxes hold, waiting (16 MiB).
pub const MOST_WAITING: usize = 16 << 20;
/// What a mailbox keeps of what it handed out, for a receiver that comes back.
const KEPT_SENT: usize = 512;

/// One message, numbered in the order the agent sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub seq: u64,
    /// The message, shared without copying by the mailbox, its kept copy and the frame.
    pub text: Utf8Bytes,
}

/// Which stream of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stream {
    Connection,
    Session(String),
}

#[derive(Default)]
struct Mailbox {
    waiting: VecDeque<Queued>,
    sent: VecDeque<Queued>,
    /// A receiver holds it.
    held: bool,
}

#[derive(Default)]
struct State {
    /// HTTP: routed by session; a WebSocket has one stream.
    routed: bool,
    connection: Mailbox,
    sessions: HashMap<String, Mailbox>,
    /// The stream each client request's answer goes to.
    answer_routes: HashMap<String, Stream>,
    next_seq: u64,
    waiting_bytes: usize,
    closed: bool,
    /// Answers that go to whoever waits for them instead of a mailbox, by request id: an
    /// HTTP `initialize`'s (its POST answers it), the server's own requests'.
    awaited: HashMap<String, oneshot::Sender<String>>,
}

/// Why a message could not be queued.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Overflow {
    #[error("more than {MOST_WAITING} bytes wait for a client that does not read them")]
    Full,
}

/// A connection's mailboxes.
pub struct Outbound {
    state: Mutex<State>,
    /// Bumped on every change; receivers wait on it.
    changed: watch::Sender<u64>,
}

/// A JSON-RPC id as a map key (`s:` string, `n:` number).
pub fn id_key(id: &Value) -> Option<String> {
    match id {
        Value::String(s) => Some(format!("s:{s}")),
        Value::Number(n) => Some(format!("n:{n}")),
        _ => None,
    }
}

fn session_of(message: &Value) -> Option<String> {
    message["params"]["sessionId"].as_str().map(str::to_string)
}

impl Outbound {
    pub fn new(routed: bool) -> Self {
        Self {
            state: Mutex::new(State {
                routed,
                ..State::default()
            }),
            changed: watch::channel(0).0,
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Something to wait on for the next change.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The answer to the request with this id goes to the receiver instead of a mailbox.
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

    /// Queues what the agent sent.
    pub fn push(&self, text: String) -> Result<(), Overflow> {
        self.push_all(&mut vec![text])
    }

    /// Queues a batch of what the agent sent, in order, with one wake-up for receivers;
    /// takes the messages out of `batch`.
    pub fn push_all(&self, batch: &mut Vec<String>) -> Result<(), Overflow> {
        let mut state = lock(&self.state);
        let mut queued = Ok(());
        for text in batch.drain(..) {
            queued = queue_one(&mut state, text);
            if queued.is_err() {
                break;
            }
        }
        drop(state);
        self.bump();
        queued
    }

    /// Takes up to `most` of the messages waiting on `stream` (in order, into `into`), kept
    /// awhile in case the receiver comes back; how many it took.
    pub fn take_up_to(&self, stream: &Stream, most: usize, into: &mut Vec<Queued>) -> usize {
        let mut state = lock(&self.state);
        let boxed = mailbox(&mut state, stream);
        let count = boxed.waiting.len().min(most);
        let mut bytes = 0;
        for next in boxed.waiting.drain(..count) {
            bytes += next.text.len();
            boxed.sent.push_back(next.clone());
            into.push(next);
        }
        let over = boxed.sent.len().saturating_sub(KEPT_SENT);
        boxed.sent.drain(..over);
        state.waiting_bytes = state.waiting_bytes.saturating_sub(bytes);
        count
    }

    /// Holds `stream` for one receiver; one that says what it got (`after`) is handed again
    /// what came after it. `None`: another receiver holds it, or what it asks from is gone.
    pub fn attach(self: &Arc<Self>, stream: Stream, after: Option<u64>) -> Result<Held, Busy> {
        let mut state = lock(&self.state);
        let boxed = mailbox(&mut state, &stream);
        if boxed.held {
            return Err(Busy::Held);
        }
        if let Some(after) = after {
            let oldest_kept = boxed.sent.front().map_or(u64::MAX, |q| q.seq);
            let missed_some = boxed.sent.back().is_some_and(|q| q.seq > after);
            if missed_some && oldest_kept > after + 1 {
                return Err(Busy::Gone);
            }
            let again: Vec<Queued> = boxed
                .sent
                .iter()
                .filter(|q| q.seq > after)
                .cloned()
                .collect();
            let bytes: usize = again.iter().map(|q| q.text.len()).sum();
            for queued in again.into_iter().rev() {
                boxed.waiting.push_front(queued);
            }
            boxed.sent.retain(|q| q.seq <= after);
            state.waiting_bytes += bytes;
        }
        mailbox(&mut state, &stream).held = true;
        drop(state);
        self.bump();
        Ok(Held {
            outbound: self.clone(),
            stream,
        })
    }

    /// No more messages come; receivers end once they took what waits.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.bump();
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    fn release(&self, stream: &Stream) {
        let mut state = lock(&self.state);
        let boxed = mailbox(&mut state, stream);
        boxed.held = false;
        let idle = boxed.waiting.is_empty();
        if let Stream::Session(id) = stream
            && idle
        {
            state.sessions.remove(id);
        }
        drop(state);
        self.bump();
    }
}

/// Why a stream cannot be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// Another receiver holds it.
    Held,
    /// The receiver asks from a point no longer kept.
    Gone,
}

/// Queues one message where it goes, or hands it to whoever awaits it.
fn queue_one(state: &mut State, text: String) -> Result<(), Overflow> {
    let parsed = (state.routed || !state.awaited.is_empty())
        .then(|| serde_json::from_str::<Value>(&text).ok())
        .flatten();
    if let Some(message) = &parsed
        && message.get("method").is_none()
        && let Some(key) = id_key(&message["id"])
        && let Some(answer) = state.awaited.remove(&key)
    {
        let _ = answer.send(text);
        return Ok(());
    }
    let stream = match &parsed {
        Some(message) if state.routed => route(state, message),
        _ => Stream::Connection,
    };
    state.waiting_bytes += text.len();
    if state.waiting_bytes > MOST_WAITING {
        return Err(Overflow::Full);
    }
    state.next_seq += 1;
    let queued = Queued {
        seq: state.next_seq,
        text: Utf8Bytes::from(text),
    };
    mailbox(state, &stream).waiting.push_back(queued);
    Ok(())
}

fn mailbox<'a>(state: &'a mut State, stream: &Stream) -> &'a mut Mailbox {
    match stream {
        Stream::Connection => &mut state.connection,
        Stream::Session(id) => state.sessions.entry(id.clone()).or_default(),
    }
}

/// Where an agent message goes over HTTP.
fn route(state: &mut State, message: &Value) -> Stream {
    if message.get("method").is_none() {
        return id_key(&message["id"])
            .and_then(|key| state.answer_routes.remove(&key))
            .unwrap_or(Stream::Connection);
    }
    session_of(message).map_or(Stream::Connection, Stream::Session)
}

/// A receiver's hold on a stream, given up when dropped.
pub struct Held {
    outbound: Arc<Outbound>,
    pub stream: Stream,
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
            self.outbound.take_up_to(&self.stream, room, into);
        }
    }

    /// Up to `most` messages (into `into`), waiting for at least one; `false` once the
    /// connection is closed and nothing waits.
    pub async fn next_batch(&self, most: usize, into: &mut Vec<Queued>) -> bool {
        let mut changes = self.outbound.watch();
        loop {
            if self.outbound.take_up_to(&self.stream, most, into) > 0 {
                return true;
            }
            if self.outbound.is_closed() {
                return false;
            }
            if changes.changed().await.is_err() {
                return false;
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.outbound.release(&self.stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(outbound: &Outbound, stream: &Stream) -> Vec<Queued> {
        let mut all = Vec::new();
        outbound.take_up_to(stream, usize::MAX, &mut all);
        all
    }

    fn texts(outbound: &Outbound, stream: &Stream) -> Vec<String> {
        taken(outbound, stream)
            .into_iter()
            .map(|q| q.text.to_string())
            .collect()
    }

    #[test]
    fn over_http_messages_go_to_their_sessions_stream_and_answers_follow_their_request() {
        let outbound = Arc::new(Outbound::new(true));
        outbound.route_answer(&serde_json::json!(7), Stream::Session("s1".into()));
        let update = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1"}}"#;
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}"#;
        let other = r#"{"jsonrpc":"2.0","id":8,"result":{}}"#;
        for text in [update, answer, other] {
            outbound.push(text.into()).expect("queued");
        }
        assert_eq!(
            texts(&outbound, &Stream::Session("s1".into())),
            [update, answer]
        );
        assert_eq!(texts(&outbound, &Stream::Connection), [other]);
    }

    #[test]
    fn a_receiver_that_comes_back_gets_what_it_missed_in_order() {
        let outbound = Arc::new(Outbound::new(false));
        for n in 1..=4 {
            outbound.push(format!("{{\"n\":{n}}}")).expect("queued");
        }
        let held = outbound.attach(Stream::Connection, None).expect("held");
        assert!(matches!(
            outbound.attach(Stream::Connection, None),
            Err(Busy::Held)
        ));
        let first: Vec<u64> = taken(&outbound, &Stream::Connection)
            .iter()
            .map(|q| q.seq)
            .collect();
        assert_eq!(first, [1, 2, 3, 4]);
        drop(held);
        // It says it got 2: 3 and 4 come again, then what came meanwhile.
        outbound.push("{\"n\":5}".into()).expect("queued");
        let _held = outbound.attach(Stream::Connection, Some(2)).expect("again");
        let again: Vec<u64> = taken(&outbound, &Stream::Connection)
            .iter()
            .map(|q| q.seq)
            .collect();
        assert_eq!(again, [3, 4, 5]);
    }

    #[test]
    fn a_batch_is_queued_in_order_with_one_wake_up_and_taken_in_bounded_pieces() {
        let outbound = Arc::new(Outbound::new(false));
        let mut changes = outbound.watch();
        changes.mark_unchanged();
        let before = *changes.borrow();
        let mut batch: Vec<String> = (1..=5).map(|n| format!("{{\"n\":{n}}}")).collect();
        outbound.push_all(&mut batch).expect("queued");
        assert!(batch.is_empty(), "the batch is taken out");
        assert_eq!(*changes.borrow_and_update(), before.wrapping_add(1));
        let held = outbound.attach(Stream::Connection, None).expect("held");
        let mut got = Vec::new();
        outbound.take_up_to(&Stream::Connection, 2, &mut got);
        assert_eq!(got.iter().map(|q| q.seq).collect::<Vec<_>>(), [1, 2]);
        held.take_more(4, &mut got);
        assert_eq!(got.iter().map(|q| q.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
        held.take_more(4, &mut got);
        assert_eq!(got.len(), 4, "full: nothing more taken");
        drop(held);
        // What was taken is kept for a receiver that comes back.
        let _again = outbound.attach(Stream::Connection, Some(1)).expect("again");
        assert_eq!(
            taken(&outbound, &Stream::Connection)
                .iter()
                .map(|q| q.seq)
                .collect::<Vec<_>>(),
            [2, 3, 4, 5]
        );
    }

    #[test]
    fn the_initialize_answer_goes_to_its_post_and_a_flood_closes_the_connection() {
        let outbound = Outbound::new(true);
        let mut answer = outbound.await_answer(&serde_json::json!(0));
        outbound
            .push(r#"{"jsonrpc":"2.0","id":0,"result":{}}"#.into())
            .expect("pushed");
        assert!(answer.try_recv().is_ok());
        let big = "x".repeat(1 << 20);
        let mut result = Ok(());
        for _ in 0..20 {
            result = outbound.push(format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{{\"t\":\"{big}\"}}}}"
            ));
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(Overflow::Full));
    }
}
