//! One HTTP request of `talaria serve`, checked before anything else (`Host`, `Origin`,
//! token) and sent to its profile: the WebSocket upgrade, the HTTP profile's POST, GET and
//! DELETE, or the reference web client's files; CORS only for the origins allowed, never a
//! wildcard.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};

use super::guard::Refusal;
use super::shared::{Body, Server, empty, text};
use super::{http, web_client, websocket};

fn refused(refusal: &Refusal) -> Response<Body> {
    let mut response = text(refusal.status, &refusal.why);
    if refusal.status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// Answers one request.
pub async fn handle(
    server: Arc<Server>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if let Err(refusal) = server.guard.check_host(request.headers()) {
        return Ok(refused(&refusal));
    }
    let origin = match server.guard.check_origin(request.headers()) {
        Ok(origin) => origin.map(str::to_string),
        Err(refusal) => return Ok(refused(&refusal)),
    };
    let mut response = route(server, request).await;
    if let Some(origin) = origin
        && let Ok(value) = HeaderValue::from_str(&origin)
    {
        let headers = response.headers_mut();
        headers.insert("access-control-allow-origin", value);
        headers.insert("vary", HeaderValue::from_static("Origin"));
        headers.insert(
            "access-control-expose-headers",
            HeaderValue::from_static("Acp-Connection-Id, Acp-Turn-State"),
        );
    }
    Ok(response)
}

/// `/acp/NAME`: the name a client gives its connection by its address.
fn connection_name(path: &str) -> Option<&str> {
    path.strip_prefix("/acp/").filter(|name| {
        (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

async fn route(server: Arc<Server>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    let named = connection_name(&path).map(str::to_string);
    if path != "/acp" && named.is_none() {
        return match (request.method(), web_client::file(&path)) {
            (&Method::GET, Some(file)) => web_client::response(file),
            _ => text(StatusCode::NOT_FOUND, "not found"),
        };
    }
    if request.method() == Method::OPTIONS {
        return preflight();
    }
    let websocket = websocket::is_upgrade(&request);
    if let Err(refusal) = server.guard.check_token(request.headers(), websocket) {
        return refused(&refusal);
    }
    let named = named.as_deref();
    match *request.method() {
        Method::GET if websocket && named.is_none() => websocket::upgrade(server, request),
        Method::GET => http::stream(&server, &request, named),
        Method::POST => http::post(server, request, named.map(str::to_string)).await,
        Method::DELETE => http::delete(&server, &request, named),
        _ => text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
    }
}

/// A CORS preflight from an allowed origin (others were refused before).
fn preflight() -> Response<Body> {
    let mut response = empty(StatusCode::NO_CONTENT);
    let headers = response.headers_mut();
    headers.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    headers.insert(
        "access-control-allow-headers",
        HeaderValue::from_static(
            "authorization, content-type, acp-connection-id, acp-session-id, last-event-id",
        ),
    );
    headers.insert("access-control-max-age", HeaderValue::from_static("600"));
    response
}
