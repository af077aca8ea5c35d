//! Streaming answers: order, chunking, thoughts, usage, what the model was sent, stop reasons.

use serde_json::json;
use talaria_harness::{MockReply, MockUsage};

use crate::support::*;

#[tokio::test]
async fn text_streams_in_order_in_several_chunks_before_the_response() {
    let env = TestEnv::new(vec![MockReply::Text {
        chunks: vec!["Hel".into(), "lo, ".into(), "wor".into(), "ld".into()],
        reasoning: vec!["Let me ".into(), "think.".into()],
        delay_ms: 15,
        usage: Some(MockUsage {
            prompt_tokens: 1200,
            completion_tokens: 34,
            cached_tokens: 0,
        }),
        finish_reason: None,
    }])
    .await;
    std::fs::write(
        env.workspace.path().join("AGENTS.md"),
        "Use tabs, never spaces.",
    )
    .expect("agents");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "Say hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["Hel", "lo, ", "wor", "ld"]
    );
    assert_eq!(
        chunks(&updates, "agent_thought_chunk"),
        ["Let me ", "think."]
    );
    let usage = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage_update");
    assert_eq!(usage["used"], 1234);
    assert_eq!(usage["size"], 64000);

    let requests = env.mock.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some("Bearer test-key"));
    assert_eq!(sent.body["model"], "mock-model");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"]["include_usage"], true);
    let system = sent.body["messages"][0]["content"]
        .as_str()
        .expect("system prompt");
    // The cwd is in the environment before the first user message, not in the system prompt
    // (which stays the same between sessions).
    let workspace = env.workspace.path().display().to_string();
    assert!(!system.contains(&workspace), "the system prompt is stable");
    assert!(
        environment_of(&sent.body).contains(&workspace),
        "cwd in the environment"
    );
    assert!(
        system.contains("Use tabs, never spaces."),
        "AGENTS.md in system prompt"
    );
    assert!(environment_of(&sent.body).contains(std::env::consts::OS));
    assert_eq!(sent.body["messages"][1]["role"], "user");
    assert_eq!(
        without_environment(
            sent.body["messages"][1]["content"]
                .as_str()
                .unwrap_or_default()
        ),
        "Say hello"
    );
    let tools: Vec<&str> = sent.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(tools.contains(&"read_file"), "{tools:?}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn history_carries_over_and_every_prompt_block_reaches_the_model() {
    let env = TestEnv::new(vec![
        MockReply::text(&["First answer."]),
        MockReply::text(&["ok"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "one").await;
    let params = json!({"sessionId": session, "prompt": [
        {"type": "text", "text": "two"},
        {"type": "resource_link", "uri": "file:///src/lib.rs", "name": "lib.rs"},
        {"type": "resource", "resource": {"uri": "file:///src/main.rs", "text": "fn main() {}", "mimeType": "text/x-rust"}},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    ]});
    let result = agent.call("session/prompt", params).await.expect("prompt");
    assert_eq!(result["stopReason"], "end_turn");
    let messages = env.mock.requests()[1].body["messages"].clone();
    assert_eq!(
        without_environment(messages[1]["content"].as_str().unwrap_or_default()),
        "one"
    );
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "First answer."})
    );
    let parts = messages[3]["content"]
        .as_array()
        .expect("multi-part user message");
    assert_eq!(parts[0]["text"], "two");
    assert!(
        parts[1]["text"]
            .as_str()
            .unwrap_or("")
            .contains("file:///src/lib.rs")
    );
    assert!(
        parts[2]["text"]
            .as_str()
            .unwrap_or("")
            .contains("fn main() {}")
    );
    assert_eq!(
        parts[3]["image_url"]["url"],
        "data:image/png;base64,iVBORw0KGgo="
    );
}

#[tokio::test]
async fn length_limit_ends_with_max_tokens_and_refusal_with_refusal() {
    let env = TestEnv::new(vec![
        MockReply::Text {
            chunks: vec!["cut".into()],
            reasoning: vec![],
            delay_ms: 0,
            usage: None,
            finish_reason: Some("length".into()),
        },
        MockReply::Text {
            chunks: vec![],
            reasoning: vec![],
            delay_ms: 0,
            usage: None,
            finish_reason: Some("content_filter".into()),
        },
    ])
    .await;
    let (mut agent, session) = env.session().await;
    assert_eq!(
        stop_reason(&prompt(&mut agent, &session, "long").await.0),
        "max_tokens"
    );
    assert_eq!(
        stop_reason(&prompt(&mut agent, &session, "bad").await.0),
        "refusal"
    );
}

#[tokio::test]
async fn a_provider_error_fails_the_prompt_readably_and_the_session_goes_on() {
    let env = TestEnv::new(vec![
        MockReply::Error {
            status: 429,
            body:
                r#"{"error":{"message":"Rate limit reached for mock-model","type":"rate_limit"}}"#
                    .into(),
            headers: vec![("retry-after".into(), "1".into())],
        },
        // A cut after output is restarted twice, then the prompt fails.
        MockReply::Drop {
            chunks: vec!["half".into()],
        },
        MockReply::Drop {
            chunks: vec!["half".into()],
        },
        MockReply::Drop {
            chunks: vec!["half".into()],
        },
        MockReply::text(&["recovered"]),
    ])
    .await;
    // Retries are off here: this is about how a final failure reads (the fault matrix covers
    // retries).
    env.write_config("max_attempts = 1\n");
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    let message = response["error"]["message"]
        .as_str()
        .expect("error message");
    assert!(
        message.contains("429") && message.contains("Rate limit reached for mock-model"),
        "{message}"
    );
    let (response, _) = prompt(&mut agent, &session, "again").await;
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("stream"),
        "{response}"
    );
    let (response, updates) = prompt(&mut agent, &session, "third").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(chunks(&updates, "agent_message_chunk"), ["recovered"]);
    assert_clean_stdout(&agent);
}
