//! The Anthropic Messages and OpenAI Responses providers end to end, model switching, and ACP
//! notices for clients that show them.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

fn anthropic_env(env: &mut TestEnv) {
    env.extra_env.extend([
        ("TALARIA_PROVIDER".to_string(), "anthropic".to_string()),
        ("ANTHROPIC_BASE_URL".to_string(), env.mock.base_url()),
        ("ANTHROPIC_API_KEY".to_string(), "anthropic-key".to_string()),
    ]);
}

#[tokio::test]
async fn anthropic_streams_thinking_text_and_tool_use_with_caching_and_replay() {
    let mut env = TestEnv::new(vec![
        MockReply::Text {
            chunks: vec![],
            reasoning: vec!["Need the file.".into()],
            delay_ms: 0,
            usage: None,
            finish_reason: None,
        },
        MockReply::tool_call("toolu_1", "read_file", json!({"path": "a.txt"})),
        MockReply::Text {
            chunks: vec!["It says ".into(), "alpha.".into()],
            reasoning: vec![],
            delay_ms: 0,
            usage: Some(talaria_harness::MockUsage {
                prompt_tokens: 900,
                completion_tokens: 20,
                cached_tokens: 800,
            }),
            finish_reason: None,
        },
    ])
    .await;
    anthropic_env(&mut env);
    std::fs::write(env.workspace.path().join("a.txt"), "alpha").expect("write");
    let (mut agent, session) = env.session().await;
    let (first, updates) = prompt(&mut agent, &session, "think first").await;
    assert_eq!(stop_reason(&first), "end_turn");
    assert_eq!(chunks(&updates, "agent_thought_chunk"), ["Need the file."]);
    let (response, updates) = prompt(&mut agent, &session, "what is in a.txt?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["It says ", "alpha."]
    );
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
    );
    assert_eq!(response["result"]["usage"]["cachedReadTokens"], 800);

    let requests = env.mock.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("anthropic-key"));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    let body = &requests[2].body;
    assert_eq!(body["model"], "mock-model");
    assert!(
        body["max_tokens"].as_u64().is_some(),
        "max_tokens always sent"
    );
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    let messages = body["messages"].as_array().expect("messages");
    // Thinking is replayed with its signature.
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "thinking", "thinking": "Need the file.", "signature": "mock-signature"})
    );
    let tool_use = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|c| c["type"] == "tool_use")
        .expect("tool_use");
    assert_eq!(tool_use["input"], json!({"path": "a.txt"}));
    let result = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|c| c["type"] == "tool_result")
        .expect("tool_result");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert!(
        result["content"]
            .as_str()
            .unwrap_or_default()
            .contains("alpha")
    );
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert!(
        roles.windows(2).all(|w| w[0] != w[1]),
        "roles alternate: {roles:?}"
    );
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn anthropic_overload_is_retried() {
    let mut env = TestEnv::new(vec![
        MockReply::Error { status: 529, body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).to_string(), headers: vec![] },
        MockReply::text(&["fine now"]),
    ])
    .await;
    anthropic_env(&mut env);
    env.write_config("retry_base_ms = 20\n");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(
        chunks(&updates, "agent_message_chunk")
            .last()
            .map(String::as_str),
        Some("fine now")
    );
    assert_eq!(env.mock.requests().len(), 2);
}

#[tokio::test]
async fn the_responses_api_streams_summaries_text_and_function_calls() {
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("call_r", "read_file", json!({"path": "b.txt"})),
        MockReply::Text {
            chunks: vec!["Beta.".into()],
            reasoning: vec!["Summarising.".into()],
            delay_ms: 0,
            usage: None,
            finish_reason: None,
        },
    ])
    .await;
    env.extra_env
        .push(("TALARIA_PROVIDER".into(), "openai-responses".into()));
    std::fs::write(env.workspace.path().join("b.txt"), "beta").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "read b").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(chunks(&updates, "agent_thought_chunk"), ["Summarising."]);
    assert_eq!(chunks(&updates, "agent_message_chunk"), ["Beta."]);
    let requests = env.mock.requests();
    assert_eq!(requests[0].path, "/v1/responses");
    assert_eq!(requests[0].header("authorization"), Some("Bearer test-key"));
    assert!(
        requests[0].body["instructions"]
            .as_str()
            .unwrap_or_default()
            .contains("Talaria")
    );
    let input = requests[1].body["input"].as_array().expect("input");
    assert!(
        input
            .iter()
            .any(|i| i["type"] == "function_call" && i["call_id"] == "call_r")
    );
    let output = input
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("output");
    assert!(
        output["output"]
            .as_str()
            .unwrap_or_default()
            .contains("beta")
    );
}

#[tokio::test]
async fn the_model_can_be_switched_per_session() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    env.write_config("models = [\"mock-model\", \"other-model\"]\n");
    let (mut agent, session, created) = env.session_with(json!({})).await;
    let model_option = created["configOptions"]
        .as_array()
        .expect("options")
        .iter()
        .find(|o| o["id"] == "model")
        .expect("model option")
        .clone();
    assert_eq!(model_option["category"], "model");
    assert_eq!(model_option["currentValue"], "mock-model");
    let values: Vec<&str> = model_option["options"]
        .as_array()
        .expect("choices")
        .iter()
        .filter_map(|o| o["value"].as_str())
        .collect();
    assert_eq!(values, ["mock-model", "other-model"]);
    prompt(&mut agent, &session, "first").await;
    let options = agent
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "other-model"}),
        )
        .await
        .expect("switch");
    let current: Vec<Value> = options["configOptions"]
        .as_array()
        .expect("options")
        .iter()
        .map(|o| o["currentValue"].clone())
        .collect();
    assert_eq!(current, [json!("ask"), json!("other-model")]);
    prompt(&mut agent, &session, "second").await;
    let models: Vec<Value> = env
        .mock
        .requests()
        .iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(models, [json!("mock-model"), json!("other-model")]);
    let unknown = agent
        .request(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "gpt-17"}),
        )
        .await
        .expect("response");
    assert_eq!(unknown["error"]["code"], -32602);
}

#[tokio::test]
async fn clients_that_show_notices_get_acp_notices() {
    let env = TestEnv::new(vec![
        MockReply::Error {
            status: 500,
            body: "{}".into(),
            headers: vec![],
        },
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("retry_base_ms = 20\n");
    let (mut agent, session, _) = env.session_with(json!({"session": {"notices": {}}})).await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let notice = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "notice")
        .expect("notice");
    assert_eq!(notice["severity"], "warning");
    assert!(
        notice["title"]
            .as_str()
            .unwrap_or_default()
            .contains("retrying")
    );
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["done"],
        "no notice text mixed into the answer"
    );
}

#[tokio::test]
async fn the_legacy_set_model_switches_the_model_option_too() {
    let env = TestEnv::new(vec![MockReply::text(&["switched"])]).await;
    env.write_config("models = [\"mock-model\", \"other-model\"]\n");
    let (mut agent, session, _) = env.session_with(json!({})).await;
    let from = agent.transcript.len();
    let answer = agent
        .call(
            "session/set_model",
            json!({"sessionId": session, "modelId": "other-model"}),
        )
        .await
        .expect("set_model answered");
    assert_eq!(answer, json!({}));
    prompt(&mut agent, &session, "hi").await;
    assert_eq!(env.mock.requests()[0].body["model"], "other-model");
    let told = agent.transcript[from..].iter().any(|m| {
        m["params"]["update"]["sessionUpdate"] == "config_option_update"
            && m["params"]["update"]["configOptions"]
                .as_array()
                .is_some_and(|options| {
                    options
                        .iter()
                        .any(|o| o["id"] == "model" && o["currentValue"] == "other-model")
                })
    });
    assert!(told, "the client's model picker hears of it");
    let unknown = agent
        .request(
            "session/set_model",
            json!({"sessionId": session, "modelId": "no-such-model"}),
        )
        .await
        .expect("answered");
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let malformed = agent
        .request("session/set_model", json!({"sessionId": session}))
        .await
        .expect("answered");
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
}
