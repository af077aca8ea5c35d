//! Client-managed providers (`providers/list`, `providers/set`, `providers/disable`): a client
//! hands Talaria an endpoint, and the sessions started after it use it — its key from the
//! `Authorization` header, its other headers on every request — while the key reaches no log
//! and no record; bad input is a clear error and changes nothing.

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};

use crate::support::*;

const CLIENT_KEY: &str = "sk-from-the-client-5512";

fn provider<'a>(listed: &'a Value, id: &str) -> &'a Value {
    listed["providers"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["providerId"] == id))
        .unwrap_or_else(|| panic!("no {id} in {listed}"))
}

async fn initialized_agent(env: &TestEnv) -> (AgentProcess, Value) {
    let mut agent = env.spawn().await;
    let answer = agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    (agent, answer)
}

fn set_request(base_url: &str, headers: Value) -> Value {
    json!({"providerId": "openai", "apiType": "openai", "baseUrl": base_url, "headers": headers})
}

#[tokio::test]
async fn a_provider_the_client_sets_serves_the_next_session_with_its_key_and_headers() {
    let mut env = TestEnv::new(vec![MockReply::text(&["through the client's endpoint"])]).await;
    // Configured: an address nothing answers and no key, so only the client's endpoint works.
    env.api_key = None;
    env.extra_env
        .push(("OPENAI_BASE_URL".into(), "http://127.0.0.1:9/v1".into()));
    let (mut agent, answer) = initialized_agent(&env).await;
    assert!(
        answer["agentCapabilities"]["providers"].is_object(),
        "{answer}"
    );
    let listed = agent.call("providers/list", json!({})).await.expect("list");
    let openai = provider(&listed, "openai");
    assert_eq!(openai["required"], true);
    assert_eq!(openai["current"]["baseUrl"], "http://127.0.0.1:9/v1");
    assert!(provider(&listed, "anthropic")["current"].is_null());
    let refused = agent
        .request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32000, "no key yet: {refused}");

    let set = agent
        .request(
            "providers/set",
            set_request(
                &env.mock.base_url(),
                json!({"Authorization": format!("Bearer {CLIENT_KEY}"), "X-Route": "blue"}),
            ),
        )
        .await
        .expect("answered");
    assert!(set.get("result").is_some(), "{set}");
    let listed = agent.call("providers/list", json!({})).await.expect("list");
    assert_eq!(
        provider(&listed, "openai")["current"]["baseUrl"],
        env.mock.base_url().trim_end_matches('/')
    );
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("a session on the client's endpoint");
    let (response, updates) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["through the client's endpoint"]
    );
    let requests = env.mock.requests();
    let call = requests.last().expect("a model request");
    assert_eq!(
        call.header("authorization"),
        Some(format!("Bearer {CLIENT_KEY}").as_str())
    );
    assert_eq!(call.header("x-route"), Some("blue"));
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    // The key is in no log line and nowhere under the home (records, journals, spools).
    assert!(!agent.stderr().contains(CLIENT_KEY), "logged the key");
    for file in walk(env.home.path()) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(CLIENT_KEY),
            "{} holds the key",
            file.display()
        );
    }
    assert_clean_stdout(&agent);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[tokio::test]
async fn bad_provider_requests_are_clear_errors_and_change_nothing() {
    let env = TestEnv::new(vec![MockReply::text(&["still the configured one"])]).await;
    let (mut agent, _) = initialized_agent(&env).await;
    let base = env.mock.base_url();
    for (params, says) in [
        (
            json!({"providerId": "azure-east", "apiType": "openai", "baseUrl": base}),
            "unknown provider",
        ),
        (
            json!({"providerId": "openai", "apiType": "anthropic", "baseUrl": base}),
            "speaks",
        ),
        (set_request("not a url", json!({})), "not a URL"),
        (
            set_request("ftp://example.com/v1", json!({})),
            "http or https",
        ),
        (
            set_request(&base, json!({"X-Bad": "line\nbreak"})),
            "not a valid HTTP header",
        ),
        (
            json!({"providerId": "openai", "apiType": "openai"}),
            "baseUrl",
        ),
    ] {
        let answer = agent
            .request("providers/set", params.clone())
            .await
            .expect("answered");
        assert_eq!(answer["error"]["code"], -32602, "{params}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{params}: {message}");
        assert!(
            !message.contains("line\nbreak"),
            "a header value is never echoed"
        );
    }
    // The required provider cannot be disabled; another can.
    let refused = agent
        .request("providers/disable", json!({"providerId": "openai"}))
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let disabled = agent
        .request("providers/disable", json!({"providerId": "anthropic"}))
        .await
        .expect("answered");
    assert!(disabled.get("result").is_some(), "{disabled}");
    // Nothing changed for the configured provider.
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, updates) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["still the configured one"]
    );
    assert_eq!(
        env.mock
            .requests()
            .last()
            .and_then(|r| r.header("authorization")),
        Some("Bearer test-key")
    );
}
