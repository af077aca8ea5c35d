//! Retry delays: jittered exponential backoff (base × 2^(attempt-1), capped, ±50 %), or the
//! provider's `Retry-After` when it sent one (capped).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::RetryPolicy;

/// A jitter factor in [0.5, 1.5) from a cheap xorshift over the clock (no need for a
/// cryptographic source: it only spreads retries apart).
fn jitter() -> f64 {
    let mut x = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0x9E37_79B9, |d| d.as_nanos() as u64)
        | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    0.5 + (x % 10_000) as f64 / 10_000.0
}

/// The delay before retry number `attempt` (1 = the first retry).
pub fn delay(policy: &RetryPolicy, attempt: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(wait) = retry_after {
        return wait.min(Duration::from_secs(policy.retry_after_cap_secs));
    }
    let exponent = attempt.saturating_sub(1).min(20);
    let raw = policy
        .base_ms
        .saturating_mul(1u64 << exponent)
        .min(policy.cap_ms);
    Duration::from_millis((raw as f64 * jitter()) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_jittered_capped_and_honours_retry_after() {
        let policy = RetryPolicy {
            max_attempts: 3,
            base_ms: 2000,
            cap_ms: 60_000,
            retry_after_cap_secs: 60,
        };
        for attempt in 1..=8 {
            let raw = (2000u64 << (attempt - 1)).min(60_000) as f64;
            let d = delay(&policy, attempt, None).as_millis() as f64;
            assert!(d >= raw * 0.5 && d < raw * 1.5, "attempt {attempt}: {d} ms");
        }
        assert_eq!(
            delay(&policy, 1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            delay(&policy, 1, Some(Duration::from_secs(600))),
            Duration::from_secs(60)
        );
    }
}
