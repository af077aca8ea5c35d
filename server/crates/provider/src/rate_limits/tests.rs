//! Header parsing: durations, RFC 3339 times, HTTP dates, both providers' header sets, and
//! garbage left out without a crash.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(value).expect("value"),
        );
    }
    map
}

/// 2026-10-06T13:10:00Z.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_791_292_200)
}

#[test]
fn openai_durations_parse_in_every_form_it_writes() {
    let ms = Duration::from_millis;
    assert_eq!(parse_duration("1s"), Some(ms(1000)));
    assert_eq!(parse_duration("6m0s"), Some(ms(360_000)));
    assert_eq!(parse_duration("1h2m3.5s"), Some(ms(3_723_500)));
    assert_eq!(parse_duration("20ms"), Some(ms(20)));
    assert_eq!(parse_duration("7.66s"), Some(ms(7660)));
    assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
    assert_eq!(
        parse_duration("1500us"),
        Some(ms(1)).map(|d| d + Duration::from_micros(500))
    );
    assert_eq!(parse_duration(" 30 "), Some(ms(30_000)), "bare seconds");
    for garbage in [
        "", "s", "6x", "-1s", "1s-", "NaN", "inf", "1..2s", "m5", "5 m", "1e400",
    ] {
        assert_eq!(parse_duration(garbage), None, "{garbage:?}");
    }
}

#[test]
fn rfc3339_and_http_dates_parse() {
    assert_eq!(parse_rfc3339("2026-10-06T13:10:00Z"), Some(now()));
    assert_eq!(
        parse_rfc3339("2026-10-06T15:10:00+02:00"),
        Some(now()),
        "an offset is honoured"
    );
    assert_eq!(
        parse_rfc3339("2026-10-06T13:10:00.250Z"),
        Some(now() + Duration::from_millis(250))
    );
    assert_eq!(parse_rfc3339("2026-10-06 13:10"), None);
    assert_eq!(parse_rfc3339("tomorrow"), None);
    // Retry-After: seconds, fractions, every HTTP date format, and garbage.
    assert_eq!(
        parse_retry_after("600", now()),
        Some(Duration::from_secs(600))
    );
    assert_eq!(
        parse_retry_after("1.5", now()),
        Some(Duration::from_millis(1500))
    );
    let in_ten = "Tue, 06 Oct 2026 13:20:00 GMT";
    assert_eq!(
        parse_retry_after(in_ten, now()),
        Some(Duration::from_secs(600))
    );
    let rfc850 = "Tuesday, 06-Oct-26 13:20:00 GMT";
    assert_eq!(
        parse_retry_after(rfc850, now()),
        Some(Duration::from_secs(600))
    );
    let asctime = "Tue Oct  6 13:20:00 2026";
    assert_eq!(
        parse_retry_after(asctime, now()),
        Some(Duration::from_secs(600))
    );
    let past = "Tue, 06 Oct 2026 13:00:00 GMT";
    assert_eq!(
        parse_retry_after(past, now()),
        Some(Duration::ZERO),
        "no wait"
    );
    for garbage in ["soon", "-5", "", "Tue, 99 Oct 2026 13:20:00 GMT", "NaN"] {
        assert_eq!(parse_retry_after(garbage, now()), None, "{garbage:?}");
    }
}

#[test]
fn openai_headers_make_a_snapshot_with_shares_and_resets() {
    let limits = RateLimits::from_headers(
        &headers(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "15"),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-tokens", "6ms"),
        ]),
        now(),
    )
    .expect("a snapshot");
    assert_eq!(limits.observed_at, now());
    assert_eq!(limits.retry_after, None);
    let requests = limits.window(LimitKind::Requests).expect("requests");
    assert_eq!((requests.limit, requests.remaining), (Some(60), Some(15)));
    assert_eq!(requests.used_share(), Some(0.75));
    assert_eq!(requests.resets_at, Some(now() + Duration::from_secs(360)));
    let tokens = limits.window(LimitKind::Tokens).expect("tokens");
    assert_eq!(tokens.resets_at, Some(now() + Duration::from_millis(6)));
    assert_eq!(limits.binding().map(|w| w.kind), Some(LimitKind::Requests));
    assert_eq!(limits.clears_at(), None, "nothing is exhausted");
}

#[test]
fn anthropic_headers_make_a_snapshot_of_four_windows() {
    let limits = RateLimits::from_headers(
        &headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-10-06T13:11:00Z"),
            ("anthropic-ratelimit-tokens-limit", "80000"),
            ("anthropic-ratelimit-tokens-remaining", "20000"),
            ("anthropic-ratelimit-tokens-reset", "2026-10-06T13:10:30Z"),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "10000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-10-06T13:10:30Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "8000"),
            ("anthropic-ratelimit-output-tokens-remaining", "8000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2026-10-06T13:10:01Z",
            ),
            ("retry-after", "60"),
        ]),
        now(),
    )
    .expect("a snapshot");
    let kinds: Vec<LimitKind> = limits.windows.iter().map(|w| w.kind).collect();
    assert_eq!(kinds, LimitKind::ALL);
    let requests = limits.window(LimitKind::Requests).expect("requests");
    assert!(requests.exhausted());
    assert_eq!(requests.used_share(), Some(1.0));
    assert_eq!(limits.binding().map(|w| w.kind), Some(LimitKind::Requests));
    assert_eq!(
        limits
            .window(LimitKind::OutputTokens)
            .and_then(LimitWindow::used_share),
        Some(0.0)
    );
    // Retry-After says when, before the window's own reset.
    assert_eq!(limits.retry_after, Some(Duration::from_secs(60)));
    assert_eq!(limits.wait(now()), Some(Duration::from_secs(60)));
    let without = RateLimits {
        retry_after: None,
        ..limits
    };
    assert_eq!(without.wait(now()), Some(Duration::from_secs(60)));
    assert_eq!(
        without.wait(now() + Duration::from_secs(90)),
        Some(Duration::ZERO),
        "a reset in the past is no wait"
    );
}

#[test]
fn garbage_is_left_out_and_nothing_known_is_no_snapshot() {
    assert_eq!(RateLimits::from_headers(&headers(&[]), now()), None);
    let junk = headers(&[
        ("x-ratelimit-limit-requests", "-1"),
        ("x-ratelimit-remaining-requests", "lots"),
        ("x-ratelimit-reset-requests", "soon"),
        ("anthropic-ratelimit-tokens-limit", "1.5e3"),
        ("anthropic-ratelimit-tokens-reset", "yesterday"),
        ("retry-after", "whenever"),
        ("content-type", "text/event-stream"),
    ]);
    assert_eq!(RateLimits::from_headers(&junk, now()), None);
    // One good value among junk is kept alone.
    let mixed = headers(&[
        ("x-ratelimit-limit-tokens", "1000"),
        ("x-ratelimit-remaining-tokens", "-1"),
        ("x-ratelimit-reset-tokens", "1s"),
    ]);
    let limits = RateLimits::from_headers(&mixed, now()).expect("the limit is kept");
    let tokens = limits.window(LimitKind::Tokens).expect("tokens");
    assert_eq!((tokens.limit, tokens.remaining), (Some(1000), None));
    assert_eq!(tokens.used_share(), None, "no share without what remains");
    // A zero limit has no share; more left than the limit reads as nothing used.
    let zero = LimitWindow {
        kind: LimitKind::Requests,
        limit: Some(0),
        remaining: Some(0),
        resets_at: None,
    };
    assert_eq!(zero.used_share(), None);
    let over = LimitWindow {
        limit: Some(10),
        remaining: Some(50),
        ..zero
    };
    assert_eq!(over.used_share(), Some(0.0));
}

#[test]
fn retry_after_alone_and_its_millisecond_form_make_a_snapshot() {
    let alone = RateLimits::from_headers(&headers(&[("retry-after", "2")]), now())
        .expect("a wait is worth keeping");
    assert!(alone.windows.is_empty());
    assert_eq!(alone.wait(now()), Some(Duration::from_secs(2)));
    let ms = RateLimits::from_headers(&headers(&[("retry-after-ms", "1500")]), now())
        .expect("retry-after-ms");
    assert_eq!(ms.retry_after, Some(Duration::from_millis(1500)));
}

#[test]
fn resets_as_unix_times_are_read_as_times() {
    let seconds = headers(&[("x-ratelimit-reset-requests", "1791292260")]);
    let limits = RateLimits::from_headers(&seconds, now()).expect("snapshot");
    assert_eq!(
        limits.windows[0].resets_at,
        Some(now() + Duration::from_secs(60))
    );
    let millis = headers(&[("x-ratelimit-reset-requests", "1791292260000")]);
    let limits = RateLimits::from_headers(&millis, now()).expect("snapshot");
    assert_eq!(
        limits.windows[0].resets_at,
        Some(now() + Duration::from_secs(60))
    );
}

#[test]
fn waits_are_written_in_iso_8601() {
    assert_eq!(iso8601_duration(Duration::from_secs(600)), "PT600S");
    assert_eq!(iso8601_duration(Duration::from_millis(1500)), "PT1.5S");
    assert_eq!(iso8601_duration(Duration::from_millis(20)), "PT0.02S");
}

proptest! {
    /// No header value crashes the reader, whatever it holds.
    #[test]
    fn any_header_value_is_read_without_a_crash(value in "[ -~]{0,40}") {
        let _ = parse_duration(&value);
        let _ = parse_rfc3339(&value);
        let _ = parse_retry_after(&value, now());
        if let Ok(header) = HeaderValue::from_str(&value) {
            let mut map = HeaderMap::new();
            for name in ["x-ratelimit-reset-tokens", "anthropic-ratelimit-requests-reset",
                         "retry-after", "x-ratelimit-limit-requests"] {
                map.insert(HeaderName::from_static(name), header.clone());
            }
            let limits = RateLimits::from_headers(&map, now());
            if let Some(limits) = limits {
                let _ = limits.binding();
                let _ = limits.wait(now());
            }
        }
    }

    /// A duration written in Go's form reads back as itself.
    #[test]
    fn go_durations_round_trip(h in 0u64..48, m in 0u64..60, s in 0u64..60, ms in 0u64..1000) {
        let text = format!("{h}h{m}m{s}.{ms:03}s");
        let expected = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
        let parsed = parse_duration(&text).expect("parses");
        let difference = parsed.abs_diff(expected);
        prop_assert!(difference < Duration::from_micros(1), "{text}: {parsed:?}");
    }
}
