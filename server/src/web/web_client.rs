//! The reference web client's files (`clients/web/`), built into the binary and served at
//! `/` with a content security policy that lets the page load only its own files and talk
//! only to this server.

use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

use super::shared::{Body, full};

/// One file: its bytes and type.
pub struct File {
    body: &'static str,
    kind: &'static str,
}

const INDEX: File = File {
    body: include_str!("../../../clients/web/index.html"),
    kind: "text/html; charset=utf-8",
};
const APP: File = File {
    body: include_str!("../../../clients/web/app.js"),
    kind: "text/javascript; charset=utf-8",
};
const ACP: File = File {
    body: include_str!("../../../clients/web/acp.js"),
    kind: "text/javascript; charset=utf-8",
};
const MARKDOWN: File = File {
    body: include_str!("../../../clients/web/markdown.js"),
    kind: "text/javascript; charset=utf-8",
};
const STYLE: File = File {
    body: include_str!("../../../clients/web/style.css"),
    kind: "text/css; charset=utf-8",
};
/// The page's icon, also where browsers look for one unasked (`/favicon.ico`).
const ICON: File = File {
    body: include_str!("../../../clients/web/favicon.svg"),
    kind: "image/svg+xml",
};

/// The file at `path`, if the client has one there.
pub fn file(path: &str) -> Option<&'static File> {
    match path {
        "/" | "/index.html" => Some(&INDEX),
        "/app.js" => Some(&APP),
        "/acp.js" => Some(&ACP),
        "/markdown.js" => Some(&MARKDOWN),
        "/style.css" => Some(&STYLE),
        "/favicon.svg" | "/favicon.ico" => Some(&ICON),
        _ => None,
    }
}

pub fn response(file: &'static File) -> Response<Body> {
    let mut response = Response::new(full(file.body));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(file.kind));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
             style-src 'self'; script-src 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}
