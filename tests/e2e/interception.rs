//! Tool interception for clients (the ACP draft, behind `_meta`): a client that opted in is
//! asked before each call and after it ran; an error, an unreadable answer or a stop means
//! the call does not run (fail closed), a replaced result is what the model reads, and a
//! replaced input still goes through the policy.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const METHOD: &str = "_agentclientprotocol.com/tool/intercept";

/// A client that intercepts both checkpoints.
fn intercepting() -> Value {
    json!({"_meta": {"agentclientprotocol.com": {"toolInterception": {"before": true, "after": true}}}})
}

/// Drives a prompt to its answer, handing every interception request to `decide` (method and
/// params; the other requests are permission questions, answered by `permission`).
async fn prompt_intercepted(
    agent: &mut talaria_harness::AgentProcess,
    session: &str,
    mut decide: impl FnMut(&Value) -> Result<Option<Value>, (i64, String)>,
    permission: &'static str,
) -> Value {
    let id = agent
        .start_request("session/prompt", text_prompt(session, "go"))
        .await
        .expect("prompt");
    agent
        .drive(id, WAIT, |method, params| match method {
            METHOD => decide(params),
            other => choose(permission)(other, params),
        })
        .await
        .expect("response")
}

fn updates(agent: &talaria_harness::AgentProcess) -> Vec<Value> {
    agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect()
}

#[tokio::test]
async fn a_client_that_errs_or_answers_garbage_stops_the_call_and_the_model_reads_why() {
    let env = TestEnv::new(vec![
        batch(&[
            ("c1", "terminal", json!({"command": "touch errored.txt"})),
            ("c2", "terminal", json!({"command": "touch garbage.txt"})),
        ]),
        MockReply::text(&["neither ran"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session, _) = env.session_with(intercepting()).await;
    let response = prompt_intercepted(
        &mut agent,
        &session,
        |params| match params["toolCall"]["toolCallId"].as_str() {
            Some("c1") => Err((-32603, "policy engine down".into())),
            _ => Ok(Some(json!({"action": "perhaps"}))),
        },
        "reject_once",
    )
    .await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let workspace = env.workspace.path();
    assert!(!workspace.join("errored.txt").exists(), "c1 ran");
    assert!(!workspace.join("garbage.txt").exists(), "c2 ran");
    let read = tool_results(&env.mock, 1).join("\n");
    assert!(read.contains("policy engine down"), "{read}");
    assert!(read.contains("unreadable answer"), "{read}");
    let asked = agent.agent_requests();
    assert!(
        asked.iter().all(|(_, p)| p["phase"] == "before"),
        "{asked:?}"
    );
    let shown = updates(&agent);
    let card = card_state(&shown, "c2").to_string();
    assert!(card.contains("The client could not decide"), "{card}");
    assert_clean_stdout(&agent);
}

/// A client that never answers: the call is stopped when the configured wait ends (not the
/// default minute), the request withdrawn, and the model reads why.
#[tokio::test]
async fn a_silent_client_stops_the_call_at_the_configured_timeout() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "terminal", json!({"command": "touch silent.txt"})),
        MockReply::text(&["it did not run"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\ntool_interception_timeout_secs = 1\n");
    let (mut agent, session, _) = env.session_with(intercepting()).await;
    let response = prompt_intercepted(&mut agent, &session, |_| Ok(None), "reject_once").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(!env.workspace.path().join("silent.txt").exists(), "c1 ran");
    let read = tool_results(&env.mock, 1).join("\n");
    assert!(read.contains("no answer within 1 seconds"), "{read}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn after_replaces_the_output_the_model_reads() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("r1", "read_file", json!({"path": "plans.txt"})),
        MockReply::text(&["read"]),
    ])
    .await;
    std::fs::write(
        env.workspace.path().join("plans.txt"),
        "launch code PAPAYA-42\n",
    )
    .expect("write");
    let (mut agent, session, _) = env.session_with(intercepting()).await;
    let mut seen = Vec::new();
    let response = prompt_intercepted(
        &mut agent,
        &session,
        |params| {
            seen.push(params.clone());
            Ok(Some(match params["phase"].as_str() {
                Some("after") => json!({"action": "replace", "result": {"status": "completed",
                    "content": [{"type": "content", "content": {"type": "text", "text": "[redacted by policy]"}}]}}),
                _ => json!({"action": "allow"}),
            }))
        },
        "reject_once",
    )
    .await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["toolCall"]["rawInput"]["path"], "plans.txt");
    assert_eq!(seen[0]["toolCall"]["kind"], "read");
    assert_eq!(seen[1]["toolCall"]["status"], "completed");
    let original = seen[1]["toolCall"]["content"].to_string();
    assert!(original.contains("PAPAYA-42"), "{original}");
    let read = tool_results(&env.mock, 1).join("\n");
    assert!(read.contains("[redacted by policy]"), "{read}");
    assert!(!everything_sent(&env.mock).contains("PAPAYA-42"));
    let card = card_state(&updates(&agent), "r1").to_string();
    assert!(card.contains("The client replaced the result"), "{card}");
    assert!(!card.contains("PAPAYA-42"), "{card}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_stop_ends_the_turn_and_nothing_of_the_batch_runs() {
    // One model answer only: a second request would find no script (the mock fails loudly).
    let env = TestEnv::new(vec![batch(&[
        ("c1", "terminal", json!({"command": "touch first.txt"})),
        ("c2", "terminal", json!({"command": "touch second.txt"})),
    ])])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session, _) = env.session_with(intercepting()).await;
    let response = prompt_intercepted(
        &mut agent,
        &session,
        |_| {
            Ok(Some(
                json!({"action": "stop", "reason": "budget exhausted"}),
            ))
        },
        "reject_once",
    )
    .await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(!env.workspace.path().join("first.txt").exists());
    assert!(!env.workspace.path().join("second.txt").exists());
    assert_eq!(env.mock.requests().len(), 1);
    assert_eq!(agent.agent_requests().len(), 1, "c2 was never asked about");
    let shown = updates(&agent);
    assert!(
        card_state(&shown, "c1")
            .to_string()
            .contains("budget exhausted")
    );
    assert_eq!(card_state(&shown, "c2")["status"], "failed");
    assert_clean_stdout(&agent);
}

/// Calls of a batch decided together (two reads, run side by side once decided): the
/// client allows the first and stops at the second, and neither runs — the stop ends the
/// batch before any of its group runs.
#[tokio::test]
async fn a_stop_keeps_what_the_batch_decided_together_from_running() {
    let env = TestEnv::new(vec![batch(&[
        ("c1", "read_file", json!({"path": "one.txt"})),
        ("c2", "read_file", json!({"path": "two.txt"})),
    ])])
    .await;
    std::fs::write(env.workspace.path().join("one.txt"), "ONE-CONTENT\n").expect("one");
    std::fs::write(env.workspace.path().join("two.txt"), "TWO-CONTENT\n").expect("two");
    let (mut agent, session, _) = env.session_with(intercepting()).await;
    let response = prompt_intercepted(
        &mut agent,
        &session,
        |params| match params["toolCall"]["toolCallId"].as_str() {
            Some("c1") => Ok(Some(json!({"action": "allow"}))),
            _ => Ok(Some(
                json!({"action": "stop", "reason": "budget exhausted"}),
            )),
        },
        "reject_once",
    )
    .await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let before: Vec<_> = agent
        .agent_requests()
        .into_iter()
        .filter(|(_, p)| p["phase"] == "before")
        .collect();
    assert_eq!(before.len(), 2, "both were asked about: {before:?}");
    let shown = updates(&agent);
    let first = card_state(&shown, "c1");
    assert_eq!(first["status"], "failed", "c1 ran: {first}");
    assert!(!first.to_string().contains("ONE-CONTENT"), "{first}");
    assert_clean_stdout(&agent);

    // A stop after the first ran (at its `after` checkpoint) keeps a call waiting to run on
    // its own (its input replaced) from running.
    let env = TestEnv::new(vec![batch(&[
        ("c1", "read_file", json!({"path": "one.txt"})),
        ("c2", "read_file", json!({"path": "two.txt"})),
    ])])
    .await;
    std::fs::write(env.workspace.path().join("one.txt"), "ONE-CONTENT\n").expect("one");
    std::fs::write(env.workspace.path().join("three.txt"), "THREE-CONTENT\n").expect("three");
    let (mut agent, session, _) = env.session_with(intercepting()).await;
    prompt_intercepted(
        &mut agent,
        &session,
        |params| {
            let id = params["toolCall"]["toolCallId"].as_str();
            Ok(Some(match (id, params["phase"].as_str()) {
                (Some("c2"), Some("before")) => {
                    json!({"action": "replace", "rawInput": {"path": "three.txt"}})
                }
                (Some("c1"), Some("after")) => {
                    json!({"action": "stop", "reason": "budget exhausted"})
                }
                _ => json!({"action": "allow"}),
            }))
        },
        "reject_once",
    )
    .await;
    let second = card_state(&updates(&agent), "c2");
    assert_eq!(second["status"], "failed", "the replaced c2 ran: {second}");
    assert!(!second.to_string().contains("THREE-CONTENT"), "{second}");
}

#[tokio::test]
async fn a_replaced_input_is_still_decided_by_the_policy() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "terminal", json!({"command": "ls"})),
        MockReply::text(&["refused"]),
    ])
    .await;
    let (mut agent, session, _) = env.session_with(intercepting()).await;
    let response = prompt_intercepted(
        &mut agent,
        &session,
        |params| {
            Ok(Some(match params["phase"].as_str() {
                Some("before") => {
                    json!({"action": "replace", "rawInput": {"command": "touch swapped.txt"}})
                }
                _ => json!({"action": "allow"}),
            }))
        },
        "reject_once",
    )
    .await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(!env.workspace.path().join("swapped.txt").exists());
    let asked: Vec<String> = agent
        .agent_requests()
        .into_iter()
        .map(|(method, _)| method)
        .collect();
    assert_eq!(asked, [METHOD, "session/request_permission"], "{asked:?}");
    let card = card_state(&updates(&agent), "c1").to_string();
    assert!(card.contains("replaced the input"), "{card}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_client_that_did_not_opt_in_is_never_asked_and_the_agent_offers_both_checkpoints() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "terminal", json!({"command": "touch ran.txt"})),
        MockReply::text(&["ran"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, answer) = initialize_answer(&env).await;
    assert_eq!(
        answer["agentCapabilities"]["_meta"]["toolInterception"],
        json!({"before": true, "after": true}),
        "{answer}"
    );
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, _) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(env.workspace.path().join("ran.txt").exists());
    assert!(agent.agent_requests().is_empty());
    assert_clean_stdout(&agent);
}
