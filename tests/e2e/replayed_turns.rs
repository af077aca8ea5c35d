//! Scenarios that were hand-scripted tests (in `streaming.rs`, `tools.rs`, `approvals.rs`
//! and `delegation.rs`) and now run from cassettes recorded against those scripts
//! (`TALARIA_RECORD_CASSETTES=1` records them again). Their assertions on what the agent
//! sent the model read the cassette's requests, which a replay matches every request
//! against.

use serde_json::{Value, json};
use talaria_harness::{MockReply, MockToolCall};

use crate::replayed::{finish, of_kind, requests_sent, scenario};
use crate::support::*;

fn tool_messages(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "tool").cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn history_carries_over_and_every_prompt_block_reaches_the_model() {
    let script = vec![
        MockReply::text(&["First answer."]),
        MockReply::text(&["ok"]),
    ];
    let env = scenario("history_and_blocks", script, &[]).await;
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "one").await;
    let params = json!({"sessionId": session, "prompt": [
        {"type": "text", "text": "two"},
        {"type": "resource_link", "uri": "file:///src/lib.rs", "name": "lib.rs"},
        {"type": "resource", "resource": {"uri": "file:///src/main.rs", "text": "fn main() {}", "mimeType": "text/x-rust"}},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    ]});
    let result = agent.call("session/prompt", params).await.expect("prompt");
    assert_eq!(result["stopReason"], "end_turn");
    finish(agent, &env).await;
    let requests = requests_sent("history_and_blocks");
    let messages = &requests[1]["messages"];
    assert_eq!(
        without_environment(messages[1]["content"].as_str().unwrap_or_default()),
        "one"
    );
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "First answer."})
    );
    let parts = messages[3]["content"]
        .as_array()
        .expect("multi-part user message");
    assert_eq!(parts[0]["text"], "two");
    let text_of = |n: usize| parts[n]["text"].as_str().unwrap_or("").to_string();
    assert!(text_of(1).contains("file:///src/lib.rs"), "{parts:?}");
    assert!(text_of(2).contains("fn main() {}"), "{parts:?}");
    assert_eq!(
        parts[3]["image_url"]["url"],
        "data:image/png;base64,iVBORw0KGgo="
    );
}

#[tokio::test]
async fn length_limit_ends_with_max_tokens_and_refusal_with_refusal() {
    let finishing = |chunks: Vec<String>, reason: &str| MockReply::Text {
        chunks,
        reasoning: vec![],
        delay_ms: 0,
        usage: None,
        finish_reason: Some(reason.into()),
    };
    let script = vec![
        finishing(vec!["cut".into()], "length"),
        finishing(vec![], "content_filter"),
    ];
    let env = scenario("stop_reasons", script, &[]).await;
    let (mut agent, session) = env.session().await;
    assert_eq!(
        stop_reason(&prompt(&mut agent, &session, "long").await.0),
        "max_tokens"
    );
    assert_eq!(
        stop_reason(&prompt(&mut agent, &session, "bad").await.0),
        "refusal"
    );
    finish(agent, &env).await;
}

#[tokio::test]
async fn a_tool_call_round_trip_reports_the_card_and_feeds_the_result_back() {
    let script = vec![
        MockReply::tool_call("call_abc", "read_file", json!({"path": "notes.txt"})),
        MockReply::text(&["The file says hi."]),
    ];
    let env = scenario("tool_round_trip", script, &[]).await;
    std::fs::write(env.workspace.path().join("notes.txt"), "hi from the file\n").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does notes.txt say?").await;
    assert_eq!(stop_reason(&response), "end_turn");

    // The card opens as soon as the model starts the call, then gets its details.
    let opened = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .expect("tool_call");
    assert_eq!(opened["toolCallId"], "call_abc");
    assert_eq!(opened["kind"], "read");
    assert_eq!(
        opened["title"], "read_file",
        "shown before the arguments were complete"
    );
    assert!(opened.get("rawInput").is_none(), "{opened}");
    let before_running: Vec<&Value> = updates
        .iter()
        .take_while(|u| u["status"] != "in_progress")
        .collect();
    let card = card_state(before_running, "call_abc");
    assert_eq!(card["rawInput"], json!({"path": "notes.txt"}));
    let file = env.workspace.path().join("notes.txt");
    assert_eq!(card["locations"][0]["path"], file.display().to_string());
    assert!(card.get("status").is_none_or(|s| s == "pending"), "{card}");
    let statuses: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == "call_abc")
        .filter_map(|u| u["status"].as_str())
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"]);
    let done = card_state(&updates, "call_abc");
    assert!(
        done["content"][0]["content"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("hi from the file"),
        "{done}"
    );
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["The file says hi."]
    );
    assert_clean_stdout(&agent);
    finish(agent, &env).await;

    let requests = requests_sent("tool_round_trip");
    let second = &requests[1]["messages"];
    let assistant = &second[2];
    assert_eq!(assistant["tool_calls"][0]["id"], "call_abc");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        json!({"path": "notes.txt"}).to_string()
    );
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], "call_abc");
    assert!(
        second[3]["content"]
            .as_str()
            .unwrap_or("")
            .contains("1|hi from the file"),
        "{}",
        second[3]
    );
}

#[tokio::test]
async fn reject_once_reaches_the_model_and_nothing_runs() {
    let script = vec![
        MockReply::tool_call("t1", "terminal", json!({"command": "touch made.txt"})),
        MockReply::text(&["ok, I won't"]),
    ];
    let env = scenario("rejected_once", script, &[]).await;
    let (mut agent, session) = env.session().await;
    let response = prompt_choosing(&mut agent, &session, "make a file", "reject_once").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(!env.workspace.path().join("made.txt").exists());
    let failed = agent
        .updates()
        .into_iter()
        .any(|u| u["toolCallId"] == "t1" && u["status"] == "failed");
    assert!(failed, "the card ends failed");
    finish(agent, &env).await;
    let results = tool_messages(&requests_sent("rejected_once")[1]);
    let text = results[0]["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("declined") && text.contains("Do not retry"),
        "{text}"
    );
}

#[tokio::test]
async fn a_parallel_batch_keeps_the_models_order_and_todo_becomes_a_plan() {
    let call = |id: &str, name: &str, arguments: Value| MockToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.to_string(),
    };
    let script = vec![
        MockReply::ToolCalls {
            calls: vec![
                call("1", "read_file", json!({"path": "a.txt"})),
                call("2", "search_files", json!({"pattern": "needle"})),
                call("3", "read_file", json!({"path": "b.txt"})),
                call(
                    "4",
                    "todo",
                    json!({"todos": [{"id": "1", "content": "look around", "status": "in_progress"}]}),
                ),
                call("5", "read_file", json!({"path": "c.txt"})),
            ],
            text: None,
            fragment_chars: Some(4),
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["done"]),
    ];
    let env = scenario("parallel_batch", script, &[]).await;
    for (name, text) in [
        ("a.txt", "alpha"),
        ("b.txt", "beta needle"),
        ("c.txt", "gamma"),
    ] {
        std::fs::write(env.workspace.path().join(name), text).expect("write");
    }
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "look").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let plans = of_kind(&updates, "plan");
    let plan = plans.first().expect("plan update");
    assert_eq!(plan["entries"][0]["content"], "look around");
    assert_eq!(plan["entries"][0]["status"], "in_progress");
    finish(agent, &env).await;
    let tools = tool_messages(&requests_sent("parallel_batch")[1]);
    let tool_ids: Vec<&str> = tools
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(tool_ids, ["1", "2", "3", "4", "5"]);
    let content = |n: usize| tools[n]["content"].as_str().unwrap_or_default().to_string();
    assert!(content(0).contains("alpha"), "{}", content(0));
    assert!(content(1).contains("b.txt:1:beta needle"), "{}", content(1));
    assert!(content(4).contains("gamma"), "{}", content(4));
}
