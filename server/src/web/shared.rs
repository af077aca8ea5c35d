//! What every handler of `talaria serve` shares: the server's state, and how responses are
//! built.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

use super::connection::Registry;
use super::guard::Guard;

/// Every response body.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// What serves requests.
pub struct Server {
    pub guard: Guard,
    pub registry: Arc<Registry>,
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    BodyExt::boxed(Full::new(bytes.into()))
}

pub fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

pub fn text(status: StatusCode, why: &str) -> Response<Body> {
    let mut response = Response::new(full(format!("{why}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// 410: the point a client asks to resume a stream from is gone; the body (JSON) says why,
/// what to do, and where the turn stands (`_meta["acp/turnState"]`), as the answer of a
/// refused resume does.
pub fn gone(why: super::outbound::Unresumable, turn: serde_json::Value) -> Response<Body> {
    let body = serde_json::json!({
        "error": format!(
            "the messages after that point are no longer kept ({}): load the session again \
             (`session/load`) to see all of it",
            why.says()
        ),
        "_meta": super::outbound::turn_meta(turn),
    });
    json_response(StatusCode::GONE, &body)
}
