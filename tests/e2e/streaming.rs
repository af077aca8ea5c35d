//! Streaming answers: order, chunking, thoughts, usage, what the model was sent (history,
//! prompt blocks and stop reasons are in `replayed_turns.rs`).

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
    env.trust_workspace();
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
