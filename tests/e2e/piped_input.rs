//! A script that pipes its requests and closes its end at once (`printf … | talaria acp`):
//! every request read before the end of input is answered before the process exits, in
//! either framing, whatever the requests were doing (an `initialize` or a session start
//! still running off the loop is waited for), and the exit is clean.

use std::process::Stdio;

use serde_json::{Value, json};
use talaria_harness::binary::talaria_bin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

#[derive(Clone, Copy)]
enum Framing {
    Lines,
    ContentLength,
}

fn frame(messages: &[Value], framing: Framing) -> Vec<u8> {
    let mut out = Vec::new();
    for message in messages {
        let body = message.to_string();
        match framing {
            Framing::Lines => {
                out.extend_from_slice(body.as_bytes());
                out.push(b'\n');
            }
            Framing::ContentLength => {
                out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                out.extend_from_slice(body.as_bytes());
            }
        }
    }
    out
}

/// The JSON messages in the agent's output, in either framing.
fn messages_in(output: &str) -> Vec<Value> {
    let mut found = Vec::new();
    let mut rest = output;
    while let Some(start) = rest.find('{') {
        let mut stream = serde_json::Deserializer::from_str(&rest[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => {
                found.push(value);
                rest = &rest[start + stream.byte_offset()..];
            }
            _ => break,
        }
    }
    found
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize(id: u64) -> Value {
    request(id, "initialize", json!({"protocolVersion": 1}))
}

/// Writes `input` to a fresh agent, closes its input at once, and returns what it wrote and
/// its exit status.
async fn piped(env: &TestEnv, input: Vec<u8>) -> (Vec<Value>, std::process::ExitStatus) {
    let mut child = tokio::process::Command::new(talaria_bin())
        .arg("acp")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("agent starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    stdin.write_all(&input).await.expect("requests written");
    drop(stdin);
    let mut output = String::new();
    tokio::time::timeout(WAIT, stdout.read_to_string(&mut output))
        .await
        .expect("the agent ends its output")
        .expect("output read");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the agent exits")
        .expect("status");
    (messages_in(&output), status)
}

/// Asserts each id in `ids` was answered exactly once.
fn each_answered_once(messages: &[Value], ids: &[u64]) {
    for id in ids {
        let answers = messages
            .iter()
            .filter(|m| {
                m["id"] == json!(id) && (m.get("result").is_some() || m.get("error").is_some())
            })
            .count();
        assert_eq!(
            answers, 1,
            "request {id} answered {answers} times: {messages:#?}"
        );
    }
}

/// `count` requests: an `initialize`, then session starts, lists, an unknown method and a
/// request with bad parameters, in turn.
fn mixed_requests(count: u64, workspace: &std::path::Path) -> Vec<Value> {
    (1..=count)
        .map(|id| match (id, id % 4) {
            (1, _) => initialize(id),
            (_, 0) => request(
                id,
                "session/new",
                json!({"cwd": workspace, "mcpServers": []}),
            ),
            (_, 1) => request(id, "session/list", json!({})),
            (_, 2) => request(id, "no/such_method", json!({})),
            _ => request(id, "session/load", json!({"sessionId": 7})),
        })
        .collect()
}

async fn all_answered(count: u64, framing: Framing) {
    let env = TestEnv::new(Vec::new()).await;
    let requests = mixed_requests(count, env.workspace.path());
    let (messages, status) = piped(&env, frame(&requests, framing)).await;
    assert!(status.success(), "{status}");
    let ids: Vec<u64> = (1..=count).collect();
    each_answered_once(&messages, &ids);
    assert_eq!(
        messages[0]["id"], 1,
        "the first answer is the first request's"
    );
    assert!(
        messages[0]["result"]["protocolVersion"].is_number(),
        "{}",
        messages[0]
    );
}

#[tokio::test]
async fn one_piped_request_is_answered_before_exit() {
    for framing in [Framing::Lines, Framing::ContentLength] {
        all_answered(1, framing).await;
    }
}

#[tokio::test]
async fn two_piped_requests_are_answered_before_exit() {
    for framing in [Framing::Lines, Framing::ContentLength] {
        all_answered(2, framing).await;
    }
}

#[tokio::test]
async fn fifty_piped_requests_are_answered_before_exit() {
    for framing in [Framing::Lines, Framing::ContentLength] {
        all_answered(50, framing).await;
    }
}

#[tokio::test]
async fn a_last_line_without_its_newline_is_answered() {
    let env = TestEnv::new(Vec::new()).await;
    let mut input = frame(&[initialize(1)], Framing::Lines);
    input.extend_from_slice(request(2, "session/list", json!({})).to_string().as_bytes());
    let (messages, status) = piped(&env, input).await;
    assert!(status.success());
    each_answered_once(&messages, &[1, 2]);
}

#[tokio::test]
async fn requests_before_a_garbage_line_at_the_end_are_answered() {
    let env = TestEnv::new(Vec::new()).await;
    let mut input = frame(
        &[initialize(1), request(2, "session/list", json!({}))],
        Framing::Lines,
    );
    input.extend_from_slice(b"{not json at all\n");
    let (messages, status) = piped(&env, input).await;
    assert!(status.success());
    each_answered_once(&messages, &[1, 2]);
}

#[tokio::test]
async fn session_starts_in_flight_at_the_end_are_answered_with_their_sessions() {
    let env = TestEnv::new(Vec::new()).await;
    let mut requests = vec![initialize(1)];
    requests.extend((2..=6).map(|id| {
        request(
            id,
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
    }));
    let (messages, status) = piped(&env, frame(&requests, Framing::Lines)).await;
    assert!(status.success());
    each_answered_once(&messages, &[1, 2, 3, 4, 5, 6]);
    for id in 2..=6 {
        let answer = messages.iter().find(|m| m["id"] == id).expect("answer");
        assert!(answer["result"]["sessionId"].is_string(), "{answer}");
    }
}

#[tokio::test]
async fn a_prompt_piped_after_its_session_is_answered_and_saved() {
    let env = TestEnv::new(Vec::new()).await;
    // Without the session's id the prompt names a session that does not exist: it is
    // answered with an error, the session start with its session.
    let requests = vec![
        initialize(1),
        request(
            2,
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        ),
        request(
            3,
            "session/prompt",
            json!({"sessionId": "not-yet-known", "prompt": [{"type": "text", "text": "hi"}]}),
        ),
    ];
    let (messages, status) = piped(&env, frame(&requests, Framing::ContentLength)).await;
    assert!(status.success());
    each_answered_once(&messages, &[1, 2, 3]);
}

#[tokio::test]
async fn end_of_input_withdraws_a_pending_question_as_a_signal_does() {
    let env = TestEnv::new(vec![talaria_harness::MockReply::tool_call(
        "t1",
        "terminal",
        json!({"command": "echo hi"}),
    )])
    .await;
    let (mut agent, session) = env.session().await;
    agent
        .start_request("session/prompt", text_prompt(&session, "run it"))
        .await
        .expect("prompt");
    let ask = agent
        .next_agent_request(WAIT)
        .await
        .expect("permission request");
    assert_eq!(ask["method"], "session/request_permission");
    agent.close_stdin();
    let withdrawn = agent
        .wait_for(WAIT, |m| m["method"] == "$/cancel_request")
        .await
        .expect("the question is withdrawn");
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn a_request_nested_ten_thousand_deep_is_answered_under_its_id() {
    let env = TestEnv::new(Vec::new()).await;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let mut input = frame(&[initialize(1)], Framing::Lines);
    input.extend_from_slice(
        format!(r#"{{"jsonrpc":"2.0","id":42,"method":"session/list","params":{deep}}}"#)
            .as_bytes(),
    );
    input.push(b'\n');
    input.extend(frame(
        &[request(43, "session/list", json!({}))],
        Framing::Lines,
    ));
    let (messages, status) = piped(&env, input).await;
    assert!(status.success());
    each_answered_once(&messages, &[1, 42, 43]);
    let deep_answer = messages.iter().find(|m| m["id"] == 42).expect("answer");
    assert_eq!(deep_answer["error"]["code"], -32700, "{deep_answer}");
    assert!(
        !messages.iter().any(|m| m["id"].is_null()),
        "nothing answered under null: {messages:?}"
    );
}
