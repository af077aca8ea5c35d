//! How fast a model server on this machine generates, measured from its answers, and the
//! output cap that keeps one answer within a few minutes at that speed (unless the user set
//! `max_output_tokens`). A server's speed is a fact of the machine: every session of the
//! process shares one measure per server and model.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// The longest an answer should take at the measured speed.
pub(crate) const ANSWER_BUDGET: Duration = Duration::from_secs(180);
/// The cap before any answer was measured (as before: a bound, not a budget).
pub(crate) const UNMEASURED_CAP: u32 = 4096;
/// The cap never goes below this (a tool call with a file's content must fit).
const MIN_CAP: u32 = 512;
/// Nor above this.
const MAX_CAP: u32 = 16_384;
/// Answers shorter than this say little about the speed.
const MIN_SAMPLE_TOKENS: u64 = 16;

/// One server's measured speed, in tenths of a token per second (0: not measured yet).
#[derive(Debug, Default)]
pub struct Pace {
    tenths_per_second: AtomicU32,
}

static PACES: LazyLock<Mutex<HashMap<String, Arc<Pace>>>> = LazyLock::new(Mutex::default);

impl Pace {
    /// The shared measure of the server at `base_url` serving `model`.
    pub fn of(base_url: &str, model: &str) -> Arc<Self> {
        let mut paces = talaria_util::lock(&PACES);
        paces
            .entry(format!("{base_url} {model}"))
            .or_default()
            .clone()
    }

    /// An answer of `tokens` output tokens took `generating` from its first to its last
    /// token: the measure moves halfway toward it (one slow answer does not halve the cap).
    pub fn observe(&self, tokens: u64, generating: Duration) {
        if tokens < MIN_SAMPLE_TOKENS || generating.is_zero() {
            return;
        }
        let measured = (tokens as f64 / generating.as_secs_f64() * 10.0).min(f64::from(u32::MAX));
        let before = self.tenths_per_second.load(Ordering::Relaxed);
        let next = if before == 0 {
            measured
        } else {
            (f64::from(before) + measured) / 2.0
        };
        self.tenths_per_second
            .store(next.round().max(1.0) as u32, Ordering::Relaxed);
    }

    /// The output cap for the next answer.
    pub fn cap(&self) -> u32 {
        let tenths = self.tenths_per_second.load(Ordering::Relaxed);
        if tenths == 0 {
            return UNMEASURED_CAP;
        }
        let tokens = f64::from(tenths) / 10.0 * ANSWER_BUDGET.as_secs_f64();
        (tokens as u32).clamp(MIN_CAP, MAX_CAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_follows_the_measured_speed_within_bounds() {
        let pace = Pace::default();
        assert_eq!(pace.cap(), UNMEASURED_CAP);
        pace.observe(400, Duration::from_secs(50)); // 8 tokens/s on one thread
        assert_eq!(pace.cap(), 1440);
        pace.observe(5, Duration::from_secs(10));
        assert_eq!(pace.cap(), 1440, "too short to say");
        pace.observe(2000, Duration::from_secs(100)); // 20 tokens/s: halfway to it
        assert_eq!(pace.cap(), 2520);
        pace.observe(100, Duration::from_secs(100));
        pace.observe(100, Duration::from_secs(100));
        pace.observe(100, Duration::from_secs(100));
        assert_eq!(pace.cap(), 512, "never below the floor");
        let fast = Pace::default();
        fast.observe(10_000, Duration::from_secs(10));
        assert_eq!(fast.cap(), 16_384);
    }

    #[test]
    fn one_server_and_model_share_one_measure() {
        let a = Pace::of("http://127.0.0.1:8080/v1", "qwen");
        let b = Pace::of("http://127.0.0.1:8080/v1", "qwen");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(
            &a,
            &Pace::of("http://127.0.0.1:8081/v1", "qwen")
        ));
    }
}
