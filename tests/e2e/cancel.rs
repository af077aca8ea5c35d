//! Cancellation and prompt queueing.

use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

#[tokio::test]
async fn cancel_mid_stream_answers_cancelled_closes_the_model_stream_and_the_session_goes_on() {
    let env = TestEnv::new(vec![MockReply::Hang {
        chunks: vec!["Working on".into()],
    }])
    .await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "long task"))
        .await
        .expect("prompt");
    let first = agent.next_update(WAIT).await.expect("first chunk");
    assert_eq!(first["content"]["text"], "Working on");
    let cancelled_at = Instant::now();
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(5),
        "cancel took {:?}",
        cancelled_at.elapsed()
    );
    assert!(
        env.mock
            .wait_until(WAIT, |r| r[0].client_disconnected)
            .await,
        "the mock saw the connection closed"
    );

    env.mock.push(MockReply::text(&["fresh"]));
    let (response, updates) = prompt(&mut agent, &session, "next").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(chunks(&updates, "agent_message_chunk"), ["fresh"]);
    // The partial answer stays in history, marked as cut off (so the model does not take it
    // for a complete answer), followed by the new question.
    let messages = &env.mock.requests()[1].body["messages"];
    assert_eq!(
        messages[2],
        json!({
            "role": "assistant",
            "content": "Working on\n\n[This answer was cut off before it was complete: the turn was cancelled]"
        })
    );
    assert_eq!(messages[3]["content"], "next");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn cancel_request_on_a_prompt_cancels_its_turn() {
    let env = TestEnv::new(vec![MockReply::Hang {
        chunks: vec!["..".into()],
    }])
    .await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "x"))
        .await
        .expect("prompt");
    agent.next_update(WAIT).await.expect("chunk");
    agent
        .notify("$/cancel_request", json!({"requestId": id}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled");
}

#[tokio::test]
async fn a_prompt_sent_during_a_turn_is_queued_and_runs_after_it() {
    let env = TestEnv::new(vec![
        MockReply::Text {
            chunks: vec!["a1".into(), "a2".into(), "a3".into()],
            reasoning: vec![],
            delay_ms: 40,
            usage: None,
            finish_reason: None,
        },
        MockReply::text(&["b1"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let first = agent
        .start_request("session/prompt", text_prompt(&session, "first"))
        .await
        .expect("first");
    let second = agent
        .start_request("session/prompt", text_prompt(&session, "second"))
        .await
        .expect("second");
    let first_response = agent
        .wait_response(first, WAIT)
        .await
        .expect("first response");
    let second_response = agent
        .wait_response(second, WAIT)
        .await
        .expect("second response");
    assert_eq!(stop_reason(&first_response), "end_turn");
    assert_eq!(stop_reason(&second_response), "end_turn");
    // Order on the wire: all of turn one, its response, then turn two.
    let order: Vec<String> = agent
        .transcript
        .iter()
        .filter_map(|m| {
            if m["id"] == json!(first) && m.get("result").is_some() {
                Some("R1".to_string())
            } else if m["id"] == json!(second) && m.get("result").is_some() {
                Some("R2".to_string())
            } else {
                m["params"]["update"]["content"]["text"]
                    .as_str()
                    .map(str::to_string)
            }
        })
        .collect();
    assert_eq!(order, ["a1", "a2", "a3", "R1", "b1", "R2"]);
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].body["messages"][2]["content"], "a1a2a3",
        "turn two saw turn one's answer"
    );
}
