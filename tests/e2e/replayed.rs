//! The project's own scenarios on cassettes: each was recorded against the scripted mock
//! (`TALARIA_RECORD_CASSETTES=1 cargo test -p talaria-e2e replayed` records them again into
//! `tests/e2e/cassettes/<scenario>/`) and is replayed from there with no model — the mock
//! answers nothing, and fails the test if it is asked. `replayed_turns.rs` holds scenarios
//! that were hand-scripted tests of their own before.

use std::path::PathBuf;

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply, MockToolCall};

use crate::support::*;

/// Where a scenario's cassettes are kept.
pub(crate) fn cassettes(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/cassettes")
        .join(name)
}

pub(crate) fn recording() -> bool {
    std::env::var_os("TALARIA_RECORD_CASSETTES").is_some()
}

/// A scenario's environment: recording against `script` (and `models`' scripts), or
/// replaying its cassettes with an empty mock.
pub(crate) async fn scenario(
    name: &str,
    script: Vec<MockReply>,
    models: &[(&str, Vec<MockReply>)],
) -> TestEnv {
    let dir = cassettes(name);
    if recording() {
        let _ = std::fs::remove_dir_all(&dir);
        let mut env = TestEnv::new(script).await;
        for (model, replies) in models {
            env.mock.script_for_model(model, replies.clone());
        }
        env.args = vec!["--record".into(), dir.display().to_string()];
        env
    } else {
        let mut env = TestEnv::new(Vec::new()).await;
        env.args = vec!["--replay".into(), dir.display().to_string()];
        env
    }
}

/// Ends the agent (so a recording is complete on disk) and checks no model was asked in a
/// replay.
pub(crate) async fn finish(mut agent: AgentProcess, env: &TestEnv) {
    agent.close_stdin();
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{status:?}");
    if !recording() {
        assert!(env.mock.requests().is_empty(), "a replay asked the model");
    }
}

/// The requests the agent sent in a scenario, as its cassettes hold them (after `finish`).
/// A replay matches every request it is asked against these, so they are what the replayed
/// run sent as well, its paths, dates and ids normalised.
pub(crate) fn requests_sent(name: &str) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cassettes(name))
        .expect("the scenario's cassettes")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|file| {
            std::fs::read_to_string(file)
                .expect("a cassette")
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(|line| line["line"] == "request")
                .map(|line| line["request"].clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

pub(crate) fn of_kind<'a>(updates: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

#[tokio::test]
async fn a_streamed_answer() {
    let script = vec![MockReply::text(&["Hello ", "from ", "a cassette."])];
    let env = scenario("streamed_answer", script, &[]).await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "greet me").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(
        chunks(&updates, "agent_message_chunk").concat(),
        "Hello from a cassette."
    );
    finish(agent, &env).await;
}

#[tokio::test]
async fn a_file_read_and_explained() {
    let script = vec![
        MockReply::tool_call("r1", "read_file", json!({"path": "notes.txt"})),
        MockReply::text(&["The notes say to ship on Friday."]),
    ];
    let env = scenario("file_read", script, &[]).await;
    std::fs::write(env.workspace.path().join("notes.txt"), "Ship on Friday.\n").expect("notes");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What do the notes say?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let card = card_state(&updates, "r1");
    assert_eq!(card["status"], "completed", "{card}");
    assert!(card.to_string().contains("Ship on Friday."), "{card}");
    assert!(
        chunks(&updates, "agent_message_chunk")
            .concat()
            .contains("Friday")
    );
    finish(agent, &env).await;
}

#[tokio::test]
async fn an_edit_the_user_allows() {
    let script = vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "plan.md", "content": "# Plan\n- ship\n"}),
        ),
        MockReply::text(&["Wrote the plan."]),
    ];
    let env = scenario("edit_allowed", script, &[]).await;
    let (mut agent, session) = env.session().await;
    let response = prompt_allowing_once(&mut agent, &session, "Write the plan").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let written = std::fs::read_to_string(env.workspace.path().join("plan.md")).expect("file");
    assert_eq!(
        written, "# Plan\n- ship\n",
        "the tool ran for real in the replay"
    );
    let card = card_state(&agent.updates(), "w1");
    assert_eq!(card["status"], "completed", "{card}");
    finish(agent, &env).await;
}

#[tokio::test]
async fn a_plan_kept_with_todo() {
    let script = vec![
        MockReply::tool_call(
            "t1",
            "todo",
            json!({"todos": [
                {"id": "1", "content": "read the code", "status": "completed"},
                {"id": "2", "content": "write the test", "status": "in_progress"}
            ]}),
        ),
        MockReply::text(&["Planned."]),
    ];
    let env = scenario("plan", script, &[]).await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "Plan the work").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let plans = of_kind(&updates, "plan");
    let entries = &plans.last().expect("a plan")["entries"];
    assert_eq!(entries[1]["content"], "write the test", "{entries}");
    assert_eq!(entries[1]["status"], "in_progress", "{entries}");
    finish(agent, &env).await;
}

#[tokio::test]
async fn a_subagent_delegated_to() {
    const CHILD: &str = "child-model";
    let script = vec![
        MockReply::ToolCalls {
            calls: vec![MockToolCall {
                id: "d1".into(),
                name: "delegate_task".into(),
                arguments: json!({"goal": "count the files"}).to_string(),
            }],
            text: None,
            fragment_chars: None,
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["The child counted them."]),
    ];
    let children = vec![MockReply::text(&["There are no files."])];
    let env = scenario("subagent", script, &[(CHILD, children)]).await;
    env.write_config(&format!(
        "[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
         [auxiliary.subagent]\nmodel = \"{CHILD}\"\n"
    ));
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "Delegate the count").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let card = card_state(&updates, "d1");
    assert_eq!(card["status"], "completed", "{card}");
    assert!(card.to_string().contains("There are no files."), "{card}");
    finish(agent, &env).await;
}

#[tokio::test]
async fn a_conversation_compacted_on_request() {
    let mut script: Vec<MockReply> = (1..=6)
        .map(|n| MockReply::text(&[&format!("Answer {n}: {}", "words ".repeat(200))]))
        .collect();
    script.push(MockReply::text(&["## Goal\nGreet the user."]));
    let env = scenario("compacted", script, &[]).await;
    let (mut agent, session, _) = env
        .session_with(json!({"session": {"compaction": {}}}))
        .await;
    for n in 1..=6 {
        let (response, _) = prompt(&mut agent, &session, &format!("question {n}")).await;
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
    }
    let (response, updates) = prompt(&mut agent, &session, "/compact").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let statuses: Vec<&str> = of_kind(&updates, "compaction_update")
        .iter()
        .filter_map(|u| u["status"].as_str())
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"], "{updates:?}");
    finish(agent, &env).await;
}
