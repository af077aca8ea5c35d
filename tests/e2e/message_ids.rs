//! Every message a client sees carries its `messageId`: an answer's chunks share one id, its
//! thought chunks one of their own, the next answer another; a load replays the same ids
//! for the answers, and each user message gets an id that stays the same from load to load
//! (what a client names a message by, to rewind to it).

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};

use crate::support::*;

/// `(kind, messageId)` of every chunk in `updates`, in order.
fn chunk_ids(updates: &[Value]) -> Vec<(String, String)> {
    updates
        .iter()
        .filter(|u| {
            matches!(
                u["sessionUpdate"].as_str(),
                Some("agent_message_chunk" | "agent_thought_chunk" | "user_message_chunk")
            )
        })
        .map(|u| {
            (
                u["sessionUpdate"].as_str().unwrap_or_default().to_string(),
                u["messageId"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The chunk ids a `session/load` of `session` replays.
async fn replayed_ids(
    agent: &mut AgentProcess,
    env: &TestEnv,
    session: &str,
) -> Vec<(String, String)> {
    let from = agent.transcript.len();
    agent
        .call("session/load", load_params(env, session))
        .await
        .expect("load");
    let updates: Vec<Value> = agent.transcript[from..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    chunk_ids(&updates)
}

#[tokio::test]
async fn each_message_carries_its_id_live_and_the_same_on_every_load() {
    let env = TestEnv::new(vec![
        MockReply::Text {
            chunks: vec!["the first ".into(), "answer".into()],
            reasoning: vec!["weighing it".into()],
            delay_ms: 0,
            usage: None,
            finish_reason: None,
        },
        MockReply::text(&["the second answer"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (_, first) = prompt(&mut agent, &session, "one").await;
    let (_, second) = prompt(&mut agent, &session, "two").await;
    let (first, second) = (chunk_ids(&first), chunk_ids(&second));

    let answer_id = |chunks: &[(String, String)]| {
        let ids: Vec<&String> = chunks
            .iter()
            .filter(|(kind, _)| kind == "agent_message_chunk")
            .map(|(_, id)| id)
            .collect();
        assert!(!ids.is_empty() && !ids[0].is_empty(), "{chunks:?}");
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "one id per answer: {chunks:?}"
        );
        ids[0].clone()
    };
    let (one, two) = (answer_id(&first), answer_id(&second));
    assert_ne!(one, two, "each answer is a message of its own");
    let thoughts: Vec<&(String, String)> = first
        .iter()
        .filter(|(kind, _)| kind == "agent_thought_chunk")
        .collect();
    assert!(!thoughts.is_empty(), "{first:?}");
    assert!(
        thoughts.iter().all(|(_, id)| !id.is_empty() && *id != one),
        "the thought is a message beside the answer: {first:?}"
    );

    // A load in another process replays the same ids for the answers and the thought, and
    // ids for the user's messages.
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
    let mut agent = initialized(&env).await;
    let replayed = replayed_ids(&mut agent, &env, &session).await;
    let of = |kind: &str| -> Vec<String> {
        replayed
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, id)| id.clone())
            .collect()
    };
    let answers = of("agent_message_chunk");
    assert_eq!(answers.first(), Some(&one), "{replayed:?}");
    assert_eq!(answers.last(), Some(&two), "{replayed:?}");
    assert_eq!(of("agent_thought_chunk"), [thoughts[0].1.clone()]);
    let users = of("user_message_chunk");
    assert_eq!(users.len(), 2, "{replayed:?}");
    assert!(users.iter().all(|id| !id.is_empty()) && users[0] != users[1]);
    // And again: the same ids.
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    assert_eq!(replayed_ids(&mut agent, &env, &session).await, replayed);
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
}
