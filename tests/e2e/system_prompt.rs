//! A client's system prompt over stdio (`systemPrompt` on `session/new`, `load`, `resume`,
//! `fork`): `append` after Talaria's stable instructions (byte-identical across sessions that
//! append the same text), `override` in place of Talaria's own; kept by the record across a
//! restart and replaced when a reload brings another; refused with `-32602`, creating
//! nothing, for an empty prompt, a block that is not text or a mode not offered.

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};

use crate::support::*;

fn system_prompt(mode: &str, text: &str) -> Value {
    json!({"mode": mode, "content": [{"type": "text", "text": text}]})
}

async fn new_session_with(agent: &mut AgentProcess, env: &TestEnv, prompt: Value) -> Value {
    agent
        .request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": [], "systemPrompt": prompt}),
        )
        .await
        .expect("answered")
}

fn session_id(response: &Value) -> String {
    response["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {response}"))
        .to_string()
}

/// The system message of the mock's request `index`.
fn system_of(env: &TestEnv, index: usize) -> String {
    let body = &env.mock.requests()[index].body;
    assert_eq!(body["messages"][0]["role"], "system", "{body}");
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn initialize_offers_append_and_override() {
    let env = TestEnv::new(Vec::new()).await;
    let (_agent, answer) = initialize_answer(&env).await;
    assert_eq!(
        answer["agentCapabilities"]["sessionCapabilities"]["systemPrompt"],
        json!({"mode": {"override": {}}}),
        "{answer}"
    );
}

#[tokio::test]
async fn append_follows_talarias_instructions_byte_for_byte_the_same_across_sessions() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let mut agent = initialized(&env).await;
    let appended = "Answer in French.";
    for _ in 0..2 {
        let created = new_session_with(&mut agent, &env, system_prompt("append", appended)).await;
        let session = session_id(&created);
        let (response, _) = prompt(&mut agent, &session, "hi").await;
        assert_eq!(stop_reason(&response), "end_turn");
    }
    let (first, second) = (system_of(&env, 0), system_of(&env, 1));
    assert!(first.starts_with("You are Talaria"), "{first}");
    assert!(
        first.ends_with("# Instructions from the client\n\nAnswer in French."),
        "{first}"
    );
    assert_eq!(
        first, second,
        "the same prefix, byte for byte, for the server's cache"
    );
}

#[tokio::test]
async fn override_replaces_talarias_own_instructions() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let mut agent = initialized(&env).await;
    let created = new_session_with(
        &mut agent,
        &env,
        system_prompt("override", "You are a pirate."),
    )
    .await;
    let session = session_id(&created);
    prompt(&mut agent, &session, "hi").await;
    let system = system_of(&env, 0);
    assert!(system.starts_with("You are a pirate."), "{system}");
    assert!(!system.contains("You are Talaria"), "{system}");
    // Tools are still offered: the override changes instructions, not capabilities.
    assert!(!offered_tools(&env.mock.requests()[0].body).is_empty());
}

#[tokio::test]
async fn the_record_keeps_it_across_a_restart_and_a_reload_with_another_replaces_it() {
    let env = TestEnv::new(vec![
        MockReply::text(&["first"]),
        MockReply::text(&["after load"]),
        MockReply::text(&["after resume"]),
    ])
    .await;
    let mut agent = initialized(&env).await;
    let created = new_session_with(&mut agent, &env, system_prompt("append", "Be brief.")).await;
    let session = session_id(&created);
    prompt(&mut agent, &session, "hi").await;
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;

    // A load without a system prompt keeps the one the session was made with.
    let mut again = initialized(&env).await;
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    prompt(&mut again, &session, "again").await;
    assert!(
        system_of(&env, 1).ends_with("Be brief."),
        "{}",
        system_of(&env, 1)
    );
    again.close_stdin();
    let _ = again.wait_exit(WAIT).await;

    // A resume with another replaces it, and the record keeps the new one.
    let mut third = initialized(&env).await;
    let mut params = load_params(&env, &session);
    params["systemPrompt"] = system_prompt("append", "Be thorough.");
    third.call("session/resume", params).await.expect("resume");
    prompt(&mut third, &session, "more").await;
    let system = system_of(&env, 2);
    assert!(system.ends_with("Be thorough."), "{system}");
    assert!(!system.contains("Be brief."), "{system}");
    third.close_stdin();
    let _ = third.wait_exit(WAIT).await;
    let store =
        talaria_store::SqliteStore::open(&env.home.path().join("talaria/state.db")).expect("store");
    let (_, transcript) = talaria_store::SessionStore::load(&store, &session).expect("load");
    let kept = transcript
        .entries()
        .iter()
        .find_map(|e| match &e.body {
            talaria_record::EntryBody::System { text, .. } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default();
    assert!(kept.ends_with("Be thorough."), "{kept}");
}

#[tokio::test]
async fn a_fork_takes_its_own_and_the_parent_keeps_its() {
    let env = TestEnv::new(vec![
        MockReply::text(&["parent"]),
        MockReply::text(&["fork"]),
        MockReply::text(&["parent again"]),
    ])
    .await;
    let mut agent = initialized(&env).await;
    let created =
        new_session_with(&mut agent, &env, system_prompt("append", "Parent rules.")).await;
    let parent = session_id(&created);
    prompt(&mut agent, &parent, "hi").await;
    let forked = agent
        .call(
            "session/fork",
            json!({"sessionId": parent, "cwd": env.workspace.path(), "mcpServers": [],
                   "systemPrompt": system_prompt("append", "Fork rules.")}),
        )
        .await
        .expect("fork");
    let fork = forked["sessionId"].as_str().expect("id").to_string();
    prompt(&mut agent, &fork, "in the fork").await;
    prompt(&mut agent, &parent, "in the parent").await;
    let (in_fork, in_parent) = (system_of(&env, 1), system_of(&env, 2));
    assert!(
        in_fork.ends_with("Fork rules.") && !in_fork.contains("Parent rules."),
        "{in_fork}"
    );
    assert!(in_parent.ends_with("Parent rules."), "{in_parent}");
}

#[tokio::test]
async fn a_prompt_that_cannot_be_applied_is_refused_and_nothing_is_created() {
    let env = TestEnv::new(vec![MockReply::text(&["fine"])]).await;
    let mut agent = initialized(&env).await;
    let bad = [
        json!({"mode": "append", "content": []}),
        json!({"mode": "append", "content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}),
        system_prompt("_prepend", "x"),
        json!({"mode": "append"}),
    ];
    for prompt in bad {
        let answer = new_session_with(&mut agent, &env, prompt.clone()).await;
        assert_eq!(answer["error"]["code"], -32602, "{prompt}: {answer}");
    }
    let listed = agent.call("session/list", json!({})).await.expect("list");
    assert_eq!(
        listed["sessions"],
        json!([]),
        "nothing was created: {listed}"
    );
    // A session with a valid one works on.
    let created = new_session_with(&mut agent, &env, system_prompt("append", "ok")).await;
    let session = session_id(&created);
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    // A load that cannot apply its prompt opens nothing either.
    let mut params = load_params(&env, &session);
    params["systemPrompt"] = json!({"mode": "append", "content": []});
    let answer = agent
        .request("session/load", params)
        .await
        .expect("answered");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
}
