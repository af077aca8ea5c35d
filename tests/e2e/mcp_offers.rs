//! MCP resources and prompts end to end, with `talaria-mcp-fixture --offers`: resources read
//! by the model and linked by the user (a listed one and one a template makes), an update of
//! a subscribed resource noted in the next prompt, a huge resource held to the result
//! budget, a prompt as a slash command with its missing argument asked in a form, and a
//! server's malformed line and unknown content type leaving the session working.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::mcp::{fixture, prompt_allowing, session_with_servers, session_with_servers_and};
use crate::support::*;

fn offering() -> Value {
    fixture("fix", &["--offers"], None)
}

fn last_user_message(env: &TestEnv, request: usize) -> String {
    let messages = env.mock.requests()[request].body["messages"].clone();
    messages
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(Value::to_string)
        .unwrap_or_default()
}

#[tokio::test]
async fn resources_are_read_linked_and_their_updates_noted() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "r",
            "mcp_read_resource",
            json!({"uri": "fixture://notes/today"}),
        ),
        MockReply::text(&["read"]),
        MockReply::text(&["linked"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![offering()]).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "read today's note").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let tool_result = env.mock.requests()[1].body["messages"].to_string();
    assert!(tool_result.contains("buy milk"), "{tool_result}");
    let linked = json!({"sessionId": session, "prompt": [
        {"type": "text", "text": "look at this row"},
        {"type": "resource_link", "uri": "fixture://rows/7", "name": "row 7"}
    ]});
    let response = agent.call("session/prompt", linked).await.expect("prompt");
    assert_eq!(response["stopReason"], "end_turn", "{response}");
    let asked = last_user_message(&env, 2);
    assert!(
        asked.contains("row 7 of the fixture"),
        "a template's resource is read: {asked}"
    );
    // The fixture says the note changed once it was subscribed to: told in the next prompt.
    assert!(
        asked.contains("fixture://notes/today changed since it was read"),
        "{asked}"
    );
}

#[tokio::test]
async fn a_huge_resource_is_held_to_the_result_budget_and_a_missing_one_fails_clearly() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("h", "mcp_read_resource", json!({"uri": "fixture://huge"})),
        MockReply::tool_call(
            "m",
            "mcp_read_resource",
            json!({"uri": "fixture://nothing"}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![offering()]).await;
    let (response, updates) = prompt_allowing(&mut agent, &session, "read the huge one").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let huge = env.mock.requests()[1].body["messages"].to_string();
    assert!(
        huge.contains("huge line of the fixture"),
        "a preview is read"
    );
    assert!(
        huge.len() < 200_000,
        "{} bytes reached the model",
        huge.len()
    );
    let missing = env.mock.requests()[2].body["messages"].to_string();
    assert!(
        missing.contains("no resource fixture://nothing"),
        "{missing}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u["status"] == "failed" && u.to_string().contains("fixture://nothing")),
        "the missing one is a failed call"
    );
}

/// The form asking for the review's file answered with `main.rs`; the prompt's answer.
async fn file_given(agent: &mut talaria_harness::AgentProcess, form: &Value, id: i64) -> Value {
    agent
        .respond(
            &form["id"],
            json!({"action": "accept", "content": {"file": "main.rs"}}),
        )
        .await
        .expect("answer");
    agent.wait_response(id, WAIT).await.expect("response")
}

#[tokio::test]
async fn a_prompt_is_a_command_and_its_missing_argument_is_asked_in_a_form() {
    let env = TestEnv::new(vec![MockReply::text(&["reviewed"])]).await;
    let forms = json!({"elicitation": {"form": {}}});
    let (mut agent, session, updates) =
        session_with_servers_and(&env, vec![offering()], forms).await;
    let command = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "available_commands_update")
        .flat_map(|u| {
            u["availableCommands"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|c| c["name"] == "mcp:fix:review")
        .expect("the prompt is a command");
    assert_eq!(command["input"]["hint"], "file [focus]");
    let id = agent
        .start_request(
            "session/prompt",
            text_prompt(&session, "/mcp:fix:review focus=naming"),
        )
        .await
        .expect("prompt");
    let form = agent
        .wait_for(WAIT, |m| m["method"] == "elicitation/create")
        .await
        .expect("the missing argument is asked");
    assert_eq!(
        form["params"]["requestedSchema"]["required"],
        json!(["file"])
    );
    let response = file_given(&mut agent, &form, id).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let asked = last_user_message(&env, 0);
    assert!(
        asked.contains("Review main.rs, looking at naming."),
        "{asked}"
    );
}

#[tokio::test]
async fn without_forms_a_missing_prompt_argument_is_a_clear_error() {
    let env = TestEnv::new(vec![]).await;
    let (mut agent, session, _) = session_with_servers(&env, vec![offering()]).await;
    let response = agent
        .request("session/prompt", text_prompt(&session, "/mcp:fix:review"))
        .await
        .expect("answered");
    assert!(
        response.to_string().contains("file"),
        "the error names the argument: {response}"
    );
    assert!(env.mock.requests().is_empty(), "nothing reached the model");
}

#[tokio::test]
async fn a_garbled_line_and_an_unknown_content_type_leave_the_session_working() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("w", "mcp__fix__weird", json!({})),
        MockReply::text(&["odd"]),
        MockReply::tool_call("e", "mcp__fix__echo", json!({"text": "still here"})),
        MockReply::text(&["fine"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![offering()]).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "be weird").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let weird = env.mock.requests()[1].body["messages"].to_string();
    assert!(
        weird.contains("the MCP server fix failed: its answer is not a valid MCP result"),
        "{weird}"
    );
    let (response, _) = prompt_allowing(&mut agent, &session, "echo").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let echoed = env.mock.requests()[3].body["messages"].to_string();
    assert!(echoed.contains("echo: still here"), "{echoed}");
}

#[tokio::test]
async fn a_changed_list_is_listed_again() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("l1", "mcp_resources", json!({})),
        MockReply::tool_call("a", "mcp__fix__add", json!({})),
        MockReply::tool_call("l2", "mcp_resources", json!({})),
        MockReply::text(&["listed"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![offering()]).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "list, add, list").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let before = env.mock.requests()[1].body["messages"].to_string();
    assert!(before.contains("fixture://notes/today"), "{before}");
    assert!(!before.contains("fixture://notes/added"), "{before}");
    let after = env.mock.requests()[3].body["messages"]
        .as_array()
        .and_then(|m| m.last().cloned())
        .unwrap_or_default()
        .to_string();
    assert!(after.contains("fixture://notes/added"), "{after}");
}

#[tokio::test]
async fn a_server_whose_prompts_changed_has_its_commands_listed_again_before_the_next_turn() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("a", "mcp__fix__add", json!({})),
        MockReply::text(&["added"]),
        MockReply::text(&["next"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![offering()]).await;
    let listed = |agent: &talaria_harness::AgentProcess| -> Vec<String> {
        agent
            .transcript
            .iter()
            .filter(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")
            .filter_map(|m| {
                m["params"]["update"]["availableCommands"]
                    .as_array()
                    .cloned()
            })
            .next_back()
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    assert!(!listed(&agent).contains(&"mcp:fix:added".to_string()));
    let (response, _) = prompt_allowing(&mut agent, &session, "add").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (response, _) = prompt(&mut agent, &session, "next").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let names = listed(&agent);
    assert!(names.contains(&"mcp:fix:added".to_string()), "{names:?}");
    assert!(names.contains(&"mcp:fix:review".to_string()), "{names:?}");
}

/// While a command's expansion waits on the user's form the session reads none of its ops:
/// settings sent then are held to 256, the next refused with `-32010` until it has read
/// them; the turn then runs and a setting is taken again.
#[tokio::test]
async fn settings_sent_while_a_command_waits_on_a_form_are_held_to_256() {
    let env = TestEnv::new(vec![MockReply::text(&["reviewed"])]).await;
    let forms = json!({"elicitation": {"form": {}}});
    let (mut agent, session, _) = session_with_servers_and(&env, vec![offering()], forms).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "/mcp:fix:review"))
        .await
        .expect("prompt");
    let form = agent
        .wait_for(WAIT, |m| m["method"] == "elicitation/create")
        .await
        .expect("the missing argument is asked");
    let sets = crate::bounded_queues::mode_sets(&mut agent, &session, 300).await;
    let mut refused = 0;
    for (n, id) in sets.iter().enumerate() {
        let answer = agent.wait_response(*id, WAIT).await.expect("answered");
        if n < 256 {
            assert!(answer["result"].is_object(), "{n}: {answer}");
        } else {
            assert_eq!(answer["error"]["code"], -32010, "{n}: {answer}");
            refused += 1;
        }
    }
    assert_eq!(refused, 300 - 256);
    let response = file_given(&mut agent, &form, id).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let again = agent
        .request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "ask"}),
        )
        .await
        .expect("answered");
    assert!(again["result"].is_object(), "{again}");
}
