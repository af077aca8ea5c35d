//! Typed provider errors; each names what happened in words a user can act on.

use std::time::Duration;

/// The full chain of an error's causes, for messages.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The endpoint answered with an HTTP error status.
    #[error("{provider} returned HTTP {status}: {message}")]
    Http {
        provider: String,
        status: u16,
        /// The provider's own message (from its JSON error body when there is one).
        message: String,
        /// `Retry-After`, when the provider sent one.
        retry_after: Option<Duration>,
        /// The rate limits the answer's headers stated, when it stated any.
        limits: Option<Box<crate::rate_limits::RateLimits>>,
    },
    /// The endpoint could not be reached or the connection failed before a response.
    #[error("cannot reach {provider} at {url}: {detail}")]
    Connect {
        provider: String,
        url: String,
        detail: String,
    },
    /// The endpoint's host name does not resolve: retrying will not help.
    #[error("cannot find the host of {url} ({detail}): is the address right?")]
    UnknownHost {
        provider: String,
        url: String,
        detail: String,
    },
    /// Nothing listens at the endpoint (connection refused): retrying will not help.
    #[error("cannot connect to {provider} at {url} (connection refused): is the server running?")]
    Refused { provider: String, url: String },
    /// The response stream broke, stalled, or carried an error event.
    #[error("{provider} stream failed: {detail}")]
    Stream {
        provider: String,
        failure: StreamFailure,
        detail: String,
    },
    /// The request could not be built.
    #[error("invalid request for {provider}: {detail}")]
    Request { provider: String, detail: String },
}

/// How a response stream failed (typed, so recovery never parses messages for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFailure {
    /// No bytes for longer than the idle timeout.
    Stalled,
    /// The connection broke mid-stream.
    Broken,
    /// The stream ended before the response was complete.
    EndedEarly,
    /// The provider sent an error event in the stream (its message is the detail).
    ErrorEvent,
}

impl ProviderError {
    /// The HTTP status, when the provider answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The rate limits the provider's answer stated, when it stated any.
    pub fn limits(&self) -> Option<&crate::rate_limits::RateLimits> {
        match self {
            Self::Http { limits, .. } => limits.as_deref(),
            _ => None,
        }
    }
}

/// Extracts the provider's own message from an error body (OpenAI/Anthropic JSON shapes),
/// falling back to the body text, cut to a readable length.
pub fn message_from_body(body: &str) -> String {
    let parsed = serde_json::from_str::<serde_json::Value>(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("detail"))
            .and_then(|m| m.as_str())
            .map(str::to_string)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_string());
    if text.is_empty() {
        return "(empty response body)".to_string();
    }
    let mut end = text.len().min(500);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_messages_are_extracted() {
        assert_eq!(
            message_from_body(r#"{"error":{"message":"Rate limit reached","type":"x"}}"#),
            "Rate limit reached"
        );
        assert_eq!(message_from_body(r#"{"error":"bad key"}"#), "bad key");
        assert_eq!(message_from_body("  Bad Gateway  "), "Bad Gateway");
        assert_eq!(message_from_body(""), "(empty response body)");
    }
}
