//! The fault matrix: each case asserts what the mock saw and what the client saw, then checks
//! that the next prompt works.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

/// Fast retries for tests (the defaults are 2 s base, 60 s cap).
const FAST: &str = "retry_base_ms = 20\nretry_cap_ms = 200\n";

fn error(status: u16, message: &str, headers: Vec<(&str, &str)>) -> MockReply {
    MockReply::Error {
        status,
        body: json!({"error": {"message": message}}).to_string(),
        headers: headers
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Texts of the notices the client saw (as thoughts or messages, since this client does not
/// advertise ACP notices).
fn notices(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .filter(|t| t.contains("[warning]") || t.contains("[info]") || t.contains("[error]"))
        .map(str::to_string)
        .collect()
}

async fn then_a_prompt_works(
    env: &TestEnv,
    agent: &mut talaria_harness::AgentProcess,
    session: &str,
) {
    env.mock.push(MockReply::text(&["all good"]));
    let (response, updates) = prompt(agent, session, "still there?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(chunks(&updates, "agent_message_chunk"), ["all good"]);
    assert_clean_stdout(agent);
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_honoured() {
    let env = TestEnv::new(vec![
        error(429, "Rate limit reached", vec![("retry-after", "1")]),
        MockReply::text(&["after the wait"]),
    ])
    .await;
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].received_at.expect("t1") - requests[0].received_at.expect("t0");
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After honoured: waited {waited:?}"
    );
    let seen = notices(&updates);
    assert!(
        seen.iter()
            .any(|n| n.contains("rate limited") && n.contains("retrying in 1.0 s")),
        "{seen:?}"
    );
    assert_eq!(
        chunks(&updates, "agent_message_chunk")
            .last()
            .map(String::as_str),
        Some("after the wait")
    );
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff() {
    let env = TestEnv::new(vec![
        error(500, "boom", vec![]),
        error(502, "bad gateway", vec![]),
        MockReply::text(&["third time"]),
    ])
    .await;
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(env.mock.requests().len(), 3);
    let seen = notices(&updates);
    assert_eq!(
        seen.iter().filter(|n| n.contains("retrying")).count(),
        2,
        "{seen:?}"
    );
    assert!(seen[0].contains("attempt 2 of 3") && seen[1].contains("attempt 3 of 3"));
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn overloaded_529_is_retried() {
    let env = TestEnv::new(vec![
        error(529, "Overloaded", vec![]),
        MockReply::text(&["ok"]),
    ])
    .await;
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(notices(&updates).iter().any(|n| n.contains("overloaded")));
    assert_eq!(env.mock.requests().len(), 2);
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn exhausted_retries_fail_with_a_clear_account() {
    let env = TestEnv::new(vec![
        error(503, "unavailable", vec![]),
        error(503, "unavailable", vec![]),
        error(503, "still unavailable", vec![]),
    ])
    .await;
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    let message = response["error"]["message"].as_str().expect("error");
    assert!(
        message.contains("503") && message.contains("still unavailable"),
        "{message}"
    );
    // What kind of failure it was, for frontends that act on it.
    assert_eq!(
        response["error"]["data"]["talaria"],
        json!({"kind": "model", "class": "server_error", "status": 503}),
        "{response}"
    );
    // Reported once: by the prompt's error, not also as a message in the answer.
    let told = chunks(&updates, "agent_message_chunk");
    assert!(
        !told
            .iter()
            .any(|t| t.contains("503") || t.contains("[error]")),
        "{told:?}"
    );
    assert_eq!(env.mock.requests().len(), 3);
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn a_stream_that_goes_silent_is_abandoned_and_retried() {
    let env = TestEnv::new(vec![
        MockReply::Hang { chunks: vec![] },
        MockReply::text(&["fresh stream"]),
    ])
    .await;
    env.write_config(&format!("{FAST}stream_idle_timeout_secs = 1\n"));
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        env.mock
            .wait_until(WAIT, |r| r[0].client_disconnected)
            .await,
        "the stale stream was closed"
    );
    assert!(
        notices(&updates).iter().any(|n| n.contains("timed out")),
        "{:?}",
        notices(&updates)
    );
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn a_stream_cut_is_retried_before_output_and_restarted_after_it_keeping_only_the_full_answer()
{
    let env = TestEnv::new(vec![
        MockReply::Drop { chunks: vec![] },
        MockReply::text(&["retried cleanly"]),
        MockReply::Drop {
            chunks: vec!["half an ans".into()],
        },
        MockReply::text(&["the full answer"]),
        MockReply::text(&["third"]),
    ])
    .await;
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "first").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(env.mock.requests().len(), 2, "cut before output: retried");

    // Nothing runs before a stream ends, so a cut after output is asked again, after a
    // notice that the partial answer is abandoned.
    let (response, updates) = prompt(&mut agent, &session, "second").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(env.mock.requests().len(), 4, "cut after output: restarted");
    assert!(
        notices(&updates).iter().any(|n| n.contains("abandoned")),
        "{:?}",
        notices(&updates)
    );
    let text: Vec<String> = chunks(&updates, "agent_message_chunk");
    assert!(
        text.iter().any(|t| t.contains("the full answer")),
        "{text:?}"
    );
    // The record keeps only the complete answer.
    let (response, _) = prompt(&mut agent, &session, "third").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let last = &env.mock.requests()[4].body;
    let assistant: Vec<&str> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(assistant, ["retried cleanly", "the full answer"], "{last}");
}

#[tokio::test]
async fn malformed_sse_lines_are_skipped() {
    let chunk = |text: &str| {
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
            .to_string()
    };
    let env = TestEnv::new(vec![MockReply::RawSse {
        data: vec![
            chunk("Hello"),
            "{this is not json".into(),
            chunk(" world"),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string(),
            "[DONE]".into(),
        ],
    }])
    .await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(chunks(&updates, "agent_message_chunk"), ["Hello", " world"]);
    assert!(agent.stderr().contains("malformed SSE"), "logged to stderr");
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn a_401_moves_to_the_next_key_in_the_pool() {
    let mut env = TestEnv::new(vec![
        error(401, "Incorrect API key provided", vec![]),
        MockReply::text(&["with the good key"]),
    ])
    .await;
    env.api_key = Some("bad-key,good-key".into());
    env.write_config(FAST);
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let keys: Vec<String> = env
        .mock
        .requests()
        .iter()
        .filter_map(|r| r.header("authorization").map(str::to_string))
        .collect();
    assert_eq!(keys, ["Bearer bad-key", "Bearer good-key"]);
    assert!(
        notices(&updates)
            .iter()
            .any(|n| n.contains("key 1 of 2") && n.contains("next key"))
    );
    then_a_prompt_works(&env, &mut agent, &session).await;
    assert_eq!(
        env.mock.requests()[2].header("authorization"),
        Some("Bearer good-key"),
        "the bad key cools down"
    );
}

#[tokio::test]
async fn a_missing_model_falls_back_and_the_primary_is_restored_next_turn() {
    let env = TestEnv::new(vec![
        error(404, "The model `mock-model` does not exist", vec![]),
        MockReply::text(&["backup here"]),
    ])
    .await;
    env.write_config(&format!(
        "{FAST}[[fallback]]\nprovider = \"openai\"\nmodel = \"backup-model\"\n"
    ));
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let models: Vec<Value> = env
        .mock
        .requests()
        .iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(models, [json!("mock-model"), json!("backup-model")]);
    let seen = notices(&updates);
    assert!(
        seen.iter()
            .any(|n| n.contains("falling back to backup-model")),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|n| n.contains("Answered by the fallback model backup-model")),
        "{seen:?}"
    );
    then_a_prompt_works(&env, &mut agent, &session).await;
    assert_eq!(
        env.mock.requests()[2].body["model"],
        "mock-model",
        "primary restored"
    );
}

#[tokio::test]
async fn context_overflow_compacts_old_tool_output_and_retries() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("r", "read_file", json!({"path": "big.txt"})),
        MockReply::text(&["read it"]),
        error(400, "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.", vec![]),
        MockReply::Text { chunks: vec!["fits now".into()], reasoning: vec![], delay_ms: 0, usage: Some(talaria_harness::MockUsage { prompt_tokens: 700, completion_tokens: 3, cached_tokens: 0 }), finish_reason: None },
    ])
    .await;
    std::fs::write(
        env.workspace.path().join("big.txt"),
        "line of the big file\n".repeat(300),
    )
    .expect("write");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "read big.txt").await;
    let (response, updates) = prompt(&mut agent, &session, "now summarise").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 4);
    let before = requests[2].body["messages"].to_string();
    let after = requests[3].body["messages"].to_string();
    assert!(
        before.contains("line of the big file") && !after.contains("line of the big file"),
        "old tool output compacted"
    );
    assert!(
        after.contains("[read_file] read big.txt lines 1–300"),
        "a one-line account replaces it: {after}"
    );
    let seen = notices(&updates);
    assert!(
        seen.iter()
            .any(|n| n.contains("context window of 8192 tokens")),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|n| n.contains("1 old tool outputs shortened to one line")),
        "{seen:?}"
    );
    let usage = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage");
    assert_eq!(
        usage["size"], 8192,
        "the window was lowered to the real limit"
    );
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn max_tokens_too_large_retries_with_the_stated_limit() {
    let env = TestEnv::new(vec![
        error(400, "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.", vec![]),
        MockReply::text(&["smaller"]),
    ])
    .await;
    env.write_config("max_output_tokens = 100000\n");
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests[0].body["max_tokens"], 100000);
    assert_eq!(requests[1].body["max_tokens"], 16384);
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn cancel_during_a_backoff_wait_ends_the_turn_at_once() {
    let env = TestEnv::new(vec![error(500, "boom", vec![])]).await;
    env.write_config("retry_base_ms = 20000\nretry_cap_ms = 60000\n");
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "go"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("retrying in"))
        })
        .await
        .expect("backing off");
    let cancelled_at = Instant::now();
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled");
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(5),
        "did not wait out the backoff"
    );
    assert_eq!(env.mock.requests().len(), 1);
    then_a_prompt_works(&env, &mut agent, &session).await;
}

#[tokio::test]
async fn usage_and_cost_are_reported_per_turn_and_session() {
    let usage = |p, c, cached| {
        Some(talaria_harness::MockUsage {
            prompt_tokens: p,
            completion_tokens: c,
            cached_tokens: cached,
        })
    };
    let env = TestEnv::new(vec![
        MockReply::Text {
            chunks: vec!["one".into()],
            reasoning: vec![],
            delay_ms: 0,
            usage: usage(1_000_000, 100_000, 400_000),
            finish_reason: None,
        },
        MockReply::Text {
            chunks: vec!["two".into()],
            reasoning: vec![],
            delay_ms: 0,
            usage: usage(1_000_000, 0, 0),
            finish_reason: None,
        },
    ])
    .await;
    env.write_config("[prices.\"mock-model\"]\ninput = 2.0\noutput = 8.0\ncached_input = 0.5\n");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["usage"]["inputTokens"], 1_000_000);
    assert_eq!(response["result"]["usage"]["outputTokens"], 100_000);
    assert_eq!(response["result"]["usage"]["cachedReadTokens"], 400_000);
    let cost = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage")["cost"]
        .clone();
    // 600k × 2 + 400k × 0.5 + 100k × 8, per million = 1.2 + 0.2 + 0.8.
    assert_eq!(cost["currency"], "USD");
    assert!(
        (cost["amount"].as_f64().expect("amount") - 2.2).abs() < 1e-9,
        "{cost}"
    );
    let (_, updates) = prompt(&mut agent, &session, "again").await;
    let total = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage")["cost"]["amount"]
        .as_f64()
        .expect("amount");
    assert!(
        (total - 4.2).abs() < 1e-9,
        "the session's cost accumulates: {total}"
    );
}

#[tokio::test]
async fn a_slow_start_is_shown_as_still_working_and_a_silent_server_times_out() {
    let delayed = |ms: u64, text: &str| MockReply::Delayed {
        delay_ms: ms,
        reply: Box::new(MockReply::text(&[text])),
    };
    let env = TestEnv::new(vec![
        delayed(1500, "late but here"),
        delayed(10_000, "too late"),
    ])
    .await;
    env.write_config("still_working_secs = 1\nfirst_byte_timeout_secs = 3\nmax_attempts = 1\n");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "think hard").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(
        notices(&updates)
            .iter()
            .any(|n| n.contains("Still waiting")),
        "{:?}",
        notices(&updates)
    );
    // A server on this machine gets a default output cap.
    assert_eq!(env.mock.requests()[0].body["max_tokens"], 4096);
    let started = std::time::Instant::now();
    let (response, _) = prompt(&mut agent, &session, "again").await;
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no response within 3 s"), "{response}");
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
}

#[tokio::test]
async fn a_grammar_error_after_a_few_tokens_is_asked_again_without_native_tools() {
    let chunk = |text: &str| {
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
            .to_string()
    };
    let rejected = json!({"error": {"code": 500, "message":
        "The model produced output that does not match the expected peg-native format"}})
    .to_string();
    let env = TestEnv::new(vec![
        MockReply::RawSse {
            data: vec![chunk("```json\n"), chunk("{\"name\": \"read_"), rejected],
        },
        MockReply::text(&["main.py prints the first ten Fibonacci numbers."]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "asked again at once, not after a backoff"
    );
    assert!(requests[1].body.get("tools").is_none());
    let messages = requests[1].body["messages"].as_array().expect("messages");
    // The broken partial answer is not in what the model is sent again.
    assert!(
        messages.iter().all(|m| m["role"] != "assistant"
            && !m["content"]
                .as_str()
                .unwrap_or_default()
                .contains("```json")),
        "{messages:?}"
    );
    // Nothing of it was shown, so the chat hears nothing of the retry.
    assert!(notices(&updates).is_empty(), "{:?}", notices(&updates));
    assert_eq!(
        chunks(&updates, "agent_message_chunk").concat(),
        "main.py prints the first ten Fibonacci numbers."
    );
}
