//! Durable sessions over stdio: load replays what the client saw live and the model sees the
//! same transcript; list, resume, close, delete, fork; a second process cannot open a session
//! in use; `kill -9` mid-stream and mid-tool loses nothing completed; a damaged store.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply, MockToolCall};

use crate::support::*;

async fn initialize(agent: &mut AgentProcess) {
    agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await
        .expect("initialize");
}

async fn load(agent: &mut AgentProcess, env: &TestEnv, session: &str) -> (Value, Vec<Value>) {
    let before = agent.transcript.len();
    let response = agent
        .request(
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("response");
    let updates = agent.transcript[before..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    (response, updates)
}

async fn new_session(agent: &mut AgentProcess, env: &TestEnv) -> String {
    let created = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("new");
    created["sessionId"].as_str().expect("id").to_string()
}

fn text_of(updates: &[Value], kind: &str) -> String {
    chunks(updates, kind).concat()
}

fn cards(updates: &[Value]) -> Vec<Value> {
    let mut ids: Vec<String> = Vec::new();
    for update in updates {
        if let Some(id) = update["toolCallId"].as_str()
            && !ids.iter().any(|i| i == id)
        {
            ids.push(id.to_string());
        }
    }
    ids.iter().map(|id| card_state(updates, id)).collect()
}

/// The card fields a replay must reproduce (live progress output is not kept).
fn card_shape(card: &Value) -> Value {
    json!({
        "title": card["title"], "kind": card["kind"], "status": card["status"],
        "content": card["content"], "locations": card["locations"],
        "rawInput": card["rawInput"], "rawOutput": card["rawOutput"],
    })
}

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn load_replays_what_the_client_saw_and_the_model_sees_the_same_transcript() {
    let env = TestEnv::new(vec![
        MockReply::ToolCalls {
            calls: vec![
                MockToolCall {
                    id: "r1".into(),
                    name: "read_file".into(),
                    arguments: json!({"path": "notes.txt"}).to_string(),
                },
                MockToolCall {
                    id: "t1".into(),
                    name: "todo".into(),
                    arguments: json!({"todos": [{"id": "1", "content": "read notes", "status": "completed"}]}).to_string(),
                },
            ],
            text: Some("Let me look.".into()),
            fragment_chars: Some(6),
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["The notes ", "say hi."]),
        MockReply::text(&["Still here."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("notes.txt"), "hi\n").expect("write");
    let (mut agent, session) = env.session().await;
    let (response, live) = prompt(&mut agent, &session, "What do the notes say?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");

    let mut second = env.spawn().await;
    initialize(&mut second).await;
    let (loaded, replayed) = load(&mut second, &env, &session).await;
    assert!(loaded["result"].is_object(), "{loaded}");
    assert_eq!(
        text_of(&replayed, "user_message_chunk"),
        "What do the notes say?"
    );
    assert_eq!(
        text_of(&replayed, "agent_message_chunk"),
        text_of(&live, "agent_message_chunk")
    );
    let live_cards: Vec<Value> = cards(&live).iter().map(card_shape).collect();
    let replayed_cards: Vec<Value> = cards(&replayed).iter().map(card_shape).collect();
    assert_eq!(replayed_cards, live_cards);
    let plan = |updates: &[Value]| {
        updates
            .iter()
            .find(|u| u["sessionUpdate"] == "plan")
            .cloned()
    };
    assert_eq!(plan(&replayed), plan(&live));
    // The session continues where it was: the model sees the same transcript plus the ask.
    let (response, _) = prompt(&mut second, &session, "And now?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    let before = messages(&requests[1].body);
    let after = messages(&requests[2].body);
    assert_eq!(&after[..before.len()], &before[..], "same transcript");
    assert_eq!(
        after.len(),
        before.len() + 2,
        "plus the answer and the new ask"
    );
}

#[tokio::test]
async fn list_pages_filters_and_close_resume_delete_fork_work() {
    let env = TestEnv::new(vec![
        MockReply::text(&["first"]),
        MockReply::text(&["on the fork"]),
        MockReply::text(&["resumed"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "remember the number 42").await;
    for _ in 0..55 {
        agent
            .call(
                "session/new",
                json!({"cwd": env.workspace.path(), "mcpServers": []}),
            )
            .await
            .expect("new");
    }
    let elsewhere = tempfile::tempdir().expect("dir");
    agent
        .call(
            "session/new",
            json!({"cwd": elsewhere.path(), "mcpServers": []}),
        )
        .await
        .expect("new elsewhere");
    let first = agent
        .call("session/list", json!({"cwd": env.workspace.path()}))
        .await
        .expect("list");
    let listed = first["sessions"].as_array().expect("sessions");
    assert_eq!(listed.len(), 50);
    assert!(
        listed
            .iter()
            .all(|s| s["cwd"] == json!(env.workspace.path()))
    );
    assert!(listed[0]["updatedAt"].is_string());
    let cursor = first["nextCursor"].as_str().expect("cursor");
    let second = agent
        .call(
            "session/list",
            json!({"cwd": env.workspace.path(), "cursor": cursor}),
        )
        .await
        .expect("list");
    assert_eq!(second["sessions"].as_array().map(Vec::len), Some(6));
    assert!(second.get("nextCursor").is_none_or(Value::is_null));
    // Fork: a new session with a copy of the history.
    let fork = agent
        .call(
            "session/fork",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("fork");
    let fork_id = fork["sessionId"].as_str().expect("id").to_string();
    assert_ne!(fork_id, session);
    prompt(&mut agent, &fork_id, "what number?").await;
    let forked = messages(&env.mock.requests()[1].body);
    assert!(
        forked.iter().any(
            |m| without_environment(m["content"].as_str().unwrap_or_default())
                == "remember the number 42"
        ),
        "{forked:?}"
    );
    // Close frees it (prompts fail) but it stays listed; resume brings it back without replay.
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    let (closed, _) = prompt(&mut agent, &session, "hello?").await;
    assert!(closed["error"].is_object(), "{closed}");
    let before = agent.transcript.len();
    agent
        .call(
            "session/resume",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("resume");
    assert!(
        !agent.transcript[before..]
            .iter()
            .any(|m| m["method"] == "session/update"),
        "resume does not replay"
    );
    let (response, _) = prompt(&mut agent, &session, "still there?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    // Delete removes it from the list and from the store.
    agent
        .call("session/delete", json!({"sessionId": fork_id}))
        .await
        .expect("delete");
    let all = agent.call("session/list", json!({})).await.expect("list");
    let mut ids: Vec<String> = all["sessions"]
        .as_array()
        .expect("s")
        .iter()
        .filter_map(|s| s["sessionId"].as_str().map(str::to_string))
        .collect();
    let mut cursor = all["nextCursor"].as_str().map(str::to_string);
    while let Some(next) = cursor {
        let page = agent
            .call("session/list", json!({"cursor": next}))
            .await
            .expect("list");
        ids.extend(
            page["sessions"]
                .as_array()
                .expect("s")
                .iter()
                .filter_map(|s| s["sessionId"].as_str().map(str::to_string)),
        );
        cursor = page["nextCursor"].as_str().map(str::to_string);
    }
    assert_eq!(ids.len(), 57);
    assert!(!ids.contains(&fork_id) && ids.contains(&session));
    let (gone, _) = load(&mut agent, &env, &fork_id).await;
    assert!(
        gone["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("no saved session"),
        "{gone}"
    );
}

#[tokio::test]
async fn a_second_process_cannot_open_a_session_in_use() {
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "hello").await;
    let mut other = env.spawn().await;
    initialize(&mut other).await;
    let (refused, _) = load(&mut other, &env, &session).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("open in another Talaria process"),
        "{refused}"
    );
    // Once the first process is gone, it can be loaded.
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let (loaded, _) = load(&mut other, &env, &session).await;
    assert!(loaded["result"].is_object(), "{loaded}");
}

fn kill_hard(agent: &AgentProcess) {
    let pid = agent.pid().expect("pid");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill -9");
}

#[tokio::test]
async fn kill_9_mid_stream_and_mid_tool_loses_nothing_completed() {
    let env = TestEnv::new(vec![
        MockReply::text(&["first answer"]),
        MockReply::Hang {
            chunks: vec!["half of".into()],
        },
        MockReply::text(&["after the crash"]),
        MockReply::tool_call("sleepy", "terminal", json!({"command": "sleep 3"})),
        MockReply::text(&["after the second crash"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "one").await;
    agent
        .start_request("session/prompt", text_prompt(&session, "two"))
        .await
        .expect("prompt");
    env.mock.wait_until(WAIT, |r| r.len() == 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill_hard(&agent);

    let mut second = env.spawn().await;
    initialize(&mut second).await;
    let (loaded, replayed) = load(&mut second, &env, &session).await;
    assert!(loaded["result"].is_object(), "{loaded}");
    assert_eq!(text_of(&replayed, "user_message_chunk"), "onetwo");
    assert_eq!(text_of(&replayed, "agent_message_chunk"), "first answer");
    let (response, _) = prompt(&mut second, &session, "three").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let request = messages(&env.mock.requests()[2].body);
    let roles: Vec<&str> = request.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    assert!(
        request[4]["content"]
            .as_str()
            .unwrap_or("")
            .contains("did not complete")
    );

    // Mid-tool: the command runs when the process dies.
    second
        .start_request("session/prompt", text_prompt(&session, "four"))
        .await
        .expect("prompt");
    let started = tokio::time::timeout(WAIT, async {
        loop {
            if second
                .updates()
                .iter()
                .any(|u| u["toolCallId"] == "sleepy" && u["status"] == "in_progress")
            {
                break;
            }
            second.next_message().await;
        }
    })
    .await;
    assert!(started.is_ok(), "the command started");
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill_hard(&second);
    let mut third = env.spawn().await;
    initialize(&mut third).await;
    let (_, replayed) = load(&mut third, &env, &session).await;
    let card = card_state(&replayed, "sleepy");
    assert_eq!(card["status"], "failed", "{card}");
    let (response, _) = prompt(&mut third, &session, "five").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let request = messages(&env.mock.requests()[4].body);
    let tool = request
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result");
    assert!(
        tool["content"]
            .as_str()
            .unwrap_or("")
            .contains("interrupted"),
        "{tool}"
    );
}

#[tokio::test]
async fn a_damaged_store_is_moved_aside_reported_and_replaced_by_a_working_one() {
    let env = TestEnv::new(vec![MockReply::text(&["still works"])]).await;
    let home = env.home.path().join("talaria");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(home.join("state.db"), b"definitely not sqlite ".repeat(300)).expect("write");
    let (mut agent, session, _) = env.session_with(json!({"session": {"notices": {}}})).await;
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let told = agent
        .updates()
        .iter()
        .any(|u| u["sessionUpdate"] == "notice" && u.to_string().contains("was damaged"));
    assert!(told, "{:?}", agent.updates());
    let kept = std::fs::read_dir(&home)
        .expect("home")
        .filter_map(Result::ok)
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("state.db.damaged-")
        });
    assert!(kept, "the damaged file is kept beside the new store");
    let listed = agent
        .request("session/list", json!({}))
        .await
        .expect("response");
    assert!(
        listed["result"]["sessions"]
            .as_array()
            .is_some_and(|all| all.iter().any(|s| s["sessionId"] == session.as_str())),
        "the new store saves: {listed}"
    );
    assert!(agent.stderr().contains("damaged"), "logged");
}

#[tokio::test]
async fn a_store_that_cannot_be_opened_is_told_and_sessions_run_unsaved() {
    let env = TestEnv::new(vec![MockReply::text(&["still works"])]).await;
    let home = env.home.path().join("talaria");
    // A folder where the store's file belongs: nothing can open or move it.
    std::fs::create_dir_all(home.join("state.db").join("inside")).expect("mkdir");
    let (mut agent, session, _) = env.session_with(json!({"session": {"notices": {}}})).await;
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let warned = agent
        .updates()
        .iter()
        .any(|u| u["sessionUpdate"] == "notice" && u.to_string().contains("not saved"));
    assert!(warned, "{:?}", agent.updates());
    let listed = agent
        .request("session/list", json!({}))
        .await
        .expect("response");
    assert!(listed["error"]["message"].is_string(), "{listed}");
    assert!(
        home.join("state.db").join("inside").is_dir(),
        "left as it was"
    );
}

#[tokio::test]
async fn a_title_comes_from_the_title_model_after_the_first_turn_and_is_listed() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["The parser recurses without a limit."]),
        MockReply::text(&["\"Parser stack overflow.\"\nextra line"]),
        MockReply::text(&["second answer"]),
    ])
    .await;
    env.extra_env.push(("TALARIA_TITLES".into(), "on".into()));
    env.write_config("[auxiliary.title]\nmodel = \"title-model\"\n");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "why does the parser overflow?").await;
    let titled = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(update) = agent
                .updates()
                .into_iter()
                .find(|u| u["sessionUpdate"] == "session_info_update")
            {
                return update;
            }
            agent.next_message().await;
        }
    })
    .await
    .expect("titled");
    assert_eq!(titled["title"], "Parser stack overflow");
    let requests = env.mock.requests();
    assert_eq!(requests[1].body["model"], "title-model");
    // Nothing of the title call reached the chat.
    let shown = text_of(&agent.updates(), "agent_message_chunk");
    assert!(!shown.contains("Parser stack overflow"), "{shown}");
    // The next prompt is not delayed by it and the title is listed.
    let (response, _) = prompt(&mut agent, &session, "and then?").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let listed = agent.call("session/list", json!({})).await.expect("list");
    assert_eq!(listed["sessions"][0]["title"], "Parser stack overflow");
}

#[tokio::test]
async fn without_title_model_the_first_line_of_the_prompt_is_the_title() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let (mut agent, session) = env.session().await;
    prompt(
        &mut agent,
        &session,
        "Fix the flaky login test\nIt fails on CI only.",
    )
    .await;
    tokio::time::timeout(WAIT, async {
        while !agent
            .updates()
            .iter()
            .any(|u| u["sessionUpdate"] == "session_info_update")
        {
            agent.next_message().await;
        }
    })
    .await
    .expect("title notice");
    // Once the client has been told, a listing shows it: no polling (read-your-writes).
    let listed = agent.call("session/list", json!({})).await.expect("list");
    assert_eq!(listed["sessions"][0]["title"], "Fix the flaky login test");
    assert_eq!(env.mock.requests().len(), 1, "no model call for the title");
}

#[tokio::test]
async fn session_search_recalls_earlier_sessions_ranked_with_context() {
    let env = TestEnv::new(vec![
        MockReply::text(&[
            "Rotating the deploy key failed with error E1234: the vault was sealed.",
        ]),
        MockReply::text(&["Unrelated: the weather is fine."]),
        MockReply::tool_call(
            "s1",
            "session_search",
            json!({"query": "deploy key rotation error"}),
        ),
        MockReply::tool_call("s2", "session_search", json!({})),
        MockReply::text(&["Found it."]),
    ])
    .await;
    let (mut agent, first) = env.session().await;
    prompt(&mut agent, &first, "why did the deploy key rotation fail?").await;
    let second = new_session(&mut agent, &env).await;
    prompt(&mut agent, &second, "what about the weather").await;
    let third = new_session(&mut agent, &env).await;
    let (response, _) = prompt(
        &mut agent,
        &third,
        "what happened with the deploy key last time?",
    )
    .await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    let tool_text = |index: usize, nth: usize| -> String {
        messages(&requests[index].body)
            .iter()
            .filter(|m| m["role"] == "tool")
            .nth(nth)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let found = tool_text(3, 0);
    assert!(found.contains(&format!("session {first}")), "{found}");
    assert!(found.contains("E1234"), "{found}");
    let best = found.find(&first).unwrap_or(usize::MAX);
    let weather = found.find(&second).unwrap_or(usize::MAX);
    assert!(best < weather, "the best match comes first: {found}");
    let recent = tool_text(4, 1);
    assert!(
        recent.contains("Recent sessions") && recent.contains(&first),
        "{recent}"
    );
    // No permission was asked for a read-only tool.
    assert!(agent.agent_requests().is_empty());
}

#[tokio::test]
async fn a_compacted_tool_output_stays_compacted_after_a_reload() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("big", "read_file", json!({"path": "big.txt"})),
        MockReply::text(&["read it"]),
        MockReply::Error {
            status: 400,
            body: json!({"error": {"message": "This model's maximum context length is 30000 tokens."}}).to_string(),
            headers: vec![],
        },
        MockReply::text(&["after the prune"]),
        MockReply::text(&["after the reload"]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("big.txt"), "x".repeat(3000)).expect("write");
    env.write_config("retry_base_ms = 1\n");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "read big.txt").await;
    let (response, _) = prompt(&mut agent, &session, "go on").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let mut second = env.spawn().await;
    initialize(&mut second).await;
    let (loaded, _) = load(&mut second, &env, &session).await;
    assert!(loaded["result"].is_object(), "{loaded}");
    prompt(&mut second, &session, "and now").await;
    let request = env.mock.requests()[4].body.to_string();
    assert!(
        request.contains("[read_file] read big.txt lines 1–1"),
        "the compaction was saved"
    );
    assert!(!request.contains(&"x".repeat(3000)));
}

#[tokio::test]
async fn a_title_the_client_sets_survives_the_generated_one_and_a_reload() {
    let mut env = TestEnv::new(vec![MockReply::text(&["an answer"])]).await;
    env.extra_env.push(("TALARIA_TITLES".into(), "on".into()));
    env.write_config("[auxiliary.title]\nmodel = \"title-model\"\n");
    let (mut agent, session) = env.session().await;
    let set = agent
        .call(
            "session/set_title",
            json!({"sessionId": session, "title": "  Release   checklist  "}),
        )
        .await
        .expect("set_title");
    assert_eq!(set["title"], "Release checklist", "normalised: {set}");
    prompt(&mut agent, &session, "what is left before the release?").await;
    let listed = agent.call("session/list", json!({})).await.expect("list");
    assert_eq!(listed["sessions"][0]["title"], "Release checklist");
    assert!(
        env.mock
            .requests()
            .iter()
            .all(|r| r.body["model"] != "title-model"),
        "no title is generated for a session the client named"
    );
    let empty = agent
        .request(
            "session/set_title",
            json!({"sessionId": session, "title": "   "}),
        )
        .await
        .expect("answered");
    assert_eq!(empty["error"]["code"], -32602, "{empty}");
    let unknown = agent
        .request(
            "session/set_title",
            json!({"sessionId": "no-such-session", "title": "x"}),
        )
        .await
        .expect("answered");
    assert!(unknown.get("error").is_some(), "{unknown}");
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    let mut again = env.spawn().await;
    initialize(&mut again).await;
    let listed = again.call("session/list", json!({})).await.expect("list");
    assert_eq!(listed["sessions"][0]["title"], "Release checklist");
}

#[tokio::test]
async fn a_title_set_while_one_is_being_generated_is_the_one_kept() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["first answer"]),
        MockReply::Delayed {
            delay_ms: 1500,
            reply: Box::new(MockReply::text(&["Generated title"])),
        },
    ])
    .await;
    env.extra_env.push(("TALARIA_TITLES".into(), "on".into()));
    env.write_config("[auxiliary.title]\nmodel = \"title-model\"\n");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "start").await;
    assert!(
        env.mock
            .wait_until(WAIT, |r| r.iter().any(|r| r.body["model"] == "title-model"))
            .await,
        "the title is being generated"
    );
    agent
        .call(
            "session/set_title",
            json!({"sessionId": session, "title": "Mine"}),
        )
        .await
        .expect("set_title");
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    let listed = agent.call("session/list", json!({})).await.expect("list");
    assert_eq!(listed["sessions"][0]["title"], "Mine");
    let titles: Vec<Value> = agent
        .updates()
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "session_info_update")
        .map(|u| u["title"].clone())
        .collect();
    assert_eq!(
        titles,
        [json!("Mine")],
        "the generated title was never shown"
    );
}

/// A stored session of `messages` entries (asks, read_file calls with results, answers),
/// written into the env's store before the agent starts.
fn seed_big_session(env: &TestEnv, id: &str, messages: usize) {
    use talaria_record::testing::{assistant, result, user};
    use talaria_store::SessionStore;
    let dir = env.home.path().join("talaria");
    std::fs::create_dir_all(&dir).expect("home");
    let store = talaria_store::SqliteStore::open(&dir.join("state.db")).expect("store");
    store
        .create(&talaria_store::SessionMeta {
            id: id.into(),
            cwd: env.workspace.path().display().to_string(),
            model: "mock-model".into(),
            mode: "ask".into(),
            created_at: 1,
            updated_at: 1,
            ..talaria_store::SessionMeta::default()
        })
        .expect("create");
    let mut record = talaria_record::Transcript::with_system("You are Talaria.");
    let mut n = 0;
    while record.len() < messages {
        n += 1;
        let call = format!("call_{n}");
        record.push(user(&format!("Question {n}")));
        record.push(assistant(
            "",
            &[(call.as_str(), "read_file", "{\"path\":\"a.txt\"}")],
        ));
        record.push(result(&call, "read_file", "     1|contents"));
        record.push(assistant(&format!("Answer {n}"), &[]));
    }
    store.append(id, record.entries()).expect("append");
}

/// Reads one JSON line from the agent's output.
async fn next_line(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> Value {
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("a line in time")
        .expect("read")
        .expect("output open");
    serde_json::from_str(&line).expect("json")
}

#[tokio::test]
async fn a_loads_replay_going_out_to_a_slow_client_does_not_hold_other_requests() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let env = TestEnv::new(vec![MockReply::text(&["the other session answers"])]).await;
    // Far more updates than the output queue (1,024) and the pipe hold together.
    seed_big_session(&env, "big-session", 8000);
    let mut child = tokio::process::Command::new(talaria_harness::binary::talaria_bin())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let cwd = env.workspace.path().display().to_string();
    let send = |message: Value| format!("{message}\n");
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}),
    ] {
        stdin
            .write_all(send(message).as_bytes())
            .await
            .expect("write");
    }
    let other = loop {
        let message = next_line(&mut lines).await;
        if message["id"] == 2 {
            break message["result"]["sessionId"]
                .as_str()
                .expect("id")
                .to_string();
        }
    };
    // The client asks for the replay, reads its first update (the replay is going out), then
    // prompts elsewhere and reads nothing meanwhile.
    let load = json!({"jsonrpc": "2.0", "id": 3, "method": "session/load", "params": {"sessionId": "big-session", "cwd": cwd, "mcpServers": []}});
    stdin.write_all(send(load).as_bytes()).await.expect("write");
    let mut replayed = 0;
    while replayed == 0 {
        let message = next_line(&mut lines).await;
        assert_ne!(
            message["id"], 3,
            "the load was answered before its replay: {message}"
        );
        if message["params"]["sessionId"] == "big-session" {
            replayed += 1;
        }
    }
    let prompt = json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt", "params": {"sessionId": other, "prompt": [{"type": "text", "text": "hi"}]}});
    stdin
        .write_all(send(prompt).as_bytes())
        .await
        .expect("write");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while env.mock.requests().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        env.mock.requests().len(),
        1,
        "the prompt was served while the replay waited for the client"
    );
    // The client reads again: the whole replay, then the load's answer; the prompt ends too.
    let (mut load_answered, mut prompt_answered) = (false, false);
    while !(load_answered && prompt_answered) {
        let message = next_line(&mut lines).await;
        if message["method"] == "session/update" && message["params"]["sessionId"] == "big-session"
        {
            assert!(!load_answered, "an update of the replay after the answer");
            replayed += 1;
        }
        load_answered |= message["id"] == 3;
        prompt_answered |= message["id"] == 4;
    }
    assert!(replayed > 4000, "{replayed} updates replayed");
}
