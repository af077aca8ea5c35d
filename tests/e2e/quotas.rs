//! Quotas and rate limits end to end: the mock answers with each wire API's rate-limit
//! headers; the client sees the windows on `usage_update`, the full snapshot as
//! `quota_update` when it opted in (and on `quota/read`), a refusal whose wait is beyond the
//! retry budget as `quotaExceeded` at once, and a short wait honoured.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply, MockUsage};

use crate::support::*;

/// Fast retries, so that only a wait the provider asked for takes time.
const FAST: &str = "retry_base_ms = 20\nretry_cap_ms = 200\n";

/// The wire APIs, as `TALARIA_PROVIDER` names them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    Chat,
    Responses,
    Anthropic,
}

impl Wire {
    fn set_up(self, env: &mut TestEnv) {
        match self {
            Wire::Chat => {}
            Wire::Responses => env
                .extra_env
                .push(("TALARIA_PROVIDER".into(), "openai-responses".into())),
            Wire::Anthropic => env.extra_env.extend([
                ("TALARIA_PROVIDER".to_string(), "anthropic".to_string()),
                ("ANTHROPIC_BASE_URL".to_string(), env.mock.base_url()),
                ("ANTHROPIC_API_KEY".to_string(), "anthropic-key".to_string()),
            ]),
        }
    }

    /// The pool a client sees its limits under.
    fn pool(self) -> &'static str {
        match self {
            Wire::Chat => "openai/mock-model",
            Wire::Responses => "openai-responses/mock-model",
            Wire::Anthropic => "anthropic/mock-model",
        }
    }

    /// The provider's headers for a requests window (`remaining` of `limit`, resetting in
    /// `reset_s`) and a tokens window, as it writes them.
    fn limits(self, limit: u64, remaining: u64, reset_s: u64) -> Vec<(String, String)> {
        let pairs = match self {
            Wire::Chat | Wire::Responses => vec![
                ("x-ratelimit-limit-requests", limit.to_string()),
                ("x-ratelimit-remaining-requests", remaining.to_string()),
                (
                    "x-ratelimit-reset-requests",
                    format!("{}m{}s", reset_s / 60, reset_s % 60),
                ),
                ("x-ratelimit-limit-tokens", "150000".into()),
                ("x-ratelimit-remaining-tokens", "149000".into()),
                ("x-ratelimit-reset-tokens", "400ms".into()),
            ],
            Wire::Anthropic => vec![
                ("anthropic-ratelimit-requests-limit", limit.to_string()),
                (
                    "anthropic-ratelimit-requests-remaining",
                    remaining.to_string(),
                ),
                ("anthropic-ratelimit-requests-reset", rfc3339_in(reset_s)),
                ("anthropic-ratelimit-tokens-limit", "48000".into()),
                ("anthropic-ratelimit-tokens-remaining", "47000".into()),
                ("anthropic-ratelimit-tokens-reset", rfc3339_in(1)),
                ("anthropic-ratelimit-input-tokens-limit", "40000".into()),
                ("anthropic-ratelimit-input-tokens-remaining", "39000".into()),
                ("anthropic-ratelimit-input-tokens-reset", rfc3339_in(1)),
                ("anthropic-ratelimit-output-tokens-limit", "8000".into()),
                ("anthropic-ratelimit-output-tokens-remaining", "8000".into()),
                ("anthropic-ratelimit-output-tokens-reset", rfc3339_in(1)),
            ],
        };
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

/// An RFC 3339 time `seconds` from now (whole seconds, as Anthropic writes it).
fn rfc3339_in(seconds: u64) -> String {
    let at = chrono::Utc::now() + chrono::Duration::seconds(i64::try_from(seconds).unwrap_or(0));
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Seconds from now until an RFC 3339 time.
fn seconds_until(text: &str) -> f64 {
    let at = chrono::DateTime::parse_from_rfc3339(text).expect("an RFC 3339 time");
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_milliseconds() as f64 / 1000.0
}

/// A streamed answer that reports its usage (a `usage_update` follows it).
fn answer(text: &str) -> MockReply {
    MockReply::Text {
        chunks: vec![text.into()],
        reasoning: Vec::new(),
        delay_ms: 0,
        usage: Some(MockUsage {
            prompt_tokens: 900,
            completion_tokens: 5,
            cached_tokens: 0,
        }),
        finish_reason: None,
    }
}

fn headed(reply: MockReply, headers: Vec<(String, String)>) -> MockReply {
    MockReply::WithHeaders {
        headers,
        reply: Box::new(reply),
    }
}

/// A 429 as each provider words it, with these headers.
fn refusal(wire: Wire, headers: Vec<(String, String)>) -> MockReply {
    let body = match wire {
        Wire::Anthropic => json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "Number of request tokens has exceeded your per-minute rate limit"}}),
        _ => json!({"error": {"message": "Rate limit reached for requests",
            "type": "requests", "code": "rate_limit_exceeded"}}),
    };
    MockReply::Error {
        status: 429,
        body: body.to_string(),
        headers,
    }
}

fn of_kind<'u>(updates: &'u [Value], kind: &str) -> Vec<&'u Value> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

/// The windows the last `usage_update` carried.
fn usage_windows(updates: &[Value]) -> Vec<Value> {
    let usage = of_kind(updates, "usage_update");
    let last = usage.last().expect("a usage_update");
    last["_meta"]["talaria"]["rateLimits"]["windows"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn window<'w>(windows: &'w [Value], name: &str) -> &'w Value {
    windows
        .iter()
        .find(|w| w["window"] == name)
        .unwrap_or_else(|| panic!("no {name} window in {windows:?}"))
}

#[tokio::test]
async fn every_wire_api_reports_its_rate_limits_on_usage_update() {
    for wire in [Wire::Chat, Wire::Responses, Wire::Anthropic] {
        let mut env = TestEnv::new(vec![]).await;
        wire.set_up(&mut env);
        env.mock
            .push(headed(answer("fine"), wire.limits(60, 45, 360)));
        let (mut agent, session) = env.session().await;
        let (response, updates) = prompt(&mut agent, &session, "hello").await;
        assert_eq!(stop_reason(&response), "end_turn", "{wire:?}: {response}");
        let windows = usage_windows(&updates);
        let requests = window(&windows, "requests");
        assert_eq!(requests["pool"], wire.pool(), "{wire:?}");
        assert_eq!(requests["usedShare"], 0.25, "{wire:?}");
        assert_eq!(
            (&requests["limit"], &requests["remaining"]),
            (&json!(60), &json!(45))
        );
        let resets = seconds_until(requests["resetsAt"].as_str().expect("resetsAt"));
        assert!(
            (340.0..=361.0).contains(&resets),
            "{wire:?}: resets in {resets} s"
        );
        assert!(window(&windows, "tokens")["usedShare"].is_number());
        if wire == Wire::Anthropic {
            assert_eq!(window(&windows, "output_tokens")["usedShare"], 0.0);
            assert!(window(&windows, "input_tokens")["resetsAt"].is_string());
        }
        // claude-agent-acp's shape too: the most used window.
        let usage = of_kind(&updates, "usage_update");
        let claude = &usage.last().expect("usage")["_meta"]["_claude/rateLimit"];
        assert_eq!(claude["status"], "allowed", "{wire:?}: {claude}");
        assert_eq!(claude["utilization"], 0.25);
        assert!(
            claude["resetsAt"]
                .as_u64()
                .is_some_and(|s| s > 1_700_000_000)
        );
        // A client that did not opt in never gets a `quota_update`.
        assert!(of_kind(&updates, "quota_update").is_empty(), "{wire:?}");
        assert_clean_stdout(&agent);
    }
}

/// `initialize` (opting in to quota updates) and a session; the `initialize` answer too.
async fn opted_in_session(env: &TestEnv) -> (AgentProcess, String, Value) {
    let mut agent = env.spawn().await;
    let capabilities = json!({"session": {"quota": {}}});
    let initialized = agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
        )
        .await
        .expect("initialize");
    let created = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session/new");
    let session = created["sessionId"].as_str().expect("id").to_string();
    (agent, session, initialized)
}

#[tokio::test]
async fn a_client_that_opts_in_gets_each_snapshot_as_quota_update_and_on_quota_read() {
    let mut env = TestEnv::new(vec![]).await;
    Wire::Anthropic.set_up(&mut env);
    let wire = Wire::Anthropic;
    env.mock
        .push(headed(answer("one"), wire.limits(50, 40, 60)));
    env.mock.push(headed(answer("two"), wire.limits(50, 5, 60)));
    let (mut agent, session, initialized) = opted_in_session(&env).await;
    assert_eq!(
        initialized["agentCapabilities"]["_meta"]["quota"],
        json!({}),
        "{initialized}"
    );
    let (_, updates) = prompt(&mut agent, &session, "one").await;
    let sent = of_kind(&updates, "quota_update");
    assert_eq!(sent.len(), 1, "{updates:?}");
    let first = sent[0].clone();
    let pool = &first["pools"][0];
    assert_eq!(pool["id"], "anthropic/mock-model");
    assert_eq!(pool["state"], "available");
    let meters: Vec<&str> = pool["meters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(
        meters,
        ["requests", "tokens", "input_tokens", "output_tokens"]
    );
    let requests = &pool["meters"][0];
    assert_eq!(requests["usedPercent"], 20.0);
    assert_eq!(requests["status"], "ok");
    assert_eq!(
        requests["limit"],
        json!({"value": "50", "unit": "requests"})
    );
    assert_eq!(
        requests["remaining"],
        json!({"value": "40", "unit": "requests"})
    );
    let resets = seconds_until(requests["resetsAt"].as_str().expect("resetsAt"));
    assert!((50.0..=61.0).contains(&resets), "resets in {resets} s");
    // `quota/read` answers the snapshot last sent.
    let read = agent
        .call("quota/read", json!({"sessionId": session}))
        .await
        .expect("quota/read");
    let mut expected = first.clone();
    if let Some(object) = expected.as_object_mut() {
        object.remove("sessionUpdate");
    }
    assert_eq!(read, expected);
    // The next answer nears the limit: a new full snapshot, stamped later.
    let (_, updates) = prompt(&mut agent, &session, "two").await;
    let sent = of_kind(&updates, "quota_update");
    assert_eq!(sent.len(), 1, "{updates:?}");
    let second = sent[0];
    assert_eq!(second["pools"][0]["meters"][0]["usedPercent"], 90.0);
    assert_eq!(second["pools"][0]["meters"][0]["status"], "warning");
    assert!(
        second["updatedAt"].as_str() > first["updatedAt"].as_str(),
        "{first} then {second}"
    );
    let latest = agent
        .call("quota/read", json!({}))
        .await
        .expect("quota/read without a session");
    assert_eq!(latest["pools"], second["pools"]);
    let unknown = agent
        .call("quota/read", json!({"sessionId": "no-such-session"}))
        .await;
    assert!(unknown.is_err(), "{unknown:?}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_retry_after_beyond_the_budget_ends_the_turn_at_once_with_quota_exceeded() {
    for wire in [Wire::Chat, Wire::Anthropic] {
        let mut env = TestEnv::new(vec![]).await;
        wire.set_up(&mut env);
        let mut headers = wire.limits(60, 0, 600);
        headers.push(("retry-after".into(), "600".into()));
        env.mock.push(refusal(wire, headers));
        // The default budget: `Retry-After` is honoured up to 60 s, three attempts. A retry
        // would wait at least a minute, past the prompt's wait.
        let (mut agent, session) = env.session().await;
        let (response, updates) = prompt(&mut agent, &session, "go").await;
        let error = &response["error"];
        assert_eq!(error["code"], -32003, "{wire:?}: {response}");
        let message = error["message"].as_str().expect("message");
        for words in [
            "rate limited",
            "requests limit",
            "0 of 60",
            "resets at",
            "retry_after_cap_secs",
        ] {
            assert!(message.contains(words), "{wire:?}: {words:?} in {message}");
        }
        let data = &error["data"];
        assert_eq!(data["poolId"], wire.pool(), "{wire:?}: {data}");
        assert_eq!(data["meterId"], "requests");
        assert_eq!(data["retryAfter"], "PT600S");
        let resets = seconds_until(data["resetsAt"].as_str().expect("resetsAt"));
        assert!(
            (580.0..=601.0).contains(&resets),
            "{wire:?}: resets in {resets} s"
        );
        assert_eq!(data["talaria"]["class"], "rate_limit");
        assert_eq!(data["talaria"]["status"], 429);
        assert_eq!(data["talaria"]["retryAfterSecs"], 600.0);
        assert_eq!(env.mock.requests().len(), 1, "{wire:?}: never asked again");
        // The refusal's limits reached the client before the answer.
        let usage = of_kind(&updates, "usage_update");
        let meta = &usage.last().expect("a usage_update with the refusal")["_meta"];
        assert_eq!(meta["_claude/rateLimit"]["status"], "rejected", "{meta}");
        assert_eq!(meta["talaria"]["rateLimits"]["retryAfterSecs"], 600.0);
        // The session goes on.
        env.mock.push(answer("later"));
        let (response, _) = prompt(&mut agent, &session, "again").await;
        assert_eq!(stop_reason(&response), "end_turn", "{wire:?}");
        assert_clean_stdout(&agent);
    }
}

#[tokio::test]
async fn an_opted_in_client_sees_the_refusing_pool_exhausted() {
    let env = TestEnv::new(vec![]).await;
    let mut headers = Wire::Chat.limits(60, 0, 600);
    headers.push(("retry-after".into(), "600".into()));
    env.mock.push(refusal(Wire::Chat, headers));
    let (mut agent, session, _) = opted_in_session(&env).await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(response["error"]["code"], -32003, "{response}");
    let sent = of_kind(&updates, "quota_update");
    let pool = &sent.last().expect("a quota_update")["pools"][0];
    assert_eq!(pool["state"], "exhausted", "{pool}");
    assert_eq!(pool["meters"][0]["status"], "exceeded");
    assert_eq!(response["error"]["data"]["poolId"], pool["id"]);
}

#[tokio::test]
async fn a_server_errors_headers_update_the_limits_but_it_is_no_refusal() {
    let env = TestEnv::new(vec![]).await;
    env.mock.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "unavailable"}}).to_string(),
        headers: Wire::Chat.limits(60, 30, 60),
    });
    env.mock
        .push(headed(answer("fine"), Wire::Chat.limits(60, 29, 60)));
    env.write_config(FAST);
    let (mut agent, session, _) = opted_in_session(&env).await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let sent = of_kind(&updates, "quota_update");
    assert_eq!(sent.len(), 2, "{updates:?}");
    for snapshot in sent {
        assert_eq!(snapshot["pools"][0]["state"], "available", "{snapshot}");
    }
    // No usage_update for the server error: only a limit's refusal reports one at once.
    let usage = of_kind(&updates, "usage_update");
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0]["_meta"]["_claude/rateLimit"]["status"], "allowed");
}

#[tokio::test]
async fn a_short_retry_after_is_honoured_and_the_turn_succeeds() {
    let mut env = TestEnv::new(vec![]).await;
    Wire::Anthropic.set_up(&mut env);
    let mut headers = Wire::Anthropic.limits(50, 0, 1);
    headers.push(("retry-after".into(), "1".into()));
    env.mock.push(refusal(Wire::Anthropic, headers));
    env.mock.push(headed(
        answer("after the wait"),
        Wire::Anthropic.limits(50, 49, 60),
    ));
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].received_at.expect("t1") - requests[0].received_at.expect("t0");
    assert!(waited >= Duration::from_millis(950), "waited {waited:?}");
    assert_eq!(
        chunks(&updates, "agent_message_chunk")
            .last()
            .map(String::as_str),
        Some("after the wait")
    );
    // The last usage_update shows the answer's own limits, not the refusal's.
    let windows = usage_windows(&updates);
    assert_eq!(window(&windows, "requests")["remaining"], 49);
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_refusal_without_retry_after_waits_for_its_window_to_reset() {
    let env = TestEnv::new(vec![]).await;
    env.mock
        .push(refusal(Wire::Chat, Wire::Chat.limits(60, 0, 1)));
    env.mock
        .push(headed(answer("reset"), Wire::Chat.limits(60, 59, 60)));
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].received_at.expect("t1") - requests[0].received_at.expect("t0");
    // The fast backoff would ask again within 300 ms; the window said a second.
    assert!(waited >= Duration::from_millis(800), "waited {waited:?}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_quota_error_body_ends_the_turn_with_quota_exceeded() {
    let env = TestEnv::new(vec![MockReply::Error {
        status: 429,
        body: json!({"error": {
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "type": "insufficient_quota", "code": "insufficient_quota"}})
        .to_string(),
        headers: Vec::new(),
    }])
    .await;
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "go").await;
    let error = &response["error"];
    assert_eq!(error["code"], -32003, "{response}");
    let message = error["message"].as_str().expect("message");
    assert!(
        message.contains("quota or credit") && message.contains("check the plan and billing"),
        "{message}"
    );
    assert_eq!(error["data"]["talaria"]["class"], "billing");
    assert!(
        error["data"].get("resetsAt").is_none(),
        "no reset was stated"
    );
    assert_eq!(
        env.mock.requests().len(),
        1,
        "a spent quota is not asked again"
    );
    assert_clean_stdout(&agent);
}
