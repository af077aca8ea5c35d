//! A typed classification of provider failures, from the HTTP status, the provider's error
//! code and its message. Each class says what to do about it: retry, rotate the key, fall
//! back to another model, or shrink the context.

use std::time::Duration;

use crate::error::{ProviderError, StreamFailure};

/// What kind of failure it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The key is missing, wrong or revoked.
    Auth,
    /// The account is out of credit or over quota.
    Billing,
    /// Too many requests for now.
    RateLimit,
    /// The provider is overloaded (Anthropic 529, "overloaded").
    Overloaded,
    /// A 5xx from the provider.
    ServerError,
    /// Could not connect, or the stream went silent.
    Timeout,
    /// Nothing listens at the endpoint (connection refused).
    Unreachable,
    /// The stream broke before it was complete.
    StreamCut,
    /// The conversation does not fit the model's context window.
    ContextOverflow,
    /// The request body is too large for the endpoint.
    PayloadTooLarge,
    /// `max_tokens` is larger than the model allows.
    MaxTokensTooLarge,
    /// No such model (or no access to it).
    ModelNotFound,
    /// The provider's content policy refused the request.
    ContentPolicy,
    /// The request itself is wrong.
    BadRequest,
    /// Anything else.
    Unknown,
}

/// What recovery may do about one class of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassPolicy {
    /// Worth trying again with the same model.
    pub retry: bool,
    /// Worth trying another key of the same provider.
    pub rotate_key: bool,
    /// Worth moving to the next model of the fallback chain (once retries are spent).
    pub fall_back: bool,
    /// Worth shrinking the conversation and trying again.
    pub compress: bool,
}

impl ErrorClass {
    /// Every class, for tables and tests.
    pub const ALL: [ErrorClass; 15] = [
        Self::Auth,
        Self::Billing,
        Self::RateLimit,
        Self::Overloaded,
        Self::ServerError,
        Self::Timeout,
        Self::Unreachable,
        Self::StreamCut,
        Self::ContextOverflow,
        Self::PayloadTooLarge,
        Self::MaxTokensTooLarge,
        Self::ModelNotFound,
        Self::ContentPolicy,
        Self::BadRequest,
        Self::Unknown,
    ];

    /// What recovery may do. One exhaustive table: a new class must state its policy here.
    pub fn policy(self) -> ClassPolicy {
        let (retry, rotate_key, fall_back, compress) = match self {
            Self::Auth => (false, true, true, false),
            Self::Billing => (false, true, true, false),
            Self::RateLimit => (true, true, true, false),
            Self::Overloaded => (true, false, true, false),
            Self::ServerError => (true, false, true, false),
            Self::Timeout => (true, false, true, false),
            Self::Unreachable => (false, false, true, false),
            Self::StreamCut => (true, false, true, false),
            Self::ContextOverflow => (false, false, false, true),
            Self::PayloadTooLarge => (false, false, false, true),
            Self::MaxTokensTooLarge => (false, false, false, false),
            Self::ModelNotFound => (false, false, true, false),
            Self::ContentPolicy => (false, false, false, false),
            Self::BadRequest => (false, false, false, false),
            Self::Unknown => (false, false, true, false),
        };
        ClassPolicy {
            retry,
            rotate_key,
            fall_back,
            compress,
        }
    }

    /// Worth trying again with the same model.
    pub fn retryable(self) -> bool {
        self.policy().retry
    }

    /// Worth trying another key of the same provider.
    pub fn rotate_key(self) -> bool {
        self.policy().rotate_key
    }

    /// Worth moving to the next model of the fallback chain (once retries are spent).
    pub fn fall_back(self) -> bool {
        self.policy().fall_back
    }

    /// Worth shrinking the conversation and trying again.
    pub fn compress(self) -> bool {
        self.policy().compress
    }

    /// A stable identifier (snake case), for machines: logs, error data.
    pub fn id(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::Billing => "billing",
            Self::RateLimit => "rate_limit",
            Self::Overloaded => "overloaded",
            Self::ServerError => "server_error",
            Self::Timeout => "timeout",
            Self::Unreachable => "unreachable",
            Self::StreamCut => "stream_cut",
            Self::ContextOverflow => "context_overflow",
            Self::PayloadTooLarge => "payload_too_large",
            Self::MaxTokensTooLarge => "max_tokens_too_large",
            Self::ModelNotFound => "model_not_found",
            Self::ContentPolicy => "content_policy",
            Self::BadRequest => "bad_request",
            Self::Unknown => "unknown",
        }
    }

    /// A short human name.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Auth => "authentication failed",
            Self::Billing => "billing or quota problem",
            Self::RateLimit => "rate limited",
            Self::Overloaded => "provider overloaded",
            Self::ServerError => "provider server error",
            Self::Timeout => "timed out",
            Self::Unreachable => "the endpoint cannot be reached",
            Self::StreamCut => "stream interrupted",
            Self::ContextOverflow => "context window exceeded",
            Self::PayloadTooLarge => "request too large",
            Self::MaxTokensTooLarge => "max_tokens too large",
            Self::ModelNotFound => "model not found",
            Self::ContentPolicy => "refused by content policy",
            Self::BadRequest => "bad request",
            Self::Unknown => "unexpected error",
        }
    }
}

/// A classified failure with the numbers the recovery needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub class: ErrorClass,
    pub retry_after: Option<Duration>,
    /// The real context limit, when the message states it.
    pub context_limit: Option<u64>,
    /// The largest allowed `max_tokens`, when the message states it.
    pub max_tokens_limit: Option<u32>,
}

fn mentions(text: &str, words: &[&str]) -> bool {
    words.iter().any(|w| text.contains(w))
}

/// The first whole number after `phrase` in `text` (commas allowed).
pub fn number_after(text: &str, phrase: &str) -> Option<u64> {
    let start = text.find(phrase)? + phrase.len();
    let digits: String = text[start..]
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn context_limit(text: &str) -> Option<u64> {
    number_after(text, "maximum context length is")
        .or_else(|| number_after(text, "context size ("))
        .or_else(|| number_after(text, "context window of"))
        .or_else(|| {
            // "prompt is too long: 210000 tokens > 200000 maximum"
            let after = text.find("tokens >")?;
            number_after(&text[after..], ">")
        })
}

fn max_tokens_limit(text: &str) -> Option<u32> {
    number_after(text, "supports at most")
        .or_else(|| number_after(text, "at most"))
        .or_else(|| {
            // "max_tokens: 100000 > 64000, which is the maximum allowed"
            let after = text.find("max_tokens")?;
            number_after(&text[after..], ">")
        })
        .and_then(|n| u32::try_from(n).ok())
}

fn classify_message(lower: &str) -> Option<ErrorClass> {
    if mentions(
        lower,
        &[
            "context length",
            "context_length",
            "context window",
            "maximum context",
            "prompt is too long",
            "too many tokens",
            "reduce the length",
            "exceeds the available context",
        ],
    ) {
        return Some(ErrorClass::ContextOverflow);
    }
    if lower.contains("max_tokens")
        && mentions(
            lower,
            &["too large", "exceed", "maximum allowed", "at most", "> "],
        )
    {
        return Some(ErrorClass::MaxTokensTooLarge);
    }
    if mentions(
        lower,
        &[
            "insufficient_quota",
            "billing",
            "credit balance",
            "exceeded your current quota",
            "payment",
        ],
    ) {
        return Some(ErrorClass::Billing);
    }
    if mentions(lower, &["overloaded"]) {
        return Some(ErrorClass::Overloaded);
    }
    if mentions(lower, &["rate limit", "rate_limit", "too many requests"]) {
        return Some(ErrorClass::RateLimit);
    }
    if mentions(
        lower,
        &[
            "content policy",
            "content_policy",
            "content_filter",
            "safety system",
            "flagged",
        ],
    ) {
        return Some(ErrorClass::ContentPolicy);
    }
    if lower.contains("model")
        && mentions(
            lower,
            &[
                "not found",
                "does not exist",
                "not_found",
                "unknown model",
                "no such model",
            ],
        )
    {
        return Some(ErrorClass::ModelNotFound);
    }
    None
}

/// Whether a local server stopped because the model's own output broke the tool-call syntax
/// it parses (llama.cpp: "The model produced output that does not match the expected
/// peg-native format", "failed to parse tool call"), as an error event in the stream or as a
/// server-error status. Asking the same way rarely helps; asking without native tools does.
pub fn is_malformed_output(error: &ProviderError) -> bool {
    let detail = match error {
        ProviderError::Stream {
            failure: StreamFailure::ErrorEvent,
            detail,
            ..
        } => detail,
        ProviderError::Http {
            status: 500..=599,
            message,
            ..
        } => message,
        _ => return false,
    };
    let lower = detail.to_ascii_lowercase();
    [
        "does not match the expected",
        "failed to parse",
        "grammar",
        "invalid tool call",
    ]
    .iter()
    .any(|sign| lower.contains(sign))
}

/// Classifies a failure.
pub fn classify(error: &ProviderError) -> Classified {
    let mut classified = Classified {
        class: ErrorClass::Unknown,
        retry_after: None,
        context_limit: None,
        max_tokens_limit: None,
    };
    let (class, message) = match error {
        ProviderError::Http {
            status,
            message,
            retry_after,
            limits,
            ..
        } => {
            // With no `Retry-After`, a refusal's exhausted window says how long to wait.
            classified.retry_after = retry_after.or_else(|| {
                let limits = limits.as_deref().filter(|_| *status == 429)?;
                limits.wait(std::time::SystemTime::now())
            });
            let lower = message.to_ascii_lowercase();
            let by_message = classify_message(&lower);
            let class = match status {
                401 => ErrorClass::Auth,
                403 => by_message
                    .filter(|c| *c == ErrorClass::Billing)
                    .unwrap_or(ErrorClass::Auth),
                402 => ErrorClass::Billing,
                404 => ErrorClass::ModelNotFound,
                408 => ErrorClass::Timeout,
                413 => by_message
                    .filter(|c| *c == ErrorClass::ContextOverflow)
                    .unwrap_or(ErrorClass::PayloadTooLarge),
                429 => by_message
                    .filter(|c| *c == ErrorClass::Billing)
                    .unwrap_or(ErrorClass::RateLimit),
                529 => ErrorClass::Overloaded,
                503 if by_message == Some(ErrorClass::Overloaded) => ErrorClass::Overloaded,
                504 => ErrorClass::Timeout,
                500..=599 => ErrorClass::ServerError,
                400 | 422 => by_message
                    .filter(|c| !matches!(c, ErrorClass::RateLimit | ErrorClass::Overloaded))
                    .unwrap_or(ErrorClass::BadRequest),
                _ => by_message.unwrap_or(ErrorClass::Unknown),
            };
            (class, message.clone())
        }
        ProviderError::Connect { detail, .. } => (ErrorClass::Timeout, detail.clone()),
        ProviderError::Refused { .. } | ProviderError::UnknownHost { .. } => {
            (ErrorClass::Unreachable, error.to_string())
        }
        ProviderError::Stream {
            failure, detail, ..
        } => {
            let class = match failure {
                StreamFailure::Stalled => ErrorClass::Timeout,
                StreamFailure::Broken | StreamFailure::EndedEarly => ErrorClass::StreamCut,
                StreamFailure::ErrorEvent => classify_message(&detail.to_ascii_lowercase())
                    .unwrap_or(ErrorClass::ServerError),
            };
            (class, detail.clone())
        }
        ProviderError::Request { detail, .. } => (ErrorClass::BadRequest, detail.clone()),
    };
    classified.class = class;
    let lower = message.to_ascii_lowercase();
    if class == ErrorClass::ContextOverflow {
        classified.context_limit = context_limit(&lower);
    }
    if class == ErrorClass::MaxTokensTooLarge {
        classified.max_tokens_limit = max_tokens_limit(&lower);
    }
    classified
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_tool_call_output_is_told_apart_from_other_stream_errors() {
        let event = |detail: &str| ProviderError::Stream {
            provider: "openai".into(),
            failure: StreamFailure::ErrorEvent,
            detail: detail.into(),
        };
        assert!(is_malformed_output(&event(
            "The model produced output that does not match the expected peg-native format"
        )));
        assert!(is_malformed_output(&event(
            "Failed to parse tool call arguments"
        )));
        assert!(!is_malformed_output(&event("server overloaded")));
        let cut = ProviderError::Stream {
            provider: "openai".into(),
            failure: StreamFailure::Broken,
            detail: "failed to parse chunk".into(),
        };
        assert!(
            !is_malformed_output(&cut),
            "only the server's error event counts"
        );
        // The same error as the server's status line, before any output.
        let status = |status: u16| ProviderError::Http {
            provider: "openai".into(),
            status,
            message: "The model produced output that does not match the expected peg-native format"
                .into(),
            retry_after: None,
            limits: None,
        };
        assert!(is_malformed_output(&status(500)));
        assert!(!is_malformed_output(&status(401)), "not a server error");
    }

    fn http(status: u16, message: &str) -> ProviderError {
        ProviderError::Http {
            provider: "p".into(),
            status,
            message: message.into(),
            retry_after: None,
            limits: None,
        }
    }

    #[test]
    // A table of cases, one per line: longer is clearer than split.
    #[allow(clippy::too_many_lines)]
    fn statuses_and_messages_map_to_classes() {
        let cases = [
            (http(401, "Invalid API key"), ErrorClass::Auth),
            (http(402, "Payment required"), ErrorClass::Billing),
            (
                http(
                    429,
                    "You exceeded your current quota, please check your plan and billing",
                ),
                ErrorClass::Billing,
            ),
            (
                http(429, "Rate limit reached for requests"),
                ErrorClass::RateLimit,
            ),
            (http(529, "Overloaded"), ErrorClass::Overloaded),
            (
                http(503, "overloaded_error: Overloaded"),
                ErrorClass::Overloaded,
            ),
            (http(500, "Internal server error"), ErrorClass::ServerError),
            (http(504, "Gateway Timeout"), ErrorClass::Timeout),
            (
                http(413, "Request Entity Too Large"),
                ErrorClass::PayloadTooLarge,
            ),
            (
                http(404, "The model `gpt-9` does not exist"),
                ErrorClass::ModelNotFound,
            ),
            (
                http(
                    400,
                    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
                ),
                ErrorClass::ContextOverflow,
            ),
            (
                http(400, "prompt is too long: 210000 tokens > 200000 maximum"),
                ErrorClass::ContextOverflow,
            ),
            (
                http(
                    400,
                    "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens",
                ),
                ErrorClass::MaxTokensTooLarge,
            ),
            (
                http(400, "Your request was rejected by our content policy"),
                ErrorClass::ContentPolicy,
            ),
            (
                http(400, "messages: field required"),
                ErrorClass::BadRequest,
            ),
            (
                ProviderError::Connect {
                    provider: "p".into(),
                    url: "u".into(),
                    detail: "connection refused".into(),
                },
                ErrorClass::Timeout,
            ),
            (
                ProviderError::Stream {
                    provider: "p".into(),
                    failure: StreamFailure::Stalled,
                    detail: "no data for 180 s".into(),
                },
                ErrorClass::Timeout,
            ),
            (
                ProviderError::Stream {
                    provider: "p".into(),
                    failure: StreamFailure::Broken,
                    detail: "connection broke mid-stream".into(),
                },
                ErrorClass::StreamCut,
            ),
            (
                ProviderError::Stream {
                    provider: "p".into(),
                    failure: StreamFailure::ErrorEvent,
                    detail: "Overloaded".into(),
                },
                ErrorClass::Overloaded,
            ),
        ];
        for (error, class) in cases {
            assert_eq!(classify(&error).class, class, "{error}");
        }
    }

    #[test]
    fn limits_are_read_from_messages() {
        let overflow = classify(&http(
            400,
            "This model's maximum context length is 8,192 tokens. However, you requested 9000",
        ));
        assert_eq!(overflow.context_limit, Some(8192));
        let anthropic = classify(&http(
            400,
            "prompt is too long: 210000 tokens > 200000 maximum",
        ));
        assert_eq!(anthropic.context_limit, Some(200_000));
        let llama = classify(&http(
            400,
            "the request exceeds the available context size (4096 tokens), try increasing it",
        ));
        assert_eq!(llama.context_limit, Some(4096));
        let max = classify(&http(
            400,
            "max_tokens is too large: 50000. This model supports at most 16384 completion tokens",
        ));
        assert_eq!(max.max_tokens_limit, Some(16384));
        let anthropic_max = classify(&http(
            400,
            "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens",
        ));
        assert_eq!(anthropic_max.max_tokens_limit, Some(64000));
    }

    #[test]
    fn a_refusal_without_retry_after_waits_for_its_exhausted_window() {
        use crate::rate_limits::{LimitKind, LimitWindow, RateLimits};
        use std::time::SystemTime;
        let now = SystemTime::now();
        let limits = |remaining| RateLimits {
            observed_at: now,
            windows: vec![LimitWindow {
                kind: LimitKind::Requests,
                limit: Some(60),
                remaining: Some(remaining),
                resets_at: Some(now + Duration::from_secs(600)),
            }],
            retry_after: None,
        };
        let refused = |status, remaining| ProviderError::Http {
            provider: "p".into(),
            status,
            message: "Rate limit reached for requests".into(),
            retry_after: None,
            limits: Some(Box::new(limits(remaining))),
        };
        let wait = classify(&refused(429, 0))
            .retry_after
            .expect("the window's reset");
        assert!(
            wait > Duration::from_secs(590) && wait <= Duration::from_secs(600),
            "{wait:?}"
        );
        assert_eq!(
            classify(&refused(429, 5)).retry_after,
            None,
            "not exhausted"
        );
        assert_eq!(
            classify(&refused(500, 0)).retry_after,
            None,
            "not a refusal"
        );
    }

    #[test]
    fn every_class_says_what_to_do() {
        assert!(ErrorClass::RateLimit.retryable() && ErrorClass::RateLimit.rotate_key());
        assert!(
            ErrorClass::Auth.rotate_key()
                && !ErrorClass::Auth.retryable()
                && ErrorClass::Auth.fall_back()
        );
        assert!(ErrorClass::ContextOverflow.compress() && !ErrorClass::ContextOverflow.fall_back());
        assert!(!ErrorClass::BadRequest.retryable() && !ErrorClass::BadRequest.fall_back());
        assert!(ErrorClass::ModelNotFound.fall_back() && !ErrorClass::ModelNotFound.retryable());
    }
}
