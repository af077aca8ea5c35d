//! The todo list as each client takes it: plan operations (`plan_update`, `plan_removed`, one
//! id-addressed plan) for a client announcing `clientCapabilities.plan`, live and in a load's
//! replay; the whole-plan `plan` update for every other client.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

fn todo(items: Value) -> MockReply {
    MockReply::tool_call("t", "todo", json!({ "todos": items }))
}

fn script() -> Vec<MockReply> {
    vec![
        todo(json!([
            {"id": "1", "content": "read the code", "status": "completed"},
            {"id": "2", "content": "write the test", "status": "in_progress"}
        ])),
        MockReply::text(&["Planned."]),
        todo(json!([])),
        MockReply::text(&["Cleared."]),
    ]
}

fn kinds(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| u["sessionUpdate"].as_str())
        .filter(|k| k.starts_with("plan"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_client_with_plan_operations_gets_updates_and_a_removal_also_on_load() {
    let env = TestEnv::new(script()).await;
    let (mut agent, session, _) = env.session_with(json!({"plan": {}})).await;
    let (_, updates) = prompt(&mut agent, &session, "plan it").await;
    assert_eq!(kinds(&updates), ["plan_update"]);
    let update = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "plan_update")
        .expect("plan_update");
    assert_eq!(update["plan"]["type"], "items");
    assert_eq!(update["plan"]["planId"], "todo");
    assert_eq!(update["plan"]["entries"][1]["content"], "write the test");
    assert_eq!(update["plan"]["entries"][1]["status"], "in_progress");
    let (_, updates) = prompt(&mut agent, &session, "clear it").await;
    assert_eq!(kinds(&updates), ["plan_removed"]);
    let removed = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "plan_removed")
        .expect("removed");
    assert_eq!(removed["planId"], "todo");

    // A load's replay speaks the same operations, in order.
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    let mut again = env.spawn().await;
    again
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {"plan": {}}}),
        )
        .await
        .expect("initialize");
    let before = again.transcript.len();
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    let replayed: Vec<Value> = again.transcript[before..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    assert_eq!(kinds(&replayed), ["plan_update", "plan_removed"]);
}

#[tokio::test]
async fn a_client_without_them_gets_the_whole_plan() {
    let env = TestEnv::new(script()).await;
    let (mut agent, session) = env.session().await;
    let (_, updates) = prompt(&mut agent, &session, "plan it").await;
    assert_eq!(kinds(&updates), ["plan"]);
    let (_, updates) = prompt(&mut agent, &session, "clear it").await;
    assert_eq!(kinds(&updates), ["plan"]);
    let cleared = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "plan")
        .expect("plan");
    assert_eq!(cleared["entries"], json!([]));
}
