//! MCP servers end to end, with the stdio test server `talaria-mcp-fixture`: tools listed and
//! called with approval, structured results, a server that fails or hangs at start, one that
//! crashes mid-call, cancel during a long call, and `/mcp`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::MockReply;
use talaria_harness::binary::workspace_bin;

use crate::support::*;

/// The fixture over streamable HTTP: its process (killed when dropped) and its URL.
async fn http_fixture() -> (tokio::process::Child, String) {
    http_fixture_with(&[], &[]).await
}

/// The fixture over streamable HTTP with more `args` and `env`.
pub(crate) async fn http_fixture_with(
    args: &[&str],
    env: &[(&str, String)],
) -> (tokio::process::Child, String) {
    let mut server =
        tokio::process::Command::new(workspace_bin("talaria-harness", "talaria-mcp-fixture"))
            .arg("--http")
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("fixture");
    let mut lines = tokio::io::BufReader::new(server.stdout.take().expect("stdout"));
    let mut url = String::new();
    tokio::time::timeout(
        WAIT,
        tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut url),
    )
    .await
    .expect("in time")
    .expect("url");
    (server, url)
}

pub(crate) fn fixture(name: &str, args: &[&str], log: Option<&std::path::Path>) -> Value {
    let env: Vec<Value> = log
        .map(|path| vec![json!({"name": "MCP_FIXTURE_LOG", "value": path.display().to_string()})])
        .unwrap_or_default();
    json!({
        "name": name,
        "command": workspace_bin("talaria-harness", "talaria-mcp-fixture"),
        "args": args,
        "env": env
    })
}

pub(crate) async fn session_with_servers(
    env: &TestEnv,
    servers: Vec<Value>,
) -> (talaria_harness::AgentProcess, String, Vec<Value>) {
    session_with_servers_and(env, servers, json!({})).await
}

/// A session given `servers` by a client with `capabilities`.
pub(crate) async fn session_with_servers_and(
    env: &TestEnv,
    servers: Vec<Value>,
    capabilities: Value,
) -> (talaria_harness::AgentProcess, String, Vec<Value>) {
    let (mut agent, session, _) = env.session_given(capabilities, json!(servers)).await;
    // The session's notices follow its creation.
    let _ = agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "available_commands_update"
        })
        .await;
    let updates = agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    (agent, session, updates)
}

/// Sends a prompt, allows every permission question, and returns the response and updates.
pub(crate) async fn prompt_allowing(
    agent: &mut talaria_harness::AgentProcess,
    session: &str,
    text: &str,
) -> (Value, Vec<Value>) {
    let before = agent.transcript.len();
    let id = agent
        .start_request("session/prompt", text_prompt(session, text))
        .await
        .expect("prompt");
    loop {
        let message = agent
            .wait_for(WAIT, |m| {
                m["method"] == "session/request_permission"
                    || (m["id"] == json!(id) && m.get("method").is_none())
            })
            .await
            .expect("message");
        if message["method"] == "session/request_permission" {
            allow_once(agent, &message).await;
            continue;
        }
        let updates = agent.transcript[before..]
            .iter()
            .filter(|m| m["method"] == "session/update")
            .map(|m| m["params"]["update"].clone())
            .collect();
        return (message, updates);
    }
}

#[tokio::test]
async fn tools_are_listed_and_called_with_approval_and_keep_their_structure() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__fix__echo", json!({"text": "hi"})),
        MockReply::tool_call("p", "mcp__fix__picture", json!({})),
        MockReply::tool_call("f", "mcp__fix__fail", json!({})),
        MockReply::text(&["done"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![fixture("fix", &[], None)]).await;
    let (response, updates) = prompt_allowing(&mut agent, &session, "use the server").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    let tools = requests[0].body["tools"].to_string();
    assert!(
        tools.contains("mcp__fix__echo") && tools.contains("[MCP server fix] Echo the text back."),
        "{tools}"
    );
    let read = requests[3].body["messages"].to_string();
    assert!(read.contains("echo: hi"), "{read}");
    assert!(
        read.contains("a red dot") && read.contains("[image (image/png"),
        "{read}"
    );
    assert!(read.contains("the fixture refuses"), "{read}");
    // The image itself reaches the model, after the results of its response.
    let messages = requests[3].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let shown = messages
        .iter()
        .position(|m| {
            m["role"] == "user"
                && m["content"][1]["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="
        })
        .unwrap_or_else(|| panic!("the picture is forwarded: {read}"));
    assert_eq!(messages[shown - 1]["role"], "tool", "{read}");
    assert_eq!(messages[shown - 1]["tool_call_id"], "p", "{read}");
    let cards = updates.iter().map(Value::to_string).collect::<String>();
    assert!(
        cards.contains("the server says it only reads"),
        "the hint is shown: {cards}"
    );
    let failed = updates.iter().any(|u| {
        u["sessionUpdate"] == "tool_call_update"
            && u["status"] == "failed"
            && u.to_string().contains("the fixture refuses")
    });
    assert!(failed, "isError is a failed call");
    let (_, listed) = prompt(&mut agent, &session, "/mcp").await;
    let report = chunks(&listed, "agent_message_chunk").concat();
    assert!(report.contains("fix: ready, 6 tools"), "{report}");
}

#[tokio::test]
async fn a_model_without_images_reads_only_that_a_picture_was_returned() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("p", "mcp__fix__picture", json!({})),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("supports_images = false\n");
    let (mut agent, session, _) = session_with_servers(&env, vec![fixture("fix", &[], None)]).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "show me").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let read = env.mock.requests()[1].body["messages"].to_string();
    assert!(read.contains("[image (image/png"), "{read}");
    assert!(!read.contains("image_url"), "no image part: {read}");
}

#[tokio::test]
async fn always_allowing_a_server_covers_its_other_tools_in_later_sessions_too() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__fix__echo", json!({"text": "hi"})),
        MockReply::tool_call("p", "mcp__fix__picture", json!({})),
        MockReply::text(&["first done"]),
        MockReply::tool_call("e2", "mcp__fix__echo", json!({"text": "again"})),
        MockReply::text(&["second done"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![fixture("fix", &[], None)]).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "use it"))
        .await
        .expect("prompt");
    let asked = agent
        .wait_for(WAIT, |m| m["method"] == "session/request_permission")
        .await
        .expect("asked once");
    let options = asked["params"]["options"].as_array().expect("options");
    let server_wide = options
        .iter()
        .find(|o| o["optionId"] == "allow_always_server")
        .unwrap_or_else(|| panic!("a per-server choice: {options:?}"));
    assert_eq!(server_wide["kind"], "allow_always");
    assert!(
        server_wide["name"]
            .as_str()
            .is_some_and(|n| n.contains("MCP server fix")),
        "{server_wide}"
    );
    assert!(options.iter().any(|o| o["optionId"] == "allow_always"));
    agent
        .respond(
            &asked["id"],
            json!({"outcome": {"outcome": "selected", "optionId": "allow_always_server"}}),
        )
        .await
        .expect("answer");
    let response = agent
        .wait_for(WAIT, |m| m["id"] == json!(id) && m.get("method").is_none())
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let asked_again = agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .count();
    assert_eq!(asked_again, 1, "the picture call did not ask");
    // A later session in the same project remembers it.
    let (mut later, second, _) = session_with_servers(&env, vec![fixture("fix", &[], None)]).await;
    let (response, _) = prompt(&mut later, &second, "again").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(
        !later
            .transcript
            .iter()
            .any(|m| m["method"] == "session/request_permission"),
        "nothing asked in the later session"
    );
    assert!(
        env.mock.requests()[4].body["messages"]
            .to_string()
            .contains("echo: again")
    );
}

/// Runs one call of the fixture's `ask` tool for a client with `capabilities`, answering its
/// form (if one comes) with `answer`; returns the form and what the model read.
async fn server_asks(capabilities: Value, answer: Value) -> (Option<Value>, String) {
    let env = TestEnv::new(vec![
        MockReply::tool_call("a", "mcp__fix__ask", json!({})),
        MockReply::text(&["noted"]),
    ])
    .await;
    let (mut agent, session, _) =
        session_with_servers_and(&env, vec![fixture("fix", &[], None)], capabilities).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "pick a colour"))
        .await
        .expect("prompt");
    let mut form = None;
    loop {
        let message = agent
            .wait_for(WAIT, |m| {
                m["method"] == "session/request_permission"
                    || m["method"] == "elicitation/create"
                    || (m["id"] == json!(id) && m.get("method").is_none())
            })
            .await
            .expect("message");
        if message["method"] == "session/request_permission" {
            allow_once(&mut agent, &message).await;
        } else if message["method"] == "elicitation/create" {
            form = Some(message["params"].clone());
            agent
                .respond(&message["id"], answer.clone())
                .await
                .expect("answer");
        } else {
            assert_eq!(stop_reason(&message), "end_turn", "{message}");
            break;
        }
    }
    (form, env.mock.requests()[1].body["messages"].to_string())
}

#[tokio::test]
async fn a_servers_question_reaches_the_user_as_a_form_and_the_answer_goes_back() {
    let forms = json!({"elicitation": {"form": {}}});
    let (form, read) = server_asks(
        forms.clone(),
        json!({"action": "accept", "content": {"colour": "teal"}}),
    )
    .await;
    let form = form.expect("the server's question was forwarded");
    assert_eq!(form["mode"], "form");
    assert_eq!(form["message"], "The MCP server fix asks: Which colour?");
    assert_eq!(
        form["requestedSchema"]["properties"]["colour"]["type"],
        "string"
    );
    assert!(form["sessionId"].is_string());
    assert!(read.contains(r#"the user chose \"teal\""#), "{read}");
    let (_, read) = server_asks(forms, json!({"action": "decline"})).await;
    assert!(read.contains("the user did not answer: decline"), "{read}");
}

#[tokio::test]
async fn without_forms_a_server_is_not_offered_elicitation() {
    let (form, read) = server_asks(json!({}), json!({"action": "accept"})).await;
    assert!(form.is_none(), "nothing forwarded");
    assert!(read.contains("cannot ask: no elicitation"), "{read}");
}

#[tokio::test]
async fn servers_that_fail_or_hang_at_start_are_reported_and_the_session_works() {
    let env = TestEnv::new(vec![MockReply::text(&["still fine"])]).await;
    let started = Instant::now();
    let (mut agent, session, updates) = session_with_servers(
        &env,
        vec![
            fixture("dead", &["--exit"], None),
            fixture("stuck", &["--hang"], None),
            fixture("ok", &[], None),
        ],
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the session opened within the budget"
    );
    drop(updates);
    agent
        .wait_for(WAIT, |m| m.to_string().contains("The MCP server stuck"))
        .await
        .expect("the hanging server is reported");
    let shown = agent
        .transcript
        .iter()
        .map(Value::to_string)
        .collect::<String>();
    assert!(
        shown.contains("The MCP server dead is not available"),
        "{shown}"
    );
    assert!(
        shown.contains("The MCP server stuck is not available")
            && shown.contains("did not start within"),
        "{shown}"
    );
    let (response, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let tools = env.mock.requests()[0].body["tools"].to_string();
    assert!(
        tools.contains("mcp__ok__echo") && !tools.contains("mcp__dead__"),
        "{tools}"
    );
}

#[tokio::test]
async fn a_server_that_crashes_mid_call_fails_the_call_clearly() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c", "mcp__fix__crash", json!({})),
        MockReply::text(&["noted"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![fixture("fix", &[], None)]).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "crash it").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let read = env.mock.requests()[1].body["messages"].to_string();
    assert!(read.contains("the MCP server fix"), "{read}");
}

#[tokio::test]
async fn cancel_during_a_long_call_ends_the_turn_and_tells_the_server() {
    let env = TestEnv::new(vec![MockReply::tool_call("s", "mcp__fix__slow", json!({}))]).await;
    let log = env.home.path().join("fixture.log");
    let (mut agent, session, _) =
        session_with_servers(&env, vec![fixture("fix", &[], Some(&log))]).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "be slow"))
        .await
        .expect("prompt");
    let asked = agent.next_agent_request(WAIT).await.expect("permission");
    allow_once(&mut agent, &asked).await;
    tokio::time::timeout(WAIT, async {
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("tools/call")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the call reached the server");
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
    let told = tokio::time::timeout(WAIT, async {
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("notifications/cancelled")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        told.is_ok(),
        "the server got the cancellation: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[tokio::test]
async fn a_server_over_streamable_http_is_called_end_to_end() {
    let (_server, url) = http_fixture().await;
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__web__echo", json!({"text": "over http"})),
        MockReply::text(&["done"]),
    ])
    .await;
    let (mut agent, initialized) = initialize_answer(&env).await;
    assert_eq!(
        initialized["agentCapabilities"]["mcpCapabilities"]["http"],
        true
    );
    let created = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": [
                {"type": "http", "name": "web", "url": url.trim(), "headers": []}
            ]}),
        )
        .await
        .expect("session/new");
    let session = created["sessionId"].as_str().expect("id").to_string();
    let (response, _) = prompt_allowing(&mut agent, &session, "call it").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let read = env.mock.requests()[1].body["messages"].to_string();
    assert!(read.contains("echo: over http"), "{read}");
}

#[tokio::test]
async fn closing_the_session_stops_its_stdio_servers() {
    let env = TestEnv::new(Vec::new()).await;
    let log = env.home.path().join("fixture.log");
    let (mut agent, session, _) =
        session_with_servers(&env, vec![fixture("fix", &[], Some(&log))]).await;
    let pid: i32 = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .and_then(|p| p.trim().parse().ok())
        .expect("the fixture logged its pid");
    let running = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    };
    assert!(running(pid));
    let closed = agent
        .request("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    assert!(closed["result"].is_object(), "{closed}");
    let stopped = tokio::time::timeout(WAIT, async {
        while running(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        stopped.is_ok(),
        "the server process {pid} outlived its session"
    );
}

#[tokio::test]
async fn arguments_that_break_the_servers_schema_never_reach_it() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__fix__echo", json!({"text": "x".repeat(60)})),
        MockReply::text(&["shorter next time"]),
    ])
    .await;
    let log = env.home.path().join("fixture.log");
    let (mut agent, session, _) =
        session_with_servers(&env, vec![fixture("fix", &[], Some(&log))]).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "echo a lot").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let read = env.mock.requests()[1].body["messages"].to_string();
    assert!(
        read.contains("Invalid arguments for mcp__fix__echo"),
        "{read}"
    );
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("tools/call"),
        "the server was not called"
    );
}

#[tokio::test]
async fn a_session_whose_mcp_server_hangs_delays_no_other_session() {
    let env = TestEnv::new(vec![
        MockReply::Hang {
            chunks: vec!["thinking".into()],
        },
        MockReply::text(&["the third session answers"]),
    ])
    .await;
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let first = agent
        .start_session(env.workspace.path())
        .await
        .expect("first session");
    let running = agent
        .start_request("session/prompt", text_prompt(&first, "take your time"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m.to_string().contains("thinking"))
        .await
        .expect("the first session's turn runs");
    // A second session whose MCP server never answers: it waits for the start budget.
    let slow_started = Instant::now();
    let slow = agent
        .start_request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": [fixture("stuck", &["--hang"], None)]}),
        )
        .await
        .expect("slow session/new");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Meanwhile the first session's cancel is served at once...
    let cancel_sent = Instant::now();
    agent
        .notify("session/cancel", json!({"sessionId": first}))
        .await
        .expect("cancel");
    let cancelled = agent.wait_response(running, WAIT).await.expect("cancelled");
    assert_eq!(stop_reason(&cancelled), "cancelled");
    assert!(
        cancel_sent.elapsed() < Duration::from_secs(2),
        "the cancel waited {:?} behind the slow start",
        cancel_sent.elapsed()
    );
    // ...and a third session starts and answers, all before the slow one is ready.
    let third = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("third session")["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    let (answered, _) = prompt(&mut agent, &third, "hello").await;
    assert_eq!(stop_reason(&answered), "end_turn");
    assert!(
        slow_started.elapsed() < Duration::from_secs(4),
        "all of that happened while the slow start was still waiting"
    );
    let slow = agent.wait_response(slow, WAIT).await.expect("slow session");
    assert!(slow["result"]["sessionId"].is_string(), "{slow}");
    assert!(
        slow_started.elapsed() >= Duration::from_secs(4),
        "it waited for its server"
    );
}

/// `to` written relative to this process's folder (`../../tmp/…`).
fn relative_from_here(to: &std::path::Path) -> String {
    let here = std::env::current_dir().expect("cwd");
    let ups = here.components().count().saturating_sub(1);
    let below = to.strip_prefix("/").unwrap_or(to);
    format!("{}{}", "../".repeat(ups), below.display())
}

#[tokio::test]
async fn a_server_named_on_a_relative_path_entry_is_never_run_from_it() {
    let env = TestEnv::new(vec![MockReply::text(&["fine"])]).await;
    let planted_dir = env.workspace.path().join("node_modules/.bin");
    std::fs::create_dir_all(&planted_dir).expect("bin");
    let marker = env.workspace.path().join("planted-ran");
    let planted = planted_dir.join("planted-mcp");
    std::fs::write(
        &planted,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", marker.display()),
    )
    .expect("planted");
    std::fs::set_permissions(
        &planted,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    // Three relative spellings of the folder the model could fill, before the real ones.
    let path = format!(
        "{rel}:./{rel}:{rel}/../.bin:/usr/local/bin:/usr/bin:/bin",
        rel = relative_from_here(&planted_dir)
    );
    let server = json!({
        "name": "planted",
        "command": "planted-mcp",
        "args": [],
        "env": [{"name": "PATH", "value": path}],
    });
    let (mut agent, session, _) = session_with_servers(&env, vec![server]).await;
    let shown = agent
        .wait_for(WAIT, |m| m.to_string().contains("The MCP server planted"))
        .await
        .expect("the server is reported")
        .to_string();
    assert!(shown.contains("not on PATH"), "{shown}");
    assert!(!marker.exists(), "the planted program ran");
    let (response, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn");
}

#[tokio::test]
async fn a_crashed_server_answers_restarting_at_once_and_comes_back_after_its_backoff() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c", "mcp__fix__crash", json!({})),
        MockReply::text(&["it crashed"]),
        MockReply::tool_call("e1", "mcp__fix__echo", json!({"text": "too soon"})),
        MockReply::text(&["waiting"]),
        MockReply::tool_call("e2", "mcp__fix__echo", json!({"text": "back again"})),
        MockReply::text(&["it is back"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(&env, vec![fixture("fix", &[], None)]).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "crash it").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    // Right after the crash the server waits out its backoff: the call fails at once.
    let started = std::time::Instant::now();
    let (response, _) = prompt_allowing(&mut agent, &session, "echo").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let told = env.mock.requests()[3].body["messages"].to_string();
    assert!(told.contains("is restarting; try again in"), "{told}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "it did not hang"
    );
    // After the backoff it is started again and answers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "echo again").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let answered = env.mock.requests()[5].body["messages"].to_string();
    assert!(answered.contains("back again"), "{answered}");
    let (_, listed) = prompt(&mut agent, &session, "/mcp").await;
    let report = chunks(&listed, "agent_message_chunk").concat();
    assert!(report.contains("fix: ready, 6 tools"), "{report}");
}

#[tokio::test]
async fn an_http_server_that_drops_its_session_is_connected_again() {
    let (_server, url) = http_fixture().await;
    let env = TestEnv::new(vec![
        MockReply::tool_call("f", "mcp__web__forget", json!({})),
        MockReply::text(&["forgotten"]),
        MockReply::tool_call("e", "mcp__web__echo", json!({"text": "new session"})),
        MockReply::text(&["done"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers(
        &env,
        vec![json!({"type": "http", "name": "web", "url": url.trim(), "headers": []})],
    )
    .await;
    let (response, _) = prompt_allowing(&mut agent, &session, "forget").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (response, _) = prompt_allowing(&mut agent, &session, "echo").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let read = env.mock.requests()[3].body["messages"].to_string();
    assert!(read.contains("echo: new session"), "{read}");
}
