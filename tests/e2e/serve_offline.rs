//! Attached clients away for 30 s while another client's long answer streams: one over
//! HTTP+SSE, one over a WebSocket, both dropped as a network drops them, come back with the
//! point they saw last and get every word once, in order, nothing missing.

use serde_json::{Value, json};

use crate::serve_attach::{attach, client, prompt, slow_answer, turn_ended, with_session};
use crate::serve_support::*;
use crate::support::*;

/// The words of the answer a client was shown, and whether its cursors are contiguous.
fn words_in_order(messages: &[Value]) -> (Vec<String>, bool) {
    let numbers: Vec<u64> = messages
        .iter()
        .filter_map(cursor_of)
        .filter_map(|c| c.rsplit('.').next()?.parse().ok())
        .collect();
    let contiguous = numbers.windows(2).all(|w| w[1] == w[0] + 1);
    (answer_chunks(messages), contiguous)
}

#[tokio::test]
async fn observers_away_for_30_s_during_a_long_answer_miss_nothing_over_sse_or_websocket() {
    // About 40 s of answer: 800 words, 50 ms apart.
    let all = words(800);
    let env = TestEnv::new(vec![slow_answer(&all, 50)]).await;
    let served = start(&env, &[]).await;
    let (mut editor, session) = with_session(&served, &env, "editor").await;
    let (sse, _) = HttpClient::initialize(&served, None).await;
    let mut stream = sse
        .open(Some(&session), None)
        .await
        .expect("the session's stream");
    sse.post(json!({"jsonrpc": "2.0", "id": 2, "method": "_session/attach", "params": {"sessionId": session, "role": "observer"}}))
        .await;
    let mut socket = client(&served, "phone").await;
    attach(&mut socket, 2, &session, "observer").await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt(&session, "count")}))
        .await;
    let at_w20 = |m: &Value| m["params"]["update"]["content"]["text"] == "w20 ";
    let mut over_sse = stream.until(|e| at_w20(&e.message)).await;
    socket.until(at_w20).await;
    let connection = socket.connection.clone();
    let mut over_ws = std::mem::take(&mut socket.messages);

    // Both gone for 30 s as the answer streams on.
    drop(stream);
    socket.drop_now();
    away(30_000).await;

    let point = over_sse
        .last()
        .and_then(|e| e.id.clone())
        .expect("events carry ids");
    let mut again = sse
        .open(Some(&session), Some(&point))
        .await
        .expect("resumed over SSE: 200");
    over_sse.extend(again.until(|e| turn_ended(&e.message)).await);
    let after = over_ws.iter().rev().find_map(cursor_of).expect("a cursor");
    let mut back = Socket::open(&served, &format!("?connection={connection}&after={after}"))
        .await
        .expect("resumed over WebSocket");
    back.until(turn_ended).await;
    over_ws.append(&mut back.messages);

    let sse_seen: Vec<Value> = over_sse.into_iter().map(|e| e.message).collect();
    for (transport, seen) in [("SSE", sse_seen), ("WebSocket", over_ws)] {
        let (got, contiguous) = words_in_order(&seen);
        assert_eq!(got, all, "{transport}: every word once, in order");
        assert!(contiguous, "{transport}: no cursor skipped");
    }
}
