//! The streamable HTTP profile: `POST /acp` carries client messages (`initialize` answered
//! 200 with `Acp-Connection-Id`, the rest 202, their answers coming on a stream), `GET /acp`
//! opens a server-sent-event stream (the connection's, or a session's with
//! `Acp-Session-Id`; each event's `id` is its cursor, and `Last-Event-ID` resumes exactly
//! after one, or is answered 410 when that point is gone), `DELETE /acp` ends the
//! connection. A client that sends no `Acp-Connection-Id` names its connection by its
//! address instead, `/acp/NAME` for all its requests.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{ACCEPT, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::connection::{Connection, Kind, NotOpened, Refused as NotPassed, answer_stream};
use super::outbound::{Busy, Held, Stream};
use super::shared::{Body, Server, json_response, text};

pub const CONNECTION_HEADER: &str = "acp-connection-id";
pub const SESSION_HEADER: &str = "acp-session-id";
/// On an event stream's answer: where the stream's turn stands (`acp/turnState`, as JSON).
pub const TURN_STATE_HEADER: &str = "acp-turn-state";
/// How long `initialize` may take to be answered.
const INITIALIZE_WAIT: Duration = Duration::from_secs(30);
/// How often an idle event stream says it is alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The connection a request names, by `Acp-Connection-Id` or by its address
/// (`/acp/NAME`): 400 without either, 404 for one unknown.
fn named_connection(
    server: &Server,
    headers: &HeaderMap,
    named: Option<&str>,
) -> Result<Arc<Connection>, Refused> {
    let by_address = named.and_then(|name| server.registry.by_name(name));
    let connection = match (header(headers, CONNECTION_HEADER), named) {
        (Some(id), _) => server.registry.get(id),
        (None, Some(_)) => by_address,
        (None, None) => {
            return Err(Box::new(text(
                StatusCode::BAD_REQUEST,
                "Missing Acp-Connection-Id: send the one the initialize answer carried, or \
                 send every request of the connection, initialize too, to an address of its \
                 own, /acp/NAME (see docs/http.md)",
            )));
        }
    };
    connection
        .filter(|c| c.kind == Kind::Http)
        .ok_or_else(|| Box::new(text(StatusCode::NOT_FOUND, "Unknown Acp-Connection-Id")))
}

/// A request refused, with its response.
type Refused = Box<Response<Body>>;

/// 413, and the socket closed after it (the rest of the body is never read).
fn too_large() -> Refused {
    let mut refused = text(
        StatusCode::PAYLOAD_TOO_LARGE,
        "the message is larger than the server takes",
    );
    refused
        .headers_mut()
        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    Box::new(refused)
}

/// Reads a POST's body within `limit`: one declared larger is refused before a byte of it is
/// read, one that grows past the limit as it comes (chunked) is refused there and what was
/// read is dropped at once.
async fn read_body(
    body: Incoming,
    declared: Option<u64>,
    limit: usize,
) -> Result<Vec<u8>, Refused> {
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let mut body = body;
    let mut bytes = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(Box::new(text(StatusCode::BAD_REQUEST, "the body was cut")));
        };
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// Reads a POST's JSON-RPC object, within the message limit.
async fn read_message(
    server: &Server,
    request: Request<Incoming>,
) -> Result<(HeaderMap, Value), Refused> {
    let json = header(request.headers(), CONTENT_TYPE.as_str())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(Box::new(text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "messages are application/json",
        )));
    }
    let (parts, body) = request.into_parts();
    let declared =
        header(&parts.headers, CONTENT_LENGTH.as_str()).and_then(|v| v.trim().parse().ok());
    let bytes = read_body(body, declared, server.registry.limits.message_bytes).await?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(message @ Value::Object(_)) => Ok((parts.headers, message)),
        Ok(Value::Array(_)) => Err(Box::new(json_response(
            StatusCode::BAD_REQUEST,
            &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "JSON-RPC batches are not supported"}}),
        ))),
        Ok(_) => Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "Invalid JSON-RPC message",
        ))),
        Err(_) => Err(Box::new(text(StatusCode::BAD_REQUEST, "Invalid JSON"))),
    }
}

/// `POST /acp` (or `/acp/NAME`).
pub async fn post(
    server: Arc<Server>,
    request: Request<Incoming>,
    named: Option<String>,
) -> Response<Body> {
    let (headers, message) = match read_message(&server, request).await {
        Ok(read) => read,
        Err(refused) => return *refused,
    };
    if message["method"] == "initialize" {
        if header(&headers, CONNECTION_HEADER).is_some() {
            return text(
                StatusCode::BAD_REQUEST,
                "Initialize not allowed on existing connection",
            );
        }
        return initialize(&server, &message, named.as_deref()).await;
    }
    let connection = match named_connection(&server, &headers, named.as_deref()) {
        Ok(connection) => connection,
        Err(refused) => return *refused,
    };
    let session_header = header(&headers, SESSION_HEADER);
    let named = message["params"]["sessionId"].as_str();
    if let (Some(header), Some(named)) = (session_header, named)
        && header != named
    {
        return text(StatusCode::BAD_REQUEST, "Mismatched Acp-Session-Id");
    }
    if message.get("method").is_some() && message.get("id").is_some() {
        connection
            .outbound
            .route_answer(&message["id"], answer_stream(&message, session_header));
    }
    server.registry.hand_over_for(&connection, &message).await;
    match connection.deliver(&message).await {
        Ok(()) | Err(NotPassed::Answered(_)) => super::shared::empty(StatusCode::ACCEPTED),
        Err(NotPassed::Ended) => text(StatusCode::NOT_FOUND, "Unknown Acp-Connection-Id"),
    }
}

/// A new connection (named by its address when `named`): its `initialize` answered in the
/// POST's response.
async fn initialize(server: &Server, message: &Value, named: Option<&str>) -> Response<Body> {
    if message.get("id").is_none_or(Value::is_null) {
        return text(
            StatusCode::BAD_REQUEST,
            "Initialize request must include an ID",
        );
    }
    let connection = match server.registry.open(Kind::Http, named) {
        Ok(connection) => connection,
        Err(NotOpened::Full) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server has as many connections as it takes; try again later",
            );
        }
        Err(NotOpened::NameTaken) => {
            return text(
                StatusCode::CONFLICT,
                "a connection already has this address: end it first (DELETE), or use another",
            );
        }
    };
    let answer = connection.outbound.await_answer(&message["id"]);
    if connection.deliver(message).await.is_err() {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the connection's agent did not start",
        );
    }
    match tokio::time::timeout(INITIALIZE_WAIT, answer).await {
        Ok(Ok(answered)) => {
            let mut response = Response::new(super::shared::full(answered));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            if let Ok(id) = HeaderValue::from_str(&connection.id) {
                response.headers_mut().insert(CONNECTION_HEADER, id);
            }
            response
        }
        _ => {
            server
                .registry
                .close(&connection.id, "its initialize was not answered in time");
            text(
                StatusCode::GATEWAY_TIMEOUT,
                "initialize was not answered in time",
            )
        }
    }
}

/// `GET /acp` (or `/acp/NAME`) for an event stream.
pub fn stream(server: &Server, request: &Request<Incoming>, named: Option<&str>) -> Response<Body> {
    let headers = request.headers();
    let wants_events =
        header(headers, ACCEPT.as_str()).is_some_and(|a| a.contains("text/event-stream"));
    if !wants_events {
        return text(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: ask for text/event-stream",
        );
    }
    let connection = match named_connection(server, headers, named) {
        Ok(connection) => connection,
        Err(refused) => return *refused,
    };
    let which = header(headers, SESSION_HEADER)
        .map_or(Stream::Connection, |s| Stream::Session(s.to_string()));
    let after = header(headers, "last-event-id").filter(|v| !v.trim().is_empty());
    let held = match connection.outbound.attach(which.clone(), after) {
        Ok(held) => held,
        Err(Busy::Held) => {
            return text(
                StatusCode::CONFLICT,
                "Outbound stream already has an active receiver",
            );
        }
        Err(Busy::Gone { why, turn }) => return super::shared::gone(why, turn),
    };
    let turn = connection.outbound.turn_state(&which);
    let mut response = Response::new(events(connection, held));
    let out = response.headers_mut();
    out.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    out.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(turn) = HeaderValue::from_str(&turn.to_string()) {
        out.insert(TURN_STATE_HEADER, turn);
    }
    response
}

/// Holds a stream for an event body; the connection's own stream counts as attached.
struct Receiving {
    held: Held,
    connection: Arc<Connection>,
}

impl Receiving {
    fn new(held: Held, connection: Arc<Connection>) -> Self {
        if held.stream == Stream::Connection {
            connection.attached(true);
        }
        Self { held, connection }
    }
}

impl Drop for Receiving {
    fn drop(&mut self) {
        if self.held.stream == Stream::Connection {
            self.connection.attached(false);
        }
    }
}

/// The event body: an opening comment, then each message as an event whose id is its
/// cursor, with a comment when idle.
fn events(connection: Arc<Connection>, held: Held) -> Body {
    let receiving = Receiving::new(held, connection);
    let opening = futures_util::stream::once(async { Bytes::from_static(b": open\n\n") });
    let messages = futures_util::stream::unfold(Some(receiving), |state| async move {
        let receiving = state?;
        let next = tokio::time::timeout(KEEP_ALIVE, receiving.held.next()).await;
        match next {
            Err(_) => Some((Bytes::from_static(b": alive\n\n"), Some(receiving))),
            Ok(Some(queued)) => {
                let cursor = receiving.held.cursor(&queued);
                let event = format!("id: {cursor}\ndata: {}\n\n", queued.text);
                Some((Bytes::from(event), Some(receiving)))
            }
            Ok(None) => None,
        }
    });
    let frames = opening
        .chain(messages)
        .map(|bytes| Ok::<_, std::convert::Infallible>(Frame::data(bytes)));
    BodyExt::boxed(StreamBody::new(frames))
}

/// `DELETE /acp` (or `/acp/NAME`): ends the connection.
pub fn delete(server: &Server, request: &Request<Incoming>, named: Option<&str>) -> Response<Body> {
    match named_connection(server, request.headers(), named) {
        Ok(connection) => {
            connection.end("its client's DELETE");
            super::shared::empty(StatusCode::ACCEPTED)
        }
        Err(refused) => *refused,
    }
}
