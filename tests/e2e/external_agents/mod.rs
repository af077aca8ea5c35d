//! Other ACP agents (`[agents.<name>]`) handed a task by `delegate_task {agent}`: the
//! scripted child `talaria-acp-child` and another Talaria process. The child's answer is the
//! call's result; its file requests, terminals and questions are served by the session under
//! its own rules (hidden places stay hidden, writes ask and are rewound, commands run in the
//! sandbox); a crash, a hang or a cancel ends the call, never the turn.

use serde_json::{Value, json};
use talaria_harness::binary::{talaria_bin, workspace_bin};
use talaria_harness::{MockReply, MockToolCall};

use crate::support::*;

mod batch;
mod claude;
mod registry;
mod reuse;
mod slash;

/// The parent's script: one delegation to `agent`, then its own answer.
fn delegating_to(agent: &str) -> Vec<MockReply> {
    delegating_as("d1", agent)
}

/// Like [`delegating_to`], the call's id `id`.
fn delegating_as(id: &str, agent: &str) -> Vec<MockReply> {
    vec![
        MockReply::ToolCalls {
            calls: vec![MockToolCall {
                id: id.into(),
                name: "delegate_task".into(),
                arguments: json!({"goal": "look at the notes", "agent": agent}).to_string(),
            }],
            text: None,
            fragment_chars: None,
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["Delegated."]),
    ]
}

/// A home whose config names the scripted child (playing `prompts`, `HOME/` its home) as
/// `scripted`.
async fn with_scripted_child(prompts: Value, extra: &str) -> TestEnv {
    scripted_child(delegating_to("scripted"), prompts, extra).await
}

/// Like [`with_scripted_child`], the parent's model playing `parent`. The child's command
/// line holds the test's home, so a test could find its process.
async fn scripted_child(parent: Vec<MockReply>, prompts: Value, extra: &str) -> TestEnv {
    let env = TestEnv::new(parent).await;
    let script = env.home.path().join("child-script.json");
    // `HOME/` in the script is the test's home (the child names paths there absolutely).
    let text = json!({ "prompts": prompts })
        .to_string()
        .replace("HOME/", &format!("{}/", env.home.path().display()));
    std::fs::write(&script, text).expect("script");
    let child = workspace_bin("talaria-harness", "talaria-acp-child");
    env.write_config(&format!(
        "[learning]\nskill_review_after = 0\nmemory_review_after = 0\n{extra}\n\
         [agents.scripted]\ncommand = \"{}\"\ntools = \"acp\"\nargs = [\"{}\"]\n\
         env = {{ TALARIA_CHILD_SCRIPT = \"{}\" }}\n",
        child.display(),
        env.home.path().display(),
        script.display()
    ));
    env
}

/// What the session's model read as the delegation's result (in its last request; another
/// Talaria as the child asks the same mock for another model).
fn delegation_result(env: &TestEnv) -> String {
    let requests = env.mock.requests();
    let last = requests
        .iter()
        .rposition(|r| r.body["model"] == "mock-model")
        .unwrap_or_default();
    tool_results(&env.mock, last).join("\n")
}

#[tokio::test]
async fn a_task_handed_to_another_agent_comes_back_as_the_calls_result() {
    let script = json!([[{"say": "I looked "}, {"tool_call": "listed the files"},
        {"say": "and all is well.\n"}, {"usage": {"input": 120, "output": 30}}]]);
    let env = with_scripted_child(script, "").await;
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    assert!(
        result.contains("Report from scripted:\nI looked and all is well."),
        "{result}"
    );
    let card: String = updates
        .iter()
        .filter(|u| u["toolCallId"] == "d1")
        .map(Value::to_string)
        .collect();
    assert!(card.contains("scripted — listed the files"), "{card}");
    assert!(card.contains("scripted: I looked\\n"), "{card}");
    assert!(card.contains("scripted: and all is well."), "{card}");
    assert!(card.contains("120 input and 30 output tokens"), "{card}");
    let tools = env.mock.requests()[0].body["tools"].to_string();
    assert!(tools.contains("\"agent\""), "delegate_task offers `agent`");
}

#[tokio::test]
async fn the_agents_reads_follow_the_sessions_rules_and_its_writes_ask_and_are_rewound() {
    let script = json!([[{"read": "notes.txt"}, {"read": "HOME/.ssh/id_ed25519"},
        {"write": {"path": "out.txt", "content": "written by the agent\n"}}]]);
    let mut env = with_scripted_child(script, "").await;
    let dir = env.workspace.path().to_path_buf();
    std::fs::write(dir.join("notes.txt"), "the notes\n").expect("notes");
    let ssh = env.home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).expect("ssh");
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE KEY MATERIAL").expect("key");
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let answer = prompt_choosing(&mut agent, &session, "hand it over", "allow_once").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let result = delegation_result(&env);
    assert!(result.contains("read notes.txt: the notes"), "{result}");
    assert!(result.contains("id_ed25519: error:"), "{result}");
    assert!(!result.contains("PRIVATE KEY"), "{result}");
    assert!(result.contains("wrote: ok"), "{result}");
    let asked = agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .map(|m| m["params"]["toolCall"]["title"].to_string())
        .collect::<Vec<_>>();
    assert!(asked.iter().any(|t| t.contains("[scripted]")), "{asked:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).expect("written"),
        "written by the agent\n"
    );
    let (rewound, _) = prompt(&mut agent, &session, "/rewind files").await;
    assert_eq!(stop_reason(&rewound), "end_turn", "{rewound}");
    assert!(
        !dir.join("out.txt").exists(),
        "the rewind took the agent's write back"
    );
}

#[tokio::test]
async fn the_agents_terminal_runs_in_the_sessions_sandbox() {
    if !sandbox_enforced() {
        return;
    }
    let script = json!([[{"terminal": "echo visible; cat \"$HOME/.ssh/id_ed25519\""}]]);
    let mut env = with_scripted_child(script, "mode = \"yolo\"").await;
    let ssh = env.home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).expect("ssh");
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE KEY MATERIAL").expect("key");
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    // The command names a key: even in yolo mode the user is asked; allowed, the sandbox
    // still hides it.
    let answer = prompt_choosing(&mut agent, &session, "hand it over", "allow_once").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let result = delegation_result(&env);
    assert!(result.contains("terminal exit 1: visible"), "{result}");
    assert!(!result.contains("PRIVATE KEY"), "{result}");
}

#[tokio::test]
async fn the_agents_question_reaches_the_user_with_its_name_and_the_answer_goes_back() {
    let script = json!([[{"ask": "delete the build folder"}]]);
    let env = with_scripted_child(script, "").await;
    let (mut agent, session) = env.session().await;
    let answer = prompt_choosing(&mut agent, &session, "hand it over", "allow_once").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let asked: Vec<&Value> = agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let title = asked[0]["params"]["toolCall"]["title"].to_string();
    assert!(
        title.contains("[scripted] delete the build folder"),
        "{title}"
    );
    let result = delegation_result(&env);
    assert!(result.contains("permission: yes"), "{result}");
}

/// The agent's form (`elicitation/create`) reaches a client that shows forms, with the
/// agent's name on it, and the user's answer goes back to the agent; a client without forms
/// never sees it, and the agent is told the user did not answer.
#[tokio::test]
async fn the_agents_form_reaches_the_user_and_the_answer_goes_back() {
    let script = json!([[{"form": "Which colour for the button?"}]]);
    let env = with_scripted_child(script.clone(), "").await;
    let (mut agent, session, _) = env.session_with(json!({"elicitation": {"form": {}}})).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "hand it over"))
        .await
        .expect("prompt");
    let mut forms = Vec::new();
    let answer = agent
        .drive(id, WAIT, |method, params| match method {
            "elicitation/create" => {
                forms.push(params.clone());
                Ok(Some(
                    json!({"action": "accept", "content": {"colour": "teal"}}),
                ))
            }
            other => Err((-32601, format!("unexpected {other}"))),
        })
        .await
        .expect("answer");
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    assert_eq!(forms.len(), 1, "{forms:?}");
    let message = forms[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("scripted asks: Which colour for the button?"),
        "{message}"
    );
    assert_eq!(
        forms[0]["requestedSchema"]["properties"]["colour"]["type"],
        "string"
    );
    let result = delegation_result(&env);
    assert!(result.contains("form: accept teal"), "{result}");

    let env = with_scripted_child(script, "").await;
    let (mut agent, session) = env.session().await;
    let (answer, _) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let result = delegation_result(&env);
    assert!(
        result.contains("form: decline") || result.contains("form: cancel"),
        "{result}"
    );
    assert!(
        agent
            .transcript
            .iter()
            .all(|m| m["method"] != "elicitation/create"),
        "a client without forms was asked one"
    );
}

#[tokio::test]
async fn an_agent_that_crashes_or_hangs_fails_the_call_and_the_turn_goes_on() {
    for (step, expected) in [
        (json!({"crash": 3}), "crashing on purpose"),
        (json!({"hang": true}), "taken as hung"),
    ] {
        let script = json!([[{"say": "starting\n"}, step]]);
        let env = with_scripted_child(script, "").await;
        let config = env.home.path().join("talaria/config.toml");
        let text = std::fs::read_to_string(&config).expect("config");
        std::fs::write(&config, format!("{text}idle_timeout_secs = 1\n")).expect("config");
        let (mut agent, session) = env.session().await;
        let (response, _) = prompt(&mut agent, &session, "hand it over").await;
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
        let result = delegation_result(&env);
        assert!(
            result.contains("scripted failed: agent scripted"),
            "{result}"
        );
        assert!(result.contains(expected), "{result}");
    }
}

#[tokio::test]
async fn a_cancelled_turn_cancels_the_agents_turn() {
    let script = json!([[{"say": "working\n"}, {"wait_cancel": true}]]);
    let env = with_scripted_child(script, "").await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "hand it over"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m.to_string().contains("scripted: working"))
        .await
        .expect("the child works");
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
}

#[tokio::test]
async fn another_talaria_process_takes_a_task_and_its_answer_comes_back() {
    const CHILD_MODEL: &str = "child-talaria-model";
    let env = TestEnv::new(delegating_to("talaria")).await;
    env.mock.script_for_model(
        CHILD_MODEL,
        vec![MockReply::text(&["the child Talaria's answer"])],
    );
    let child_home = env.home.path().join("child-home");
    std::fs::create_dir_all(&child_home).expect("child home");
    env.write_config(&format!(
        "[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
         [agents.talaria]\ncommand = \"{}\"\nargs = [\"acp\"]\ntools = \"own\"\n\
         env = {{ TALARIA_HOME = \"{}\", TALARIA_MODEL = \"{CHILD_MODEL}\", TALARIA_TITLES = \"off\", \
         OPENAI_BASE_URL = \"{}\", OPENAI_API_KEY = \"child-key\" }}\n",
        talaria_bin().display(),
        child_home.display(),
        env.mock.base_url()
    ));
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    assert!(
        result.contains("Report from talaria:\nthe child Talaria's answer"),
        "{result}"
    );
    // The child asked with the key its configuration gave it, never the parent's.
    let child = env
        .mock
        .requests()
        .into_iter()
        .find(|r| r.body["model"] == CHILD_MODEL)
        .expect("the child asked the model");
    let auth: Vec<&str> = child
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(auth, ["Bearer child-key"]);
}

#[tokio::test]
async fn talaria_agents_lists_each_agent_whether_it_starts_and_its_walls() {
    let env = with_scripted_child(json!([]), "").await;
    let config = env.home.path().join("talaria/config.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("{text}[agents.ghost]\ncommand = \"/nonexistent/agent\"\n"),
    )
    .expect("config");
    let output = tokio::process::Command::new(talaria_bin())
        .arg("agents")
        .envs(env.env())
        .current_dir(env.workspace.path())
        .output()
        .await
        .expect("runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "one does not start: {text}");
    assert!(text.contains("scripted: "), "{text}");
    assert!(text.contains("starts: yes — acp-child 0.0.1"), "{text}");
    assert!(text.contains("tools: declared to ask Talaria"), "{text}");
    assert!(text.contains("ghost: /nonexistent/agent"), "{text}");
    assert!(text.contains("starts: no"), "{text}");
    assert!(
        text.contains("tools: its own, outside Talaria's walls"),
        "{text}"
    );
}

#[tokio::test]
async fn a_client_that_shows_subagents_sees_the_agent_as_a_session_of_its_own() {
    let script = json!([[{"say": "child words"},
        {"tool_run": "grep TODO", "output": "src/a.rs:3: TODO"}]]);
    let env = with_scripted_child(script, "").await;
    let (mut agent, session, _) = env.session_with(json!({"subagents": {}})).await;
    let (response, parent) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let announced: Vec<&Value> = parent
        .iter()
        .filter(|u| u["sessionUpdate"] == "subagent_update")
        .collect();
    assert_eq!(announced.len(), 2, "{parent:?}");
    assert_eq!(announced[0]["title"], "scripted");
    assert_eq!(
        announced[0]["state"]["state"], "running",
        "{:?}",
        announced[0]
    );
    assert_eq!(announced[1]["state"]["state"], "idle", "{:?}", announced[1]);
    let child = announced[0]["sessionId"].as_str().expect("child id");
    assert_ne!(child, session);
    let said: String = agent
        .transcript
        .iter()
        .filter(|m| m["params"]["sessionId"] == child)
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(said.starts_with("child words"), "{said}");
    // Its own tool call is a call of its session: started, then done with what it showed.
    let calls: Vec<&Value> = agent
        .transcript
        .iter()
        .filter(|m| m["params"]["sessionId"] == child)
        .map(|m| &m["params"]["update"])
        .filter(|u| u["toolCallId"] == "agent-r1")
        .collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0]["sessionUpdate"], "tool_call");
    assert_eq!(
        (
            &calls[0]["title"],
            &calls[0]["kind"],
            &calls[0]["rawInput"]["pattern"]
        ),
        (&json!("grep TODO"), &json!("search"), &json!("grep TODO"))
    );
    assert_eq!(calls[1]["status"], "in_progress", "{:?}", calls[1]);
    assert_eq!(calls[2]["status"], "completed", "{:?}", calls[2]);
    assert!(
        calls[2]["content"].to_string().contains("src/a.rs:3: TODO"),
        "{:?}",
        calls[2]
    );
    // The parent's card still shows it as a line, for clients without subagents.
    assert!(
        parent
            .iter()
            .any(|u| u.to_string().contains("scripted — grep TODO")),
        "{parent:?}"
    );
}

#[tokio::test]
async fn the_agent_writes_only_where_a_rewind_can_take_it_back() {
    let script = json!([[{"write": {"path": "HOME/outside.txt", "content": "out\n"}}]]);
    let env = with_scripted_child(script, "mode = \"yolo\"").await;
    let (mut agent, session) = env.session().await;
    let answer = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let result = delegation_result(&env);
    assert!(
        result.contains("wrote: error:") && result.contains("outside the session's folders"),
        "{result}"
    );
    assert!(!env.home.path().join("outside.txt").exists());
}

#[tokio::test]
async fn a_question_naming_no_path_is_asked_even_in_yolo_mode() {
    let script = json!([[{"ask": "tidy up"}]]);
    let env = with_scripted_child(script, "mode = \"yolo\"").await;
    let (mut agent, session) = env.session().await;
    let answer = prompt_choosing(&mut agent, &session, "hand it over", "reject_once").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let asked: Vec<&Value> = agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .collect();
    assert_eq!(asked.len(), 1, "asked even in yolo: {asked:?}");
    let options = asked[0]["params"]["options"].to_string();
    assert!(
        !options.contains("allow_always"),
        "allow is never remembered: {options}"
    );
    let result = delegation_result(&env);
    assert!(result.contains("permission: no"), "{result}");
}

#[tokio::test]
async fn the_agents_read_is_one_read_through_the_editor_and_gets_its_buffer() {
    let script = json!([[{"read": "notes.txt"}]]);
    let env = with_scripted_child(script, "").await;
    std::fs::write(env.workspace.path().join("notes.txt"), "saved on disk\n").expect("notes");
    let (mut agent, session, _) = env
        .session_with(json!({"fs": {"readTextFile": true, "writeTextFile": true}}))
        .await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "hand it over"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, WAIT, |method, _| match method {
            "fs/read_text_file" => Ok(Some(json!({"content": "unsaved buffer\n"}))),
            other => Err((-32601, format!("unexpected {other}"))),
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let reads = agent
        .agent_requests()
        .into_iter()
        .filter(|(m, _)| m == "fs/read_text_file")
        .count();
    assert_eq!(reads, 1, "the checked read is the agent's read");
    let result = delegation_result(&env);
    assert!(
        result.contains("read notes.txt: unsaved buffer"),
        "{result}"
    );
}
