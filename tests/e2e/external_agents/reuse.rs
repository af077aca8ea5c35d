//! A running agent kept for the session: a second delegation reuses its process (on a new
//! session in it, or its one session when it opens no other), an idle one is stopped after
//! `idle_timeout_secs`, the session's end stops it; a steer interrupts its turn; the
//! session's MCP servers reach its sessions and what it used is the session's.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::MockReply;

use super::{delegating_as, delegation_result, scripted_child};
use crate::support::*;

/// Two prompts, each delegating to the scripted agent once.
fn delegating_twice() -> Vec<MockReply> {
    [
        delegating_as("d1", "scripted"),
        delegating_as("d2", "scripted"),
    ]
    .concat()
}

/// One model answer delegating two tasks to the scripted agent at once, then `answer`.
fn delegating_both(answer: &str) -> Vec<MockReply> {
    let task = |goal: &str| json!({"goal": goal, "agent": "scripted"});
    vec![
        batch(&[
            ("d1", "delegate_task", task("look at the notes")),
            ("d2", "delegate_task", task("look at the tests")),
        ]),
        MockReply::text(&[answer]),
    ]
}

/// The scripted agent of `env` opens one session only (a second `session/new` is refused).
fn one_session_only(env: &TestEnv) {
    let config = env.home.path().join("talaria/config.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replace(
        "TALARIA_CHILD_SCRIPT",
        "TALARIA_CHILD_ONE_SESSION = \"1\", TALARIA_CHILD_SCRIPT",
    );
    std::fs::write(&config, text).expect("config");
}

/// What the agent said of itself (`{"whoami": true}`) in the last delegation's result:
/// its process id and its session.
fn whoami(env: &TestEnv) -> (u32, String) {
    let result = delegation_result(env);
    let line = result
        .lines()
        .rev()
        .find(|l| l.starts_with("pid "))
        .unwrap_or_else(|| panic!("no whoami in {result}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    (words[1].parse().expect("pid"), words[3].to_string())
}

/// Whether process `pid` runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit(')').next().map(str::trim).map(str::to_string))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// Waits up to `limit` for process `pid` to end; whether it did.
async fn ends_within(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    !alive(pid)
}

#[tokio::test]
async fn a_second_delegation_reuses_the_running_agent_and_the_sessions_end_stops_it() {
    let script = json!([[{"whoami": true}], [{"whoami": true}]]);
    let env = scripted_child(delegating_twice(), script, "").await;
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "first").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (first_pid, first_session) = whoami(&env);
    assert!(alive(first_pid), "kept running between delegations");
    let (response, _) = prompt(&mut agent, &session, "second").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (pid, child_session) = whoami(&env);
    assert_eq!(pid, first_pid, "the same process took the second task");
    assert_ne!(child_session, first_session, "on a new session of its own");
    agent
        .request("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    assert!(
        ends_within(pid, Duration::from_secs(10)).await,
        "the session's end stops the agent"
    );
}

#[tokio::test]
async fn an_agent_that_opens_one_session_takes_the_next_task_on_it() {
    let script = json!([[{"whoami": true}], [{"whoami": true}]]);
    let env = scripted_child(delegating_twice(), script, "").await;
    one_session_only(&env);
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "first").await;
    let first = whoami(&env);
    let (response, _) = prompt(&mut agent, &session, "second").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(whoami(&env), first, "the same process, on its one session");
}

#[tokio::test]
async fn an_idle_agent_is_stopped_after_its_idle_timeout() {
    let script = json!([[{"whoami": true}]]);
    let env = scripted_child(super::delegating_to("scripted"), script, "").await;
    let config = env.home.path().join("talaria/config.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{text}idle_timeout_secs = 1\n")).expect("config");
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (pid, _) = whoami(&env);
    assert!(alive(pid), "kept running after its delegation");
    assert!(
        ends_within(pid, Duration::from_secs(10)).await,
        "stopped once idle for its timeout, the session still open"
    );
    assert!(
        alive(agent.pid().expect("pid")),
        "the session's agent runs on"
    );
}

/// Prompts the scripted agent (whose first turn says "working" and waits for a cancel)
/// through the parent's delegation, steers with `words` while it works, and waits for the
/// turn's end; the delegation's result.
async fn steered(script: Value, words: &str) -> (TestEnv, String) {
    let env = scripted_child(super::delegating_to("scripted"), script, "").await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "hand it over"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m.to_string().contains("scripted: working"))
        .await
        .expect("the child works");
    let steer = json!({"sessionId": session, "prompt": [{"type": "text", "text": words}]});
    let steered = agent
        .request("_session/steering", steer)
        .await
        .expect("steer");
    assert_eq!(steered["result"]["outcome"], "injected", "{steered}");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    let last = env.mock.requests().last().expect("a request").body.clone();
    assert!(
        last.to_string().contains(words),
        "the steer entered the parent's turn too"
    );
    (env, result)
}

#[tokio::test]
async fn a_steer_reaches_the_agent_as_its_next_prompt_and_its_answer_is_the_result() {
    let script = json!([
        [{"whoami": true}, {"say": "working\n"}, {"wait_cancel": true}],
        [{"echo_prompt": true}, {"say": "done with B\n"}, {"usage": {"input": 7, "output": 3}}]
    ]);
    let (_env, result) = steered(script, "stop, use B").await;
    let first_session = result
        .split("session ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session in {result}"));
    assert!(
        result.contains(&format!("prompt on {first_session}: stop, use B")),
        "the steer's words are the agent's next prompt, on its same session: {result}"
    );
    assert!(
        result.contains(
            "Report from scripted (the user's new message \"stop, use B\" reached it while \
             it worked, and it went on with it):\nprompt on"
        ) && result.contains("done with B\n\nWhat it had said before the message:\npid "),
        "its answer to the steer is the result: {result}"
    );
    assert!(
        !result.contains("was stopped so that you can read"),
        "{result}"
    );
}

/// The user steers the agent, then cancels the whole turn while it works on the steer: the
/// delegation's card says it was cancelled, not that it stopped for the user's message.
#[tokio::test]
async fn a_cancel_after_a_steer_is_a_cancel() {
    let script = json!([
        [{"say": "working\n"}, {"wait_cancel": true}],
        [{"say": "on the steer\n"}, {"wait_cancel": true}]
    ]);
    let env = scripted_child(super::delegating_to("scripted"), script, "").await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "hand it over"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m.to_string().contains("scripted: working"))
        .await
        .expect("the child works");
    let steer = json!({"sessionId": session, "prompt": [{"type": "text", "text": "use B"}]});
    agent
        .request("_session/steering", steer)
        .await
        .expect("steer");
    agent
        .wait_for(WAIT, |m| m.to_string().contains("scripted: on the steer"))
        .await
        .expect("the child works on the steer");
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
    let card: String = agent
        .updates()
        .iter()
        .filter(|u| u["toolCallId"] == "d1" && u["status"].is_string())
        .map(|u| u.to_string())
        .collect();
    assert!(card.contains("scripted was cancelled"), "{card}");
    assert!(!card.contains("so that you can read"), "{card}");
}

#[tokio::test]
async fn a_steer_interrupts_the_agents_turn_and_the_turn_takes_it() {
    // An agent that cannot take a second prompt after a cancel: the cut turn is the result.
    let script = json!([
        [{"say": "working\n"}, {"wait_cancel": true}],
        [{"error": "no second prompt after a cancel"}]
    ]);
    let (_env, result) = steered(script, "stop, use B").await;
    assert!(
        result.contains("stopped so that you can read the user's new message")
            && result.contains("could not take the message itself")
            && result.contains("no second prompt after a cancel")
            && result.contains("working"),
        "{result}"
    );
}

#[tokio::test]
async fn the_sessions_mcp_servers_reach_the_agent_and_its_usage_is_the_sessions() {
    let script = json!([[{"whoami": true}, {"cost": 0.25},
        {"usage": {"input": 1200, "output": 300}}]]);
    // The session's own model reports its usage after the delegation (unpriced: the cost
    // is the agent's alone).
    let mut parent = super::delegating_to("scripted");
    parent[1] = MockReply::Text {
        chunks: vec!["Delegated.".into()],
        reasoning: vec![],
        delay_ms: 0,
        usage: Some(talaria_harness::MockUsage {
            prompt_tokens: 10,
            completion_tokens: 2,
            cached_tokens: 0,
        }),
        finish_reason: None,
    };
    let env = scripted_child(parent, script, "").await;
    let servers = json!([crate::mcp::fixture("notes", &[], None)]);
    let (mut agent, session, _) = env.session_given(json!({}), servers).await;
    let (response, updates) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    assert!(result.contains("mcp [notes]"), "{result}");
    let usage = &response["result"]["usage"];
    let input = usage["inputTokens"].as_u64().expect("input");
    assert!(input >= 1200, "the agent's tokens are the turn's: {usage}");
    assert!(
        usage["outputTokens"].as_u64().expect("output") >= 300,
        "{usage}"
    );
    let cost: Vec<f64> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "usage_update")
        .filter_map(|u| u["cost"]["amount"].as_f64())
        .collect();
    assert!(
        cost.last().is_some_and(|c| (c - 0.25).abs() < 1e-9),
        "the agent's cost is the session's: {cost:?} in {:?}",
        updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "usage_update")
            .collect::<Vec<&Value>>()
    );
}

#[tokio::test]
async fn a_kept_agent_dies_with_a_killed_talaria_even_if_it_ignores_its_input() {
    let script = json!([[{"whoami": true}]]);
    let env = scripted_child(super::delegating_to("scripted"), script, "").await;
    let config = env.home.path().join("talaria/config.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replace(
        "TALARIA_CHILD_SCRIPT",
        "TALARIA_CHILD_IGNORE_EOF = \"1\", TALARIA_CHILD_SCRIPT",
    );
    std::fs::write(&config, text).expect("config");
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "go").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (pid, _) = whoami(&env);
    assert!(alive(pid), "kept after its delegation");
    kill_now(&agent);
    assert!(
        ends_within(pid, Duration::from_secs(10)).await,
        "the agent followed Talaria's death (its parent-death signal)"
    );
}

/// The model's delegations to one agent in one answer: `agents/mod.rs` keeps one running
/// agent, so both go to the same process, each on a session of its own, and both answers
/// come back, each as its own call's result.
#[tokio::test]
async fn two_delegations_at_once_to_one_agent_each_get_a_session_of_its_own() {
    let script = json!([[{"whoami": true}], [{"whoami": true}]]);
    let parent = delegating_both("Both delegated.");
    let env = scripted_child(parent, script, "").await;
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "both").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = delegation_result(&env);
    let whoamis: Vec<(String, String)> = results
        .lines()
        .filter(|l| l.starts_with("pid "))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            (words[1].to_string(), words[3].to_string())
        })
        .collect();
    assert_eq!(whoamis.len(), 2, "{results}");
    assert_eq!(whoamis[0].0, whoamis[1].0, "one running agent: {results}");
    assert_ne!(whoamis[0].1, whoamis[1].1, "two sessions: {results}");
}

/// The same with an agent that opens one session only: the second task cannot share the
/// session the first is on; it fails with why (the model can hand it over again), and the
/// first comes back.
#[tokio::test]
async fn two_delegations_at_once_to_a_one_session_agent_fail_the_second_with_why() {
    let script = json!([[{"whoami": true}], [{"whoami": true}]]);
    let parent = delegating_both("One delegated.");
    let env = scripted_child(parent, script, "").await;
    one_session_only(&env);
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "both").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = delegation_result(&env);
    eprintln!("RESULTS {results}");
    assert_eq!(
        results.lines().filter(|l| l.starts_with("pid ")).count(),
        1,
        "{results}"
    );
}
