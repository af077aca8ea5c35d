//! The conversation record seen from outside: a failed turn stays in the history, marked, so
//! the next request is valid; finished cards carry the call's locations.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

fn roles(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_failed_turn_is_marked_and_the_next_request_never_has_two_user_messages_in_a_row() {
    let env = TestEnv::new(vec![
        MockReply::Error {
            status: 400,
            body: json!({"error": {"message": "bad request from the mock"}}).to_string(),
            headers: vec![],
        },
        MockReply::text(&["recovered"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (failed, _) = prompt(&mut agent, &session, "first").await;
    assert!(failed["error"].is_object(), "{failed}");
    let (response, _) = prompt(&mut agent, &session, "second").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    let second = &requests[1].body;
    assert_eq!(
        roles(second),
        ["system", "user", "assistant", "user"],
        "{second}"
    );
    let note = second["messages"][2]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(note.contains("did not complete"), "{note}");
    assert_eq!(second["messages"][3]["content"], "second");
}

#[tokio::test]
async fn a_finished_card_carries_the_places_the_call_acted_on() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("r1", "read_file", json!({"path": "notes.txt", "offset": 2})),
        MockReply::text(&["read"]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("notes.txt"), "a\nb\nc\n").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "read").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let finished = updates
        .iter()
        .find(|u| u["toolCallId"] == "r1" && u["status"] == "completed")
        .expect("finished card");
    let path = finished["locations"][0]["path"]
        .as_str()
        .unwrap_or_default();
    assert!(path.ends_with("notes.txt"), "{finished}");
    assert_eq!(finished["content"][0]["content"]["type"], "text");
}
