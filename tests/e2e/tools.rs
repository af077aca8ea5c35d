//! The model → tool → model loop.

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

#[tokio::test]
async fn bad_tool_calls_become_failed_results_the_model_can_read() {
    let env = TestEnv::new(vec![
        MockReply::ToolCalls {
            calls: vec![
                talaria_harness::MockToolCall {
                    id: "a".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\": ".into(),
                },
                talaria_harness::MockToolCall {
                    id: "b".into(),
                    name: "launch_rockets".into(),
                    arguments: "{}".into(),
                },
            ],
            text: None,
            fragment_chars: Some(3),
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["sorry"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let failed: Vec<_> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 2);
    let results = &env.mock.requests()[1].body["messages"];
    assert!(
        results[3]["content"]
            .as_str()
            .unwrap_or("")
            .contains("not valid JSON")
    );
    assert!(
        results[4]["content"]
            .as_str()
            .unwrap_or("")
            .contains("Unknown tool `launch_rockets`")
    );
}

#[tokio::test]
async fn the_per_turn_request_cap_ends_with_max_turn_requests() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "read_file", json!({"path": "x"})),
        MockReply::tool_call("c2", "read_file", json!({"path": "x"})),
        MockReply::tool_call("c3", "read_file", json!({"path": "x"})),
    ])
    .await;
    env.write_config("max_turn_requests = 2\n");
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "loop").await;
    assert_eq!(stop_reason(&response), "max_turn_requests");
    assert_eq!(env.mock.requests().len(), 2);
}

#[tokio::test]
async fn the_same_failing_call_repeated_a_third_time_is_stopped_and_the_user_told() {
    let missing = || MockReply::tool_call("m", "read_file", json!({"path": "missing.txt"}));
    let env = TestEnv::new(vec![
        missing(),
        missing(),
        missing(),
        MockReply::text(&["I will ask the user."]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "read missing.txt").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let last = &env.mock.requests()[3].body;
    let results: Vec<&str> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(results.len(), 3);
    assert!(
        results[0].contains("not found") && results[1].contains("not found"),
        "{results:?}"
    );
    assert!(results[2].contains("already failed twice"), "{results:?}");
    let told: Vec<String> = updates
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .filter(|t| t.contains("repeated a failing"))
        .map(str::to_string)
        .collect();
    assert_eq!(told.len(), 1, "{updates:?}");
}

#[tokio::test]
async fn a_tool_call_written_as_fenced_json_runs_when_valid_and_never_when_not() {
    let fenced = |args: &str| {
        format!(
            "I'll read the file.\n```json\n{{\"name\": \"read_file\", \"arguments\": {args}}}\n```"
        )
    };
    // Streamed in small pieces, as a local server does.
    let pieces = |text: String| {
        let chars: Vec<char> = text.chars().collect();
        chars
            .chunks(5)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
    };
    let valid = pieces(fenced("{\"path\": \"main.py\"}"));
    let invalid = pieces(fenced("{\"file\": \"main.py\"}"));
    let env = TestEnv::new(vec![
        MockReply::text(&valid.iter().map(String::as_str).collect::<Vec<_>>()),
        MockReply::text(&["main.py prints hello."]),
        MockReply::text(&invalid.iter().map(String::as_str).collect::<Vec<_>>()),
        // The invalid call gets the one nudge of the turn.
        MockReply::text(&["I could not form a valid call."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let second = &env.mock.requests()[1].body;
    let result = second["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(result.contains("print('hello')"), "the call ran: {result}");
    assert!(
        updates
            .iter()
            .any(|u| u.to_string().contains("wrote its `read_file` call as text")),
        "the user is told"
    );
    // The call's text was held back while it streamed: the chat shows the prose only.
    assert_eq!(
        chunks(&updates, "agent_message_chunk").concat(),
        "I'll read the file.\nmain.py prints hello."
    );
    // Arguments that do not fit the schema: never run; the one nudge of the turn tells the
    // model why.
    let (response, updates) = prompt(&mut agent, &session, "again").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(env.mock.requests().len(), 4);
    let told = last_user(&env.mock.requests()[3].body);
    assert!(
        told.contains("Your `read_file` call was not run: missing required field `path`"),
        "{told}"
    );
    assert!(
        !updates.iter().any(|u| u["sessionUpdate"] == "tool_call"),
        "no call ran"
    );
    assert!(
        updates
            .iter()
            .any(|u| u.to_string().contains("it was not run"))
    );
    // Text that was not run is shown as it was written, once.
    let shown = chunks(&updates, "agent_message_chunk").concat();
    assert!(
        shown.starts_with(&fenced("{\"file\": \"main.py\"}")),
        "{shown}"
    );
}

#[tokio::test]
async fn an_answer_about_a_file_never_read_is_sent_back_once_to_read_it() {
    let env = TestEnv::new(vec![
        MockReply::text(&["main.py starts a web server on port 8080."]),
        MockReply::tool_call("r", "read_file", json!({"path": "main.py"})),
        MockReply::text(&["main.py prints hello."]),
        // Later answers about main.py are not suspect: it has been read.
        MockReply::text(&["main.py has one line."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    let last = requests[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["role"], "user");
    let instruction = last["content"].as_str().unwrap_or_default();
    assert!(
        instruction.contains("You described main.py without reading it"),
        "{last}"
    );
    assert!(
        updates.iter().any(|u| u
            .to_string()
            .contains("described main.py without reading it")),
        "the user is told"
    );
    // The read happened and its content reached the model.
    assert!(requests[2].body.to_string().contains("print('hello')"));
    let (response, _) = prompt(&mut agent, &session, "How long is it?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(env.mock.requests().len(), 4, "no second nudge");
}

#[tokio::test]
async fn an_answer_telling_the_user_how_to_do_the_work_is_nudged_to_do_it() {
    let how_to = "1. Open `util.py` in your preferred text editor and add `def add(a, b)`.\n\
                  2. Save the changes.";
    let env = TestEnv::new(vec![
        MockReply::text(&[how_to]),
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "util.py", "content": "def add(a, b):\n    return a + b\n"}),
        ),
        MockReply::text(&["Added add(a, b) to util.py."]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let (response, updates) =
        prompt(&mut agent, &session, "Add a function add(a, b) to util.py").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let nudged = last_user(&env.mock.requests()[1].body);
    assert!(
        nudged.contains("do it yourself with your tools"),
        "{nudged}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u.to_string().contains("instead of doing it")),
        "the user is told"
    );
    let written = std::fs::read_to_string(env.workspace.path().join("util.py")).unwrap_or_default();
    assert!(written.contains("def add(a, b)"), "{written}");
}

#[tokio::test]
async fn an_answer_that_only_announces_an_action_is_nudged_once_to_act() {
    let env = TestEnv::new(vec![
        MockReply::text(&["To analyze what main.py does, I'll read its source code."]),
        MockReply::tool_call("r", "read_file", json!({"path": "main.py"})),
        MockReply::text(&["main.py prints hello."]),
        MockReply::text(&["Let me run the tests."]),
        MockReply::text(&["Let me run the tests now, really."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let nudged = &env.mock.requests()[1].body;
    let last = nudged["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .unwrap_or("")
            .contains("did not call a tool"),
        "{last}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u.to_string().contains("asked it to act"))
    );
    assert_eq!(
        chunks(&updates, "agent_message_chunk").concat(),
        "To analyze what main.py does, I'll read its source code.main.py prints hello."
    );
    // One nudge per turn: a second announcement ends the turn.
    let (response, _) = prompt(&mut agent, &session, "run the tests").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(env.mock.requests().len(), 5);
}
