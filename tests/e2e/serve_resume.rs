//! `talaria serve`'s streams when a client goes away mid-answer and comes back: every message
//! carries its cursor, a client that says where it was gets exactly what it missed (SSE with
//! `Last-Event-ID`, WebSocket with `after` or `_session/resume_stream`), one whose point is
//! gone is told so with 410 and where its turn stands, never 200 with a gap; a session whose
//! answer is larger than what may wait unread still loads.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::serve_support::*;
use crate::support::*;

/// A streamed answer of `words`, `delay_ms` apart.
fn slow_answer(words: &[String], delay_ms: u64) -> MockReply {
    MockReply::Text {
        chunks: words.to_vec(),
        reasoning: Vec::new(),
        delay_ms,
        usage: None,
        finish_reason: None,
    }
}

fn prompt(id: u64, session: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": "count"}]}})
}

fn is_answer(id: u64) -> impl Fn(&Event) -> bool {
    move |e| e.message["id"] == id && e.message.get("method").is_none()
}

fn messages(events: &[Event]) -> Vec<Value> {
    events.iter().map(|e| e.message.clone()).collect()
}

/// An HTTP client with a session, reading the session's own stream (or, `one_stream`, only
/// the connection's, at `/acp/NAME`).
async fn http_session(
    env: &TestEnv,
    served: &Served,
    one_stream: bool,
) -> (HttpClient, String, Events) {
    let name = one_stream.then(|| format!("c{}", std::process::id()));
    let (client, _) = HttpClient::initialize(served, name.as_deref()).await;
    let mut connection = client
        .open(None, None)
        .await
        .expect("the connection's stream");
    client
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": env.workspace.path(), "mcpServers": []}}))
        .await;
    let opened = connection.until(is_answer(1)).await;
    let session = opened.last().expect("answer").message["result"]["sessionId"]
        .as_str()
        .expect("session id")
        .to_string();
    if one_stream {
        return (client, session, connection);
    }
    drop(connection);
    let stream = client
        .open(Some(&session), None)
        .await
        .expect("the session's stream");
    (client, session, stream)
}

#[tokio::test]
async fn an_sse_client_offline_mid_answer_comes_back_with_every_word_once() {
    // Each way of coming back: after the last event seen, from an earlier one, twice, on a
    // one-stream client's connection stream, and with `_session/resume_stream`.
    for variant in ["last", "earlier", "twice", "one stream", "resume_stream"] {
        let all = words(300);
        let env = TestEnv::new(vec![slow_answer(&all, 3)]).await;
        let served = start(&env, &[]).await;
        let one_stream = variant == "one stream";
        let (client, session, mut stream) = http_session(&env, &served, one_stream).await;
        client.post(prompt(7, &session)).await;
        let mut seen = stream
            .until(|e| {
                answer_chunks(std::slice::from_ref(&e.message)).len() == 1
                    && e.message["params"]["update"]["content"]["text"] == "w40 "
            })
            .await;
        let drops = if variant == "twice" { 2 } else { 1 };
        let which = (!one_stream).then_some(session.as_str());
        let mut dying = Some(stream);
        for round in 0..drops {
            // Offline while the answer streams on (and, the last time, ends: the stream is
            // idle when the client comes back): what the server sent meanwhile fills the
            // sockets' buffers and is lost with them when the socket goes.
            away(if round + 1 == drops { 1800 } else { 300 }).await;
            drop(dying.take());
            let mut point = seen
                .last()
                .and_then(|e| e.id.clone())
                .expect("events carry ids");
            if variant == "earlier" {
                let at = seen.len() - 10;
                point = seen[at].id.clone().expect("id");
                seen.truncate(at + 1);
            }
            let mut again = if variant == "resume_stream" {
                let mut fresh = fresh_stream(&client, which).await;
                client
                    .send(&json!({"jsonrpc": "2.0", "id": 90, "method": "_session/resume_stream", "params": {"after": point, "sessionId": session}}), which)
                    .await;
                let resumed = fresh.until(is_answer(90)).await;
                let answer = resumed.last().expect("answer").message.clone();
                assert!(
                    answer["result"]["_meta"]["acp/turnState"]["state"].is_string(),
                    "{answer}"
                );
                // What the fresh stream got before the rewind comes again after it: keep the
                // replay, which follows the point.
                let from = resumed
                    .iter()
                    .rposition(|e| e.id.as_deref().is_some_and(|id| next_after(id, &point)))
                    .expect("the replay");
                seen.extend(resumed[from..resumed.len() - 1].iter().cloned());
                if seen.iter().any(|e| is_answer(7)(e)) {
                    break;
                }
                fresh
            } else {
                client
                    .open(which, Some(&point))
                    .await
                    .expect("resumed: 200")
            };
            if round + 1 < drops {
                let more = again
                    .until(|e| e.message["params"]["update"]["content"]["text"] == "w120 ")
                    .await;
                seen.extend(more);
                dying = Some(again);
                continue;
            }
            seen.extend(again.until(is_answer(7)).await);
        }
        let got = messages(&seen);
        assert_eq!(
            answer_chunks(&got),
            all,
            "{variant}: every word once, in order"
        );
        let ids: Vec<u64> = seen
            .iter()
            .filter_map(|e| e.id.as_deref()?.rsplit('.').next()?.parse().ok())
            .collect();
        assert!(
            ids.windows(2).all(|w| w[1] == w[0] + 1),
            "{variant}: contiguous cursors {ids:?}"
        );
        for event in &seen {
            assert_eq!(
                cursor_of(&event.message),
                event.id,
                "the SSE id is the message's cursor"
            );
        }
        let end = seen.iter().find(|e| is_answer(7)(e)).expect("the answer");
        assert_eq!(end.message["result"]["stopReason"], "end_turn", "{variant}");
    }
}

/// Whether cursor `id` is the one right after `point` (same stream).
fn next_after(id: &str, point: &str) -> bool {
    let split = |c: &str| -> Option<(String, u64)> {
        let (tag, n) = c.rsplit_once('.')?;
        Some((tag.to_string(), n.parse().ok()?))
    };
    matches!((split(id), split(point)), (Some((a, x)), Some((b, y))) if a == b && x == y + 1)
}

#[tokio::test]
async fn a_websocket_client_offline_mid_answer_comes_back_with_every_word_once() {
    for variant in [
        "cursor",
        "count",
        "resume_stream",
        "twice",
        "ended while away",
    ] {
        let all = words(300);
        let env = TestEnv::new(vec![slow_answer(&all, 3)]).await;
        let served = start(&env, &[]).await;
        let mut socket = Socket::open(&served, "").await.expect("opened");
        socket
            .call(
                0,
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": {}}),
            )
            .await;
        let opened = socket
            .call(
                1,
                "session/new",
                json!({"cwd": env.workspace.path(), "mcpServers": []}),
            )
            .await;
        let session = opened["result"]["sessionId"]
            .as_str()
            .expect("id")
            .to_string();
        socket.send(prompt(7, &session)).await;
        socket
            .until(|m| m["params"]["update"]["content"]["text"] == "w30 ")
            .await;
        let connection = socket.connection.clone();
        let mut seen = std::mem::take(&mut socket.messages);
        let mut dying = Some(socket);
        let drops = if variant == "twice" { 2 } else { 1 };
        for round in 0..drops {
            // Offline: the server's frames fill the socket's buffers and are lost with it.
            away(if variant == "ended while away" {
                1800
            } else {
                300
            })
            .await;
            if let Some(socket) = dying.take() {
                socket.drop_now();
            }
            let last = seen.last().expect("seen");
            let query = match variant {
                "count" => format!("?connection={connection}&after={}", seen.len()),
                "resume_stream" => format!("?connection={connection}"),
                _ => format!(
                    "?connection={connection}&after={}",
                    cursor_of(last).expect("cursor")
                ),
            };
            let mut back = Socket::open(&served, &query).await.expect("taken back");
            if variant == "resume_stream" {
                let point = cursor_of(last).expect("cursor");
                back.send(json!({"jsonrpc": "2.0", "id": 90, "method": "_session/resume_stream", "params": {"after": point}}))
                    .await;
                back.until(|m| m["id"] == 90).await;
                // The socket may have been handed what followed its join before the rewind:
                // keep the replay, which follows the point.
                let from = back
                    .messages
                    .iter()
                    .rposition(|m| cursor_of(m).is_some_and(|c| next_after(&c, &point)))
                    .expect("the replay");
                back.messages.drain(..from);
                back.messages.retain(|m| m["id"] != 90);
                if back
                    .messages
                    .iter()
                    .any(|m| m["id"] == 7 && m.get("method").is_none())
                {
                    seen.append(&mut back.messages);
                    break;
                }
            }
            if round + 1 < drops {
                back.until(|m| m["params"]["update"]["content"]["text"] == "w150 ")
                    .await;
                seen.append(&mut back.messages);
                dying = Some(back);
                continue;
            }
            back.until(|m| m["id"] == 7 && m.get("method").is_none())
                .await;
            seen.append(&mut back.messages);
        }
        assert_eq!(
            answer_chunks(&seen),
            all,
            "{variant}: every word once, in order"
        );
        assert_eq!(
            seen.last().expect("answer")["result"]["stopReason"],
            "end_turn"
        );
        assert!(
            seen.iter().all(|m| cursor_of(m).is_some()),
            "{variant}: every message has its cursor"
        );
    }
}

/// An answer of `mib` chunks of 1 MiB each, then (`hang`) a turn that goes on.
fn big_answer(mib: usize, hang: bool) -> MockReply {
    let chunks = (0..mib)
        .map(|n| format!("{n:02}{}", "x".repeat((1 << 20) - 2)))
        .collect();
    if hang {
        MockReply::Hang { chunks }
    } else {
        MockReply::Text {
            chunks,
            reasoning: Vec::new(),
            delay_ms: 0,
            usage: None,
            finish_reason: None,
        }
    }
}

#[tokio::test]
async fn a_point_that_is_gone_is_refused_with_410_and_the_turns_state() {
    // 10 MiB of answer read and kept: more than the 8 MiB a connection keeps, so its first
    // messages are gone, while the turn still runs.
    let env = TestEnv::new(vec![big_answer(10, true)]).await;
    let served = start(&env, &[]).await;
    let (client, session, mut stream) = http_session(&env, &served, false).await;
    client.post(prompt(7, &session)).await;
    let total = std::cell::Cell::new(0usize);
    let read = stream
        .until(|e| {
            total.set(
                total.get()
                    + answer_chunks(std::slice::from_ref(&e.message))
                        .concat()
                        .len(),
            );
            total.get() >= 10 << 20
        })
        .await;
    drop(stream);
    let first = read.first().and_then(|e| e.id.clone()).expect("an id");
    let (tag, _) = first.rsplit_once('.').expect("TAG.N");
    let last = read.last().and_then(|e| e.id.clone()).expect("an id");
    let last_n: u64 = last.rsplit_once('.').expect("TAG.N").1.parse().expect("N");
    let foreign = format!(
        "{}.1",
        if tag == "0000beef" {
            "0000feed"
        } else {
            "0000beef"
        }
    );
    let never_sent = format!("{tag}.{}", last_n + 50);
    for (point, why) in [
        (first.as_str(), "dropped"),
        (&format!("{tag}.0"), "dropped"),
        (&foreign, "another stream's"),
        (&never_sent, "never handed out"),
        ("not-a-cursor", "unreadable"),
    ] {
        let refused = client
            .open(Some(&session), Some(point))
            .await
            .err()
            .unwrap_or_else(|| panic!("{why}: resumed with a gap"));
        assert_eq!(refused.status(), 410, "{why}");
        let body: Value = serde_json::from_str(&refused.text().await.expect("text")).expect("JSON");
        let turn = &body["_meta"]["acp/turnState"];
        assert_eq!(turn["state"], "running", "{why}: {body}");
        assert_eq!(turn["promptRequestId"], 7, "{why}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("session/load")),
            "{body}"
        );
    }
    // `_session/resume_stream` is told the same as a JSON-RPC error.
    let mut fresh = client
        .open(Some(&session), Some(&last))
        .await
        .expect("the last point is kept");
    client
        .send(&json!({"jsonrpc": "2.0", "id": 91, "method": "_session/resume_stream", "params": {"after": first, "sessionId": session}}), Some(&session))
        .await;
    let refused = fresh
        .until(is_answer(91))
        .await
        .pop()
        .expect("answer")
        .message;
    assert_eq!(refused["error"]["code"], -32011, "{refused}");
    assert_eq!(
        refused["error"]["data"]["_meta"]["acp/turnState"]["state"],
        "running"
    );
    // The turn ends (cancelled): a point gone now reports it idle, and how it ended.
    client
        .post(
            json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
        )
        .await;
    let ended = fresh
        .until(is_answer(7))
        .await
        .pop()
        .expect("answer")
        .message;
    assert_eq!(ended["result"]["stopReason"], "cancelled");
    drop(fresh);
    let refused = client
        .open(Some(&session), Some(&first))
        .await
        .err()
        .expect("refused");
    let body: Value = serde_json::from_str(&refused.text().await.expect("text")).expect("JSON");
    assert_eq!(body["_meta"]["acp/turnState"]["state"], "idle", "{body}");
    assert_eq!(body["_meta"]["acp/turnState"]["stopReason"], "cancelled");
    // Over a WebSocket too: a point that is gone refuses the upgrade with 410.
    let mut socket = Socket::open(&served, "").await.expect("opened");
    socket
        .call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    let connection = socket.connection.clone();
    socket.drop_now();
    for after in ["5", "zzzz.1", "-1"] {
        let refused =
            Socket::open(&served, &format!("?connection={connection}&after={after}")).await;
        assert_eq!(refused.err(), Some(410), "{after}");
    }
}

#[tokio::test]
async fn a_session_with_an_answer_over_16_mib_loads_over_serve() {
    let env = TestEnv::new(vec![big_answer(17, false)]).await;
    let served = start(&env, &[]).await;
    let mut socket = Socket::open(&served, "").await.expect("opened");
    socket
        .call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    let opened = socket
        .call(
            1,
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    let session = opened["result"]["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    socket.send(prompt(2, &session)).await;
    let answered = socket.until(|m| m["id"] == 2).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    let live: usize = answer_chunks(&socket.messages)
        .iter()
        .map(String::len)
        .sum();
    assert_eq!(live, 17 << 20);
    socket
        .call(3, "session/close", json!({"sessionId": session}))
        .await;
    socket.socket.close(None).await.expect("closed");
    // Loaded on a new connection, by each profile: the whole answer comes, in one piece.
    let mut loader = Socket::open(&served, "").await.expect("opened");
    loader
        .call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    let loaded = loader
        .call(
            1,
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed: usize = answer_chunks(&loader.messages)
        .iter()
        .map(String::len)
        .sum();
    assert_eq!(
        replayed,
        17 << 20,
        "the whole answer was replayed over the WebSocket"
    );
    loader
        .call(2, "session/close", json!({"sessionId": session}))
        .await;
    loader.socket.close(None).await.expect("closed");
    let (client, _) = HttpClient::initialize(&served, Some("loader")).await;
    let mut stream = client.open(None, None).await.expect("stream");
    client
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "session/load", "params": {"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}}))
        .await;
    let events = stream.until(is_answer(1)).await;
    let replayed: usize = answer_chunks(&messages(&events))
        .iter()
        .map(String::len)
        .sum();
    assert_eq!(replayed, 17 << 20, "and over SSE");
}

#[tokio::test]
async fn the_initialize_answer_advertises_resumable_streams_with_their_retention() {
    let env = TestEnv::new(vec![]).await;
    let served = start(&env, &["--reconnect-window", "120"]).await;
    let (_, answer) = HttpClient::initialize(&served, None).await;
    let resumable = &answer["result"]["_meta"]["capabilities"]["transport"]["resumable"];
    assert_eq!(resumable["retentionSeconds"], 120, "{answer}");
    assert_eq!(resumable["retentionMessages"], 10_000);
    assert_eq!(resumable["resumeMethod"], "_session/resume_stream");
    // Over stdio there is no such transport.
    let (_agent, over_stdio) = initialize_answer(&env).await;
    assert!(
        over_stdio["result"]["_meta"].get("capabilities").is_none(),
        "{over_stdio}"
    );
}

/// A new stream without a point, once the server let the dropped one go (it answers 409
/// while it still holds it: a dropped socket is noticed a moment later on a loaded machine).
async fn fresh_stream(client: &HttpClient, which: Option<&str>) -> Events {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match client.open(which, None).await {
            Ok(stream) => return stream,
            Err(refused) if refused.status() == 409 && tokio::time::Instant::now() < deadline => {
                away(100).await;
            }
            Err(refused) => panic!("a fresh stream: {refused:?}"),
        }
    }
}
