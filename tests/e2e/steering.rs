//! Steering over stdio (`_session/steering`, the contract of the current Claude and Codex
//! adapters): a message sent into a running turn enters it at the next safe boundary — at
//! once while text streams (that request ends, what streamed stays), after the calls that
//! run (never cutting one), after a permission question is answered — in order, in the
//! record where it entered, kept on cancel; with no turn running it starts one or, when the
//! client asks, is refused; bad input is a clear error and the session goes on.

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply, MockToolCall};

use crate::support::*;

const STEER: &str = "_session/steering";

fn steer_params(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// Sends a steer and returns its whole response (result or error).
async fn steer(agent: &mut AgentProcess, session: &str, text: &str) -> Value {
    agent
        .request(STEER, steer_params(session, text))
        .await
        .expect("steering answered")
}

/// Steers `text` into the running turn and checks the turn took it.
async fn steer_in(agent: &mut AgentProcess, session: &str, text: &str) {
    let steered = steer(agent, session, text).await;
    assert_eq!(outcome(&steered), "injected", "{steered}");
}

/// Starts a prompt and waits until one of its commands runs; the prompt's request id.
async fn prompt_until_a_command_runs(agent: &mut AgentProcess, session: &str, text: &str) -> i64 {
    let id = agent
        .start_request("session/prompt", text_prompt(session, text))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m["params"]["update"]["status"] == "in_progress")
        .await
        .expect("a command runs");
    id
}

/// The roles of a model request's messages, the system prompt aside.
fn roles(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter_map(|m| m["role"].as_str())
                .filter(|role| *role != "system")
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn outcome(response: &Value) -> &str {
    response["result"]["outcome"].as_str().unwrap_or_default()
}

/// The `session/update`s the client saw from message `from` on.
fn updates_since(agent: &AgentProcess, from: usize) -> Vec<Value> {
    agent.transcript[from..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect()
}

/// The roles and texts of a model request's messages, as `role: text` lines.
pub(crate) fn conversation(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["role"] != "system")
                .map(|m| {
                    let text = match &m["content"] {
                        Value::String(text) => text.clone(),
                        Value::Array(parts) => parts
                            .iter()
                            .filter_map(|p| p["text"].as_str())
                            .collect::<Vec<_>>()
                            .join(""),
                        _ => String::new(),
                    };
                    let role = m["role"].as_str().unwrap_or_default();
                    format!("{role}: {}", without_environment(&text))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The texts of the steered messages echoed; each echo names its message as a replay will
/// (`user-<entry>`).
fn steered_chunks(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .filter(|u| u["_meta"]["talaria"]["steered"] == json!(true))
        .inspect(|u| {
            assert!(
                u["messageId"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("user-")),
                "a steered echo without its message id: {u}"
            );
        })
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn initialize_advertises_steering() {
    let env = TestEnv::new(Vec::new()).await;
    let (_agent, answer) = initialize_answer(&env).await;
    assert_eq!(
        answer["_meta"]["steering"]["supported"],
        json!(true),
        "{answer}"
    );
}

#[tokio::test]
async fn a_steer_while_text_streams_ends_that_request_and_the_next_carries_it() {
    let env = TestEnv::new(vec![
        MockReply::Hang {
            chunks: vec!["Writing it with spaces".into()],
        },
        MockReply::text(&["Switched to tabs."]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let from = agent.transcript.len();
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "format the file"))
        .await
        .expect("prompt");
    let first = agent.next_update(WAIT).await.expect("first chunk");
    assert_eq!(first["content"]["text"], "Writing it with spaces");
    steer_in(&mut agent, &session, "use tabs instead").await;
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "the streaming request was ended, one more sent"
    );
    assert!(
        requests[0].client_disconnected,
        "the first request was ended"
    );
    assert_eq!(
        conversation(&requests[1].body),
        [
            "user: format the file",
            "assistant: Writing it with spaces",
            "user: use tabs instead"
        ],
        "what streamed stays, the steer follows it"
    );
    let updates = updates_since(&agent, from);
    assert_eq!(steered_chunks(&updates), ["use tabs instead"]);
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["Writing it with spaces", "Switched to tabs."]
    );

    // A reload replays the steer where it entered.
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    let mut again = initialized(&env).await;
    let before = again.transcript.len();
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    let replayed: Vec<String> = updates_since(&again, before)
        .iter()
        .filter_map(|u| {
            let text = u["content"]["text"].as_str()?;
            Some(format!("{}: {text}", u["sessionUpdate"].as_str()?))
        })
        .collect();
    assert_eq!(
        replayed,
        [
            "user_message_chunk: format the file",
            "agent_message_chunk: Writing it with spaces",
            "user_message_chunk: use tabs instead",
            "agent_message_chunk: Switched to tabs."
        ]
    );
}

#[tokio::test]
async fn steers_during_a_running_command_wait_for_it_and_keep_their_order() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "c1",
            "terminal",
            json!({"command": "sleep 1; echo built-it"}),
        ),
        MockReply::text(&["Done, both noted."]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let from = agent.transcript.len();
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "build it"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "tool_call_update"
                && m["params"]["update"]["status"] == "in_progress"
        })
        .await
        .expect("the command runs");
    for text in ["first steer", "second steer"] {
        steer_in(&mut agent, &session, text).await;
    }
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "the command was not cut: one answer, one more request"
    );
    let messages = &requests[1].body["messages"];
    assert_eq!(
        roles(&requests[1].body),
        ["user", "assistant", "tool", "user", "user"]
    );
    let tool = messages
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .expect("the result");
    assert!(
        tool["content"].to_string().contains("built-it"),
        "the command ran to its end: {tool}"
    );
    let conversation = conversation(&requests[1].body);
    assert_eq!(
        conversation[conversation.len() - 2..],
        ["user: first steer", "user: second steer"]
    );
    assert_eq!(
        steered_chunks(&updates_since(&agent, from)),
        ["first steer", "second steer"]
    );
}

#[tokio::test]
async fn a_steer_during_a_parallel_batch_follows_every_result() {
    let env = TestEnv::new(vec![
        batch(&[
            ("a", "terminal", json!({"command": "sleep 1; echo one"})),
            ("b", "terminal", json!({"command": "sleep 1; echo two"})),
        ]),
        MockReply::text(&["ok"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let id = prompt_until_a_command_runs(&mut agent, &session, "run both").await;
    steer_in(&mut agent, &session, "then summarise").await;
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let body = &env.mock.requests()[1].body;
    assert_eq!(roles(body), ["user", "assistant", "tool", "tool", "user"]);
    assert_eq!(
        conversation(body).last().map(String::as_str),
        Some("user: then summarise")
    );
}

#[tokio::test]
async fn a_steer_during_a_permission_question_is_taken_after_the_answer() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "notes.txt", "content": "hello\n"}),
        ),
        MockReply::text(&["Written."]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "write notes"))
        .await
        .expect("prompt");
    let asked = agent
        .wait_for(WAIT, |m| m["method"] == "session/request_permission")
        .await
        .expect("asked");
    steer_in(&mut agent, &session, "and keep it short").await;
    assert_eq!(
        env.mock.requests().len(),
        1,
        "nothing was sent while the question waits"
    );
    allow_once(&mut agent, &asked).await;
    let response = agent
        .drive(id, WAIT, |m, _| Err((-32601, format!("unexpected {m}"))))
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(env.workspace.path().join("notes.txt").exists());
    let conversation = conversation(&env.mock.requests()[1].body);
    assert_eq!(
        conversation.last().map(String::as_str),
        Some("user: and keep it short"),
        "{conversation:?}"
    );
}

#[tokio::test]
async fn a_steer_with_no_turn_running_starts_one_unless_the_client_asks_to_be_told() {
    let env = TestEnv::new(vec![MockReply::text(&["Started from a steer."])]).await;
    let (mut agent, session) = env.session().await;
    let mut refused = steer_params(&session, "not now");
    refused["_meta"] = json!({"steering": {"idleBehavior": "promptRequired"}});
    let answer = agent.request(STEER, refused).await.expect("answered");
    assert_eq!(
        answer["result"],
        json!({"outcome": "promptRequired", "reason": "noRunningTurn"})
    );
    assert!(env.mock.requests().is_empty(), "nothing ran");

    let from = agent.transcript.len();
    let started = steer(&mut agent, &session, "look at the README").await;
    assert_eq!(outcome(&started), "startedNewTurn", "{started}");
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["content"]["text"] == "Started from a steer."
        })
        .await
        .expect("its answer streams as a prompt's would");
    assert!(
        env.mock
            .wait_until(WAIT, |requests| requests.len() == 1)
            .await
    );
    assert_eq!(
        conversation(&env.mock.requests()[0].body),
        ["user: look at the README"]
    );
    assert!(
        updates_since(&agent, from)
            .iter()
            .all(|u| u["sessionUpdate"] != "user_message_chunk"),
        "a steer that started a turn is the client's own message, not shown again"
    );
    // The session goes on with prompts as usual.
    env.mock.push(MockReply::text(&["and on"]));
    let (response, _) = prompt(&mut agent, &session, "next").await;
    assert_eq!(stop_reason(&response), "end_turn");
}

#[tokio::test]
async fn a_steer_is_kept_when_the_turn_is_cancelled_before_it_entered() {
    let env = TestEnv::new(vec![MockReply::tool_call(
        "c1",
        "terminal",
        json!({"command": "sleep 5"}),
    )])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let id = prompt_until_a_command_runs(&mut agent, &session, "wait").await;
    steer_in(&mut agent, &session, "remember the steer").await;
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
    env.mock.push(MockReply::text(&["noted"]));
    let (response, _) = prompt(&mut agent, &session, "go on").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let conversation = conversation(&env.mock.requests()[1].body);
    assert!(
        conversation.iter().any(|m| m == "user: remember the steer"),
        "the steer reached the model after the cancel: {conversation:?}"
    );
    assert_eq!(conversation.last().map(String::as_str), Some("user: go on"));
}

#[tokio::test]
async fn bad_steers_are_clear_errors_and_the_session_goes_on() {
    let env = TestEnv::new(vec![MockReply::text(&["still here"])]).await;
    let (mut agent, session) = env.session().await;
    let empty = agent
        .request(STEER, json!({"sessionId": session, "prompt": []}))
        .await
        .expect("answered");
    assert_eq!(empty["error"]["code"], -32602, "{empty}");
    let huge = "x".repeat(300 * 1024);
    let oversized = steer(&mut agent, &session, &huge).await;
    assert_eq!(oversized["error"]["code"], -32602, "{oversized}");
    assert!(
        oversized["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at most"),
        "{oversized}"
    );
    let mut unknown_option = steer_params(&session, "hi");
    unknown_option["_meta"] = json!({"steering": {"idleBehavior": "whenever"}});
    let unknown_option = agent
        .request(STEER, unknown_option)
        .await
        .expect("answered");
    assert_eq!(unknown_option["error"]["code"], -32602, "{unknown_option}");
    let unknown_session = steer(&mut agent, "no-such-session", "hi").await;
    assert!(
        unknown_session["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no-such-session"),
        "{unknown_session}"
    );
    let malformed = agent
        .request(STEER, json!({"sessionId": session, "prompt": "text"}))
        .await
        .expect("answered");
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
    assert!(env.mock.requests().is_empty(), "nothing reached the model");
    let (response, updates) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(chunks(&updates, "agent_message_chunk"), ["still here"]);
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_steer_while_the_model_writes_a_call_waits_for_that_call() {
    let env = TestEnv::new(vec![
        MockReply::ToolCalls {
            calls: vec![MockToolCall {
                id: "r1".into(),
                name: "read_file".into(),
                arguments: json!({"path": "README.md"}).to_string(),
            }],
            text: None,
            // Slow enough that the steer arrives while the call streams.
            fragment_chars: Some(2),
            usage: None,
            delay_ms: 40,
        },
        MockReply::text(&["Read it."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("README.md"), "# hi\n").expect("readme");
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "read it"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "tool_call"
        })
        .await
        .expect("the call started");
    steer_in(&mut agent, &session, "then stop").await;
    let response = agent.wait_response(id, WAIT).await.expect("response");
    let sent: Vec<Vec<String>> = env
        .mock
        .requests()
        .iter()
        .map(|r| conversation(&r.body))
        .collect();
    assert_eq!(stop_reason(&response), "end_turn", "{response} {sent:#?}");
    let requests = env.mock.requests();
    let sent: Vec<Vec<String>> = requests.iter().map(|r| conversation(&r.body)).collect();
    assert_eq!(requests.len(), 2, "{sent:#?}");
    let conversation = conversation(&requests[1].body);
    assert_eq!(
        conversation.last().map(String::as_str),
        Some("user: then stop"),
        "{conversation:?}"
    );
    assert!(
        requests[1].body["messages"].to_string().contains("# hi"),
        "the call ran"
    );
}
