//! Local model servers: the context window they report sizes the session when the user set
//! none; a configured window is never second-guessed.

use serde_json::json;
use talaria_harness::{MockReply, MockUsage};

use crate::support::*;

fn answer_with_usage() -> MockReply {
    MockReply::Text {
        chunks: vec!["ok".into()],
        reasoning: Vec::new(),
        delay_ms: 0,
        usage: Some(MockUsage {
            prompt_tokens: 900,
            completion_tokens: 10,
            cached_tokens: 0,
        }),
        finish_reason: None,
    }
}

fn reported_size(updates: &[serde_json::Value]) -> serde_json::Value {
    updates
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage_update")["size"]
        .clone()
}

#[tokio::test]
async fn without_a_configured_window_the_llama_cpp_servers_own_is_used() {
    let mut env = TestEnv::new(vec![answer_with_usage()]).await;
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 8192}}));
    // The suite's default sets a window; this test leaves it unset.
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(reported_size(&updates), 8192);
    assert!(env.mock.info_requests().contains(&"/props".to_string()));
    assert!(
        agent
            .stderr()
            .contains("context window reported by the model server"),
        "logged"
    );
}

#[tokio::test]
async fn a_server_that_reports_nothing_leaves_the_default() {
    let mut env = TestEnv::new(vec![answer_with_usage()]).await;
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
    let (mut agent, session) = env.session().await;
    let (_, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(reported_size(&updates), 128_000);
    assert!(
        agent.stderr().contains("reports no context window"),
        "said why"
    );
}

#[tokio::test]
async fn a_configured_window_wins_and_the_server_is_not_asked() {
    let env = TestEnv::new(vec![answer_with_usage()]).await;
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 8192}}));
    let (mut agent, session) = env.session().await;
    let (_, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(reported_size(&updates), 32000);
    assert!(
        env.mock.info_requests().is_empty(),
        "{:?}",
        env.mock.info_requests()
    );
}
