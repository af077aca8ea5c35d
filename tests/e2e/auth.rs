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
