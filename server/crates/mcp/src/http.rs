//! MCP's streamable HTTP transport on the workspace's HTTP client (`reqwest` with rustls):
//! `rmcp` drives the protocol, this posts messages, opens the server's event stream and ends
//! the session.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    HttpStatusError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Error as SseError, Sse, SseStream};

use crate::oauth::{Challenge, Credentials};

const SESSION_HEADER: &str = "mcp-session-id";
const EVENT_STREAM: &str = "text/event-stream";

/// The HTTP client MCP servers are reached with.
#[derive(Clone)]
pub struct HttpClient {
    pub client: reqwest::Client,
    /// The status a first message (no session yet) was refused with: 400, 404 or 405 is
    /// how a server that speaks only the older HTTP+SSE transport answers; 401 asks for
    /// sign-in.
    pub refused: Arc<AtomicU16>,
    /// The server's sign-in, when it has one: its token goes on every request.
    pub auth: Option<Arc<Credentials>>,
}

impl HttpClient {
    pub fn new(client: reqwest::Client, auth: Option<Arc<Credentials>>) -> Self {
        Self {
            client,
            refused: Arc::new(AtomicU16::new(0)),
            auth,
        }
    }

    /// Whether the server asked for sign-in before any session.
    pub fn needs_sign_in(&self) -> bool {
        self.refused.load(Ordering::SeqCst) == 401
    }

    /// The token to send: the sign-in's (refreshed when due), else the one `rmcp` gives.
    async fn bearer(&self, given: Option<String>) -> Option<String> {
        match &self.auth {
            Some(auth) => auth.bearer().await.or(given),
            None => given,
        }
    }

    /// A 401: the token to try once more with, when the sign-in has a fresh one.
    async fn after_refusal(
        &self,
        response: &reqwest::Response,
        sent: Option<&str>,
    ) -> Option<String> {
        let auth = self.auth.as_ref()?;
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(Challenge::parse)
            .unwrap_or_default();
        auth.refused(sent, challenge).await
    }

    /// Whether the server answered the first message as an SSE-only server does.
    pub fn looks_sse_only(&self) -> bool {
        matches!(self.refused.load(Ordering::SeqCst), 400 | 404 | 405)
    }
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    session_id: Option<&str>,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(session) = session_id {
        request = request.header(SESSION_HEADER, session);
    }
    if let Some(auth) = auth_header {
        request = request.bearer_auth(auth);
    }
    for (name, value) in custom_headers {
        request = request.header(name, value);
    }
    request
}

fn status_error(response: &reqwest::Response) -> StreamableHttpError<reqwest::Error> {
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    StreamableHttpError::HttpStatus(HttpStatusError::new(
        response.status().as_u16(),
        retry_after,
    ))
}

fn sse_of(
    response: reqwest::Response,
) -> futures_util::stream::BoxStream<'static, Result<Sse, SseError>> {
    SseStream::from_bytes_stream(response.bytes_stream()).boxed()
}

/// A successful POST's answer: an event stream, one JSON message, or nothing.
async fn answer_of(
    response: reqwest::Response,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
    let session = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match content_type.as_deref() {
        Some(kind) if kind.starts_with(EVENT_STREAM) => {
            Ok(StreamableHttpPostResponse::Sse(sse_of(response), session))
        }
        Some(kind) if kind.starts_with("application/json") => {
            let body = response
                .bytes()
                .await
                .map_err(StreamableHttpError::Client)?;
            let message: ServerJsonRpcMessage = serde_json::from_slice(&body)?;
            Ok(StreamableHttpPostResponse::Json(message, session))
        }
        _ if response.content_length() == Some(0) => Ok(StreamableHttpPostResponse::Accepted),
        other => Err(StreamableHttpError::UnexpectedContentType(
            other.map(str::to_string),
        )),
    }
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let first = session_id.is_none();
        let body = serde_json::to_vec(&message)?;
        let mut bearer = self.bearer(auth_header).await;
        let mut retried = false;
        let response = loop {
            let request = self
                .client
                .post(uri.as_ref())
                .header(ACCEPT, format!("application/json, {EVENT_STREAM}"))
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
            let request = with_headers(
                request,
                session_id.as_deref(),
                bearer.clone(),
                custom_headers.clone(),
            );
            let response = request.send().await.map_err(StreamableHttpError::Client)?;
            if response.status() == reqwest::StatusCode::UNAUTHORIZED && !retried {
                retried = true;
                if let Some(fresh) = self.after_refusal(&response, bearer.as_deref()).await {
                    bearer = Some(fresh);
                    continue;
                }
            }
            break response;
        };
        if response.status() == reqwest::StatusCode::ACCEPTED {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if !response.status().is_success() {
            if first || response.status() == reqwest::StatusCode::UNAUTHORIZED {
                self.refused
                    .store(response.status().as_u16(), Ordering::SeqCst);
            }
            return Err(status_error(&response));
        }
        answer_of(response).await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let request = with_headers(
            self.client.delete(uri.as_ref()),
            Some(&session_id),
            self.bearer(auth_header).await,
            custom_headers,
        );
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportDeleteSession);
        }
        if !response.status().is_success() {
            return Err(status_error(&response));
        }
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        futures_util::stream::BoxStream<'static, Result<Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        let mut request = self.client.get(uri.as_ref()).header(ACCEPT, EVENT_STREAM);
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last);
        }
        let bearer = self.bearer(auth_header).await;
        let request = with_headers(request, session_id.as_deref(), bearer, custom_headers);
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !response.status().is_success() {
            return Err(status_error(&response));
        }
        Ok(sse_of(response))
    }
}
