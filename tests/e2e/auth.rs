//! Authentication as the pinned schema says: the terminal method (`talaria setup`) is offered
//! only to clients that announce terminal auth (`clientCapabilities.auth.terminal`, or the
//! registry's older `_meta["terminal-auth"]`); a key the provider refuses on a prompt is
//! answered `auth_required` with the ways to fix it, naming `talaria setup`.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

async fn methods_for(capabilities: Value) -> Vec<(String, String)> {
    let env = TestEnv::new(Vec::new()).await;
    let mut agent = env.spawn().await;
    let init = agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
        )
        .await
        .expect("initialize");
    init["authMethods"]
        .as_array()
        .expect("authMethods")
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap_or_default().to_string(),
                m["type"].as_str().unwrap_or("agent").to_string(),
            )
        })
        .collect()
}

fn has_terminal(methods: &[(String, String)]) -> bool {
    methods
        .iter()
        .any(|(id, kind)| id == "talaria-setup" && kind == "terminal")
}

#[tokio::test]
async fn a_client_that_does_not_announce_terminal_auth_is_offered_no_terminal_method() {
    for capabilities in [
        json!({}),
        json!({"auth": {}}),
        json!({"auth": {"terminal": false}}),
        json!({"_meta": {"terminal-auth": false}}),
        json!({"terminal": true}),
    ] {
        let methods = methods_for(capabilities.clone()).await;
        assert!(!has_terminal(&methods), "{capabilities}: {methods:?}");
        assert!(
            methods.iter().any(|(id, _)| id == "talaria-config"),
            "the agent method is always there: {methods:?}"
        );
    }
}

#[tokio::test]
async fn a_client_that_announces_terminal_auth_is_offered_talaria_setup() {
    for capabilities in [
        json!({"auth": {"terminal": true}}),
        json!({"_meta": {"terminal-auth": true}}),
        json!({"_meta": {"terminal-auth": {"command": "talaria"}}}),
    ] {
        let methods = methods_for(capabilities.clone()).await;
        assert!(has_terminal(&methods), "{capabilities}: {methods:?}");
    }
}

async fn refused_key_prompt(status: u16, body: &str) -> Value {
    let env = TestEnv::new(vec![MockReply::Error {
        status,
        body: body.into(),
        headers: Vec::new(),
    }])
    .await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "hello"))
        .await
        .expect("prompt");
    agent.wait_response(id, WAIT).await.expect("answered")
}

#[tokio::test]
async fn a_key_the_provider_refuses_is_answered_auth_required_naming_setup() {
    for (status, body) in [
        (401, r#"{"error":{"message":"Incorrect API key provided"}}"#),
        (403, r#"{"error":{"message":"Forbidden: key revoked"}}"#),
    ] {
        let response = refused_key_prompt(status, body).await;
        assert_eq!(response["error"]["code"], -32000, "{status}: {response}");
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("talaria setup"), "{status}: {message}");
        assert_eq!(
            response["error"]["data"]["authMethods"],
            json!(["talaria-config", "talaria-setup"]),
            "{response}"
        );
        assert_eq!(response["error"]["data"]["talaria"]["status"], status);
    }
}

#[tokio::test]
async fn other_model_failures_stay_internal_errors() {
    let response =
        refused_key_prompt(400, r#"{"error":{"message":"bad request: unknown field"}}"#).await;
    assert_ne!(response["error"]["code"], -32000, "{response}");
}

#[tokio::test]
async fn doctor_names_talaria_setup_for_a_missing_configuration_and_key() {
    let mut env = TestEnv::new(Vec::new()).await;
    env.api_key = None;
    let (passed, report) = doctor(&env, &[]).await;
    assert!(!passed, "{report}");
    let naming: Vec<&str> = report
        .lines()
        .filter(|line| line.contains("talaria setup"))
        .collect();
    assert!(
        report
            .lines()
            .any(|l| l.contains("config file") && l.contains("talaria setup")),
        "{report}"
    );
    assert!(
        naming.len() >= 2,
        "the key's finding names it too: {report}"
    );
}

/// A home as `talaria setup` leaves it: provider, model, the mock's URL and a key.
fn set_up_home(env: &mut TestEnv) {
    env.api_key = None;
    env.write_config(&format!(
        "provider = \"openai\"\nmodel = \"mock-model\"\n\n[openai]\nbase_url = \"{}\"\n\
         api_key = \"sk-from-setup\"\n",
        env.mock.base_url()
    ));
}

#[tokio::test]
async fn logout_forgets_the_stored_key_and_sessions_ask_to_authenticate_again() {
    let mut env = TestEnv::new(vec![MockReply::text(&["before logout"])]).await;
    set_up_home(&mut env);
    let (mut agent, init) = initialize_answer(&env).await;
    assert_eq!(
        init["agentCapabilities"]["auth"]["logout"],
        json!({}),
        "{init}"
    );
    let new_session = json!({"cwd": env.workspace.path(), "mcpServers": []});
    let session = agent
        .call("session/new", new_session.clone())
        .await
        .expect("a session with the stored key");
    let session = session["sessionId"].as_str().expect("id").to_string();
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(
        env.mock.requests()[0]
            .header("authorization")
            .is_some_and(|v| v == "Bearer sk-from-setup")
    );

    let out = agent
        .call("logout", json!({}))
        .await
        .expect("logout answered");
    assert_eq!(out, json!({}));
    let config =
        std::fs::read_to_string(env.home.path().join("talaria/config.toml")).expect("config");
    assert!(
        !config.contains("sk-from-setup"),
        "the key is forgotten: {config}"
    );
    assert!(
        config.contains("model = \"mock-model\"") && config.contains("base_url"),
        "every other setting stays: {config}"
    );
    let refused = agent
        .request("session/new", new_session.clone())
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    // With no key anywhere, authenticate still asks for one; a key in the environment of a
    // new process, or in the file again, lets it pass.
    let asked = agent
        .request("authenticate", json!({"methodId": "talaria-config"}))
        .await
        .expect("answered");
    assert_eq!(asked["error"]["code"], -32000, "{asked}");
    std::fs::write(
        env.home.path().join("talaria/config.toml"),
        format!("{config}api_key = \"sk-again\"\n"),
    )
    .expect("key again");
    agent
        .call("authenticate", json!({"methodId": "talaria-config"}))
        .await
        .expect("authenticated");
    agent
        .call("session/new", new_session)
        .await
        .expect("sessions start again");
}

#[tokio::test]
async fn logout_refuses_sessions_even_with_a_key_in_the_environment_until_authenticate() {
    let env = TestEnv::new(Vec::new()).await;
    let mut agent = initialized(&env).await;
    agent.call("logout", json!({})).await.expect("logout");
    let new_session = json!({"cwd": env.workspace.path(), "mcpServers": []});
    let refused = agent
        .request("session/new", new_session.clone())
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("logged out"),
        "{refused}"
    );
    agent
        .call("authenticate", json!({"methodId": "talaria-config"}))
        .await
        .expect("the environment's key passes");
    agent
        .call("session/new", new_session)
        .await
        .expect("sessions start again");
}
