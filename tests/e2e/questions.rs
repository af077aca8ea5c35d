//! Questions to the user: the `clarify` tool asks through `elicitation/create` when the client
//! shows forms (accept, decline, cancel), and is not offered otherwise.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

/// Runs one `clarify` call, answers the form with `answer`, and returns what the model read.
async fn ask_and_answer(answer: Value) -> (Value, String) {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "q",
            "clarify",
            json!({"question": "Which database?", "choices": ["sqlite", "postgres"]}),
        ),
        MockReply::text(&["ok"]),
    ])
    .await;
    let (mut agent, session, _) = env.session_with(json!({"elicitation": {"form": {}}})).await;
    let id = agent
        .start_request(
            "session/prompt",
            text_prompt(&session, "set up the database"),
        )
        .await
        .expect("prompt");
    let asked = agent
        .wait_for(WAIT, |m| m["method"] == "elicitation/create")
        .await
        .expect("a form");
    agent.respond(&asked["id"], answer).await.expect("answer");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let read = env.mock.requests()[1].body["messages"].to_string();
    (asked["params"].clone(), read)
}

#[tokio::test]
async fn an_accepted_form_answers_the_model() {
    let (form, read) =
        ask_and_answer(json!({"action": "accept", "content": {"answer": "postgres"}})).await;
    assert_eq!(form["mode"], "form");
    assert_eq!(form["message"], "Which database?");
    assert_eq!(
        form["requestedSchema"]["properties"]["answer"]["enum"],
        json!(["sqlite", "postgres"])
    );
    assert!(form["sessionId"].is_string());
    assert!(read.contains("The user answered: postgres"), "{read}");
}

#[tokio::test]
async fn a_declined_form_is_reported_as_declined() {
    let (_, read) = ask_and_answer(json!({"action": "decline"})).await;
    assert!(read.contains("The user declined to answer"), "{read}");
}

#[tokio::test]
async fn a_cancelled_form_is_reported_as_dismissed() {
    let (_, read) = ask_and_answer(json!({"action": "cancel"})).await;
    assert!(read.contains("dismissed the question"), "{read}");
}

#[tokio::test]
async fn without_forms_there_is_no_clarify_tool() {
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "hello").await;
    let tools = env.mock.requests()[0].body["tools"].to_string();
    assert!(!tools.contains("\"clarify\""), "{tools}");
    assert!(tools.contains("\"read_file\""));
}
