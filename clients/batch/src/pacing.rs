//! Pacing a batch before its provider's limits, shared by every task on one agent: the
//! windows each session's `usage_update` reports (`_meta.talaria.rateLimits`) and the resets
//! of the refusals. A task waits to start while a window is nearly spent, until it resets; a
//! task a rate limit refused runs again after the reset instead of failing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use talaria_util::lock;

/// A window is nearly spent when this share of it or less is left (or a single unit).
const LOW_SHARE: f64 = 0.05;

/// The most times a task a rate limit refused runs again.
pub const MAX_RERUNS: u32 = 5;

/// How long a task a rate limit refused waits when the agent did not say when it resets.
pub const UNKNOWN_RESET_WAIT: Duration = Duration::from_secs(60);

/// What one window said last.
#[derive(Debug, Clone, PartialEq)]
struct Window {
    limit: Option<u64>,
    remaining: Option<u64>,
    resets_at: Option<SystemTime>,
}

impl Window {
    /// Little or nothing is left of it.
    fn low(&self) -> bool {
        let Some(remaining) = self.remaining else {
            return false;
        };
        let floor = self
            .limit
            .map_or(1, |limit| ((limit as f64 * LOW_SHARE) as u64).max(1));
        remaining <= floor
    }
}

/// Why a task waits, and until when.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    pub until: SystemTime,
    /// The window that holds (`openai/gpt-4.1 requests`), or the refusal.
    pub why: String,
}

/// The run's view of its provider's limits.
#[derive(Debug, Default)]
pub struct Pacer {
    windows: Mutex<HashMap<String, Window>>,
    /// A refusal said nothing may run before this.
    refused_until: Mutex<Option<SystemTime>>,
    quiet: AtomicBool,
}

impl Pacer {
    /// Says nothing on stderr when it holds tasks back.
    pub fn quiet(&self, quiet: bool) {
        self.quiet.store(quiet, Ordering::Relaxed);
    }

    /// Takes the windows of a `usage_update` (its `_meta.talaria.rateLimits.windows`).
    pub fn observe(&self, update: &Value) {
        let Some(windows) = update["_meta"]["talaria"]["rateLimits"]["windows"].as_array() else {
            return;
        };
        let mut known = lock(&self.windows);
        for window in windows {
            let name = format!(
                "{} {}",
                window["pool"].as_str().unwrap_or("?"),
                window["window"].as_str().unwrap_or("?")
            );
            let resets_at = window["resetsAt"].as_str().and_then(parse_time);
            known.insert(
                name,
                Window {
                    limit: window["limit"].as_u64(),
                    remaining: window["remaining"].as_u64(),
                    resets_at,
                },
            );
        }
    }

    /// A rate limit refused a task: nothing starts before `until`.
    pub fn refused(&self, until: SystemTime) {
        let mut refused = lock(&self.refused_until);
        *refused = Some(refused.map_or(until, |known| known.max(until)));
    }

    /// What holds a new task back at `now`: a refusal not yet over, or a nearly spent window
    /// that has not reset (the one resetting last); `None` when it may start.
    pub fn hold(&self, now: SystemTime) -> Option<Hold> {
        let refusal = lock(&self.refused_until)
            .filter(|until| *until > now)
            .map(|until| Hold {
                until,
                why: "a rate limit refused a task".into(),
            });
        let windows = lock(&self.windows);
        let low = windows
            .iter()
            .filter(|(_, w)| w.low())
            .filter_map(|(name, w)| w.resets_at.filter(|at| *at > now).map(|at| (name, w, at)))
            .max_by_key(|(_, _, at)| *at)
            .map(|(name, w, until)| Hold {
                until,
                why: format!(
                    "{name}: {} of {} left",
                    w.remaining.unwrap_or(0),
                    w.limit.map_or_else(|| "?".to_string(), |l| l.to_string())
                ),
            });
        match (refusal, low) {
            (Some(a), Some(b)) => Some(if a.until >= b.until { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// Waits until nothing holds a new task back.
    pub async fn ready(&self) {
        while let Some(hold) = self.hold(SystemTime::now()) {
            let wait = hold
                .until
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            if !self.quiet.load(Ordering::Relaxed) {
                eprintln!(
                    "talaria batch: waiting {:.1} s for the rate limits to reset ({})",
                    wait.as_secs_f64(),
                    hold.why
                );
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// An RFC 3339 time.
pub fn parse_time(text: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rfc3339(at: SystemTime) -> String {
        chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339()
    }

    fn usage(remaining: u64, limit: u64, resets_at: SystemTime) -> Value {
        json!({"sessionUpdate": "usage_update", "used": 1, "size": 10, "_meta": {"talaria": {
            "rateLimits": {"windows": [{"pool": "openai/m", "window": "requests",
                "limit": limit, "remaining": remaining, "resetsAt": rfc3339(resets_at)}]}}}})
    }

    #[test]
    fn a_nearly_spent_window_holds_tasks_until_it_resets() {
        let now = SystemTime::now();
        let pacer = Pacer::default();
        assert_eq!(pacer.hold(now), None);
        pacer.observe(&usage(30, 60, now + Duration::from_secs(10)));
        assert_eq!(pacer.hold(now), None, "half left");
        pacer.observe(&usage(1, 1000, now + Duration::from_secs(10)));
        let hold = pacer.hold(now).expect("held");
        assert!(
            hold.why.contains("openai/m requests: 1 of 1000 left"),
            "{hold:?}"
        );
        assert!(hold.until > now + Duration::from_secs(9));
        assert_eq!(pacer.hold(now + Duration::from_secs(11)), None, "reset");
        // 5 % of the limit is nearly spent too; more is not.
        pacer.observe(&usage(50, 1000, now + Duration::from_secs(10)));
        assert!(pacer.hold(now).is_some());
        pacer.observe(&usage(51, 1000, now + Duration::from_secs(10)));
        assert_eq!(pacer.hold(now), None);
        // Updates without limits change nothing.
        pacer.observe(&json!({"sessionUpdate": "usage_update", "used": 1, "size": 2}));
        assert_eq!(pacer.hold(now), None);
    }

    #[test]
    fn a_refusal_holds_until_its_reset() {
        let now = SystemTime::now();
        let pacer = Pacer::default();
        pacer.refused(now + Duration::from_secs(5));
        pacer.refused(now + Duration::from_secs(2));
        let hold = pacer.hold(now).expect("held");
        assert_eq!(hold.until, now + Duration::from_secs(5), "the later reset");
        assert_eq!(pacer.hold(now + Duration::from_secs(6)), None);
    }
}
