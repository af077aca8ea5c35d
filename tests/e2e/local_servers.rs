//! Local model servers: the context window they report sizes the session when the user set
//! none; a configured window is never second-guessed.

use serde_json::json;
use talaria_harness::{MockReply, MockUsage};

use crate::support::*;

fn answer_with_usage() -> MockReply {
    MockReply::Text {
        chunks: vec!["ok".into()],
        reasoning: Vec::new(),
        delay_ms: 0,
        usage: Some(MockUsage {
            prompt_tokens: 900,
            completion_tokens: 10,
            cached_tokens: 0,
        }),
        finish_reason: None,
    }
}

/// A saved skill, `deploy`: in the prompt's index only when the skills toolset is offered.
fn saved_skill(env: &TestEnv) {
    let skill = env.home.path().join("talaria/skills/deploy");
    std::fs::create_dir_all(&skill).expect("skill dir");
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: deploy\ndescription: Ship it.\n---\nSteps.\n",
    )
    .expect("skill");
}

fn reported_size(updates: &[serde_json::Value]) -> serde_json::Value {
    updates
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage_update")["size"]
        .clone()
}

#[tokio::test]
async fn without_a_configured_window_the_llama_cpp_servers_own_is_used() {
    let mut env = TestEnv::new(vec![answer_with_usage()]).await;
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 8192}}));
    // The suite's default sets a window; this test leaves it unset.
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(reported_size(&updates), 8192);
    assert!(env.mock.info_requests().contains(&"/props".to_string()));
    assert!(
        agent
            .stderr()
            .contains("context window reported by the model server"),
        "logged"
    );
}

#[tokio::test]
async fn a_server_that_reports_nothing_leaves_the_default() {
    let mut env = TestEnv::new(vec![answer_with_usage()]).await;
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
    let (mut agent, session) = env.session().await;
    let (_, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(reported_size(&updates), 128_000);
    assert!(
        agent.stderr().contains("reports no context window"),
        "said why"
    );
}

#[tokio::test]
async fn a_configured_window_wins_over_the_servers() {
    let env = TestEnv::new(vec![answer_with_usage()]).await;
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 8192}}));
    let (mut agent, session) = env.session().await;
    let (_, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(reported_size(&updates), 64000);
    // The server is still asked how many requests it serves at once.
    assert!(
        env.mock.info_requests().contains(&"/props".to_string()),
        "{:?}",
        env.mock.info_requests()
    );
}

#[tokio::test]
async fn a_small_reported_window_gets_the_core_tools_and_a_short_prompt() {
    let mut env = TestEnv::new(vec![answer_with_usage()]).await;
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 16384}}));
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
    saved_skill(&env);
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "hi").await;
    let body = &env.mock.requests()[0].body;
    let tools = offered_tools(body);
    for core in CORE_TOOLS {
        assert!(tools.iter().any(|t| t == core), "{core}: {tools:?}");
    }
    for left_out in ["delegate_task", "skill_manage", "memory", "session_search"] {
        assert!(
            !tools.iter().any(|t| t == left_out),
            "{left_out}: {tools:?}"
        );
    }
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(
        !system.contains("deploy"),
        "no skill index without skill tools"
    );
    assert!(agent.stderr().contains("the core toolsets"), "logged");
}

#[tokio::test]
async fn a_large_reported_window_or_configured_toolsets_keep_their_tools() {
    let mut env = TestEnv::new(vec![answer_with_usage(), answer_with_usage()]).await;
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 131072}}));
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "hi").await;
    let tools = offered_tools(&env.mock.requests()[0].body);
    assert!(tools.iter().any(|t| t == "delegate_task"), "{tools:?}");
    assert!(tools.iter().any(|t| t == "skill_manage"), "{tools:?}");
    // A small window with toolsets chosen in the config: the choice stands.
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 8192}}));
    env.write_config("toolsets = [\"file\", \"skills\"]\n");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "hi").await;
    let tools = offered_tools(&env.mock.requests()[1].body);
    assert!(tools.iter().any(|t| t == "skill_manage"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "terminal"), "{tools:?}");
}

/// A llama.cpp server with a 16k window that takes `delay` to answer `/props` (it is still
/// loading its model, or busy).
fn slow_probe(env: &mut TestEnv, delay: std::time::Duration) {
    env.mock.serve_props_after(
        json!({"default_generation_settings": {"n_ctx": 16384}, "total_slots": 1}),
        delay,
    );
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
}

#[tokio::test]
async fn session_new_does_not_wait_for_the_servers_window_and_the_first_prompt_does() {
    let mut env = TestEnv::new(vec![answer_with_usage()]).await;
    slow_probe(&mut env, std::time::Duration::from_millis(1500));
    saved_skill(&env);
    let (mut agent, session) = env.session().await;
    assert!(
        !env.mock.info_requests().contains(&"/props".to_string()),
        "session/new was answered after the server's window: {:?}",
        env.mock.info_requests()
    );
    // The prompt sent at once waits for the window and runs sized by it.
    let (response, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(env.mock.info_requests().contains(&"/props".to_string()));
    assert_eq!(reported_size(&updates), 16384);
    let body = &env.mock.requests()[0].body;
    let tools = offered_tools(body);
    for core in CORE_TOOLS {
        assert!(tools.iter().any(|t| t == core), "{core}: {tools:?}");
    }
    for left_out in ["delegate_task", "skill_manage", "memory"] {
        assert!(
            !tools.iter().any(|t| t == left_out),
            "{left_out}: {tools:?}"
        );
    }
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(!system.contains("deploy"), "the prompt for the core tools");
}

#[tokio::test]
async fn a_prompt_cancelled_while_the_window_is_on_its_way_ends_cancelled_and_the_next_runs() {
    let mut env = TestEnv::new(vec![answer_with_usage()]).await;
    slow_probe(&mut env, std::time::Duration::from_millis(1200));
    let (mut agent, session) = env.session().await;
    let waiting = agent
        .start_request("session/prompt", text_prompt(&session, "first"))
        .await
        .expect("send prompt");
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent
        .wait_response(waiting, WAIT)
        .await
        .expect("prompt response");
    assert_eq!(stop_reason(&response), "cancelled");
    let (response, updates) = prompt(&mut agent, &session, "second").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(reported_size(&updates), 16384);
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 1, "the cancelled prompt reached no model");
    assert_eq!(last_user(&requests[0].body), "second");
}

#[tokio::test]
async fn sessions_started_while_the_window_is_on_its_way_are_all_sized_by_it() {
    let mut env = TestEnv::new(vec![answer_with_usage(), answer_with_usage()]).await;
    slow_probe(&mut env, std::time::Duration::from_millis(1000));
    let (mut agent, first) = env.session().await;
    let second = agent
        .start_session(env.workspace.path())
        .await
        .expect("second session");
    assert!(!env.mock.info_requests().contains(&"/props".to_string()));
    for session in [&first, &second] {
        let (_, updates) = prompt(&mut agent, session, "hi").await;
        assert_eq!(reported_size(&updates), 16384);
    }
    let props_asked = env
        .mock
        .info_requests()
        .iter()
        .filter(|path| *path == "/props")
        .count();
    assert_eq!(props_asked, 1, "one probe per server");
    for request in env.mock.requests() {
        let tools = offered_tools(&request.body);
        assert!(!tools.iter().any(|t| t == "delegate_task"), "{tools:?}");
    }
}
