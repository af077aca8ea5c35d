//! The built-in demo model, with no key and no model server, in every kind of client: an
//! editor over stdio (a streamed, labelled answer, a plan, a file read, an edit that asks,
//! a labelled title), `talaria-chat` and `talaria demo`, `talaria serve`'s WebSocket, and
//! `talaria setup`'s demo choice. Nothing reaches the configured model endpoint (the mock).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use talaria_harness::binary::{talaria_bin, workspace_bin};
use tokio::io::AsyncBufReadExt;
use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

/// An environment whose agents use the demo: no key, titles on.
async fn demo_env() -> TestEnv {
    let mut env = TestEnv::new(Vec::new()).await;
    env.api_key = None;
    env.extra_env
        .push(("TALARIA_PROVIDER".into(), "demo".into()));
    env.extra_env.push(("TALARIA_TITLES".into(), "on".into()));
    std::fs::write(
        env.workspace.path().join("README.md"),
        "# Sample project\n\nIt greets.\n",
    )
    .expect("readme");
    env
}

/// The written demo file names what the tour read.
fn assert_demo_file(env: &TestEnv) {
    let written =
        std::fs::read_to_string(env.workspace.path().join("TALARIA-DEMO.md")).expect("written");
    assert!(
        written.contains("README.md") && written.contains("# Sample project"),
        "{written}"
    );
}

#[tokio::test]
async fn an_editor_sees_the_demo_stream_plan_read_and_ask_before_its_edit_with_no_model() {
    let env = demo_env().await;
    let mut agent = initialized(&env).await;
    let created = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("a session with no key");
    let session = created["sessionId"].as_str().expect("id").to_string();
    assert!(
        created.to_string().contains("talaria-demo"),
        "the model is named as the demo: {created}"
    );
    let response = prompt_allowing_once(&mut agent, &session, "what does this do?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let updates = agent.updates();
    let text = chunks(&updates, "agent_message_chunk").join("");
    assert!(text.starts_with("**Talaria demo**"), "{text}");
    assert!(text.contains("“what does this do?”"), "{text}");
    assert!(
        chunks(&updates, "agent_message_chunk").len() > 10,
        "the answer streams"
    );
    let kinds: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .filter_map(|u| u["kind"].as_str())
        .collect();
    for kind in ["search", "read", "edit"] {
        assert!(kinds.contains(&kind), "a {kind} card: {kinds:?}");
    }
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "plan" || u["sessionUpdate"] == "plan_update"),
        "a plan"
    );
    assert_demo_file(&env);
    // The session's title says it is the demo.
    let titled = agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "session_info_update"
                && m["params"]["update"]["title"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("Talaria demo"))
        })
        .await;
    assert!(titled.is_ok(), "a labelled title: {:?}", agent.updates());
    assert!(env.mock.requests().is_empty(), "no model was called");
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn talaria_chat_and_talaria_demo_answer_with_the_demo() {
    let env = demo_env().await;
    let output = tokio::time::timeout(
        WAIT,
        crate::terminal_client::chat(&env, &["-p", "hello there", "--approve", "once"]).output(),
    )
    .await
    .expect("in time")
    .expect("ran");
    let answer = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(answer.starts_with("**Talaria demo**"), "{answer}");
    assert_demo_file(&env);
    // `talaria demo` makes its own sample project and hands the terminal to talaria-chat
    // (found beside talaria) with the demo model, whatever the environment's provider.
    let folder = tempfile::tempdir().expect("folder");
    std::fs::write(folder.path().join("README.md"), "# Sample project\n").expect("readme");
    let mut command = tokio::process::Command::new(talaria_bin());
    command
        .args(["demo", "--dir"])
        .arg(folder.path())
        .args(["-p", "show me", "--approve", "once"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .env_remove("TALARIA_PROVIDER")
        .kill_on_drop(true);
    let output = tokio::time::timeout(WAIT, command.output())
        .await
        .expect("in time")
        .expect("ran");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert!(
        said.contains("Talaria demo: the built-in demo model"),
        "{said}"
    );
    let answer = String::from_utf8_lossy(&output.stdout);
    assert!(answer.starts_with("**Talaria demo**"), "{answer}");
    assert!(folder.path().join("TALARIA-DEMO.md").exists());
    assert!(env.mock.requests().is_empty(), "no model was called");
    assert!(
        workspace_bin("talaria-chat", "talaria-chat").exists(),
        "talaria-chat was built beside talaria"
    );
}

/// `talaria serve` with the demo: its address and token.
async fn serve_demo(env: &TestEnv) -> (tokio::process::Child, String, String) {
    let mut child = tokio::process::Command::new(talaria_bin())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_clear()
        .envs(env.env())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("talaria serve");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("in time")
        .expect("read")
        .expect("a line");
    let addr = line
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the address")
        .to_string();
    let token = std::fs::read_to_string(env.home.path().join("talaria/serve.token"))
        .expect("token")
        .trim()
        .to_string();
    (child, addr, token)
}

#[tokio::test]
async fn the_web_page_of_talaria_serve_gets_the_demo_over_its_websocket() {
    let env = demo_env().await;
    let (_served, addr, token) = serve_demo(&env).await;
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("ws://{addr}/acp"),
    )
    .map(|mut r| {
        r.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header"),
        );
        r
    })
    .expect("request");
    let (mut socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .expect("upgraded");
    let send = |value: Value| Message::text(value.to_string());
    socket
        .send(send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": 1}}),
        ))
        .await
        .expect("initialize");
    socket
        .send(send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                          "params": {"cwd": env.workspace.path(), "mcpServers": []}}),
        ))
        .await
        .expect("session/new");
    let mut text = String::new();
    let mut answered = None;
    let deadline = tokio::time::Instant::now() + WAIT;
    while answered.is_none() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Ok(Some(Ok(Message::Text(frame)))) = tokio::time::timeout(left, socket.next()).await
        else {
            panic!("the socket ended before the answer; so far: {text}");
        };
        let message: Value = serde_json::from_str(&frame).expect("json");
        if message["id"] == 2 {
            let session = message["result"]["sessionId"].clone();
            socket
                .send(send(
                    json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": session,
                               "prompt": [{"type": "text", "text": "hi from a browser"}]}}),
                ))
                .await
                .expect("prompt");
        } else if message["method"] == "session/request_permission" {
            socket
                .send(send(json!({"jsonrpc": "2.0", "id": message["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})))
                .await
                .expect("allowed");
        } else if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            text.push_str(
                message["params"]["update"]["content"]["text"]
                    .as_str()
                    .unwrap_or_default(),
            );
        } else if message["id"] == 3 {
            answered = Some(message);
        }
    }
    let answered = answered.unwrap_or_default();
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    assert!(text.starts_with("**Talaria demo**"), "{text}");
    assert_demo_file(&env);
    assert!(env.mock.requests().is_empty(), "no model was called");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn doctor_names_the_demo_and_its_test_call_passes_with_no_server() {
    let env = demo_env().await;
    let output = tokio::process::Command::new(talaria_bin())
        .args(["doctor", "--call"])
        .env_clear()
        .envs(env.env())
        .output()
        .await
        .expect("doctor");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("built-in demo model"), "{report}");
    assert!(report.contains("the model answered"), "{report}");
    assert!(env.mock.requests().is_empty(), "no model was called");
}
