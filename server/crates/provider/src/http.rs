//! Sending a streaming request and turning HTTP failures into [`ProviderError`]s.

use std::time::Duration;

use crate::ProviderError;
use crate::error::{error_chain, message_from_body};
use crate::rate_limits::RateLimits;

/// Where an endpoint is and how to reach it; shared by every provider.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The API's base URL (each provider appends its own path).
    pub base_url: String,
    /// The provider's own key; a request's key lease takes precedence.
    pub api_key: Option<String>,
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// A stream with no bytes for this long is abandoned.
    pub idle_timeout: Duration,
    /// Headers sent with every request (a client-managed provider's routing headers).
    pub headers: ExtraHeaders,
}

/// Headers an endpoint sends with every request. They may carry secrets, so they show as
/// their names only (in `Debug`, and so in any log that prints a connection).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExtraHeaders(pub Vec<(String, String)>);

impl ExtraHeaders {
    pub const NONE: ExtraHeaders = ExtraHeaders(Vec::new());
}

impl std::fmt::Debug for ExtraHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| format!("{name}: <hidden>")))
            .finish()
    }
}

impl Connection {
    /// `builder` with the key (see `key`) as a bearer token, when there is one.
    pub fn bearer(
        &self,
        builder: reqwest::RequestBuilder,
        request_key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        match self.key(request_key) {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// The key to send: the request's lease, else the provider's own; empty means none.
    pub fn key<'a>(&'a self, request_key: Option<&'a str>) -> Option<&'a str> {
        request_key
            .or(self.api_key.as_deref())
            .filter(|k| !k.is_empty())
    }
}

/// A provider's HTTP side: its client, the URL it posts to, and its connection.
#[derive(Debug, Clone)]
pub struct Target {
    client: reqwest::Client,
    url: String,
    pub connection: Connection,
}

impl Target {
    /// A client for `connection` that posts to `url` (see [`client_for`]).
    pub fn new(provider: &str, connection: Connection, url: String) -> Result<Self, ProviderError> {
        let client = client_for(provider, connection.connect_timeout, &connection.base_url)?;
        Ok(Self {
            client,
            url,
            connection,
        })
    }

    /// The URL appended to the base URL (its trailing slash dropped).
    pub fn under_base(connection: &Connection, path: &str) -> String {
        format!("{}{path}", connection.base_url.trim_end_matches('/'))
    }

    /// A streaming POST of `body`.
    pub fn post(&self, body: String) -> reqwest::RequestBuilder {
        let mut builder = event_stream_post(&self.client, &self.url, body);
        for (name, value) in &self.connection.headers.0 {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder
    }

    /// Sends `builder` (made by [`Target::post`]) and decodes its events with `decoder`.
    pub fn start<D: crate::stream::Decoder>(
        &self,
        builder: reqwest::RequestBuilder,
        provider: &'static str,
        decoder: D,
    ) -> futures_util::future::BoxFuture<'static, Result<crate::EventStream, ProviderError>> {
        start(
            builder,
            provider,
            self.url.clone(),
            self.connection.idle_timeout,
            decoder,
        )
    }
}

/// A POST of a JSON `body` to `endpoint` asking for server-sent events.
pub fn event_stream_post(
    client: &reqwest::Client,
    endpoint: &str,
    body: String,
) -> reqwest::RequestBuilder {
    client
        .post(endpoint)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body)
}

/// Sends a streaming request and decodes its events with `decoder`.
pub fn start<D: crate::stream::Decoder>(
    builder: reqwest::RequestBuilder,
    provider: &'static str,
    endpoint: String,
    idle_timeout: Duration,
    decoder: D,
) -> futures_util::future::BoxFuture<'static, Result<crate::EventStream, ProviderError>> {
    Box::pin(async move {
        let response = send(builder, provider, &endpoint).await?;
        let limits = RateLimits::from_headers(response.headers(), std::time::SystemTime::now());
        let events = crate::stream::drive(response, provider, idle_timeout, decoder);
        Ok(match limits {
            Some(limits) => with_limits_first(limits, events),
            None => events,
        })
    })
}

/// The stream's events after one that tells the response's rate limits.
fn with_limits_first(limits: RateLimits, events: crate::EventStream) -> crate::EventStream {
    use futures_util::StreamExt;
    let first = futures_util::stream::once(std::future::ready(Ok(crate::StreamEvent::RateLimits(
        limits,
    ))));
    first.chain(events).boxed()
}

/// Builds a client with the connect timeout (no overall timeout: streams are long).
pub fn client(provider: &str, connect_timeout: Duration) -> Result<reqwest::Client, ProviderError> {
    client_for(provider, connect_timeout, "https://")
}

/// A client for `base_url`: one for a plain `http://` endpoint (a local server) loads no TLS
/// trust roots, which it would never use (less start-up work and memory).
pub fn client_for(
    provider: &str,
    connect_timeout: Duration,
    base_url: &str,
) -> Result<reqwest::Client, ProviderError> {
    let plain = base_url
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"));
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("talaria/", env!("CARGO_PKG_VERSION")))
        .tls_built_in_root_certs(!plain)
        .build()
        .map_err(|e| ProviderError::Request {
            provider: provider.into(),
            detail: format!("cannot build HTTP client: {e}"),
        })
}

/// Whether a request failed because nothing listens at the address (from the error's
/// sources, not its text).
pub fn is_connection_refused(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = current.source();
    }
    false
}

/// Whether a request failed because the host name does not resolve (the resolver's error in
/// the error's sources: hyper's "dns error", the system's "failed to lookup address").
pub fn is_unknown_host(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        let text = current.to_string().to_ascii_lowercase();
        if text.starts_with("dns error") || text.contains("failed to lookup address") {
            return true;
        }
        source = current.source();
    }
    false
}

/// The innermost cause of an error (the resolver's own words).
fn root_cause(error: &dyn std::error::Error) -> String {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

/// Sends the request; a non-success status becomes [`ProviderError::Http`] carrying the
/// provider's own message, `Retry-After` and the rate limits its headers stated.
pub async fn send(
    builder: reqwest::RequestBuilder,
    provider: &str,
    endpoint: &str,
) -> Result<reqwest::Response, ProviderError> {
    let response = builder.send().await.map_err(|e| {
        if is_connection_refused(&e) {
            ProviderError::Refused {
                provider: provider.into(),
                url: endpoint.into(),
            }
        } else if is_unknown_host(&e) {
            ProviderError::UnknownHost {
                provider: provider.into(),
                url: endpoint.into(),
                detail: root_cause(&e),
            }
        } else {
            ProviderError::Connect {
                provider: provider.into(),
                url: endpoint.into(),
                detail: error_chain(&e),
            }
        }
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let limits = RateLimits::from_headers(response.headers(), std::time::SystemTime::now());
    let retry_after = limits.as_ref().and_then(|l| l.retry_after);
    let body = tokio::time::timeout(Duration::from_secs(30), response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let reason = status.canonical_reason().unwrap_or("");
    let message = message_from_body(&body);
    Err(ProviderError::Http {
        provider: provider.into(),
        status: status.as_u16(),
        message: if reason.is_empty() {
            message
        } else {
            format!("{reason}: {message}")
        },
        retry_after,
        limits: limits.map(Box::new),
    })
}
