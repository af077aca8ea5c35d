//! The WebSocket profile: `GET /acp` with `Upgrade: websocket`, full duplex, one ACP message
//! per text frame, each carrying its cursor (`_meta["acp/cursor"]`). A new socket starts a
//! connection; one that names a connection (`?connection=ID`, and `after=CURSOR`, the
//! cursor of the last message it processed, or the count of messages it got) takes it back
//! and is sent exactly what it missed, or is refused with 410 when that is gone; on a socket,
//! `_session/resume_stream {after}` does the same. Every socket first gets
//! `_talaria/connection` (the connection's id, which a browser cannot read from the
//! upgrade's headers).

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{
    CONNECTION, HeaderValue, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
    UPGRADE,
};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::connection::{Connection, Kind, Registry};
use super::guard::offered_subprotocols;
use super::outbound::{Busy, Held, Queued, Stream, turn_meta};
use super::shared::{Body, Server, empty, text};

/// The subprotocol selected when offered.
const ACP_SUBPROTOCOL: &str = "acp";

/// Whether the request asks to upgrade to a WebSocket.
pub fn is_upgrade(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

fn query_value(request: &Request<Incoming>, name: &str) -> Option<String> {
    url::form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The connection the socket joins (a new one, or the one it names) and its held stream.
fn join(
    server: &Server,
    request: &Request<Incoming>,
) -> Result<(Arc<Connection>, Held), Box<Response<Body>>> {
    let Some(named) = query_value(request, "connection") else {
        let Ok(connection) = server.registry.open(Kind::WebSocket, None) else {
            return Err(Box::new(text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server has as many connections as it takes; try again later",
            )));
        };
        let held = connection
            .outbound
            .attach(Stream::Connection, None)
            .map_err(|_| Box::new(text(StatusCode::CONFLICT, "the connection is taken")))?;
        return Ok((connection, held));
    };
    let Some(connection) = server
        .registry
        .get(&named)
        .filter(|c| c.kind == Kind::WebSocket)
    else {
        return Err(Box::new(text(
            StatusCode::NOT_FOUND,
            "no WebSocket connection has that id (it may have ended)",
        )));
    };
    let after = query_value(request, "after");
    match connection
        .outbound
        .attach(Stream::Connection, after.as_deref())
    {
        Ok(held) => Ok((connection, held)),
        Err(Busy::Held) => Err(Box::new(text(
            StatusCode::CONFLICT,
            "another socket holds this connection",
        ))),
        Err(Busy::Gone { why, turn }) => Err(Box::new(super::shared::gone(why, turn))),
    }
}

/// Answers the upgrade (101) and serves the socket once it is upgraded.
pub fn upgrade(server: Arc<Server>, mut request: Request<Incoming>) -> Response<Body> {
    let headers = request.headers();
    let version_ok = headers
        .get("sec-websocket-version")
        .is_some_and(|v| v == "13");
    let Some(key) = headers
        .get(SEC_WEBSOCKET_KEY)
        .cloned()
        .filter(|_| version_ok)
    else {
        return text(
            StatusCode::BAD_REQUEST,
            "not a WebSocket upgrade (version 13 with a key)",
        );
    };
    let wants_acp = offered_subprotocols(headers)
        .iter()
        .any(|p| p == ACP_SUBPROTOCOL);
    let (connection, held) = match join(&server, &request) {
        Ok(joined) => joined,
        Err(refused) => return *refused,
    };
    let mut response = empty(StatusCode::SWITCHING_PROTOCOLS);
    let out = response.headers_mut();
    out.insert(UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        out.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    if wants_acp {
        out.insert(
            SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(ACP_SUBPROTOCOL),
        );
    }
    if let Ok(id) = HeaderValue::from_str(&connection.id) {
        out.insert("acp-connection-id", id);
    }
    let limit = server.registry.limits.message_bytes;
    let registry = server.registry.clone();
    let upgrading = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrading.await else {
            return;
        };
        let mut config = WebSocketConfig::default();
        config.max_message_size = Some(limit);
        config.max_frame_size = Some(limit);
        config.read_buffer_size = 4096;
        // Frames gather up to this much before a write; `send_waiting` flushes each batch.
        config.write_buffer_size = 64 * 1024;
        let socket = WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            Role::Server,
            Some(config),
        )
        .await;
        serve_socket(socket, registry, connection, held).await;
    });
    response
}

fn close_frame(code: CloseCode, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.to_string().into(),
    }))
}

/// Moves messages both ways until the socket or the connection ends.
async fn serve_socket<S>(
    socket: WebSocketStream<S>,
    registry: Arc<Registry>,
    connection: Arc<Connection>,
    held: Held,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    connection.attached(true);
    let (mut sink, mut incoming) = socket.split();
    let hello = json!({"jsonrpc": "2.0", "method": "_talaria/connection", "params": {
        "connectionId": connection.id,
        "_meta": turn_meta(connection.outbound.turn_state(&Stream::Connection)),
    }});
    let mut open = sink.send(Message::text(hello.to_string())).await.is_ok();
    let mut batch = Vec::new();
    while open {
        tokio::select! {
            more = held.next_batch(MOST_PER_FLUSH, &mut batch) => match more {
                true => {
                    // What else is ready to run (other sessions' deltas) goes first, so
                    // that it joins this write rather than costing one of its own.
                    tokio::task::yield_now().await;
                    held.take_more(MOST_PER_FLUSH, &mut batch);
                    open = send_all(&mut sink, &mut batch).await.is_ok();
                }
                false => {
                    let why = if held.taken_over() {
                        "another socket took this connection over"
                    } else {
                        "the connection has ended"
                    };
                    let _ = sink.send(close_frame(CloseCode::Normal, why)).await;
                    open = false;
                }
            },
            message = incoming.next() => match message {
                Some(Ok(Message::Text(text))) => receive(&registry, &connection, text.as_str()).await,
                Some(Ok(Message::Binary(_))) => {
                    let _ = sink.send(close_frame(CloseCode::Unsupported, "ACP messages are text frames")).await;
                    open = false;
                }
                Some(Ok(Message::Close(Some(frame)))) if frame.code == CloseCode::Normal => {
                    // The client is done (not dropped): the connection ends with it.
                    connection.end("its client closed the WebSocket");
                    open = false;
                }
                Some(Ok(Message::Close(_))) | None => open = false,
                Some(Ok(_)) => {}
                Some(Err(WsError::Capacity(why))) => {
                    tracing::info!(connection = %connection.id, "a message over the limit: {why}");
                    let _ = sink.send(close_frame(CloseCode::Size, "the message is larger than the server takes")).await;
                    open = false;
                }
                Some(Err(_)) => open = false,
            },
        }
    }
    drop(held);
    connection.attached(false);
}

/// Most messages written in one go (one flush) while more wait.
const MOST_PER_FLUSH: usize = 256;

/// Sends a batch of what waited (up to [`MOST_PER_FLUSH`]), one frame each, flushed once:
/// a streamed answer's deltas do not cost a write each.
async fn send_all<S>(sink: &mut S, batch: &mut Vec<Queued>) -> Result<(), WsError>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    for queued in batch.drain(..) {
        sink.feed(Message::Text(queued.text)).await?;
    }
    sink.flush().await
}

/// One text frame from the client: a JSON-RPC object passed on, anything else answered
/// with a JSON-RPC error.
async fn receive(registry: &Registry, connection: &Connection, text: &str) {
    let error = |code: i64, message: &str| json!({"jsonrpc": "2.0", "id": Value::Null, "error": {"code": code, "message": message}});
    let answer = match serde_json::from_str::<Value>(text) {
        Ok(message @ Value::Object(_)) => {
            registry.hand_over_for(connection, &message).await;
            let _ = connection.deliver(&message).await;
            return;
        }
        Ok(Value::Array(_)) => error(-32600, "JSON-RPC batches are not supported"),
        Ok(_) => error(-32600, "a message must be a JSON-RPC object"),
        Err(e) => error(-32700, &format!("not JSON: {e}")),
    };
    connection.outbound.push(answer.to_string());
}
