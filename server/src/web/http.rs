//! The streamable HTTP profile: `POST /acp` carries client messages (`initialize` answered
//! 200 with `Acp-Connection-Id`, the rest 202, their answers coming on a stream), `GET /acp`
//! opens a server-sent-event stream (the connection's, or a session's with
//! `Acp-Session-Id`; `Last-Event-ID` resumes one), `DELETE /acp` ends the connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::connection::{Connection, Kind, Refused as NotPassed, answer_stream};
use super::outbound::{Busy, Held, Stream};
use super::shared::{Body, Server, json_response, text};

pub const CONNECTION_HEADER: &str = "acp-connection-id";
pub const SESSION_HEADER: &str = "acp-session-id";
/// How long `initialize` may take to be answered.
const INITIALIZE_WAIT: Duration = Duration::from_secs(30);
/// How often an idle event stream says it is alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The connection a request names: 400 without one, 404 for one unknown.
fn named_connection(server: &Server, headers: &HeaderMap) -> Result<Arc<Connection>, Refused> {
    let Some(id) = header(headers, CONNECTION_HEADER) else {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "Missing Acp-Connection-Id",
        )));
    };
    server
        .registry
        .get(id)
        .filter(|c| c.kind == Kind::Http)
        .ok_or_else(|| Box::new(text(StatusCode::NOT_FOUND, "Unknown Acp-Connection-Id")))
}

/// A request refused, with its response.
type Refused = Box<Response<Body>>;

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
    let limit = server.registry.limits.message_bytes;
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Err(Box::new(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the message is larger than the server takes",
            )));
        }
    };
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

/// `POST /acp`.
pub async fn post(server: Arc<Server>, request: Request<Incoming>) -> Response<Body> {
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
        return initialize(&server, &message).await;
    }
    let connection = match named_connection(&server, &headers) {
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

/// A new connection: its `initialize` answered in the POST's response.
async fn initialize(server: &Server, message: &Value) -> Response<Body> {
    if message.get("id").is_none_or(Value::is_null) {
        return text(
            StatusCode::BAD_REQUEST,
            "Initialize request must include an ID",
        );
    }
    let Some(connection) = server.registry.open(Kind::Http) else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server has as many connections as it takes; try again later",
        );
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
            server.registry.close(&connection.id);
            text(
                StatusCode::GATEWAY_TIMEOUT,
                "initialize was not answered in time",
            )
        }
    }
}

/// `GET /acp` for an event stream.
pub fn stream(server: &Server, request: &Request<Incoming>) -> Response<Body> {
    let headers = request.headers();
    let wants_events =
        header(headers, ACCEPT.as_str()).is_some_and(|a| a.contains("text/event-stream"));
    if !wants_events {
        return text(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: ask for text/event-stream",
        );
    }
    let connection = match named_connection(server, headers) {
        Ok(connection) => connection,
        Err(refused) => return *refused,
    };
    let which = header(headers, SESSION_HEADER)
        .map_or(Stream::Connection, |s| Stream::Session(s.to_string()));
    let after = header(headers, "last-event-id").and_then(|v| v.trim().parse::<u64>().ok());
    let held = match connection.outbound.attach(which, after) {
        Ok(held) => held,
        Err(Busy::Held) => {
            return text(
                StatusCode::CONFLICT,
                "Outbound stream already has an active receiver",
            );
        }
        Err(Busy::Gone) => {
            return text(
                StatusCode::GONE,
                "the events after Last-Event-ID are no longer kept",
            );
        }
    };
    let mut response = Response::new(events(connection, held));
    let out = response.headers_mut();
    out.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    out.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
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

/// The event body: an opening comment, then each message as an event numbered by its place
/// in what the agent sent, with a comment when idle.
fn events(connection: Arc<Connection>, held: Held) -> Body {
    let receiving = Receiving::new(held, connection);
    let opening = futures_util::stream::once(async { Bytes::from_static(b": open\n\n") });
    let messages = futures_util::stream::unfold(Some(receiving), |state| async move {
        let receiving = state?;
        let next = tokio::time::timeout(KEEP_ALIVE, receiving.held.next()).await;
        match next {
            Err(_) => Some((Bytes::from_static(b": alive\n\n"), Some(receiving))),
            Ok(Some(queued)) => {
                let event = format!("id: {}\ndata: {}\n\n", queued.seq, queued.text);
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

/// `DELETE /acp`: ends the connection.
pub fn delete(server: &Server, request: &Request<Incoming>) -> Response<Body> {
    let Some(id) = header(request.headers(), CONNECTION_HEADER) else {
        return text(StatusCode::BAD_REQUEST, "Missing Acp-Connection-Id");
    };
    if server.registry.close(id) {
        super::shared::empty(StatusCode::ACCEPTED)
    } else {
        text(StatusCode::NOT_FOUND, "Unknown Acp-Connection-Id")
    }
}
