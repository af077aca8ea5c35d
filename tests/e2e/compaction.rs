//! Context compaction end to end: a long session in an 8,000-token window, the summariser on
//! its auxiliary model, a failing summariser, and `/compact` mid-session.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const WINDOW: u64 = 8_000;
const SUMMARY_MODEL: &str = "summary-model";

/// Every tool result answers a call of the assistant message before it, and every call is
/// answered before the next non-tool message.
fn assert_pairs(body: &Value) {
    let mut open: Vec<String> = Vec::new();
    for message in body["messages"].as_array().expect("messages") {
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or_default();
            let position = open.iter().position(|c| c == id);
            assert!(position.is_some(), "orphan tool result {id}: {body}");
            open.retain(|c| c != id);
            continue;
        }
        assert!(open.is_empty(), "calls without results {open:?}: {body}");
        if let Some(calls) = message["tool_calls"].as_array() {
            open = calls
                .iter()
                .filter_map(|c| c["id"].as_str().map(str::to_string))
                .collect();
        }
    }
}

/// Notices as a client without the notice capability sees them (thought or message text).
fn notices(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .filter(|t| t.contains("[warning]") || t.contains("[info]") || t.contains("[error]"))
        .map(str::to_string)
        .collect()
}

fn file_text(n: usize) -> String {
    (1..=120)
        .map(|line| format!("module {n} line {line}: let value_{line} = compute_{n}({line});\n"))
        .collect()
}

fn ask(n: usize) -> String {
    format!(
        "Step {n}: read f{n}.txt and tell me what it computes. {}",
        "Keep the public API stable and explain every change in detail. ".repeat(12)
    )
}

fn answer(n: usize) -> String {
    format!(
        "f{n}.txt defines values that call compute_{n} for each line. {}",
        "The values are computed line by line and nothing else depends on them yet. ".repeat(20)
    )
}

fn long_session_script(turns: usize) -> Vec<MockReply> {
    (1..=turns)
        .flat_map(|n| {
            [
                MockReply::tool_call(
                    &format!("read{n}"),
                    "read_file",
                    json!({"path": format!("f{n}.txt")}),
                ),
                MockReply::text(&[&answer(n)]),
            ]
        })
        .collect()
}

async fn long_session_env(turns: usize, window: u64, config: &str) -> TestEnv {
    let mut env = TestEnv::new(long_session_script(turns)).await;
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), window.to_string()));
    env.write_config(&format!("retry_base_ms = 1\n{config}"));
    for n in 1..=turns {
        std::fs::write(env.workspace.path().join(format!("f{n}.txt")), file_text(n))
            .expect("write");
    }
    env
}

#[tokio::test]
async fn a_long_session_fits_an_8000_token_window_with_summaries_from_the_auxiliary_model() {
    const TURNS: usize = 8;
    let env = long_session_env(
        TURNS,
        WINDOW,
        &format!("[auxiliary.compression]\nmodel = \"{SUMMARY_MODEL}\"\n"),
    )
    .await;
    env.mock.script_for_model(
        SUMMARY_MODEL,
        (0..6)
            .map(|n| {
                MockReply::text(&[&format!(
                    "## Goal\nRead the step files.\n## Completed actions\n{n}. READ the files — each defines compute values [read_file]"
                )])
            })
            .collect(),
    );
    let (mut agent, session, _) = env
        .session_with(json!({"session": {"compaction": {}}}))
        .await;
    let mut seen = Vec::new();
    for n in 1..=TURNS {
        let (response, updates) = prompt(&mut agent, &session, &ask(n)).await;
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
        seen.extend(updates);
    }
    let requests = env.mock.requests();
    let (summaries, main): (Vec<_>, Vec<_>) = requests
        .iter()
        .partition(|r| r.body["model"] == SUMMARY_MODEL);
    assert_eq!(main.len(), 2 * TURNS, "every scripted step was asked once");
    assert!(!summaries.is_empty(), "the summariser was asked");
    for summary in &summaries {
        let prompt = last_user(&summary.body);
        assert!(
            prompt.contains("Summarise these turns") || prompt.contains("PREVIOUS SUMMARY"),
            "{prompt}"
        );
        assert!(
            summary.body.get("tools").is_none(),
            "a summary call offers no tools"
        );
    }
    let mut turn = 0;
    for (index, request) in main.iter().enumerate() {
        if index % 2 == 0 {
            turn += 1;
        }
        let body = &request.body;
        let tokens = request_tokens(body);
        assert!(tokens < WINDOW, "request {index} has {tokens} tokens");
        assert_eq!(body["messages"][0]["role"], "system", "system prompt first");
        assert_eq!(
            last_user(body),
            ask(turn),
            "request {index}: latest ask verbatim and last"
        );
        assert_pairs(body);
    }
    let last = &main.last().expect("requests").body;
    assert!(
        last.to_string()
            .contains("[CONTEXT COMPACTION — REFERENCE ONLY]"),
        "the model reads the summary"
    );
    // The client saw each compaction start and end, then the context use.
    let compactions: Vec<&Value> = seen
        .iter()
        .filter(|u| u["sessionUpdate"] == "compaction_update")
        .collect();
    assert!(compactions.len() >= 2, "{seen:?}");
    assert_eq!(compactions[0]["status"], "in_progress");
    let completed = compactions
        .iter()
        .position(|u| u["status"] == "completed")
        .expect("a completed compaction");
    assert_eq!(
        compactions[completed]["compactionId"],
        compactions[0]["compactionId"]
    );
    let end = seen
        .iter()
        .position(|u| u["sessionUpdate"] == "compaction_update" && u["status"] == "completed")
        .expect("completed");
    assert_eq!(
        seen[end + 1]["sessionUpdate"],
        "usage_update",
        "usage follows a compaction: {:?}",
        &seen[end..]
    );
    assert!(seen[end + 1]["used"].as_u64().expect("used") < WINDOW * 3 / 4);
    assert!(
        seen.iter()
            .filter(|u| u["sessionUpdate"] == "compaction_update")
            .filter_map(|u| u["summary"][0]["text"].as_str())
            .any(|s| s.contains("READ the files")),
        "the summary is shown"
    );
    // The record kept what was compacted: a reload replays every ask to the client.
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let mut second = env.spawn().await;
    second
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {"session": {"compaction": {}}}}),
        )
        .await
        .expect("initialize");
    let before = second.transcript.len();
    second
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("load");
    let replayed: String = second.transcript[before..]
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    for n in 1..=TURNS {
        assert!(
            replayed.contains(&format!("Step {n}: read f{n}.txt")),
            "ask {n} replayed"
        );
    }
    let replayed_summary = second.transcript[before..].iter().any(|m| {
        let update = &m["params"]["update"];
        update["sessionUpdate"] == "compaction_update"
            && update["status"] == "completed"
            && update["summary"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("READ the files"))
    });
    assert!(
        replayed_summary,
        "the replay shows where the context was compacted"
    );
}

#[tokio::test]
async fn a_summariser_that_times_out_leaves_a_marked_fallback() {
    const TURNS: usize = 8;
    let env = long_session_env(
        TURNS,
        WINDOW,
        &format!("[auxiliary.compression]\nmodel = \"{SUMMARY_MODEL}\"\ntimeout_secs = 1\n"),
    )
    .await;
    env.mock.script_for_model(
        SUMMARY_MODEL,
        (0..6)
            .map(|_| MockReply::Hang { chunks: Vec::new() })
            .collect(),
    );
    let (mut agent, session) = env.session().await;
    let mut seen = Vec::new();
    for n in 1..=TURNS {
        let (response, updates) = prompt(&mut agent, &session, &ask(n)).await;
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
        seen.extend(updates);
    }
    let requests = env.mock.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| r.body["model"] != SUMMARY_MODEL)
        .expect("a main request");
    let text = last.body.to_string();
    assert!(
        text.contains("[SUMMARY GENERATION FAILED: the summary took longer than 1 s"),
        "{text}"
    );
    assert!(
        text.contains("compacted message(s)"),
        "it says how much it covers"
    );
    let shown = notices(&seen);
    assert!(
        shown
            .iter()
            .any(|n| n.contains("summary generation failed") && n.contains("fallback")),
        "{shown:?}"
    );
}

#[tokio::test]
async fn compact_mid_session_summarises_on_a_focus_and_the_session_goes_on() {
    // A window the session does not fill: only the command compacts.
    let env = long_session_env(
        4,
        32_000,
        &format!("[auxiliary.compression]\nmodel = \"{SUMMARY_MODEL}\"\n"),
    )
    .await;
    env.mock.push(MockReply::text(&["After the compaction."]));
    env.mock.script_for_model(
        SUMMARY_MODEL,
        vec![MockReply::text(&["## Goal\nUnderstand the parser files."])],
    );
    let (mut agent, session, _) = env
        .session_with(json!({"session": {"compaction": {}}}))
        .await;
    let commands = agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "available_commands_update"
        })
        .await
        .expect("available commands");
    assert_eq!(
        commands["params"]["update"]["availableCommands"][0]["name"],
        "compact"
    );
    for n in 1..=4 {
        prompt(&mut agent, &session, &ask(n)).await;
    }
    let (response, updates) = prompt(&mut agent, &session, "/compact the parser").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let statuses: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "compaction_update")
        .filter_map(|u| u["status"].as_str())
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"], "{updates:?}");
    let summary_request = env
        .mock
        .requests()
        .into_iter()
        .find(|r| r.body["model"] == SUMMARY_MODEL)
        .expect("summary request");
    assert!(last_user(&summary_request.body).contains("FOCUS TOPIC: the parser."));
    let (response, _) = prompt(&mut agent, &session, "What next?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let after = env.mock.requests().last().expect("request").body.clone();
    assert!(after.to_string().contains("Understand the parser files."));
    assert_eq!(last_user(&after), "What next?");
    assert!(
        !after.to_string().contains("/compact"),
        "the command is not a message to the model"
    );
}
