//! The process as a client meets it: the handshake (capabilities, the protocol versions it
//! takes), sessions, authentication, `--help` and `--version`, an unknown config key (a
//! warning), a start by hand on a terminal, and exit on end of input.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

#[tokio::test]
async fn handshake_states_capabilities_and_sessions_are_unique() {
    let env = TestEnv::new(vec![]).await;
    let mut agent = env.spawn().await;
    let init = agent
        .call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true}}, "clientInfo": {"name": "test", "version": "1"}}))
        .await
        .expect("initialize");
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentInfo"]["name"], "talaria");
    assert!(init["agentInfo"]["version"].is_string());
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    let sessions = &init["agentCapabilities"]["sessionCapabilities"];
    for capability in [
        "list",
        "resume",
        "close",
        "delete",
        "fork",
        "additionalDirectories",
    ] {
        assert!(sessions[capability].is_object(), "{capability}: {sessions}");
    }
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["embeddedContext"],
        true
    );
    assert_eq!(init["authMethods"][0]["id"], "talaria-config");
    // The registry's clients need a method of type agent or terminal: the agent one is
    // offered to every client, the terminal one to those that announce it (tests/e2e/auth.rs).
    assert_eq!(
        init["authMethods"].as_array().map(Vec::len),
        Some(1),
        "{init}"
    );
    let cwd = env.workspace.path();
    let a = agent
        .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .await
        .expect("a");
    let b = agent
        .call("session/new", json!({"cwd": cwd, "mcpServers": [{"name": "x", "command": "/bin/true", "args": [], "env": []}]}))
        .await
        .expect("b (mcpServers accepted)");
    assert!(a["sessionId"].is_string());
    assert_ne!(a["sessionId"], b["sessionId"]);
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn missing_credentials_answer_auth_required_with_what_to_set() {
    let mut env = TestEnv::new(vec![]).await;
    env.api_key = None;
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let response = agent
        .request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("response");
    assert_eq!(response["error"]["code"], -32000, "{response}");
    // A message any client can show as it is, naming the one thing to do…
    let message = response["error"]["message"].as_str().unwrap_or("");
    assert!(message.len() <= 120, "short: {message}");
    assert!(
        message.contains("no API key") && message.contains("run `talaria setup`"),
        "{message}"
    );
    // …and the whole story beside it, for clients with room for it.
    let data = &response["error"]["data"];
    assert_eq!(data["talaria"]["reason"], "no_credentials", "{response}");
    assert_eq!(data["talaria"]["fix"], "run `talaria setup` in a terminal");
    let detail = data["talaria"]["detail"].as_str().unwrap_or("");
    assert!(detail.contains("OPENAI_API_KEY"), "{detail}");
    for method in ["talaria-setup", "talaria-config", "talaria setup"] {
        assert!(detail.contains(method), "names {method}: {detail}");
    }
    assert_eq!(
        data["authMethods"],
        json!(["talaria-config", "talaria-setup"])
    );
    let auth = agent
        .request("authenticate", json!({"methodId": "talaria-config"}))
        .await
        .expect("response");
    assert_eq!(auth["error"]["code"], -32000, "{auth}");
    // Once the key is in the config file, authenticate and session/new succeed.
    env.write_config("[openai]\napi_key = \"from-file\"\n");
    agent
        .call("authenticate", json!({"methodId": "talaria-config"}))
        .await
        .expect("authenticated");
    agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session after config");
}

#[tokio::test]
async fn eof_exits_zero_even_during_a_turn() {
    let env = TestEnv::new(vec![MockReply::Hang {
        chunks: vec!["thinking".into()],
    }])
    .await;
    let (mut agent, session) = env.session().await;
    agent
        .start_request("session/prompt", text_prompt(&session, "go"))
        .await
        .expect("prompt");
    agent.next_update(WAIT).await.expect("first chunk");
    agent.close_stdin();
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{status:?}");
    assert!(
        env.mock
            .wait_until(WAIT, |r| r[0].client_disconnected)
            .await,
        "the model request was aborted"
    );
    agent.collect_remaining().await;
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn help_and_version_work() {
    let bin = talaria_harness::binary::talaria_bin();
    let version = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .expect("run");
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("talaria "));
    let help = std::process::Command::new(&bin)
        .arg("--help")
        .output()
        .expect("run");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("acp") && text.contains("TALARIA_HOME"),
        "{text}"
    );
}

#[tokio::test]
async fn initialize_is_liberal_in_the_protocol_version_it_accepts() {
    let env = TestEnv::new(vec![]).await;
    let mut agent = env.spawn().await;
    for version in [
        json!("1"),
        json!(" 1 "),
        json!("1.0"),
        json!(null),
        json!({"v": 1}),
        json!(7),
    ] {
        let response = agent
            .request("initialize", json!({"protocolVersion": version}))
            .await
            .expect("response");
        assert_eq!(
            response["result"]["protocolVersion"], 1,
            "{version}: {response}"
        );
    }
    let missing = agent
        .request("initialize", json!({}))
        .await
        .expect("response");
    assert_eq!(missing["result"]["protocolVersion"], 1, "{missing}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn an_unknown_config_key_is_a_warning_shown_once_and_sessions_still_open() {
    let env = TestEnv::new(vec![
        MockReply::text(&["fine"]),
        MockReply::text(&["again"]),
    ])
    .await;
    env.write_config("future_setting = true\n[openai]\nregion = \"eu\"\n");
    let (mut agent, session, _) = env.session_with(json!({"session": {"notices": {}}})).await;
    // The notices follow the session/new answer; the prompt's answer comes after them.
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let notices: Vec<Value> = agent
        .updates()
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "notice")
        .collect();
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices[0].to_string().contains("future_setting"),
        "{notices:?}"
    );
    let second = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("second session");
    let second = second["sessionId"].as_str().expect("id").to_string();
    let (response, _) = prompt(&mut agent, &second, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let count = agent
        .updates()
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "notice")
        .count();
    assert_eq!(count, 2, "shown once per process");
}

#[tokio::test]
async fn started_by_hand_on_a_terminal_it_says_what_it_is_and_exits_on_end_of_input() {
    let env = TestEnv::new(vec![]).await;
    let command = format!("{} acp", talaria_harness::binary::talaria_bin().display());
    // `script` gives the agent a terminal; its own input (empty) ends the session.
    let output = tokio::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .envs(env.env())
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("script runs");
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        shown.contains("speaks the Agent Client Protocol"),
        "{shown}"
    );
    assert!(shown.contains("talaria-chat"), "{shown}");
    assert!(output.status.success(), "{shown}");
    // Started by a client (no terminal), it says nothing of the kind.
    let mut agent = env.spawn().await;
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    assert!(!agent.stderr().contains("speaks the Agent Client Protocol"));
}
