//! `talaria serve`'s start and doors: a start that cannot listen changes nothing and a start
//! beside a running server keeps its token (a 401 says where the current one is); a POST
//! over the limit is refused before its body is read; a client's DELETE is logged as what it
//! is; a client that sends no connection id and opens one stream (as `acp-http-client` does)
//! runs a whole session, permission question included.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::MockReply;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::serve_support::*;
use crate::support::*;

fn token_in(env: &TestEnv) -> String {
    std::fs::read_to_string(env.home.path().join("talaria/serve.token"))
        .expect("token file")
        .trim()
        .to_string()
}

/// The status and body of an `initialize` with `token`.
async fn initialize_with(addr: &str, token: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/acp"))
        .bearer_auth(token)
        .header("Content-Type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#)
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn starts_on_one_home_keep_the_token_a_running_server_uses() {
    let env = TestEnv::new(vec![]).await;
    let first = start(&env, &[]).await;
    let token = first.token.clone();
    // A second start on the same address cannot listen: it says so, and the token file is
    // untouched (the running server's clients keep working).
    for _ in 0..3 {
        let output = tokio::process::Command::new(talaria_harness::binary::talaria_bin())
            .args(["serve", "--listen", &first.addr])
            .env_clear()
            .envs(env.env())
            .output()
            .await
            .expect("ran");
        assert_eq!(output.status.code(), Some(2));
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains("cannot listen on"), "{said}");
        assert_eq!(token_in(&env), token, "a failed start rewrites nothing");
        assert_eq!(initialize_with(&first.addr, &token).await.0, 200);
    }
    // A second server on another port, beside the first: both use the one token.
    let second = start(&env, &[]).await;
    assert_eq!(second.token, token, "a running server's token is kept");
    assert_eq!(initialize_with(&second.addr, &token).await.0, 200);
    assert_eq!(initialize_with(&first.addr, &token).await.0, 200);
    // Once every server has stopped, a start writes a new token; the old one is refused with
    // advice: where the current token is, and that the server may have started again.
    drop(first);
    drop(second);
    let mut third = None;
    for _ in 0..50 {
        let started = start(&env, &[]).await;
        if started.token != token {
            third = Some(started);
            break;
        }
        // The killed servers' locks go with their processes; a start may come first.
        drop(started);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let third = third.expect("a fresh token once no server runs");
    let (status, said) = initialize_with(&third.addr, &token).await;
    assert_eq!(status, 401);
    let path = env.home.path().join("talaria/serve.token");
    assert!(said.contains(&path.display().to_string()), "{said}");
    assert!(said.contains("started again"), "{said}");
    assert_eq!(initialize_with(&third.addr, &third.token).await.0, 200);
    let (status, said) = reqwest::Client::new()
        .post(third.url())
        .body("{}")
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .expect("answered");
    assert_eq!(status, 401);
    assert!(said.text().await.expect("text").contains("serve.token"));
}

/// Sends a POST's head only, declaring `length`; the status, and how long it took.
async fn head_only(addr: &str, token: &str, declared: &str) -> (u16, Duration) {
    let started = Instant::now();
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /acp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n{declared}\r\n"
    );
    socket.write_all(head.as_bytes()).await.expect("head");
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut answer))
        .await
        .expect("answered without the body")
        .expect("read");
    let text = String::from_utf8_lossy(&answer[..read]).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, started.elapsed())
}

#[tokio::test]
async fn a_post_over_the_limit_is_refused_before_its_body_is_read() {
    let env = TestEnv::new(vec![]).await;
    let served = start(&env, &["--max-message-bytes", "65536"]).await;
    for declared in [
        "Content-Length: 65537\r\n".to_string(),
        "Content-Length: 1073741824\r\n".into(),
        format!("Content-Length: {}\r\n", i64::MAX),
        "Content-Length: 8388609\r\n".into(),
        "Content-Length:    100000000   \r\n".into(),
    ] {
        let (status, took) = head_only(&served.addr, &served.token, &declared).await;
        assert_eq!(status, 413, "{declared}");
        assert!(took < Duration::from_secs(3), "{declared}: {took:?}");
    }
    // Without a length (chunked), reading stops at the limit.
    let mut socket = tokio::net::TcpStream::connect(&served.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /acp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        served.addr, served.token
    );
    socket.write_all(head.as_bytes()).await.expect("head");
    let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
    let mut answer = vec![0u8; 4096];
    let mut status = 0;
    for _ in 0..64 {
        if socket.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
        if let Ok(Ok(read)) =
            tokio::time::timeout(Duration::from_millis(50), socket.read(&mut answer)).await
            && read > 0
        {
            status = String::from_utf8_lossy(&answer[..read])
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            break;
        }
    }
    assert_eq!(
        status, 413,
        "refused at the limit, long before 4 MiB were sent"
    );
    // A message within the limit still goes through.
    let (client, _) = HttpClient::initialize(&served, None).await;
    let mut stream = client.open(None, None).await.expect("stream");
    let padded = json!({"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {"_meta": {"pad": "y".repeat(60_000)}}});
    client.post(padded).await;
    let listed = stream.until(|e| e.message["id"] == 5).await;
    assert!(
        listed
            .last()
            .expect("answer")
            .message
            .get("result")
            .is_some()
    );
}

#[tokio::test]
async fn a_clients_delete_is_logged_as_the_clients_not_as_the_servers_stop() {
    let env = TestEnv::new(vec![]).await;
    let served = start(&env, &[]).await;
    let (client, _) = HttpClient::initialize(&served, None).await;
    assert_eq!(client.delete().await, 202);
    let (named, _) = HttpClient::initialize(&served, Some("named-one")).await;
    assert_eq!(named.delete().await, 202);
    let deadline = Instant::now() + WAIT;
    while served.logged().matches("its client's DELETE").count() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logged = served.logged();
    assert_eq!(
        logged.matches("stopping (its client's DELETE)").count(),
        2,
        "{logged}"
    );
    assert!(!logged.contains("the server's stop"), "{logged}");
    assert_eq!(client.delete().await, 404, "gone");
}

#[tokio::test]
async fn a_client_with_one_stream_and_no_connection_id_runs_a_session_with_a_question() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "one.txt", "content": "one\n"}),
        ),
        MockReply::text(&["Written."]),
    ])
    .await;
    let served = start(&env, &[]).await;
    let (client, _) = HttpClient::initialize(&served, Some("one-stream-client")).await;
    assert!(
        client.connection.is_none(),
        "it never sends Acp-Connection-Id"
    );
    let mut stream = client.open(None, None).await.expect("its one stream");
    client
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": env.workspace.path(), "mcpServers": []}}))
        .await;
    let opened = stream.until(|e| e.message["id"] == 1).await;
    let session = opened.last().expect("answer").message["result"]["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    client
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": "write"}]}}))
        .await;
    let asked = stream
        .until(|e| e.message["method"] == "session/request_permission")
        .await
        .pop()
        .expect("asked")
        .message;
    let allow = asked["params"]["options"]
        .as_array()
        .and_then(|o| o.iter().find(|o| o["kind"] == "allow_once"))
        .expect("allow once")["optionId"]
        .clone();
    client
        .post(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": allow}}}))
        .await;
    let rest = stream
        .until(|e| e.message["id"] == 2 && e.message.get("method").is_none())
        .await;
    let end = &rest.last().expect("answer").message;
    assert_eq!(end["result"]["stopReason"], "end_turn", "{end}");
    assert_eq!(
        answer_chunks(
            &rest
                .iter()
                .map(|e| e.message.clone())
                .collect::<Vec<Value>>()
        ),
        ["Written."]
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("one.txt")).expect("written"),
        "one\n"
    );
    // The address is the connection's while it lives: a second initialize there is refused,
    // and a request to plain /acp with no id is told what to do.
    let refused = HttpClient::initialize_status(&served, Some("one-stream-client")).await;
    assert_eq!(refused, 409);
    let bare = HttpClient {
        http: fresh_sockets(),
        url: served.url(),
        token: served.token.clone(),
        connection: None,
    };
    let answer = bare
        .send(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {}}),
            None,
        )
        .await;
    assert_eq!(answer.status(), 400);
    assert!(answer.text().await.expect("text").contains("/acp/NAME"));
    assert_eq!(client.delete().await, 202);
}
