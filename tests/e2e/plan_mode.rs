//! Plan mode: what changes nothing runs — reads, searches, commands the analysis proves
//! read-only, the todo list — and every write, patch and command that may change something
//! is refused with a result that tells the model it is planning; the model is told where the
//! session enters and leaves plan mode, and the workspace is untouched.

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
    let (response, _) = prompt(&mut agent, &session, "plan the change").await;
    assert_eq!(stop_reason(&response), "end_turn");
    // No question was asked: plan mode decides by itself.
    assert!(
        agent.agent_requests().is_empty(),
        "{:?}",
        agent.agent_requests()
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
