//! MCP's older HTTP+SSE transport (protocol 2024-11-05), for servers that do not speak
//! streamable HTTP: a GET opens the server's event stream, whose first event (`endpoint`)
//! names where messages are POSTed; the server's messages come back as `message` events on
//! that stream. `rmcp` drives the protocol over it as over any transport.

use std::borrow::Cow;
use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::{Error as StreamError, Sse, SseStream};

const EVENT_STREAM: &str = "text/event-stream";

/// Why the event stream could not be opened, or a message not posted.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("the server answered {0}")]
    Status(reqwest::StatusCode),
    #[error("the server's answer is not an event stream ({0})")]
    NotAStream(String),
    #[error("the event stream ended before it named the endpoint for messages")]
    NoEndpoint,
    #[error("the endpoint {0:?} is not a URL on the server's own origin")]
    ForeignEndpoint(String),
    #[error("a message could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

type Events = Pin<Box<dyn Stream<Item = Result<Sse, StreamError>> + Send>>;

/// A connection to an HTTP+SSE server.
pub struct SseTransport {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    events: Events,
}

impl SseTransport {
    /// Opens the server's event stream at `url` and waits for its `endpoint` event (the
    /// caller bounds the wait).
    pub async fn connect(http: reqwest::Client, url: &str) -> Result<Self, SseError> {
        let base = reqwest::Url::parse(url).map_err(|_| SseError::ForeignEndpoint(url.into()))?;
        let response = http
            .get(base.clone())
            .header(ACCEPT, EVENT_STREAM)
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(SseError::Status(response.status()));
        }
        let kind = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if !kind.starts_with(EVENT_STREAM) {
            return Err(SseError::NotAStream(kind));
        }
        let mut events: Events = SseStream::from_bytes_stream(response.bytes_stream()).boxed();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { break };
            if event.event.as_deref() != Some("endpoint") {
                continue;
            }
            let data = event.data.unwrap_or_default();
            let endpoint = same_origin(&base, data.trim())?;
            return Ok(Self {
                http,
                endpoint,
                events,
            });
        }
        Err(SseError::NoEndpoint)
    }
}

/// The endpoint a server named, resolved against its stream's URL; refused unless it is on
/// the same origin (a server may not send the client's messages somewhere else).
fn same_origin(base: &reqwest::Url, named: &str) -> Result<reqwest::Url, SseError> {
    let endpoint = base
        .join(named)
        .map_err(|_| SseError::ForeignEndpoint(named.into()))?;
    if endpoint.origin() != base.origin() {
        return Err(SseError::ForeignEndpoint(named.into()));
    }
    Ok(endpoint)
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "HTTP+SSE".into()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let (http, endpoint) = (self.http.clone(), self.endpoint.clone());
        async move {
            let body = serde_json::to_vec(&item)?;
            let response = http
                .post(endpoint)
                .header(CONTENT_TYPE, "application/json")
                .body(body)
                .send()
                .await?;
            if !response.status().is_success() {
                return Err(SseError::Status(response.status()));
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let event = match self.events.next().await? {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!("the MCP server's event stream broke: {error}");
                    return None;
                }
            };
            if !matches!(event.event.as_deref(), None | Some("message")) {
                continue;
            }
            let Some(data) = event.data else { continue };
            match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                Ok(message) => return Some(message),
                Err(error) => {
                    tracing::warn!("an MCP server sent a message that is not JSON-RPC: {error}");
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.events = Box::pin(futures_util::stream::empty());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_elsewhere_is_refused_and_a_relative_one_resolved() {
        let base = reqwest::Url::parse("http://127.0.0.1:3001/sse").expect("url");
        assert_eq!(
            same_origin(&base, "/message?sessionId=abc")
                .expect("same origin")
                .as_str(),
            "http://127.0.0.1:3001/message?sessionId=abc"
        );
        for foreign in [
            "http://evil.example/collect",
            "https://127.0.0.1:3001/message",
            "//127.0.0.1:9/x",
        ] {
            assert!(same_origin(&base, foreign).is_err(), "{foreign}");
        }
    }
}
