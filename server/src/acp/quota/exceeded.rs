//! A turn a provider's limit refused, as the prompt's error: the quotas draft's
//! `quotaExceeded` (its placeholder code, and `data` naming the pool, the meter, when it
//! resets and how long to wait), with Talaria's own `data.talaria` beside it.

use serde_json::{Map, Value};
use talaria_engine::CallError;
use talaria_protocol::acp;
use talaria_provider::{ProviderError, rate_limits::iso8601_duration};

use super::snapshot::rfc3339;

/// The draft's code for a request a limit refused (a placeholder until ACP assigns one).
pub const QUOTA_EXCEEDED: i32 = -32003;

/// The error for a call a limit refused; `None` for any other failure. `talaria` is the
/// `data.talaria` every turn error carries.
pub fn quota_exceeded(failed: &CallError, mut talaria: Map<String, Value>) -> Option<acp::Error> {
    let CallError::LimitReached { pool, source, .. } = failed else {
        return None;
    };
    let mut data = Map::new();
    let retry_after = match source {
        ProviderError::Http { retry_after, .. } => *retry_after,
        _ => None,
    };
    if let Some(limits) = source.limits() {
        data.insert("poolId".into(), pool.clone().into());
        let binding = limits.binding();
        if let Some(window) = binding {
            data.insert("meterId".into(), window.kind.id().into());
        }
        let resets = limits
            .clears_at()
            .or_else(|| binding.and_then(|w| w.resets_at));
        if let Some(at) = resets {
            let at = rfc3339(at);
            data.insert("resetsAt".into(), at.clone().into());
            talaria.insert("resetsAt".into(), at.into());
        }
    }
    if let Some(wait) = retry_after {
        data.insert("retryAfter".into(), iso8601_duration(wait).into());
        talaria.insert("retryAfterSecs".into(), wait.as_secs_f64().into());
    }
    data.insert("talaria".into(), Value::Object(talaria));
    Some(acp::Error::new(QUOTA_EXCEEDED, failed.to_string()).data(Value::Object(data)))
}
