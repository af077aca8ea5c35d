//! A bidirectional JSON-RPC 2.0 peer: one reader task, one writer task that owns the output.
//!
//! Invariants:
//! - Only the writer task writes to the output, and only whole framed messages.
//! - Every incoming request is handed to the application with a cancellation token that fires on
//!   `$/cancel_request` for its id or when the input ends; the application answers it once.
//! - Every outgoing request gets exactly one result: the peer's answer, a cancellation, or
//!   "connection closed" when the input ends first.
//! - Malformed input is answered with the matching JSON-RPC error and reading goes on.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use talaria_util::lock;

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::acp::{Error, RequestId};
use crate::errors;
use crate::framing::{Frame, FrameReader, Framing, encode_frame};
use crate::message::{Classified, IncomingMessage, IncomingRequest, classify};

/// The method of the cancellation notification, in either direction.
pub const CANCEL_REQUEST_METHOD: &str = "$/cancel_request";

/// Limits and buffer sizes of a connection.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// A message longer than this is refused with an error and never buffered whole.
    pub max_message_bytes: usize,
    /// Capacity of the outgoing queue; senders wait when it is full.
    pub outgoing_capacity: usize,
    /// Capacity of the incoming queue handed to the application.
    pub incoming_capacity: usize,
    /// The framing to write in from the start (a client, which speaks first); `None`: the
    /// peer's, detected from its first message (an agent).
    pub framing: Option<Framing>,
}

impl Default for PeerOptions {
    fn default() -> Self {
        Self {
            max_message_bytes: 64 * 1024 * 1024,
            outgoing_capacity: 1024,
            incoming_capacity: 256,
            framing: None,
        }
    }
}

type PendingMap = HashMap<RequestId, oneshot::Sender<Result<Value, Error>>>;

#[derive(Debug)]
struct Inner {
    out: mpsc::Sender<String>,
    pending: Mutex<PendingMap>,
    incoming_cancels: Mutex<HashMap<RequestId, CancellationToken>>,
    next_id: AtomicI64,
    closed: CancellationToken,
    /// No answer will come any more (`give_up_answers`): requests fail at once.
    answers_gone: std::sync::atomic::AtomicBool,
    framing: watch::Receiver<Option<Framing>>,
}

/// A peer's output queue is full: its reader has not taken what was sent before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the peer's output queue is full")]
pub struct NoRoom;

/// An answer [`Peer::try_respond`] had no room for, serialized.
#[derive(Debug)]
pub struct UnsentAnswer(String);

/// A cheap, clonable handle for sending on a connection.
#[derive(Debug, Clone)]
pub struct Peer {
    inner: Arc<Inner>,
}

/// A running connection: the handle, the incoming messages, and the writer task.
#[derive(Debug)]
pub struct Connection {
    /// Send requests, notifications and responses.
    pub peer: Peer,
    /// Requests and notifications from the other side; ends when the input ends.
    pub incoming: mpsc::Receiver<IncomingMessage>,
    /// Finishes once every [`Peer`] handle is dropped and the queue is written out.
    pub writer: JoinHandle<io::Result<()>>,
    /// Reads the input until it ends; aborting it stops reading and drops its [`Peer`]
    /// handle, so a stop that comes while the input is still open is not held by it.
    pub reader: JoinHandle<()>,
}

#[derive(Serialize)]
struct OutRequest<'a, P: Serialize> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'a str,
    params: &'a P,
}

#[derive(Serialize)]
struct OutNotification<'a, P: Serialize> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a P,
}

/// A notification as it goes on the wire (without framing).
pub(crate) fn notification_json<P: Serialize>(
    method: &str,
    params: &P,
) -> serde_json::Result<String> {
    serde_json::to_string(&OutNotification {
        jsonrpc: "2.0",
        method,
        params,
    })
}

#[derive(Serialize)]
struct OutResult<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: &'a R,
}

#[derive(Serialize)]
struct OutError<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    error: &'a Error,
}

/// Starts a connection over `reader`/`writer` on the current tokio runtime.
pub fn connect<R, W>(reader: R, writer: W, options: PeerOptions) -> Connection
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    start(reader, options, |out_rx, framing_rx| {
        tokio::spawn(write_loop(writer, out_rx, framing_rx))
    })
}

/// Where the messages of a connection whose transport frames them itself go (a WebSocket's
/// frames, server-sent events): each [`MessageSink::put`] hands over the messages sent since
/// the last, in order, as JSON texts without framing; the sink takes them out of the vector.
/// Before each batch the peer waits for [`MessageSink::room`], so a sink that holds what its
/// receiver has not read yet slows the sender instead of growing. An error ends the output.
pub trait MessageSink: Send + 'static {
    /// Takes the batch's messages (out of the vector), in order.
    fn put(&mut self, batch: &mut Vec<String>) -> io::Result<()>;

    /// Resolves once the sink takes more; an error ends the output (a receiver that made no
    /// progress for too long). A sink that never fills resolves at once.
    fn room(&mut self) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + '_>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Starts a connection that reads `reader` and hands what it sends to `sink` as whole
/// messages: no framing is written and nothing is cut again into messages.
pub fn connect_to_sink<R>(reader: R, sink: Box<dyn MessageSink>, options: PeerOptions) -> Connection
where
    R: AsyncRead + Unpin + Send + 'static,
{
    start(reader, options, |out_rx, _| {
        tokio::spawn(sink_loop(sink, out_rx))
    })
}

fn start<R>(
    reader: R,
    options: PeerOptions,
    start_writer: impl FnOnce(
        mpsc::Receiver<String>,
        watch::Receiver<Option<Framing>>,
    ) -> JoinHandle<io::Result<()>>,
) -> Connection
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (out_tx, out_rx) = mpsc::channel(options.outgoing_capacity);
    let (in_tx, in_rx) = mpsc::channel(options.incoming_capacity);
    let (framing_tx, framing_rx) = watch::channel(options.framing);
    let inner = Arc::new(Inner {
        out: out_tx,
        pending: Mutex::new(HashMap::new()),
        incoming_cancels: Mutex::new(HashMap::new()),
        next_id: AtomicI64::new(0),
        closed: CancellationToken::new(),
        answers_gone: std::sync::atomic::AtomicBool::new(false),
        framing: framing_rx.clone(),
    });
    let peer = Peer { inner };
    let writer = start_writer(out_rx, framing_rx);
    let reader = tokio::spawn(read_loop(
        FrameReader::new(reader, options.max_message_bytes),
        peer.clone(),
        in_tx,
        framing_tx,
        options.max_message_bytes,
    ));
    Connection {
        peer,
        incoming: in_rx,
        writer,
        reader,
    }
}

/// Most messages written, or handed to a sink, in one go while more wait.
const MOST_PER_BATCH: usize = 256;

/// Hands the queued messages to `sink` in batches, each once it has room, until every sender
/// is gone.
async fn sink_loop(
    mut sink: Box<dyn MessageSink>,
    mut out_rx: mpsc::Receiver<String>,
) -> io::Result<()> {
    let mut batch = Vec::new();
    while let Some(first) = out_rx.recv().await {
        batch.push(first);
        while batch.len() < MOST_PER_BATCH {
            match out_rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        sink.room().await?;
        sink.put(&mut batch)?;
        batch.clear();
    }
    Ok(())
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut out_rx: mpsc::Receiver<String>,
    mut framing_rx: watch::Receiver<Option<Framing>>,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(64 * 1024);
    while let Some(first) = out_rx.recv().await {
        let known = *framing_rx.borrow_and_update();
        let framing = match known {
            Some(framing) => framing,
            None => match framing_rx.wait_for(Option::is_some).await {
                Ok(framing) => framing.unwrap_or(Framing::NewlineDelimited),
                Err(_) => Framing::NewlineDelimited,
            },
        };
        encode_frame(framing, &first, &mut buf);
        while buf.len() < 256 * 1024 {
            match out_rx.try_recv() {
                Ok(next) => encode_frame(framing, &next, &mut buf),
                Err(_) => break,
            }
        }
        writer.write_all(&buf).await?;
        writer.flush().await?;
        buf.clear();
    }
    writer.flush().await
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut reader: FrameReader<R>,
    peer: Peer,
    in_tx: mpsc::Sender<IncomingMessage>,
    framing_tx: watch::Sender<Option<Framing>>,
    max_message_bytes: usize,
) {
    loop {
        let frame = match reader.next_frame().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("reading input failed: {e}");
                break;
            }
        };
        if framing_tx.borrow().is_none() {
            let framing = reader.framing().unwrap_or(Framing::NewlineDelimited);
            tracing::debug!(?framing, "framing detected");
            let _ = framing_tx.send(Some(framing));
        }
        match frame {
            Frame::Message(bytes) => peer.handle_frame(&bytes, &in_tx).await,
            Frame::TooLarge { size } => {
                let error = errors::invalid_request(format!(
                    "message of {size} bytes exceeds the limit of {max_message_bytes} bytes"
                ));
                peer.send_error(&RequestId::Null, &error).await;
            }
            Frame::BadHeader(detail) => {
                peer.send_error(&RequestId::Null, &errors::parse_error(detail))
                    .await;
            }
        }
    }
    if framing_tx.borrow().is_none() {
        let _ = framing_tx.send(Some(Framing::NewlineDelimited));
    }
    peer.shut_down();
}

impl Peer {
    async fn handle_frame(&self, bytes: &[u8], in_tx: &mpsc::Sender<IncomingMessage>) {
        match classify(bytes) {
            Classified::Request { id, method, params } => {
                let cancel = self.inner.closed.child_token();
                lock(&self.inner.incoming_cancels).insert(id.clone(), cancel.clone());
                let request = IncomingRequest {
                    id: id.clone(),
                    method,
                    params,
                    cancel,
                };
                if in_tx.send(IncomingMessage::Request(request)).await.is_err() {
                    self.respond::<Value>(
                        &id,
                        Err(errors::internal_error("agent is shutting down")),
                    )
                    .await;
                }
            }
            Classified::Notification { method, params } => {
                if method == CANCEL_REQUEST_METHOD {
                    self.cancel_incoming(&params);
                } else if in_tx
                    .send(IncomingMessage::Notification { method, params })
                    .await
                    .is_err()
                {
                    tracing::debug!("notification dropped: application gone");
                }
            }
            Classified::Response { id, result } => {
                let waiter = lock(&self.inner.pending).remove(&id);
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.send(result);
                    }
                    None => tracing::debug!(%id, "response to an unknown or cancelled request"),
                }
            }
            Classified::Invalid { id, error } => {
                tracing::warn!(%id, message = %error.message, "invalid message");
                self.send_error(&id, &error).await;
            }
            Classified::InvalidRawId { raw_id, error } => {
                tracing::warn!(id = %raw_id, message = %error.message, "invalid message");
                match serde_json::to_string(&error) {
                    Ok(error) => {
                        self.enqueue(format!(
                            "{{\"jsonrpc\":\"2.0\",\"id\":{raw_id},\"error\":{error}}}"
                        ))
                        .await
                    }
                    Err(e) => tracing::error!("cannot serialize an error response: {e}"),
                }
            }
            Classified::Ignored(why) => tracing::warn!("ignored message: {why}"),
        }
    }

    fn cancel_incoming(&self, params: &Value) {
        let id = params
            .get("requestId")
            .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok());
        match id {
            Some(id) => {
                if let Some(token) = lock(&self.inner.incoming_cancels).get(&id) {
                    token.cancel();
                }
            }
            None => tracing::warn!("$/cancel_request without a valid requestId"),
        }
    }

    /// The client is gone though its input has not ended (a connection given up): every
    /// request waiting for its answer fails ("connection closed"), and so does every new one;
    /// what it asked goes on (its prompts' turns are not cancelled by this).
    pub fn give_up_answers(&self) {
        self.inner.answers_gone.store(true, Ordering::Release);
        let pending: Vec<_> = lock(&self.inner.pending).drain().collect();
        for (_, waiter) in pending {
            let _ = waiter.send(Err(errors::internal_error("connection closed")));
        }
    }

    fn shut_down(&self) {
        self.inner.closed.cancel();
        let pending: Vec<_> = lock(&self.inner.pending).drain().collect();
        for (_, waiter) in pending {
            let _ = waiter.send(Err(errors::internal_error("connection closed")));
        }
    }

    async fn enqueue(&self, json: String) {
        if self.inner.out.send(json).await.is_err() {
            tracing::debug!("output closed; message dropped");
        }
    }

    async fn send_error(&self, id: &RequestId, error: &Error) {
        match serde_json::to_string(&OutError {
            jsonrpc: "2.0",
            id,
            error,
        }) {
            Ok(json) => self.enqueue(json).await,
            Err(e) => tracing::error!("cannot serialize an error response: {e}"),
        }
    }

    /// Answers an incoming request. Call exactly once per request.
    pub async fn respond<R: Serialize>(&self, id: &RequestId, result: Result<R, Error>) {
        let answer = self.answer_text(id, result);
        self.enqueue(answer.0).await;
    }

    /// Answers an incoming request if the output has room now; else the answer, serialized,
    /// to send with [`Peer::send_answer`] (the request is answered either way: call once).
    pub fn try_respond<R: Serialize>(
        &self,
        id: &RequestId,
        result: Result<R, Error>,
    ) -> Result<(), UnsentAnswer> {
        let answer = self.answer_text(id, result);
        match self.inner.out.try_send(answer.0) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(text)) => Err(UnsentAnswer(text)),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!("output closed; message dropped");
                Ok(())
            }
        }
    }

    /// Sends an answer [`Peer::try_respond`] had no room for, waiting for room (a send
    /// given up before it is queued sends nothing: it may be sent again).
    pub async fn send_answer(&self, answer: &UnsentAnswer) {
        self.enqueue(answer.0.clone()).await;
    }

    /// Sends an answer [`Peer::try_respond`] had no room for if there is room now.
    pub fn try_send_answer(&self, answer: &UnsentAnswer) -> Result<(), NoRoom> {
        match self.inner.out.try_send(answer.0.clone()) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(NoRoom),
            Err(mpsc::error::TrySendError::Closed(_)) => Ok(()),
        }
    }

    fn answer_text<R: Serialize>(&self, id: &RequestId, result: Result<R, Error>) -> UnsentAnswer {
        lock(&self.inner.incoming_cancels).remove(id);
        let error = match result {
            Ok(result) => match serde_json::to_string(&OutResult {
                jsonrpc: "2.0",
                id,
                result: &result,
            }) {
                Ok(json) => return UnsentAnswer(json),
                Err(e) => errors::internal_error(format!("serializing result: {e}")),
            },
            Err(error) => error,
        };
        match serde_json::to_string(&OutError {
            jsonrpc: "2.0",
            id,
            error: &error,
        }) {
            Ok(json) => UnsentAnswer(json),
            Err(e) => {
                tracing::error!("cannot serialize an error response: {e}");
                let fallback = OutError {
                    jsonrpc: "2.0",
                    id,
                    error: &errors::internal_error("the answer could not be serialized"),
                };
                UnsentAnswer(serde_json::to_string(&fallback).unwrap_or_default())
            }
        }
    }

    /// Sends a notification.
    pub async fn notify<P: Serialize>(&self, method: &str, params: &P) {
        match notification_json(method, params) {
            Ok(json) => self.enqueue(json).await,
            Err(e) => tracing::error!(method, "cannot serialize a notification: {e}"),
        }
    }

    /// Sends a notification serialized once for several peers.
    pub async fn notify_serialized(&self, notification: &crate::SerializedNotification) {
        self.enqueue(notification.0.clone()).await;
    }

    /// Queues a notification serialized once for several peers only if the output has room
    /// now: [`NoRoom`] when its queue is full (the reader is that far behind). A closed
    /// output drops it, as [`Peer::notify_serialized`] does.
    pub fn try_notify_serialized(
        &self,
        notification: &crate::SerializedNotification,
    ) -> Result<(), NoRoom> {
        match self.inner.out.try_send(notification.0.clone()) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(NoRoom),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!("output closed; message dropped");
                Ok(())
            }
        }
    }

    /// Sends `template`'s notification with `text` in its hole.
    pub async fn notify_filled(&self, template: &crate::NotificationTemplate, text: &str) {
        self.enqueue(template.fill(text)).await;
    }

    /// Sends a request and reads its answer as `R` (a schema type); an answer that does not
    /// fit is an error naming the method.
    pub async fn call<P: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        cancel: &CancellationToken,
    ) -> Result<R, Error> {
        let answer = self.request(method, params, cancel).await?;
        serde_json::from_value(answer).map_err(|e| {
            crate::errors::internal_error(format!(
                "the answer to {method} does not fit the protocol: {e}"
            ))
        })
    }

    /// Sends a request and waits for its result. If `cancel` fires first, `$/cancel_request`
    /// is sent to the peer and a `-32800` error is returned at once.
    pub async fn request<P: Serialize>(
        &self,
        method: &str,
        params: &P,
        cancel: &CancellationToken,
    ) -> Result<Value, Error> {
        let id = RequestId::Number(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let json = serde_json::to_string(&OutRequest {
            jsonrpc: "2.0",
            id: &id,
            method,
            params,
        })
        .map_err(|e| errors::internal_error(format!("serializing {method} request: {e}")))?;
        let (tx, rx) = oneshot::channel();
        {
            // Checked under the lock the waiting requests are failed under: a request is
            // either failed with them or refused here.
            let mut pending = lock(&self.inner.pending);
            if self.inner.closed.is_cancelled() || self.inner.answers_gone.load(Ordering::Acquire) {
                return Err(errors::internal_error("connection closed"));
            }
            pending.insert(id.clone(), tx);
        }
        self.enqueue(json).await;
        tokio::select! {
            result = rx => {
                let result =
                    result.unwrap_or_else(|_| Err(errors::internal_error("connection closed")));
                if result.is_err() && self.inner.closed.is_cancelled() {
                    // The input ended with the request unanswered: it is withdrawn, as a
                    // cancel withdraws it (a client still reading sees its question go).
                    self.notify(CANCEL_REQUEST_METHOD, &serde_json::json!({ "requestId": id }))
                        .await;
                }
                result
            }
            () = cancel.cancelled() => {
                lock(&self.inner.pending).remove(&id);
                self.notify(CANCEL_REQUEST_METHOD, &serde_json::json!({ "requestId": id })).await;
                Err(errors::request_cancelled())
            }
        }
    }

    /// The framing in use, once the first input has been read.
    pub fn framing(&self) -> Option<Framing> {
        *self.inner.framing.borrow()
    }

    /// Fires when the input has ended.
    pub fn closed(&self) -> CancellationToken {
        self.inner.closed.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, duplex};

    struct Ends {
        conn: Connection,
        client_in: tokio::io::DuplexStream,
        client_out: BufReader<tokio::io::DuplexStream>,
    }

    fn setup() -> Ends {
        let (client_in, agent_in) = duplex(1 << 20);
        let (agent_out, client_out) = duplex(1 << 20);
        let conn = connect(agent_in, agent_out, PeerOptions::default());
        Ends {
            conn,
            client_in,
            client_out: BufReader::new(client_out),
        }
    }

    async fn read_json(reader: &mut BufReader<tokio::io::DuplexStream>) -> Value {
        let mut line = String::new();
        reader.read_line(&mut line).await.expect("read");
        serde_json::from_str(&line).expect("json")
    }

    #[tokio::test]
    async fn answers_garbage_and_keeps_serving() {
        let mut ends = setup();
        ends.client_in.write_all(b"garbage\n").await.expect("write");
        let error = read_json(&mut ends.client_out).await;
        assert_eq!(error["error"]["code"], -32700);
        assert_eq!(error["id"], Value::Null);
        ends.client_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n")
            .await
            .expect("write");
        let Some(IncomingMessage::Request(request)) = ends.conn.incoming.recv().await else {
            panic!("expected a request");
        };
        assert_eq!(request.method, "ping");
        ends.conn
            .peer
            .respond(&request.id, Ok(serde_json::json!({"pong": true})))
            .await;
        let reply = read_json(&mut ends.client_out).await;
        assert_eq!(reply["id"], 7);
        assert_eq!(reply["result"]["pong"], true);
    }

    #[tokio::test]
    async fn outgoing_request_matches_response_and_cancel_sends_cancel_request() {
        let mut ends = setup();
        // The writer waits for framing: give it some input first.
        ends.client_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"hello\"}\n")
            .await
            .expect("write");
        let _ = ends.conn.incoming.recv().await;
        let peer = ends.conn.peer.clone();
        let never = CancellationToken::new();
        let task = tokio::spawn(async move {
            peer.request("fs/read_text_file", &serde_json::json!({}), &never)
                .await
        });
        let sent = read_json(&mut ends.client_out).await;
        assert_eq!(sent["method"], "fs/read_text_file");
        let answer = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"content\":\"x\"}}}}\n",
            sent["id"]
        );
        ends.client_in
            .write_all(answer.as_bytes())
            .await
            .expect("write");
        let result = task.await.expect("join").expect("ok");
        assert_eq!(result["content"], "x");

        let cancel = CancellationToken::new();
        let peer = ends.conn.peer.clone();
        let token = cancel.clone();
        let task = tokio::spawn(async move {
            peer.request("session/request_permission", &serde_json::json!({}), &token)
                .await
        });
        let sent = read_json(&mut ends.client_out).await;
        cancel.cancel();
        let error = task.await.expect("join").expect_err("cancelled");
        assert_eq!(errors::code_of(&error), -32800);
        let cancel_note = read_json(&mut ends.client_out).await;
        assert_eq!(cancel_note["method"], CANCEL_REQUEST_METHOD);
        assert_eq!(cancel_note["params"]["requestId"], sent["id"]);
    }

    #[tokio::test]
    async fn given_up_answers_fail_waiting_and_new_requests_and_leave_incoming_ones_alone() {
        let mut ends = setup();
        ends.client_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/prompt\"}\n")
            .await
            .expect("write");
        let Some(IncomingMessage::Request(prompt)) = ends.conn.incoming.recv().await else {
            panic!("expected a request");
        };
        let peer = ends.conn.peer.clone();
        let never = CancellationToken::new();
        let waiting = tokio::spawn(async move {
            peer.request("fs/read_text_file", &serde_json::json!({}), &never)
                .await
        });
        let asked = read_json(&mut ends.client_out).await;
        assert_eq!(asked["method"], "fs/read_text_file");
        ends.conn.peer.give_up_answers();
        let failed = waiting.await.expect("joined").expect_err("failed");
        assert!(failed.message.contains("connection closed"), "{failed:?}");
        let never = CancellationToken::new();
        let refused = ends
            .conn
            .peer
            .request("fs/write_text_file", &serde_json::json!({}), &never)
            .await
            .expect_err("refused");
        assert!(refused.message.contains("connection closed"), "{refused:?}");
        // What the client asked goes on.
        assert!(!prompt.cancel.is_cancelled());
    }

    #[tokio::test]
    async fn incoming_cancel_request_fires_the_token_and_eof_closes() {
        let mut ends = setup();
        ends.client_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"r1\",\"method\":\"slow\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"$/cancel_request\",\"params\":{\"requestId\":\"r1\"}}\n")
            .await
            .expect("write");
        let Some(IncomingMessage::Request(request)) = ends.conn.incoming.recv().await else {
            panic!("expected a request");
        };
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            request.cancel.cancelled(),
        )
        .await
        .expect("token fired");
        drop(ends.client_in);
        assert!(ends.conn.incoming.recv().await.is_none());
        assert!(ends.conn.peer.closed().is_cancelled());
    }

    #[tokio::test]
    async fn content_length_input_gets_content_length_output() {
        let mut ends = setup();
        let body = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}";
        let framed = format!("Content-Length: {}\r\n\r\n", body.len());
        ends.client_in
            .write_all(framed.as_bytes())
            .await
            .expect("write");
        ends.client_in.write_all(body).await.expect("write");
        let Some(IncomingMessage::Request(request)) = ends.conn.incoming.recv().await else {
            panic!("expected a request");
        };
        ends.conn.peer.respond(&request.id, Ok(Value::Null)).await;
        let mut header = String::new();
        ends.client_out
            .read_line(&mut header)
            .await
            .expect("read header");
        assert!(header.starts_with("Content-Length: "), "{header:?}");
    }

    /// A sink that keeps what it is given, and may be told to have no room.
    struct Kept {
        seen: Arc<Mutex<Vec<String>>>,
        full: Option<watch::Receiver<bool>>,
    }

    impl MessageSink for Kept {
        fn put(&mut self, batch: &mut Vec<String>) -> io::Result<()> {
            lock(&self.seen).append(batch);
            Ok(())
        }

        fn room(&mut self) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + '_>> {
            Box::pin(async move {
                if let Some(full) = self.full.as_mut() {
                    let _ = full.wait_for(|full| !full).await;
                }
                Ok(())
            })
        }
    }

    async fn until_seen(seen: &Arc<Mutex<Vec<String>>>, count: usize) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while lock(seen).len() < count && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_sink_gets_whole_messages_in_order_with_no_framing_and_answers_garbage_too() {
        let (mut client_in, agent_in) = duplex(1 << 20);
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = Box::new(Kept {
            seen: seen.clone(),
            full: None,
        });
        let conn = connect_to_sink(agent_in, sink, PeerOptions::default());
        for n in 0..300 {
            conn.peer
                .notify("note", &serde_json::json!({ "n": n }))
                .await;
        }
        client_in.write_all(b"garbage\n").await.expect("write");
        until_seen(&seen, 301).await;
        let seen = lock(&seen).clone();
        assert_eq!(seen.len(), 301, "{seen:?}");
        for (n, text) in seen[..300].iter().enumerate() {
            assert!(!text.contains('\n'), "framed: {text:?}");
            let value: Value = serde_json::from_str(text).expect("whole JSON");
            assert_eq!(value["params"]["n"], n);
        }
        let error: Value = serde_json::from_str(&seen[300]).expect("json");
        assert_eq!(error["error"]["code"], -32700);
    }

    #[tokio::test]
    async fn a_full_sink_holds_the_sender_back_until_it_has_room() {
        let (_client_in, agent_in) = duplex(1 << 20);
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let (room, full) = watch::channel(true);
        let sink = Box::new(Kept {
            seen: seen.clone(),
            full: Some(full),
        });
        let options = PeerOptions {
            outgoing_capacity: 4,
            ..PeerOptions::default()
        };
        let conn = connect_to_sink(agent_in, sink, options);
        let peer = conn.peer.clone();
        let sending = tokio::spawn(async move {
            for n in 0..50 {
                peer.notify("note", &serde_json::json!({ "n": n })).await;
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(
            lock(&seen).is_empty(),
            "nothing is put while the sink is full"
        );
        assert!(
            !sending.is_finished(),
            "the sender waits: its queue is bounded"
        );
        room.send_replace(false);
        until_seen(&seen, 50).await;
        sending.await.expect("sent");
        let order: Vec<u64> = lock(&seen)
            .iter()
            .map(|t| {
                serde_json::from_str::<Value>(t).expect("json")["params"]["n"]
                    .as_u64()
                    .expect("n")
            })
            .collect();
        assert_eq!(order, (0..50).collect::<Vec<_>>());
    }

    /// A sink whose every put fails.
    struct Failing;

    impl MessageSink for Failing {
        fn put(&mut self, _: &mut Vec<String>) -> io::Result<()> {
            Err(io::Error::other("full"))
        }
    }

    #[tokio::test]
    async fn a_sink_that_fails_ends_the_output() {
        let (_client_in, agent_in) = duplex(1 << 20);
        let conn = connect_to_sink(agent_in, Box::new(Failing), PeerOptions::default());
        conn.peer.notify("note", &serde_json::json!({})).await;
        let ended = conn.writer.await.expect("joined");
        assert_eq!(ended.expect_err("failed").to_string(), "full");
    }

    /// A connection whose output queue holds `capacity` messages and sends none until its
    /// client speaks (the writer waits for the framing); the client's two ends.
    fn holding(
        capacity: usize,
    ) -> (
        Connection,
        tokio::io::DuplexStream,
        BufReader<tokio::io::DuplexStream>,
    ) {
        let (client_in, agent_in) = duplex(1 << 20);
        let (agent_out, client_out) = duplex(1 << 20);
        let options = PeerOptions {
            outgoing_capacity: capacity,
            ..PeerOptions::default()
        };
        let conn = connect(agent_in, agent_out, options);
        (conn, client_in, BufReader::new(client_out))
    }

    /// The client speaks: the agent's output flows from now on.
    async fn speak(mut client_in: tokio::io::DuplexStream) {
        client_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"hello\"}\n")
            .await
            .expect("write");
    }

    #[tokio::test]
    async fn a_try_to_notify_says_when_the_queue_is_full_and_loses_nothing_it_took() {
        let (conn, client_in, mut client_out) = holding(2);
        let note = |n: u32| {
            crate::SerializedNotification::new("note", &serde_json::json!({"n": n}))
                .expect("serializes")
        };
        assert_eq!(conn.peer.try_notify_serialized(&note(1)), Ok(()));
        assert_eq!(conn.peer.try_notify_serialized(&note(2)), Ok(()));
        assert_eq!(conn.peer.try_notify_serialized(&note(3)), Err(NoRoom));
        speak(client_in).await;
        assert_eq!(read_json(&mut client_out).await["params"]["n"], 1);
        assert_eq!(read_json(&mut client_out).await["params"]["n"], 2);
        // Room again once the writer took them.
        let mut sent = Err(NoRoom);
        for _ in 0..100 {
            sent = conn.peer.try_notify_serialized(&note(4));
            if sent.is_ok() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(sent, Ok(()));
        assert_eq!(read_json(&mut client_out).await["params"]["n"], 4);
    }

    #[tokio::test]
    async fn an_answer_with_no_room_is_kept_whole_and_sent_once_there_is() {
        let (conn, client_in, mut client_out) = holding(1);
        let note =
            crate::SerializedNotification::new("note", &serde_json::json!({})).expect("serializes");
        // Until the client speaks nothing leaves: the queue's one place is taken.
        assert_eq!(conn.peer.try_notify_serialized(&note), Ok(()));
        let answer = serde_json::json!({"stopReason": "end_turn"});
        let unsent = conn
            .peer
            .try_respond(&RequestId::Number(7), Ok(answer))
            .expect_err("no room");
        assert_eq!(conn.peer.try_send_answer(&unsent), Err(NoRoom));
        speak(client_in).await;
        conn.peer.send_answer(&unsent).await;
        assert_eq!(read_json(&mut client_out).await["method"], "note");
        let answered = read_json(&mut client_out).await;
        assert_eq!(answered["id"], 7);
        assert_eq!(answered["result"]["stopReason"], "end_turn");
    }
}
