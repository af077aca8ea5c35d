//! The rate limits a test call's answer stated, in the words `talaria doctor --call` shows
//! them: each window's use and when it resets.

use std::time::{Duration, SystemTime};

use talaria_provider::RateLimits;

/// From this share of a window used, the doctor warns.
const NEARLY_USED: f64 = 0.9;

/// One line per window, then the wait the provider asked for.
pub fn lines(limits: &RateLimits, now: SystemTime) -> Vec<String> {
    let mut lines: Vec<String> = limits
        .windows
        .iter()
        .map(|window| {
            let mut line = format!("{}:", window.kind.id());
            match (window.remaining, window.limit) {
                (Some(remaining), Some(limit)) => {
                    line.push_str(&format!(" {remaining} of {limit} left"));
                }
                (Some(remaining), None) => line.push_str(&format!(" {remaining} left")),
                (None, Some(limit)) => line.push_str(&format!(" limit {limit}")),
                (None, None) => {}
            }
            if let Some(share) = window.used_share() {
                line.push_str(&format!(" ({:.0}% used)", share * 100.0));
            }
            if let Some(at) = window.resets_at {
                line.push_str(&format!("; resets {}", when(at, now)));
            }
            line
        })
        .collect();
    if let Some(wait) = limits.retry_after {
        lines.push(format!("retry after {}", words(wait)));
    }
    lines
}

/// Whether a window is nearly used up (or is), so the doctor warns.
pub fn nearly_used(limits: &RateLimits) -> bool {
    limits
        .windows
        .iter()
        .any(|w| w.exhausted() || w.used_share().is_some_and(|s| s >= NEARLY_USED))
}

/// A reset time: how far away, and the time in UTC.
fn when(at: SystemTime, now: SystemTime) -> String {
    let time = chrono::DateTime::<chrono::Utc>::from(at).format("%H:%M:%S UTC");
    match at.duration_since(now) {
        Ok(wait) if wait >= Duration::from_secs(1) => format!("in {} ({time})", words(wait)),
        _ => format!("now ({time})"),
    }
}

/// A wait in words: seconds, minutes or hours.
fn words(wait: Duration) -> String {
    let seconds = wait.as_secs_f64();
    if seconds < 120.0 {
        format!("{} s", seconds.round())
    } else if seconds < 7200.0 {
        format!("{} min", (seconds / 60.0).round())
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use talaria_provider::{LimitKind, LimitWindow};

    use super::*;

    #[test]
    fn each_window_is_a_line_with_its_use_and_reset() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_791_292_200);
        let limits = RateLimits {
            observed_at: now,
            windows: vec![
                LimitWindow {
                    kind: LimitKind::Requests,
                    limit: Some(60),
                    remaining: Some(45),
                    resets_at: Some(now + Duration::from_secs(360)),
                },
                LimitWindow {
                    kind: LimitKind::Tokens,
                    limit: None,
                    remaining: Some(10),
                    resets_at: Some(now),
                },
            ],
            retry_after: Some(Duration::from_secs(30)),
        };
        assert_eq!(
            lines(&limits, now),
            [
                "requests: 45 of 60 left (25% used); resets in 6 min (13:16:00 UTC)",
                "tokens: 10 left; resets now (13:10:00 UTC)",
                "retry after 30 s",
            ]
        );
        assert!(!nearly_used(&limits));
        let mut spent = limits;
        spent.windows[0].remaining = Some(3);
        assert!(nearly_used(&spent));
    }
}
