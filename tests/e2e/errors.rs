//! Bad input gets the right JSON-RPC error and the server keeps serving.

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

#[tokio::test]
async fn malformed_input_gets_the_right_codes_and_serving_goes_on() {
    let env = TestEnv::new(vec![MockReply::text(&["still here"])]).await;
    let mut agent = env.spawn().await;

    agent.send_raw(b"this is not json\n").await.expect("send");
    let parse = agent
        .wait_for(WAIT, |m| m.get("error").is_some())
        .await
        .expect("parse error");
    assert_eq!(parse["error"]["code"], -32700);
    assert_eq!(parse["id"], serde_json::Value::Null);

    agent
        .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":77}\n")
        .await
        .expect("send");
    let invalid = agent
        .wait_for(WAIT, |m| m["id"] == 77)
        .await
        .expect("invalid request");
    assert_eq!(invalid["error"]["code"], -32600);

    let unknown = agent
        .request("session/teleport", json!({}))
        .await
        .expect("response");
    assert_eq!(unknown["error"]["code"], -32601);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("session/teleport")
    );

    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize after garbage");

    let missing = agent
        .request("session/new", json!({"mcpServers": []}))
        .await
        .expect("response");
    assert_eq!(missing["error"]["code"], -32602);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("cwd"),
        "{missing}"
    );

    let relative = agent
        .request(
            "session/new",
            json!({"cwd": "relative/dir", "mcpServers": []}),
        )
        .await
        .expect("response");
    assert_eq!(relative["error"]["code"], -32602);
    assert!(
        relative["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("absolute")
    );

    let wrong_type = agent
        .request("session/prompt", json!({"sessionId": 5, "prompt": "hi"}))
        .await
        .expect("response");
    assert_eq!(wrong_type["error"]["code"], -32602);

    let no_session = agent
        .request("session/prompt", text_prompt("nope", "hi"))
        .await
        .expect("response");
    assert!(
        no_session["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Session not found")
    );

    // Unknown notifications are ignored (no answer), and the server still works.
    agent
        .notify("$/unknown_thing", json!({}))
        .await
        .expect("notify");
    let session = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session");
    let sid = session["sessionId"].as_str().expect("id").to_string();
    let (response, _) = prompt(&mut agent, &sid, "hello?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_configuration_error_reaches_the_client_as_invalid_params_naming_the_file() {
    let env = TestEnv::new(vec![]).await;
    env.write_config("model = \"m\"\ncontext_window = \"lots\"\n");
    let mut agent = env.spawn().await;
    agent
        .call("initialize", serde_json::json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let response = agent
        .request(
            "session/new",
            serde_json::json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("response");
    assert_eq!(response["error"]["code"], -32602, "{response}");
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("config.toml") && message.contains("line 2"),
        "{message}"
    );
    assert!(agent.stderr().contains("config.toml"), "logged");
}

#[tokio::test]
async fn a_refused_connection_fails_at_once_and_says_so() {
    let mut env = TestEnv::new(vec![]).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    env.extra_env.push((
        "OPENAI_BASE_URL".into(),
        format!("http://127.0.0.1:{port}/v1"),
    ));
    let (mut agent, session) = env.session().await;
    let started = std::time::Instant::now();
    let (response, _) = prompt(&mut agent, &session, "hello?").await;
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("connection refused"), "{response}");
    assert!(!message.contains("timed out"), "{message}");
    // No backoff: the default policy would wait seconds between attempts.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_unknown_host_fails_at_once_and_says_so() {
    let mut env = TestEnv::new(vec![]).await;
    env.extra_env.push((
        "OPENAI_BASE_URL".into(),
        "http://localhots.invalid:8080/v1".into(),
    ));
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "hello?").await;
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot find the host"), "{response}");
    assert!(!message.contains("timed out"), "{message}");
    // Not retried: no backoff notice, nothing logged about another attempt.
    let told = serde_json::to_string(&updates).unwrap_or_default();
    assert!(!told.contains("retrying"), "{told}");
    assert!(
        !agent.stderr().contains("retrying in"),
        "{}",
        agent.stderr()
    );
}

#[tokio::test]
async fn the_configuration_is_checked_at_start_up_and_each_problem_logged_once() {
    let env = TestEnv::new(vec![]).await;
    env.write_config("model = \"m\"\ncontext_window = \"lots\"\n");
    let mut agent = env.spawn().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let log = agent.stderr();
    assert_eq!(log.matches("configuration:").count(), 1, "{log}");
    assert!(log.contains("line 2"), "{log}");

    let warned = TestEnv::new(vec![]).await;
    warned.write_config("a_future_setting = 1\n");
    let mut agent = warned.spawn().await;
    agent
        .start_session(warned.workspace.path())
        .await
        .expect("session");
    agent
        .call(
            "session/new",
            serde_json::json!({"cwd": warned.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("second session");
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    assert_eq!(
        agent.stderr().matches("a_future_setting").count(),
        1,
        "{}",
        agent.stderr()
    );
}

#[tokio::test]
async fn request_ids_are_echoed_exactly_even_with_lone_surrogates_or_bad_bytes() {
    let env = TestEnv::new(Vec::new()).await;
    let mut agent = initialized(&env).await;
    // An id no UTF-8 string can hold: answered under its own text, the request not run.
    agent
        .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"x\\ud800\",\"method\":\"session/list\",\"params\":{}}\n")
        .await
        .expect("send");
    // Invalid UTF-8 in the params: the error comes under the readable id.
    let mut bad = b"{\"jsonrpc\":\"2.0\",\"id\":\"bytes-1\",\"method\":\"session/list\",\"params\":{\"cwd\":\"/a".to_vec();
    bad.extend_from_slice(&[0xFF, 0xFE]);
    bad.extend_from_slice(b"\"}}\n");
    agent.send_raw(&bad).await.expect("send");
    let under_its_id = agent
        .wait_for(WAIT, |m| m["id"] == "bytes-1")
        .await
        .expect("answered under its id");
    assert_eq!(under_its_id["error"]["code"], -32700, "{under_its_id}");
    // Serving goes on.
    agent
        .call("session/list", json!({}))
        .await
        .expect("still serving");
    // The surrogate id's answer is not JSON a strict reader accepts (nor was the request):
    // it is the one line the harness could not read, with the id exactly as sent.
    let unreadable = agent.non_json_output();
    assert_eq!(unreadable.len(), 1, "{unreadable:?}");
    assert!(
        unreadable[0].contains(r#""id":"x\ud800""#) && unreadable[0].contains("-32600"),
        "{unreadable:?}"
    );
    assert!(!unreadable[0].contains("\\ufffd"), "{unreadable:?}");
}
