//! `/agent NAME TASK`: offered only when agents are configured; its turn is the delegation
//! (no model request), the agent's answer the turn's, in the record for the next prompt.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use super::scripted_child;
use crate::support::*;

fn listed_commands(agent: &talaria_harness::AgentProcess) -> Vec<String> {
    agent
        .updates()
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "available_commands_update")
        .and_then(|u| u["availableCommands"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn slash_agent_runs_the_delegation_as_the_turn_and_its_answer_is_the_turns() {
    let script = json!([[{"say": "I wrote the tests.\n"}]]);
    // The model is asked only by the next, ordinary prompt.
    let env = scripted_child(vec![MockReply::text(&["Noted."])], script, "").await;
    let (mut agent, session) = env.session().await;
    assert!(
        listed_commands(&agent).contains(&"agent".to_string()),
        "{:?}",
        listed_commands(&agent)
    );
    let (response, updates) = prompt(&mut agent, &session, "/agent scripted write the tests").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(env.mock.requests().is_empty(), "no model request");
    let card: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call" || u["sessionUpdate"] == "tool_call_update")
        .map(Value::to_string)
        .collect();
    assert!(card.contains("Delegate: write the tests"), "{card}");
    let said = chunks(&updates, "agent_message_chunk").join("");
    assert!(
        said.contains("Report from scripted:\nI wrote the tests."),
        "{said}"
    );
    let (response, _) = prompt(&mut agent, &session, "what did it do?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let asked = env.mock.requests()[0].body.to_string();
    assert!(
        asked.contains("I wrote the tests."),
        "in the record: {asked}"
    );
    // The record loads again, the agent's report replayed as the assistant's.
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    let mut again = initialized(&env).await;
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("loads");
    let replayed = chunks(&again.updates(), "agent_message_chunk").join("");
    assert!(
        replayed.contains("Report from scripted:\nI wrote the tests."),
        "{replayed}"
    );
}

#[tokio::test]
async fn slash_agent_is_offered_only_with_agents_and_refused_without() {
    let env = TestEnv::new(vec![]).await;
    let (mut agent, session) = env.session().await;
    let listed = listed_commands(&agent);
    assert!(listed.contains(&"rewind".to_string()), "{listed:?}");
    assert!(!listed.contains(&"agent".to_string()), "{listed:?}");
    let answer = agent
        .request(
            "session/prompt",
            text_prompt(&session, "/agent codex do it"),
        )
        .await
        .expect("answered");
    assert!(
        answer.to_string().contains("No other agent is configured"),
        "{answer}"
    );
    assert!(env.mock.requests().is_empty(), "no model request");
    let refused = agent
        .request("session/prompt", text_prompt(&session, "/agent codex"))
        .await
        .expect("answered");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}
