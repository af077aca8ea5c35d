//! The bounds on what a client can pile up in the agent (ARCHITECTURE.md, "Queues and their
//! bounds"): a session holds at most `MAX_QUEUED_TURNS` turns queued or running, and a
//! connection at most `MAX_DEFERRED` requests being answered; past either, a request is
//! refused at once with `-32010` (try again later) and the session goes on.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

/// The code of a request that may succeed later.
const UNAVAILABLE: i64 = -32010;

fn slow_answer(words: usize, delay_ms: u64) -> MockReply {
    MockReply::Text {
        chunks: (0..words).map(|n| format!("w{n} ")).collect(),
        reasoning: Vec::new(),
        delay_ms,
        usage: None,
        finish_reason: None,
    }
}

fn refused_as_busy(answer: &Value, says: &str) -> bool {
    answer["error"]["code"] == UNAVAILABLE
        && answer["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains(says))
}

#[tokio::test]
async fn a_session_holds_at_most_64_turns_and_refuses_the_next_until_one_ends() {
    let env = TestEnv::new(vec![
        slow_answer(100, 100),
        MockReply::text(&["after the flood"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let running = agent
        .start_request("session/prompt", text_prompt(&session, "a long answer"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await
        .expect("the answer streams");
    let mut sent = Vec::new();
    for n in 0..70 {
        let prompt = text_prompt(&session, &format!("queued {n}"));
        sent.push(
            agent
                .start_request("session/prompt", prompt)
                .await
                .expect("sent"),
        );
    }
    // One runs and 63 wait: the last 7 are refused at once, while the answer still streams.
    for id in &sent[63..] {
        let answer = agent.wait_response(*id, WAIT).await.expect("answered");
        assert!(
            refused_as_busy(&answer, "64 prompts waiting or running"),
            "{answer}"
        );
    }
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    for id in std::iter::once(&running).chain(&sent[..63]) {
        let answer = agent.wait_response(*id, WAIT).await.expect("answered");
        assert_eq!(stop_reason(&answer), "cancelled", "{answer}");
    }
    // The slots came back with the turns' ends: the session takes prompts again.
    let (answer, _) = prompt(&mut agent, &session, "and now").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    assert_eq!(
        env.mock.requests().len(),
        2,
        "the refused prompts reached no model"
    );
}

#[tokio::test]
async fn a_connection_past_256_requests_being_answered_is_refused_at_once() {
    let env = TestEnv::new(vec![
        MockReply::text(&["stored"]),
        MockReply::text(&["alive"]),
    ])
    .await;
    let mut agent = env.spawn().await;
    let stored = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (answer, _) = prompt(&mut agent, &stored, "hello").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    agent
        .call("session/close", json!({"sessionId": stored}))
        .await
        .expect("closed");
    // With the store's write lock held elsewhere, each delete waits for the store in turn.
    let store = env.home.path().join("talaria").join("state.db");
    let holder = hold_write_lock(&store, Duration::from_secs(4));
    let before = agent.transcript.len();
    let mut sent = Vec::new();
    for _ in 0..400 {
        let params = json!({"sessionId": stored});
        sent.push(
            agent
                .start_request("session/delete", params)
                .await
                .expect("sent"),
        );
    }
    for id in &sent {
        agent
            .wait_response(*id, Duration::from_secs(120))
            .await
            .expect("every request answered");
    }
    holder.join().expect("the lock holder");
    // In the order the agent answered: each refusal came while 256 earlier requests were
    // still unanswered, and only then.
    let mut answered = 0;
    let mut refused = 0;
    for message in &agent.transcript[before..] {
        let Some(id) = message["id"].as_i64().filter(|id| sent.contains(id)) else {
            continue;
        };
        let earlier = sent.iter().filter(|sent| **sent < id).count();
        if refused_as_busy(
            message,
            "requests of this connection are still being answered",
        ) {
            refused += 1;
            assert!(
                earlier - answered >= 256,
                "{} in flight: {message}",
                earlier - answered
            );
        }
        answered += 1;
    }
    assert!(refused >= 1, "nothing refused of 400 sent at once");
    // The connection goes on.
    let fresh = agent
        .start_session(env.workspace.path())
        .await
        .expect("a new session");
    let (answer, _) = prompt(&mut agent, &fresh, "still there?").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
}
