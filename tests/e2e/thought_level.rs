//! The thought level and fast mode as config options: offered only for models that reason,
//! with the levels each takes; a chosen level reaches each wire API in its own words (Chat
//! Completions' `reasoning_effort`, Responses' `reasoning.effort`, Anthropic's thinking
//! budget); fast mode is a boolean only for clients that show booleans; bad values are clear
//! errors and the session goes on.

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};

use crate::support::*;

/// The session's option with this id, in a response or update's `configOptions`.
fn option<'a>(options: &'a Value, id: &str) -> Option<&'a Value> {
    options.as_array()?.iter().find(|o| o["id"] == id)
}

fn values(option: &Value) -> Vec<String> {
    option["options"]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(|v| v["value"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A session of `model` on an agent started with `extra` settings (and the client's
/// capabilities); the session/new answer too.
async fn session_of(
    env: &mut TestEnv,
    model: &str,
    extra: &[(&str, String)],
    capabilities: Value,
) -> (AgentProcess, String, Value) {
    env.extra_env
        .push(("TALARIA_MODEL".into(), model.to_string()));
    for (key, value) in extra {
        env.extra_env.push(((*key).to_string(), value.clone()));
    }
    let mut agent = env.spawn().await;
    agent
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
    (agent, session, created)
}

async fn set_option(agent: &mut AgentProcess, session: &str, id: &str, value: Value) -> Value {
    let mut params = json!({"sessionId": session, "configId": id});
    match value {
        Value::Bool(on) => {
            params["type"] = json!("boolean");
            params["value"] = json!(on);
        }
        other => params["value"] = other,
    }
    agent
        .request("session/set_config_option", params)
        .await
        .expect("answered")
}

/// The last model request's body.
fn last_body(env: &TestEnv) -> Value {
    env.mock.requests().last().expect("a request").body.clone()
}

#[tokio::test]
async fn a_chosen_level_reaches_chat_completions_as_reasoning_effort() {
    let mut env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let (mut agent, session, created) = session_of(&mut env, "gpt-5-mini", &[], json!({})).await;
    let level = option(&created["configOptions"], "thought_level").expect("offered");
    assert_eq!(level["category"], "thought_level");
    assert_eq!(level["currentValue"], "default");
    assert_eq!(
        values(level),
        ["default", "minimal", "low", "medium", "high"]
    );
    assert!(
        option(&created["configOptions"], "fast_mode").is_none(),
        "no boolean for a client that shows none"
    );
    let answer = set_option(&mut agent, &session, "thought_level", json!("high")).await;
    let options = &answer["result"]["configOptions"];
    assert_eq!(
        option(options, "thought_level").expect("kept")["currentValue"],
        "high"
    );
    let (response, _) = prompt(&mut agent, &session, "think hard").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(last_body(&env)["reasoning_effort"], "high");
    set_option(&mut agent, &session, "thought_level", json!("default")).await;
    prompt(&mut agent, &session, "as you like").await;
    assert!(last_body(&env).get("reasoning_effort").is_none());
}

#[tokio::test]
async fn a_chosen_level_reaches_the_responses_api_and_anthropic_in_their_own_words() {
    let mut env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let (mut agent, session, _) = session_of(
        &mut env,
        "o4-mini",
        &[("TALARIA_PROVIDER", "openai-responses".into())],
        json!({}),
    )
    .await;
    set_option(&mut agent, &session, "thought_level", json!("low")).await;
    prompt(&mut agent, &session, "go").await;
    assert_eq!(last_body(&env)["reasoning"]["effort"], "low");

    let mut env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let base = env.mock.base_url();
    let (mut agent, session, created) = session_of(
        &mut env,
        "claude-sonnet-4-5",
        &[
            ("TALARIA_PROVIDER", "anthropic".into()),
            ("ANTHROPIC_BASE_URL", base),
            ("ANTHROPIC_API_KEY", "anthropic-key".into()),
        ],
        json!({}),
    )
    .await;
    assert!(option(&created["configOptions"], "thought_level").is_some());
    set_option(&mut agent, &session, "thought_level", json!("high")).await;
    prompt(&mut agent, &session, "go").await;
    let body = last_body(&env);
    assert_eq!(body["thinking"]["type"], "enabled");
    let budget = body["thinking"]["budget_tokens"].as_u64().expect("budget");
    assert!(budget >= 16_000, "{body}");
    assert!(body["max_tokens"].as_u64().expect("max") > budget, "{body}");
}

#[tokio::test]
async fn fast_mode_is_a_boolean_for_clients_that_show_booleans_and_sets_the_least_thinking() {
    let mut env = TestEnv::new(vec![MockReply::text(&["quick"])]).await;
    let booleans = json!({"session": {"configOptions": {"boolean": {}}}});
    let (mut agent, session, created) = session_of(&mut env, "gpt-5", &[], booleans).await;
    let fast = option(&created["configOptions"], "fast_mode").expect("offered");
    assert_eq!(fast["type"], "boolean");
    assert_eq!(fast["currentValue"], false);
    let answer = set_option(&mut agent, &session, "fast_mode", json!(true)).await;
    let options = &answer["result"]["configOptions"];
    assert_eq!(
        option(options, "fast_mode").expect("fast")["currentValue"],
        true
    );
    assert_eq!(
        option(options, "thought_level").expect("level")["currentValue"],
        "minimal"
    );
    prompt(&mut agent, &session, "quick").await;
    assert_eq!(last_body(&env)["reasoning_effort"], "minimal");
    // A value id for the boolean, or a boolean for a select, is refused.
    let wrong = set_option(&mut agent, &session, "fast_mode", json!("yes")).await;
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    let wrong = set_option(&mut agent, &session, "thought_level", json!(true)).await;
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
}

#[tokio::test]
async fn a_model_that_does_not_reason_offers_no_level_and_refuses_one_without_harm() {
    let mut env = TestEnv::new(vec![MockReply::text(&["plain"])]).await;
    let booleans = json!({"session": {"configOptions": {"boolean": {}}}});
    let (mut agent, session, created) = session_of(&mut env, "mock-model", &[], booleans).await;
    assert!(option(&created["configOptions"], "thought_level").is_none());
    assert!(option(&created["configOptions"], "fast_mode").is_none());
    let refused = set_option(&mut agent, &session, "thought_level", json!("high")).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("mock-model")),
        "{refused}"
    );
    let (response, _) = prompt(&mut agent, &session, "still here").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(last_body(&env).get("reasoning_effort").is_none());
}

#[tokio::test]
async fn an_unknown_level_is_refused_and_a_switch_to_a_plain_model_drops_the_level() {
    let mut env = TestEnv::new(vec![MockReply::text(&["after the switch"])]).await;
    env.write_config("models = [\"o3\", \"mock-model\"]\n");
    let (mut agent, session, _) = session_of(&mut env, "o3", &[], json!({})).await;
    let refused = set_option(&mut agent, &session, "thought_level", json!("minimal")).await;
    assert_eq!(
        refused["error"]["code"], -32602,
        "o3 takes no minimal: {refused}"
    );
    set_option(&mut agent, &session, "thought_level", json!("high")).await;
    let switched = set_option(&mut agent, &session, "model", json!("mock-model")).await;
    let options = &switched["result"]["configOptions"];
    assert!(option(options, "thought_level").is_none(), "{switched}");
    prompt(&mut agent, &session, "go").await;
    assert!(last_body(&env).get("reasoning_effort").is_none());
}
