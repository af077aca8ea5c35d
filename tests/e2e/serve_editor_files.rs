//! The editor's files in a shared session of `talaria serve`: while the client that opened
//! the session is attached, the agent's file writes go to its buffers (`fs/write_text_file`)
//! and its tool interception decides on each call; once it has left and another client goes
//! on, they land on this machine's disk and that editor is asked nothing more. An editor
//! whose connection dropped mid-request holds the turn only until the connection is given up.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::serve_attach::{attach, client, is_answer, prompt};
use crate::serve_support::*;
use crate::support::*;

/// A client of `served` that offers its files, with a new session: the client and the id.
async fn editor_with_session(served: &Served, env: &TestEnv) -> (Socket, String) {
    let mut editor = Socket::open(served, "").await.expect("opened");
    let intercepts = json!({"toolInterception": {"before": true, "after": true}});
    let files = json!({
        "fs": {"readTextFile": true, "writeTextFile": true},
        "_meta": {"agentclientprotocol.com": intercepts},
    });
    let info = json!({"name": "editor", "version": "1"});
    editor
        .call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": files, "clientInfo": info}),
        )
        .await;
    let opened = editor
        .call(
            1,
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    let session = opened["result"]["sessionId"].as_str().expect("id");
    (editor, session.to_string())
}

/// A `talaria serve` started with `args` (edits accepted) where the editor opened a session
/// and a browser took control of it: the server (kept alive), the editor, the browser and
/// the session's id.
async fn taken_over_by_a_browser(env: &TestEnv, args: &[&str]) -> (Served, Socket, Socket, String) {
    env.write_config("mode = \"accept-edits\"\n");
    let served = start(env, args).await;
    let (editor, session) = editor_with_session(&served, env).await;
    let mut browser = client(&served, "browser").await;
    let took = attach(&mut browser, 2, &session, "controller").await;
    assert_eq!(took["result"]["role"], "controller", "{took}");
    (served, editor, browser, session)
}

/// The first call the client was told failed.
fn failed_call(client: &Socket) -> &Value {
    client
        .messages
        .iter()
        .find(|m| m["params"]["update"]["status"] == "failed")
        .unwrap_or_else(|| panic!("no failed call: {:?}", client.messages))
}

/// The turn's call to the editor failed ("not written") and nothing reached the disk at
/// `file`: a turn that worked on the editor's buffers writes nothing there once it left.
fn failed_and_wrote_nothing(client: &Socket, env: &TestEnv, file: &str) {
    let failed = failed_call(client);
    assert!(failed.to_string().contains("not written"), "{failed}");
    assert!(!env.workspace.path().join(file).exists());
}

/// Answers the editor's requests (a read: no such file; a write: done; an interception:
/// allow) until request `id` is answered: that answer, and the requests it got.
async fn answer_files_until_answered(editor: &mut Socket, id: u64) -> (Value, Vec<Value>) {
    let mut asked = Vec::new();
    loop {
        let message = editor.until(|m| m["id"] == id || asks_the_editor(m)).await;
        let reply = match message["method"].as_str() {
            None => return (message, asked),
            Some("fs/write_text_file") => json!({"result": {}}),
            Some(INTERCEPT) => json!({"result": {"action": "allow"}}),
            Some(_) => json!({"error": {"code": -32002, "message": "no such file"}}),
        };
        let mut reply = reply;
        reply["jsonrpc"] = "2.0".into();
        reply["id"] = message["id"].clone();
        editor.send(reply).await;
        asked.push(message);
    }
}

const INTERCEPT: &str = "_agentclientprotocol.com/tool/intercept";

/// A request the agent makes of the editor: its files or its interception.
fn asks_the_editor(message: &Value) -> bool {
    message.get("id").is_some()
        && message["method"]
            .as_str()
            .is_some_and(|m| m.starts_with("fs/") || m == INTERCEPT)
}

fn write(id: &str, path: &str, content: &str) -> MockReply {
    MockReply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

#[tokio::test]
async fn once_the_editor_has_left_the_session_its_files_are_this_machines() {
    let env = TestEnv::new(vec![
        write("w1", "kept.txt", "in the editor\n"),
        MockReply::text(&["kept"]),
        write("w2", "left.txt", "after the editor left\n"),
        MockReply::text(&["written"]),
    ])
    .await;
    env.write_config("mode = \"accept-edits\"\n");
    let served = start(&env, &[]).await;
    let (mut editor, session) = editor_with_session(&served, &env).await;
    let mut browser = client(&served, "browser").await;
    attach(&mut browser, 2, &session, "observer").await;
    // Attached, the editor owns the write.
    editor
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(&session, "keep")}))
        .await;
    let (answered, asked) = answer_files_until_answered(&mut editor, 2).await;
    let wrote: Vec<&Value> = asked
        .iter()
        .filter(|m| m["method"] == "fs/write_text_file")
        .collect();
    assert_eq!(wrote.len(), 1, "{asked:?}");
    assert_eq!(wrote[0]["params"]["content"], "in the editor\n");
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    assert!(!env.workspace.path().join("kept.txt").exists());
    // The editor leaves; the browser has control and goes on: the write is the disk's.
    let left = editor
        .call(3, "session/close", json!({"sessionId": session}))
        .await;
    assert!(left["result"].is_object(), "{left}");
    let answered = browser
        .call(3, "session/prompt", prompt(&session, "write it"))
        .await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    let written = std::fs::read_to_string(env.workspace.path().join("left.txt"));
    assert_eq!(written.expect("on disk"), "after the editor left\n");
    // Nothing more was asked of the editor (all it got comes before this answer).
    editor.call(4, "session/list", json!({})).await;
    assert!(asked.iter().any(|m| m["method"] == INTERCEPT), "{asked:?}");
    let after = editor
        .messages
        .iter()
        .filter(|m| asks_the_editor(m))
        .count();
    assert_eq!(after, asked.len(), "{:?}", editor.messages);
}

#[tokio::test]
async fn a_turn_waiting_on_an_editor_that_dropped_goes_on_once_its_connection_is_given_up() {
    let env = TestEnv::new(vec![
        write("w1", "dropped.txt", "to the editor that dropped\n"),
        MockReply::text(&["went on"]),
    ])
    .await;
    let (_served, editor, mut browser, session) =
        taken_over_by_a_browser(&env, &["--reconnect-window", "2"]).await;
    // The editor's socket drops: it stays attached for the reconnect window, so the turn's
    // file requests go to it, and nothing answers them.
    editor.drop_now();
    let asked = std::time::Instant::now();
    let answered = browser
        .call(3, "session/prompt", prompt(&session, "write it"))
        .await;
    // Once the window is over the connection ends, and its requests fail: the turn goes on.
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    assert!(asked.elapsed() < std::time::Duration::from_secs(15));
    // What the turn asked of the editor failed with its connection, and the turn, having
    // worked on the editor's buffers, wrote nothing to disk.
    failed_and_wrote_nothing(&browser, &env, "dropped.txt");
}

#[tokio::test]
async fn what_the_editor_had_not_answered_when_it_left_fails_and_the_turn_goes_on() {
    let env = TestEnv::new(vec![
        write("w1", "left.txt", "asked of an editor that left\n"),
        MockReply::text(&["went on"]),
    ])
    .await;
    let (_served, mut editor, mut browser, session) = taken_over_by_a_browser(&env, &[]).await;
    let ask = prompt(&session, "write it");
    browser
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": ask}))
        .await;
    // Asked to read the file, the editor leaves the session instead of answering (and
    // stays connected).
    editor.until(asks_the_editor).await;
    let left = editor
        .call(9, "_session/detach", json!({"sessionId": session}))
        .await;
    assert!(left["result"].is_object(), "{left}");
    let answered = browser.until(is_answer(3)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    // Its read failed, and a turn that worked on the editor's buffers writes nothing to disk.
    failed_and_wrote_nothing(&browser, &env, "left.txt");
}

#[tokio::test]
async fn a_subagent_writes_nothing_to_disk_after_its_parent_worked_on_the_editors_buffers() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("r1", "read_file", json!({"path": "a.txt"})),
        MockReply::tool_call("d1", "delegate_task", json!({"goal": "edit a.txt"})),
        write("w1", "a.txt", "written by the subagent\n"),
        MockReply::text(&["child done"]),
        MockReply::text(&["parent done"]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("a.txt"), "disk line\n").expect("written");
    let (_served, mut editor, mut browser, session) = taken_over_by_a_browser(&env, &[]).await;
    let ask = prompt(&session, "go");
    browser
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": ask}))
        .await;
    // The parent's read is answered from the editor's buffer (its interception allows it
    // first); then the editor leaves.
    let read = loop {
        let asked = editor.until(asks_the_editor).await;
        if asked["method"] != INTERCEPT {
            break asked;
        }
        let allow = json!({"action": "allow"});
        editor
            .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": allow}))
            .await;
    };
    assert_eq!(read["method"], "fs/read_text_file", "{read}");
    let buffer = json!({"content": "unsaved buffer\n"});
    editor
        .send(json!({"jsonrpc": "2.0", "id": read["id"], "result": buffer}))
        .await;
    let left = editor
        .call(9, "_session/detach", json!({"sessionId": session}))
        .await;
    assert!(left["result"].is_object(), "{left}");
    let answered = browser.until(is_answer(3)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    // The subagent's write, part of the same turn's work, did not reach the disk.
    let on_disk = std::fs::read_to_string(env.workspace.path().join("a.txt"));
    let calls: Vec<&Value> = browser
        .messages
        .iter()
        .filter(|m| m["params"]["update"]["status"].is_string())
        .collect();
    let asked: Vec<&Value> = editor
        .messages
        .iter()
        .filter(|m| asks_the_editor(m))
        .collect();
    assert_eq!(
        on_disk.expect("on disk"),
        "disk line\n",
        "{calls:?} {asked:?}"
    );
}
