//! Why a model call failed, after the whole recovery stack: typed, with the provider's own
//! error kept as the source (the turn, the side tasks and the edge read it, never a string).

use talaria_compress::CompressError;
use talaria_provider::ProviderError;
use talaria_provider::classify::ErrorClass;

/// A model call that failed for good (the sink has already been told).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The request cannot be made to fit the window; nothing was sent.
    #[error(
        "the request needs about {needed} tokens, but the model's context window is {window} \
         ({limit} with room for the answer) and it could not be shortened enough; nothing was \
         sent. Start a new session, or use a model with a larger window"
    )]
    DoesNotFit {
        needed: u64,
        window: u64,
        limit: u64,
    },
    /// Every key of the target failed recently and no fallback is left.
    #[error("every API key of {label} is cooling down after failures")]
    KeysCoolingDown { label: String },
    /// The provider said the conversation is too long, and compacting it failed.
    #[error(
        "{label}: the conversation does not fit the model's context window, and compacting it \
         failed ({source}); start a new session or use a model with a larger window"
    )]
    CompactionFailed {
        label: String,
        #[source]
        source: CompressError,
    },
    /// The provider kept saying the conversation is too long after every shrink.
    #[error(
        "{label}: the conversation still does not fit after {attempts} attempts to shrink it \
         ({source})"
    )]
    StillTooLarge {
        label: String,
        attempts: u32,
        #[source]
        source: ProviderError,
    },
    /// The answer broke off after output was shown: it cannot be restarted unseen.
    #[error(
        "The answer from {label} was interrupted after it had started ({source}). What was \
         shown is incomplete; ask again to continue."
    )]
    CutAfterOutput {
        label: String,
        #[source]
        source: ProviderError,
    },
    /// A provider's limit refused the call (a rate limit, or the account's quota), and it
    /// does not clear within the retry budget or retries are spent. `detail` names the limit
    /// and when it resets.
    #[error("{label}: {detail}")]
    LimitReached {
        label: String,
        /// The pool of limits it belongs to (see [`crate::LimitsView::pool`]).
        pool: String,
        class: ErrorClass,
        detail: String,
        #[source]
        source: ProviderError,
    },
    /// The provider failed, retries and fallbacks are exhausted.
    #[error("{label}: {} — {source}", .class.describe())]
    Provider {
        label: String,
        class: ErrorClass,
        #[source]
        source: ProviderError,
    },
    /// The chain was empty.
    #[error("no model could be reached")]
    NoModel,
}

impl CallError {
    /// The provider's error behind this failure, if one was.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            Self::StillTooLarge { source, .. }
            | Self::CutAfterOutput { source, .. }
            | Self::LimitReached { source, .. }
            | Self::Provider { source, .. } => Some(source),
            Self::DoesNotFit { .. }
            | Self::KeysCoolingDown { .. }
            | Self::CompactionFailed { .. }
            | Self::NoModel => None,
        }
    }

    /// The class of the provider's failure, when it was classified.
    pub fn class(&self) -> Option<ErrorClass> {
        match self {
            Self::Provider { class, .. } | Self::LimitReached { class, .. } => Some(*class),
            Self::StillTooLarge { .. } => Some(ErrorClass::ContextOverflow),
            _ => None,
        }
    }
}

/// Whether a class of failure is a limit refusing the call (a rate limit, or the account's
/// quota or credit).
pub(crate) fn is_limit(class: ErrorClass) -> bool {
    matches!(class, ErrorClass::RateLimit | ErrorClass::Billing)
}

impl CallError {
    /// The failure of a call a limit refused; `budget` is the retry budget in seconds when the
    /// provider's wait was beyond it (the call was not asked again).
    pub(crate) fn limit_reached(
        label: String,
        pool: String,
        class: ErrorClass,
        source: ProviderError,
        budget: Option<u64>,
    ) -> Self {
        let detail = limit_detail(class, &source, budget, std::time::SystemTime::now());
        Self::LimitReached {
            label,
            pool,
            class,
            detail,
            source,
        }
    }
}

/// Which limit refused a call and when it resets, in words.
fn limit_detail(
    class: ErrorClass,
    source: &ProviderError,
    budget: Option<u64>,
    now: std::time::SystemTime,
) -> String {
    let limits = source.limits();
    let which = match limits.and_then(talaria_provider::RateLimits::binding) {
        Some(window) => {
            let mut which = format!("the {} limit", window.kind.label().to_lowercase());
            if let (Some(limit), Some(remaining)) = (window.limit, window.remaining) {
                which.push_str(&format!(
                    " ({remaining} of {limit} {} left)",
                    window.kind.unit()
                ));
            }
            which
        }
        None if class == ErrorClass::Billing => "the account's quota or credit".to_string(),
        None => "a rate limit".to_string(),
    };
    let resets = limits.and_then(|limits| {
        limits
            .clears_at()
            .or_else(|| limits.binding().and_then(|w| w.resets_at))
    });
    let when = match resets {
        Some(at) => format!("it resets at {}", reset_words(at, now)),
        None if class == ErrorClass::Billing => {
            "the provider gave no reset time: check the plan and billing".to_string()
        }
        None => "the provider did not say when it resets".to_string(),
    };
    let mut detail = format!("{} — {which} was reached; {when}", class.describe());
    if let Some(budget) = budget {
        detail.push_str(&format!(
            "; not retried, since that is beyond the retry budget (retry_after_cap_secs = {budget})"
        ));
    }
    detail.push_str(&format!(" ({source})"));
    detail
}

/// A reset time as a user reads it: the UTC time and how far away it is.
fn reset_words(at: std::time::SystemTime, now: std::time::SystemTime) -> String {
    let time = chrono::DateTime::<chrono::Utc>::from(at).format("%Y-%m-%d %H:%M:%S UTC");
    let seconds = at.duration_since(now).map_or(0, |d| d.as_secs());
    let away = match seconds {
        0 => "now".to_string(),
        1..=119 => format!("in {seconds} s"),
        120..=7199 => format!("in {} min", seconds.div_ceil(60)),
        _ => format!("in {:.1} h", seconds as f64 / 3600.0),
    };
    format!("{time} ({away})")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use talaria_provider::{LimitKind, LimitWindow, RateLimits};

    use super::*;

    fn refusal(limits: Option<RateLimits>, message: &str) -> ProviderError {
        ProviderError::Http {
            provider: "openai".into(),
            status: 429,
            message: message.into(),
            retry_after: limits.as_ref().and_then(|l| l.retry_after),
            limits: limits.map(Box::new),
        }
    }

    #[test]
    fn a_limit_refusal_names_the_limit_and_its_reset() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_791_292_200);
        let limits = RateLimits {
            observed_at: now,
            windows: vec![
                LimitWindow {
                    kind: LimitKind::Requests,
                    limit: Some(60),
                    remaining: Some(0),
                    resets_at: Some(now + Duration::from_secs(30)),
                },
                LimitWindow {
                    kind: LimitKind::Tokens,
                    limit: Some(1000),
                    remaining: Some(900),
                    resets_at: Some(now + Duration::from_secs(2)),
                },
            ],
            retry_after: Some(Duration::from_secs(600)),
        };
        let error = refusal(Some(limits), "Too Many Requests: slow down");
        let detail = limit_detail(ErrorClass::RateLimit, &error, Some(60), now);
        assert!(
            detail.starts_with("rate limited — the requests limit (0 of 60 requests left)"),
            "{detail}"
        );
        assert!(
            detail.contains("it resets at 2026-10-06 13:20:00 UTC (in 10 min)"),
            "{detail}"
        );
        assert!(detail.contains("retry_after_cap_secs = 60"), "{detail}");
        assert!(detail.contains("slow down"), "{detail}");
        let quota = refusal(None, "You exceeded your current quota");
        let detail = limit_detail(ErrorClass::Billing, &quota, None, now);
        assert!(
            detail.contains("the account's quota or credit was reached")
                && detail.contains("check the plan and billing"),
            "{detail}"
        );
        assert!(!detail.contains("retry budget"), "{detail}");
    }
}
