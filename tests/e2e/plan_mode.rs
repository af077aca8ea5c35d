//! Plan mode: what changes nothing runs — reads, searches, commands the analysis proves
//! read-only, the todo list — and every write, patch and command that may change something
//! is refused with a result that tells the model it is planning; the model is told where the
//! session enters and leaves plan mode, and the workspace is untouched. At the turn's end the
//! plan is handed over with one question: implement it (asking, or accepting edits — the mode
//! switches and the same turn implements it) or keep planning.

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

#[tokio::test]
async fn plan_mode_explores_and_changes_nothing_and_the_model_is_told_it_is_planning() {
    let env = TestEnv::new(vec![
        batch(&[
            ("w", "write_file", json!({"path": "new.txt", "content": "x\n"})),
            (
                "p",
                "patch",
                json!({"path": "main.py", "old_string": "print(1)", "new_string": "print(2)"}),
            ),
            ("rm", "terminal", json!({"command": "rm main.py"})),
            ("sed", "terminal", json!({"command": "sed -i s/1/2/ main.py"})),
            ("cat", "terminal", json!({"command": "cat main.py"})),
            ("ls", "terminal", json!({"command": "ls"})),
            ("r", "read_file", json!({"path": "main.py"})),
            (
                "t",
                "todo",
                json!({"todos": [{"id": "1", "content": "change print(1) to print(2)", "status": "pending"}]}),
            ),
        ]),
        MockReply::text(&["Plan: change print(1) to print(2) in main.py."]),
        MockReply::text(&["Implementing now."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("main.py"), "print(1)\n").expect("write");
    let (mut agent, session) = env.session().await;
    agent
        .call(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "plan"}),
        )
        .await
        .expect("plan mode");
    let response = prompt_choosing(&mut agent, &session, "plan the change", "keep_planning").await;
    assert_eq!(stop_reason(&response), "end_turn");
    // The one question is the plan's: plan mode decides the calls by itself.
    let asked = agent.agent_requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        asked[0].1["toolCall"]["title"], "Implement this plan?",
        "{asked:?}"
    );
    let results = tool_results(&env.mock, 1);
    assert_eq!(results.len(), 8, "{results:?}");
    for refused in &results[..4] {
        assert!(refused.contains("plan mode"), "{refused}");
    }
    assert!(results[4].contains("print(1)"), "cat ran: {}", results[4]);
    assert!(results[5].contains("main.py"), "ls ran: {}", results[5]);
    assert!(
        results[6].contains("print(1)"),
        "read_file ran: {}",
        results[6]
    );
    assert!(
        !results[7].contains("plan mode"),
        "the todo ran: {}",
        results[7]
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("main.py")).expect("read"),
        "print(1)\n",
        "nothing was changed"
    );
    assert!(!env.workspace.path().join("new.txt").exists());
    // The model was told it is planning, where the mode changed.
    let first = env.mock.requests()[0].body.to_string();
    assert!(first.contains("now in plan mode"), "{first}");
    // Leaving plan mode is told too.
    agent
        .call(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "accept-edits"}),
        )
        .await
        .expect("accept edits");
    let (response, _) = prompt(&mut agent, &session, "go ahead").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let last = env
        .mock
        .requests()
        .last()
        .expect("request")
        .body
        .to_string();
    assert!(last.contains("Plan mode is over"), "{last}");
    assert!(last.contains("accept-edits"), "{last}");
}

/// A plan-mode session whose turn plans, then hands the plan over; the user picks `option`.
async fn planned_and_chose(
    option: &'static str,
) -> (TestEnv, talaria_harness::AgentProcess, serde_json::Value) {
    let env = TestEnv::new(vec![
        MockReply::text(&["Plan: 1. write notes.txt with 'done'."]),
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "notes.txt", "content": "done\n"}),
        ),
        MockReply::text(&["Implemented: notes.txt written."]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    agent
        .call(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "plan"}),
        )
        .await
        .expect("plan mode");
    let response = prompt_choosing(&mut agent, &session, "write the notes", option).await;
    (env, agent, response)
}

#[tokio::test]
async fn implementing_a_plan_switches_the_mode_and_the_same_turn_implements_it() {
    let (env, agent, response) = planned_and_chose("implement_accept_edits").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("notes.txt")).expect("written"),
        "done\n",
        "accepted edits run without a question"
    );
    let asked = agent.agent_requests();
    assert_eq!(asked.len(), 1, "only the plan's question: {asked:?}");
    let options: Vec<String> = asked[0].1["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["optionId"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        options,
        ["implement_ask", "implement_accept_edits", "keep_planning"]
    );
    let switched = agent.updates().iter().any(|u| {
        u["sessionUpdate"] == "current_mode_update" && u["currentModeId"] == "accept-edits"
    });
    assert!(switched, "the client is told the mode changed");
    // The model read that the plan is approved before it implemented it.
    let implementing = env.mock.requests()[1].body.to_string();
    assert!(implementing.contains("Plan mode is over"), "{implementing}");
    assert_eq!(env.mock.requests().len(), 3);
}

#[tokio::test]
async fn keeping_on_planning_ends_the_turn_in_plan_mode_and_changes_nothing() {
    let (env, agent, response) = planned_and_chose("keep_planning").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(env.mock.requests().len(), 1, "the turn ended with the plan");
    assert!(!env.workspace.path().join("notes.txt").exists());
    assert!(
        !agent
            .updates()
            .iter()
            .any(|u| u["sessionUpdate"] == "current_mode_update"),
        "still planning"
    );
}

#[tokio::test]
async fn slash_plan_enters_plan_mode_and_plans_the_rest_of_the_line() {
    let env = TestEnv::new(vec![MockReply::text(&["Plan: 1. rename the module."])]).await;
    let (mut agent, session) = env.session().await;
    let listed = agent.updates().iter().any(|u| {
        u["sessionUpdate"] == "available_commands_update"
            && u["availableCommands"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["name"] == "plan"))
    });
    assert!(listed, "/plan is offered");
    let response = prompt_choosing(
        &mut agent,
        &session,
        "/plan rename the module",
        "keep_planning",
    )
    .await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(
        agent.updates().iter().any(|u| {
            u["sessionUpdate"] == "current_mode_update" && u["currentModeId"] == "plan"
        }),
        "the client is told"
    );
    let asked = env.mock.requests()[0].body.to_string();
    assert!(
        asked.contains("rename the module") && !asked.contains("/plan"),
        "{asked}"
    );
    assert!(asked.contains("now in plan mode"), "{asked}");
    let empty = agent
        .request("session/prompt", text_prompt(&session, "/plan"))
        .await
        .expect("answered");
    assert_eq!(empty["error"]["code"], -32602, "{empty}");
}
