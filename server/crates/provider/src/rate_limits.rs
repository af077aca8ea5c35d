//! A provider's rate limits as its response headers state them, read into a typed snapshot:
//! OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (resets as durations such
//! as `1s` or `6m0s`), Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,
//! output-tokens}-{limit,remaining,reset}` (resets as RFC 3339 times) and `retry-after`
//! (seconds or an HTTP date). A header that does not parse is left out, never an error.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

/// What a window counts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    Requests,
    Tokens,
    InputTokens,
    OutputTokens,
}

impl LimitKind {
    /// Every kind, in the order a snapshot lists them.
    pub const ALL: [LimitKind; 4] = [
        Self::Requests,
        Self::Tokens,
        Self::InputTokens,
        Self::OutputTokens,
    ];

    /// A stable identifier (snake case).
    pub fn id(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Tokens => "tokens",
            Self::InputTokens => "input_tokens",
            Self::OutputTokens => "output_tokens",
        }
    }

    /// A short human name.
    pub fn label(self) -> &'static str {
        match self {
            Self::Requests => "Requests",
            Self::Tokens => "Tokens",
            Self::InputTokens => "Input tokens",
            Self::OutputTokens => "Output tokens",
        }
    }

    /// What it counts, as a unit word.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            _ => "tokens",
        }
    }

    /// The word in OpenAI's header names (it reports no input/output split).
    fn openai_word(self) -> Option<&'static str> {
        match self {
            Self::Requests => Some("requests"),
            Self::Tokens => Some("tokens"),
            Self::InputTokens | Self::OutputTokens => None,
        }
    }

    /// The word in Anthropic's header names.
    fn anthropic_word(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Tokens => "tokens",
            Self::InputTokens => "input-tokens",
            Self::OutputTokens => "output-tokens",
        }
    }
}

/// One limit: how much it allows, how much is left, and when it resets. Each value only as
/// the provider stated it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitWindow {
    pub kind: LimitKind,
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// When the window resets (a relative reset is made absolute at the response's arrival).
    pub resets_at: Option<SystemTime>,
}

impl LimitWindow {
    /// The share of the limit used, from 0 to 1, when both the limit and what remains are
    /// known (a remainder above the limit reads as nothing used).
    pub fn used_share(&self) -> Option<f64> {
        let limit = self.limit.filter(|limit| *limit > 0)?;
        let remaining = self.remaining?.min(limit);
        Some((limit - remaining) as f64 / limit as f64)
    }

    /// Nothing is left of it.
    pub fn exhausted(&self) -> bool {
        self.remaining == Some(0)
    }
}

/// The rate limits one response reported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RateLimits {
    /// When the response carrying them arrived.
    pub observed_at: SystemTime,
    /// The windows the headers named, in [`LimitKind::ALL`]'s order.
    pub windows: Vec<LimitWindow>,
    /// How long the provider asked to wait (`retry-after`, `retry-after-ms`).
    pub retry_after: Option<Duration>,
}

impl RateLimits {
    /// The limits in `headers` as of `now`; `None` when they name none.
    pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Option<Self> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let windows: Vec<LimitWindow> = LimitKind::ALL
            .into_iter()
            .filter_map(|kind| window(kind, &text, now))
            .collect();
        let retry_after = text("retry-after")
            .and_then(|value| parse_retry_after(value, now))
            .or_else(|| {
                text("retry-after-ms")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .and_then(|ms| seconds(ms / 1000.0))
            });
        (!windows.is_empty() || retry_after.is_some()).then_some(Self {
            observed_at: now,
            windows,
            retry_after,
        })
    }

    /// The window of this kind, when the headers named it.
    pub fn window(&self, kind: LimitKind) -> Option<&LimitWindow> {
        self.windows.iter().find(|w| w.kind == kind)
    }

    /// The window that holds calls back: an exhausted one (the one resetting last), else the
    /// most used.
    pub fn binding(&self) -> Option<&LimitWindow> {
        let exhausted = self
            .windows
            .iter()
            .filter(|w| w.exhausted())
            .max_by_key(|w| w.resets_at);
        exhausted.or_else(|| {
            self.windows
                .iter()
                .filter_map(|w| w.used_share().map(|share| (share, w)))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, w)| w)
        })
    }

    /// When a call may succeed again: after `retry-after`, else when the last exhausted
    /// window resets; `None` when nothing says.
    pub fn clears_at(&self) -> Option<SystemTime> {
        if let Some(wait) = self.retry_after {
            return self.observed_at.checked_add(wait);
        }
        self.windows
            .iter()
            .filter(|w| w.exhausted())
            .filter_map(|w| w.resets_at)
            .max()
    }

    /// How long from `now` until [`RateLimits::clears_at`].
    pub fn wait(&self, now: SystemTime) -> Option<Duration> {
        self.clears_at()
            .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO))
    }
}

/// One kind's window from the headers (OpenAI's names first, then Anthropic's).
fn window<'h>(
    kind: LimitKind,
    text: &impl Fn(&str) -> Option<&'h str>,
    now: SystemTime,
) -> Option<LimitWindow> {
    let mut names = Vec::new();
    if let Some(word) = kind.openai_word() {
        names.push([
            format!("x-ratelimit-limit-{word}"),
            format!("x-ratelimit-remaining-{word}"),
            format!("x-ratelimit-reset-{word}"),
        ]);
    }
    let word = kind.anthropic_word();
    names.push([
        format!("anthropic-ratelimit-{word}-limit"),
        format!("anthropic-ratelimit-{word}-remaining"),
        format!("anthropic-ratelimit-{word}-reset"),
    ]);
    let count = |name: &str| text(name).and_then(parse_count);
    let reset = |name: &str| text(name).and_then(|value| parse_reset(value, now));
    names.iter().find_map(|[limit, remaining, resets]| {
        let window = LimitWindow {
            kind,
            limit: count(limit),
            remaining: count(remaining),
            resets_at: reset(resets),
        };
        let any = window.limit.is_some() || window.remaining.is_some();
        (any || window.resets_at.is_some()).then_some(window)
    })
}

/// A whole, non-negative count (Azure's `-1` for "unknown" is left out).
fn parse_count(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Seconds as a duration, when they are a finite, non-negative number.
fn seconds(value: f64) -> Option<Duration> {
    if value.is_finite() && value >= 0.0 {
        Duration::try_from_secs_f64(value).ok()
    } else {
        None
    }
}

/// A duration as OpenAI writes it (`1s`, `6m0s`, `1h2m3.5s`, `20ms`; Go's units), or a bare
/// number of seconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(value) = text.parse::<f64>() {
        return seconds(value);
    }
    let mut total = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest.get(..number_end)?.parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    seconds(total)
}

/// An RFC 3339 time (`2026-10-06T18:00:00Z`).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(SystemTime::from)
}

/// A reset as either provider writes it: an RFC 3339 time, a duration from `now`, or a bare
/// number — seconds from now, or (when it is that large) a Unix time in seconds or
/// milliseconds, as some compatible servers send.
fn parse_reset(text: &str, now: SystemTime) -> Option<SystemTime> {
    if let Some(at) = parse_rfc3339(text) {
        return Some(at);
    }
    if let Ok(number) = text.trim().parse::<f64>() {
        let epoch = if number >= 1e12 {
            seconds(number / 1000.0)
        } else if number >= 1e9 {
            seconds(number)
        } else {
            None
        };
        if let Some(since_epoch) = epoch {
            return UNIX_EPOCH.checked_add(since_epoch);
        }
    }
    now.checked_add(parse_duration(text)?)
}

/// `retry-after`: delta-seconds (fractions allowed) or an HTTP date, as a wait from `now` (a
/// date in the past is no wait).
pub fn parse_retry_after(text: &str, now: SystemTime) -> Option<Duration> {
    let text = text.trim();
    if let Ok(value) = text.parse::<f64>() {
        return seconds(value);
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A duration in ISO 8601 (`PT600S`, `PT1.5S`), as the ACP quota draft writes waits.
pub fn iso8601_duration(wait: Duration) -> String {
    let millis = wait.subsec_millis();
    if millis == 0 {
        format!("PT{}S", wait.as_secs())
    } else {
        let fraction = format!("{millis:03}");
        format!("PT{}.{}S", wait.as_secs(), fraction.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests;
