//! Editor delegation: `fs/*` and `terminal/*` are used exactly when the client advertises them;
//! cancelling a running command leaves no process behind (the parallel batch's order is in
//! `replayed_turns.rs`).

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

#[tokio::test]
async fn file_tools_use_the_editor_buffers_when_advertised() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("r", "read_file", json!({"path": "buf.txt"})),
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "buf.txt", "content": "agent text\n"}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"accept-edits\"\n");
    let file = env.workspace.path().join("buf.txt");
    std::fs::write(&file, "saved on disk\n").expect("write");
    let (mut agent, session, _) = env
        .session_with(json!({"fs": {"readTextFile": true, "writeTextFile": true}}))
        .await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "edit"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, WAIT, |method, params| match method {
            "fs/read_text_file" => Ok(Some(json!({"content": "unsaved buffer\n"}))),
            "fs/write_text_file" => {
                assert_eq!(params["content"], "agent text\n");
                Ok(Some(json!({})))
            }
            other => Err((-32601, format!("unexpected {other}"))),
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn");
    let methods: Vec<String> = agent.agent_requests().into_iter().map(|(m, _)| m).collect();
    assert!(
        methods.contains(&"fs/read_text_file".to_string())
            && methods.contains(&"fs/write_text_file".to_string()),
        "{methods:?}"
    );
    let writes = agent
        .agent_requests()
        .into_iter()
        .filter(|(m, _)| m == "fs/write_text_file")
        .count();
    assert_eq!(writes, 1);
    let read_result = &env.mock.requests()[1].body["messages"][3]["content"];
    assert!(
        read_result
            .as_str()
            .unwrap_or_default()
            .contains("unsaved buffer"),
        "{read_result}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("disk"),
        "saved on disk\n",
        "the editor owns the write"
    );
}

#[tokio::test]
async fn editor_errors_become_readable_tool_failures_and_without_the_capability_disk_is_used() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("r", "read_file", json!({"path": "missing.txt"})),
        MockReply::text(&["noted"]),
        MockReply::tool_call("r2", "read_file", json!({"path": "disk.txt"})),
        MockReply::text(&["read it"]),
    ])
    .await;
    let (mut agent, session, _) = env
        .session_with(json!({"fs": {"readTextFile": true}}))
        .await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "read"))
        .await
        .expect("prompt");
    agent
        .drive(id, WAIT, |_, _| Err((-32002, "Resource not found".into())))
        .await
        .expect("response");
    let result = env.mock.requests()[1].body["messages"][3]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(result.contains("File not found"), "{result}");

    // A client without the fs capability never gets fs/* requests.
    std::fs::write(env.workspace.path().join("disk.txt"), "on disk\n").expect("write");
    let (mut plain, session) = env.session().await;
    let id = plain
        .start_request("session/prompt", text_prompt(&session, "read"))
        .await
        .expect("prompt");
    plain
        .drive(id, WAIT, |m, _| Err((-32601, format!("unexpected {m}"))))
        .await
        .expect("response");
    assert!(plain.agent_requests().is_empty());
    assert!(
        env.mock.requests()[3].body["messages"][3]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("on disk")
    );
}

#[tokio::test]
async fn commands_run_in_an_editor_terminal_when_advertised_and_it_is_released() {
    let command = "echo hi from the editor; echo token=${EDITOR_SECRET_TOKEN:-withheld}; \
                   echo spec=${TALARIA_SANDBOX_SPEC:-kept-by-the-helper}; \
                   touch ../outside-the-workspace || echo refused";
    let env = TestEnv::new(vec![
        MockReply::tool_call("t", "terminal", json!({"command": command})),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session, _) = env.session_with(json!({"terminal": true})).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "run"))
        .await
        .expect("prompt");
    // The "editor" runs exactly what it is asked to, with a secret in its own environment.
    let mut ran = String::new();
    let response = agent
        .drive(id, WAIT, |method, params| match method {
            "terminal/create" => {
                let program = params["command"].as_str().unwrap_or_default();
                let args: Vec<&str> = params["args"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                    .unwrap_or_default();
                let given = params["env"].as_array().cloned().unwrap_or_default();
                let output = std::process::Command::new(program)
                    .args(&args)
                    .current_dir(params["cwd"].as_str().unwrap_or("/"))
                    .env("EDITOR_SECRET_TOKEN", "leaked")
                    .envs(given.iter().map(|v| {
                        (
                            v["name"].as_str().unwrap_or_default().to_string(),
                            v["value"].as_str().unwrap_or_default().to_string(),
                        )
                    }))
                    .output()
                    .expect("the editor runs the command");
                ran = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                Ok(Some(json!({"terminalId": "term-1"})))
            }
            "terminal/wait_for_exit" => Ok(Some(json!({"exitCode": 0}))),
            "terminal/output" => Ok(Some(
                json!({"output": ran, "truncated": false, "exitStatus": {"exitCode": 0}}),
            )),
            "terminal/release" => Ok(Some(json!({}))),
            other => Err((-32601, format!("unexpected {other}"))),
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = agent.agent_requests();
    let methods: Vec<&str> = requests.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/output",
            "terminal/release"
        ]
    );
    // The editor starts the sandbox helper, which starts the shell. Its arguments are the
    // user's command, word by word, so an editor that titles the terminal `COMMAND ARGS…`
    // shows `talaria-sandbox echo hi from the editor; …`, never the helper's plumbing; the
    // policy travels out of sight, in the environment the editor gives the helper, and the
    // editor is told the command alone in `_meta`.
    let create = &requests[0].1;
    let program = create["command"].as_str().expect("program");
    assert!(program.ends_with("/talaria-sandbox"), "{program}");
    let words: Vec<&str> = create["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(words.join(" "), command, "the title reads as the command");
    assert!(!words.contains(&"__sandbox"), "{words:?}");
    assert_eq!(create["_meta"]["talaria"]["command"], json!(command));
    let spec_text = create["env"]
        .as_array()
        .and_then(|vars| {
            vars.iter()
                .find(|v| v["name"] == "TALARIA_SANDBOX_SPEC")
                .and_then(|v| v["value"].as_str())
        })
        .expect("the policy in the helper's environment");
    let spec: serde_json::Value = serde_json::from_str(spec_text).expect("helper spec");
    assert!(
        spec["sandbox"]["writable"].to_string().contains(
            &env.workspace
                .path()
                .canonicalize()
                .expect("c")
                .display()
                .to_string()
        ),
        "{spec}"
    );
    assert!(spec["env"].is_object(), "{spec}");
    assert!(ran.contains("token=withheld"), "{ran}");
    assert!(ran.contains("spec=kept-by-the-helper"), "{ran}");
    assert!(ran.contains("refused"), "{ran}");
    assert!(
        !env.workspace
            .path()
            .join("../outside-the-workspace")
            .exists()
    );
    assert_eq!(
        requests[0].1["cwd"],
        env.workspace.path().display().to_string()
    );
    let embedded = agent.updates().into_iter().any(|u| {
        u["toolCallId"] == "t"
            && u["content"][0]["type"] == "terminal"
            && u["content"][0]["terminalId"] == "term-1"
    });
    assert!(embedded, "the terminal is embedded in the card");
    let result = env.mock.requests()[1].body["messages"][3]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        result.contains("hi from the editor") && result.contains("Exit code: 0"),
        "{result}"
    );
}

fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[tokio::test]
async fn cancel_during_a_running_command_kills_it_and_its_children() {
    let marker = format!(
        "3000.{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let command = format!("sleep {marker} & sleep {marker}; echo never");
    let env = TestEnv::new(vec![MockReply::tool_call(
        "t",
        "terminal",
        json!({"command": command}),
    )])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "run"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m["params"]["update"]["status"] == "in_progress")
        .await
        .expect("running");
    let deadline = std::time::Instant::now() + WAIT;
    while processes_with(&marker).len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(processes_with(&marker).len() >= 2, "the command is running");
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "cancelled");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !processes_with(&marker).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        processes_with(&marker),
        Vec::<String>::new(),
        "no process left"
    );
}

#[tokio::test]
async fn local_command_output_streams_into_the_card_before_it_finishes() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "t",
            "terminal",
            json!({"command": "echo first; sleep 1; echo second"}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "run").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let card: Vec<&Value> = updates.iter().filter(|u| u["toolCallId"] == "t").collect();
    let streamed = card
        .iter()
        .position(|u| {
            u["status"].is_null()
                && u["content"][0]["content"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("first") && !t.contains("second"))
        })
        .expect("partial output shown while running");
    let completed = card
        .iter()
        .position(|u| u["status"] == "completed")
        .expect("completed");
    assert!(streamed < completed);
}

#[tokio::test]
async fn cancelling_an_editor_terminal_command_kills_and_releases_it() {
    let env = TestEnv::new(vec![MockReply::tool_call(
        "t",
        "terminal",
        json!({"command": "sleep 100"}),
    )])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (mut agent, session, _) = env.session_with(json!({"terminal": true})).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "run"))
        .await
        .expect("prompt");
    let create = agent.next_agent_request(WAIT).await.expect("create");
    assert_eq!(create["method"], "terminal/create");
    agent
        .respond(&create["id"], json!({"terminalId": "term-9"}))
        .await
        .expect("answer");
    let wait = agent.next_agent_request(WAIT).await.expect("wait");
    assert_eq!(wait["method"], "terminal/wait_for_exit");
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent
        .drive(id, WAIT, |method, _| match method {
            "terminal/kill" | "terminal/release" => Ok(Some(json!({}))),
            "terminal/output" => Ok(Some(
                json!({"output": "", "truncated": false, "exitStatus": {"signal": "SIGKILL"}}),
            )),
            other => Err((-32601, format!("unexpected {other}"))),
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "cancelled");
    let methods: Vec<String> = agent.agent_requests().into_iter().map(|(m, _)| m).collect();
    assert_eq!(
        methods,
        [
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/kill",
            "terminal/output",
            "terminal/release"
        ]
    );
}

#[tokio::test]
async fn a_new_file_is_written_through_a_client_that_answers_missing_files_with_any_error() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "hello.txt", "content": "hi\n"}),
        ),
        MockReply::text(&["written"]),
        MockReply::tool_call("r", "read_file", json!({"path": "present.txt"})),
        MockReply::text(&["noted"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    std::fs::write(env.workspace.path().join("present.txt"), "on disk\n").expect("write");
    let (mut agent, session, _) = env
        .session_with(json!({"fs": {"readTextFile": true, "writeTextFile": true}}))
        .await;
    let workspace = env.workspace.path().to_path_buf();
    let serve = |method: &str, params: &Value| -> Result<Option<Value>, (i64, String)> {
        match method {
            // Like acpx: a missing file is an internal error with ENOENT.
            "fs/read_text_file" => Err((-32603, "Internal error: ENOENT".into())),
            "fs/write_text_file" => {
                let path = params["path"].as_str().unwrap_or_default();
                std::fs::write(path, params["content"].as_str().unwrap_or_default())
                    .map_err(|e| (-32603, e.to_string()))?;
                Ok(Some(json!({})))
            }
            other => Err((-32601, format!("unexpected {other}"))),
        }
    };
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "write"))
        .await
        .expect("prompt");
    agent.drive(id, WAIT, serve).await.expect("response");
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).expect("written"),
        "hi\n"
    );
    // A file that is on the disk: the client's error is real and is reported.
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "read"))
        .await
        .expect("prompt");
    agent.drive(id, WAIT, serve).await.expect("response");
    let result = env.mock.requests()[3].body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        result.contains("could not read") && result.contains("ENOENT"),
        "{result}"
    );
}

#[tokio::test]
async fn cancel_while_the_editor_has_not_answered_a_read_ends_the_turn_at_once() {
    let env = TestEnv::new(vec![MockReply::tool_call(
        "r",
        "read_file",
        json!({"path": "buf.txt"}),
    )])
    .await;
    std::fs::write(env.workspace.path().join("buf.txt"), "text\n").expect("write");
    let (mut agent, session, _) = env
        .session_with(json!({"fs": {"readTextFile": true, "writeTextFile": true}}))
        .await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "read it"))
        .await
        .expect("prompt");
    // The editor never answers the read.
    let asked = agent
        .wait_for(WAIT, |m| m["method"] == "fs/read_text_file")
        .await
        .expect("the read reaches the editor");
    let sent = std::time::Instant::now();
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent.wait_response(id, WAIT).await.expect("answered");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(3),
        "the turn waited {:?} for the editor",
        sent.elapsed()
    );
    // The editor is told the read is no longer wanted.
    let withdrawn = agent
        .wait_for(WAIT, |m| m["method"] == "$/cancel_request")
        .await
        .expect("$/cancel_request");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"]);
}
