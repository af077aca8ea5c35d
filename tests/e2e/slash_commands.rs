//! Slash commands from the one declared table: the built-ins are listed with their argument
//! hints, a command given an argument it does not take is refused at once (nothing queued,
//! no model call), and a prompt that only starts with a `/` path is an ordinary prompt.

use serde_json::Value;
use talaria_harness::MockReply;

use crate::support::*;

/// The last list of commands the client was sent.
fn listed_commands(agent: &talaria_harness::AgentProcess) -> Vec<Value> {
    agent
        .updates()
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "available_commands_update")
        .and_then(|u| u["availableCommands"].as_array().cloned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_bad_argument_is_refused_before_anything_is_queued_and_paths_are_prompts() {
    let env = TestEnv::new(vec![MockReply::text(&["It is not on the PATH."])]).await;
    let (mut agent, session) = env.session().await;
    let listed = listed_commands(&agent);
    let hint = |name: &str| {
        listed
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["input"]["hint"].clone())
    };
    assert_eq!(
        hint("rewind"),
        Some(Value::from("[N] [files] [force]")),
        "{listed:?}"
    );
    assert_eq!(
        hint("plan"),
        Some(Value::from("the task to plan")),
        "{listed:?}"
    );
    assert_eq!(
        hint("mcp"),
        Some(Value::Null),
        "/mcp takes no hint: {listed:?}"
    );
    for name in ["compact", "skills"] {
        assert!(hint(name).is_some(), "/{name} is listed: {listed:?}");
    }
    for refused in ["/rewind back", "/skills burn", "/mcp restart", "/plan"] {
        let answer = agent
            .request("session/prompt", text_prompt(&session, refused))
            .await
            .expect("answered");
        assert_eq!(answer["error"]["code"], -32602, "{refused}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains('/'),
            "{refused}: the message names the command: {answer}"
        );
    }
    assert!(
        env.mock.requests().is_empty(),
        "no refused command reached the model"
    );
    let (response, _) = prompt(&mut agent, &session, "/usr/bin/ls fails here").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let asked = env.mock.requests()[0].body.to_string();
    assert!(asked.contains("/usr/bin/ls fails here"), "{asked}");
}
