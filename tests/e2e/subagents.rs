//! Subagents: `delegate_task` runs children in parallel on their own records and the
//! auxiliary subagent model, never deeper than one level, cancelled with their parent, asking
//! permission on the parent's session under their own name.

use serde_json::{Value, json};
use talaria_harness::{MockReply, MockToolCall};

use crate::support::*;

const CHILD_MODEL: &str = "child-model";

fn delegate(id: &str, goal: &str) -> MockToolCall {
    MockToolCall {
        id: id.into(),
        name: "delegate_task".into(),
        arguments: json!({"goal": goal, "context": "The project is in the working directory."})
            .to_string(),
    }
}

fn delayed(text: &str, delay_ms: u64) -> MockReply {
    MockReply::Delayed {
        delay_ms,
        reply: Box::new(MockReply::text(&[text])),
    }
}

/// The parent's script: one delegation to write the notes, then its answer.
fn delegating_the_notes() -> Vec<MockReply> {
    vec![
        MockReply::ToolCalls {
            calls: vec![delegate("d1", "write the notes")],
            text: None,
            fragment_chars: None,
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["Delegated."]),
    ]
}

async fn env_with(main: Vec<MockReply>, children: Vec<MockReply>) -> TestEnv {
    let env = TestEnv::new(main).await;
    env.write_config(&format!(
        "[learning]\nskill_review_after = 0\nmemory_review_after = 0\n[auxiliary.subagent]\nmodel = \"{CHILD_MODEL}\"\n"
    ));
    env.mock.script_for_model(CHILD_MODEL, children);
    env
}

fn child_requests(env: &TestEnv) -> Vec<talaria_harness::RecordedRequest> {
    env.mock
        .requests()
        .into_iter()
        .filter(|r| r.body["model"] == CHILD_MODEL)
        .collect()
}

#[tokio::test]
async fn two_delegations_run_in_parallel_and_report_back() {
    let env = env_with(
        vec![
            MockReply::ToolCalls {
                calls: vec![
                    delegate("d1", "count the files"),
                    delegate("d2", "read the readme"),
                ],
                text: None,
                fragment_chars: None,
                usage: None,
                delay_ms: 0,
            },
            MockReply::text(&["Both done."]),
        ],
        vec![
            delayed("child report one", 600),
            delayed("child report two", 600),
        ],
    )
    .await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "do two things").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let children = child_requests(&env);
    assert_eq!(children.len(), 2);
    let (a, b) = (
        children[0].received_at.expect("time"),
        children[1].received_at.expect("time"),
    );
    let apart = if a > b { a - b } else { b - a };
    assert!(
        apart.as_millis() < 500,
        "the children ran in parallel ({apart:?} apart)"
    );
    for child in &children {
        let body = &child.body;
        assert!(
            body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.contains("You are a subagent"))
        );
        let asked =
            without_environment(body["messages"][1]["content"].as_str().unwrap_or_default());
        assert!(
            asked.starts_with("Task: ") && asked.contains("Context:"),
            "{asked}"
        );
        let tools = body["tools"].to_string();
        assert!(!tools.contains("\"delegate_task\""), "no deeper delegation");
        assert!(tools.contains("\"read_file\""));
    }
    let last = env
        .mock
        .requests()
        .last()
        .expect("request")
        .body
        .to_string();
    assert!(
        last.contains("Report from subagent")
            && last.contains("child report one")
            && last.contains("child report two"),
        "{last}"
    );
    // The parent's cards show the children's progress.
    let progress = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .map(Value::to_string)
        .collect::<String>();
    assert!(
        progress.contains("subagent 1") && progress.contains("subagent 2"),
        "{progress}"
    );
    // Each child's record is saved as a session of its own, its parent recorded; it can be
    // loaded and replayed.
    let listed = agent.call("session/list", json!({})).await.expect("list");
    let sessions = listed["sessions"].as_array().expect("sessions").clone();
    let children: Vec<&Value> = sessions
        .iter()
        .filter(|s| {
            s["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("subagent "))
        })
        .collect();
    assert_eq!(children.len(), 2, "{listed}");
    let child = children[0]["sessionId"].as_str().expect("id").to_string();
    assert!(child.starts_with(&session), "{child}");
    let mut other = env.spawn().await;
    other
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await
        .expect("initialize");
    let before = other.transcript.len();
    other
        .call(
            "session/load",
            json!({"sessionId": child, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("load");
    let replayed: String = other.transcript[before..]
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(replayed.starts_with("Task: "), "{replayed}");
}

#[tokio::test]
async fn a_child_cannot_delegate_and_asks_permission_on_the_parents_session() {
    let env = env_with(
        delegating_the_notes(),
        vec![
            MockReply::tool_call("nested", "delegate_task", json!({"goal": "go deeper"})),
            MockReply::tool_call(
                "w",
                "write_file",
                json!({"path": "notes.txt", "content": "from the child\n"}),
            ),
            MockReply::text(&["Wrote notes.txt."]),
        ],
    )
    .await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "delegate it"))
        .await
        .expect("prompt");
    let asked = agent.next_agent_request(WAIT).await.expect("permission");
    assert_eq!(asked["method"], "session/request_permission");
    let title = asked["params"]["toolCall"]["title"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(title.starts_with("[subagent 1]"), "{title}");
    assert_eq!(asked["params"]["sessionId"], session.as_str());
    allow_once(&mut agent, &asked).await;
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("notes.txt")).expect("written"),
        "from the child\n"
    );
    let children = child_requests(&env);
    let refused = children[1].body["messages"].to_string();
    assert!(
        refused.contains("Unknown tool `delegate_task`"),
        "{refused}"
    );
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_children() {
    let env = env_with(
        vec![MockReply::ToolCalls {
            calls: vec![delegate("d1", "take forever")],
            text: None,
            fragment_chars: None,
            usage: None,
            delay_ms: 0,
        }],
        vec![MockReply::Hang {
            chunks: vec!["working".into()],
        }],
    )
    .await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "delegate"))
        .await
        .expect("prompt");
    assert!(
        env.mock
            .wait_until(WAIT, |r| r.iter().any(|r| r.body["model"] == CHILD_MODEL))
            .await
    );
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
    assert!(
        env.mock
            .wait_until(WAIT, |r| r
                .iter()
                .any(|r| r.body["model"] == CHILD_MODEL && r.client_disconnected))
            .await,
        "the child's model call was aborted"
    );
}

#[tokio::test]
async fn a_client_that_shows_subagents_sees_each_child_as_its_own_session() {
    let env = env_with(
        delegating_the_notes(),
        vec![
            MockReply::tool_call(
                "w",
                "write_file",
                json!({"path": "notes.txt", "content": "child\n"}),
            ),
            MockReply::text(&["Wrote notes.txt."]),
        ],
    )
    .await;
    let (mut agent, session, _) = env.session_with(json!({"subagents": {}})).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "delegate it"))
        .await
        .expect("prompt");
    let asked = agent.next_agent_request(WAIT).await.expect("permission");
    assert_eq!(asked["method"], "session/request_permission");
    let child = asked["params"]["sessionId"]
        .as_str()
        .expect("child session")
        .to_string();
    assert_ne!(
        child, session,
        "the child's question carries its own session id"
    );
    allow_once(&mut agent, &asked).await;
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let notes: Vec<Value> = agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/update")
        .cloned()
        .collect();
    let on = |sid: &str| {
        notes
            .iter()
            .filter(|m| m["params"]["sessionId"] == sid)
            .map(|m| m["params"]["update"].clone())
            .collect::<Vec<Value>>()
    };
    let parent = on(&session);
    let announced: Vec<&Value> = parent
        .iter()
        .filter(|u| u["sessionUpdate"] == "subagent_update")
        .collect();
    assert_eq!(announced.len(), 2, "{parent:?}");
    assert_eq!(announced[0]["sessionId"], child.as_str());
    assert_eq!(announced[0]["title"], "subagent 1");
    assert_eq!(
        announced[0]["state"]["state"], "running",
        "{:?}",
        announced[0]
    );
    assert_eq!(announced[1]["state"]["state"], "idle", "{:?}", announced[1]);
    // The 1.20 shape: the client may cancel the running child; the idle state says how its
    // work ended; the task and the report are messages between the two sessions.
    assert!(
        announced[0]["capabilities"]["cancel"].is_object(),
        "{:?}",
        announced[0]
    );
    assert!(
        announced[1]["state"].to_string().contains("end_turn"),
        "{:?}",
        announced[1]
    );
    let messages: Vec<&Value> = parent
        .iter()
        .filter(|u| u["sessionUpdate"] == "session_message")
        .collect();
    assert_eq!(messages.len(), 2, "{parent:?}");
    assert_eq!(messages[0]["senderSessionId"], session.as_str());
    assert_eq!(messages[0]["recipientSessionId"], child.as_str());
    assert!(
        messages[0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("write the notes")),
        "{:?}",
        messages[0]
    );
    assert_eq!(messages[1]["senderSessionId"], child.as_str());
    assert_eq!(messages[1]["recipientSessionId"], session.as_str());
    assert_eq!(messages[1]["content"][0]["text"], "Wrote notes.txt.");
    assert_ne!(messages[0]["messageId"], messages[1]["messageId"]);
    // A reload replays the child under the id it had live, linked from the delegation's card.
    let from = agent.transcript.len();
    agent
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("load");
    let replayed: Vec<Value> = agent.transcript[from..]
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session.as_str())
        .map(|m| m["params"]["update"].clone())
        .collect();
    assert!(
        replayed
            .iter()
            .any(|u| u["sessionUpdate"] == "subagent_update" && u["sessionId"] == child.as_str()),
        "{replayed:?}"
    );
    assert!(
        replayed.iter().any(|u| u["content"][0]["type"] == "session"
            && u["content"][0]["sessionId"] == child.as_str()),
        "{replayed:?}"
    );
    assert!(
        parent.iter().any(|u| u["content"][0]["type"] == "session"
            && u["content"][0]["sessionId"] == child.as_str()),
        "the parent's card references the child: {parent:?}"
    );
    let own = on(&child);
    assert!(
        own.iter().any(|u| u["sessionUpdate"] == "tool_call"),
        "{own:?}"
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("notes.txt")).expect("written"),
        "child\n"
    );
}

#[tokio::test]
async fn children_follow_the_model_the_session_switched_to() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("d", "delegate_task", json!({"goal": "look around"})),
        MockReply::text(&["Looked around."]),
        MockReply::text(&["The child looked around."]),
    ])
    .await;
    env.write_config(
        "models = [\"mock-model\", \"other-model\"]\n[learning]\nskill_review_after = 0\nmemory_review_after = 0\n",
    );
    let (mut agent, session) = env.session().await;
    agent
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "other-model"}),
        )
        .await
        .expect("switch");
    let (response, _) = prompt(&mut agent, &session, "delegate it").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 3);
    let child = &requests[1].body;
    assert_eq!(child["model"], "other-model", "the child's request");
    let environment = environment_of(child);
    assert!(
        environment.contains("- Model: other-model"),
        "{environment}"
    );
}

#[tokio::test]
async fn a_client_cancels_one_childs_work_and_the_parents_turn_goes_on() {
    let env = env_with(
        vec![
            MockReply::tool_call("d1", "delegate_task", json!({"goal": "wait forever"})),
            MockReply::text(&["The child was stopped; carrying on."]),
        ],
        vec![MockReply::Hang { chunks: vec![] }],
    )
    .await;
    let (mut agent, session, _) = env.session_with(json!({"subagents": {}})).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "delegate it"))
        .await
        .expect("prompt");
    let running = agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "subagent_update"
                && m["params"]["update"]["state"]["state"] == "running"
        })
        .await
        .expect("the child announced");
    let child = running["params"]["update"]["sessionId"]
        .as_str()
        .expect("child id")
        .to_string();
    // Wait for the child's model request to be under way, then cancel the child alone.
    let until = std::time::Instant::now() + WAIT;
    while child_requests(&env).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "the child never asked its model"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    agent
        .notify("session/cancel", json!({"sessionId": child}))
        .await
        .expect("cancel the child");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(
        stop_reason(&response),
        "end_turn",
        "the parent's turn goes on: {response}"
    );
    let idle = agent
        .transcript
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "subagent_update")
        .find(|m| m["params"]["update"]["state"]["state"] == "idle")
        .expect("the child's end announced")
        .clone();
    assert!(
        idle["params"]["update"]["state"]
            .to_string()
            .contains("cancelled"),
        "{idle}"
    );
    // The parent's model read that the child was cancelled.
    let last = env
        .mock
        .requests()
        .last()
        .expect("request")
        .body
        .to_string();
    assert!(last.contains("was cancelled"), "{last}");
}
