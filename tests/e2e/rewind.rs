//! `_session/rewind` over stdio, against a real workspace: the conversation goes back to a
//! user message (the cut turns stay in the record and a later rewind returns to them), and
//! with `restoreFiles` the files `write_file`, `patch` and a shell command changed are put
//! back byte for byte; a file edited by hand since is listed and left unless forced; bad
//! targets and busy sessions change nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use talaria_harness::{AgentProcess, MockReply};

use crate::support::*;
use talaria_harness::binary::{talaria_bin, workspace_bin};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

fn fingerprint(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A message as a rewind names it.
fn point(id: &str, text: &str) -> Value {
    json!({"messageId": id, "messageFingerprint": fingerprint(text), "messageOccurrence": 1})
}

/// The user message id a prompt's answer told, and the id of the last answer it streamed.
fn ids_of(response: &Value, updates: &[Value]) -> (String, String) {
    let user = response["result"]["_meta"]["userMessageId"]
        .as_str()
        .expect("the answer names the prompt's message")
        .to_string();
    let answer = updates
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "agent_message_chunk")
        .and_then(|u| u["messageId"].as_str())
        .expect("an answer with an id")
        .to_string();
    (user, answer)
}

/// The prompt's message id its answer told.
fn user_id(response: &Value) -> String {
    response["result"]["_meta"]["userMessageId"]
        .as_str()
        .expect("the answer names the prompt's message")
        .to_string()
}

/// "look around", then "change things" (which edits the workspace); the params of a rewind
/// to before the second, with `extra` merged in.
async fn two_turns(agent: &mut AgentProcess, session: &str) -> impl Fn(Value) -> Value + use<> {
    let (first, first_updates) = prompt(agent, session, "look around").await;
    let (_, first_answer) = ids_of(&first, &first_updates);
    let (second, _) = prompt(agent, session, "change things").await;
    assert_eq!(stop_reason(&second), "end_turn");
    let second_user = user_id(&second);
    let session = session.to_string();
    move |extra: Value| {
        let mut params = json!({
            "sessionId": session,
            "beforeMessage": point(&second_user, "change things"),
            "resumeAtMessage": point(&first_answer, "first answer"),
        });
        for (key, value) in extra.as_object().into_iter().flatten() {
            params[key] = value.clone();
        }
        params
    }
}

/// Sends `text` as the next prompt (the model answers "ok") and returns the request the
/// model got for it.
async fn next_request(
    env: &TestEnv,
    agent: &mut AgentProcess,
    session: &str,
    text: &str,
) -> String {
    env.mock.push(MockReply::text(&["ok"]));
    let (answer, _) = prompt(agent, session, text).await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    env.mock
        .requests()
        .last()
        .expect("a request")
        .body
        .to_string()
}

async fn rewind(agent: &mut AgentProcess, params: Value) -> Value {
    let id = agent
        .start_request("_session/rewind", params)
        .await
        .expect("sends");
    agent.wait_response(id, WAIT).await.expect("answered")
}

/// Every file under `dir` (outside `.git`): its path, bytes and mode.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                if entry.file_name() != ".git" {
                    stack.push(path);
                }
                continue;
            }
            let meta = std::fs::metadata(&path).expect("meta");
            files.push((
                path.strip_prefix(dir)
                    .expect("inside")
                    .display()
                    .to_string(),
                std::fs::read(&path).expect("read"),
                meta.permissions().mode() & 0o7777,
            ));
        }
    }
    files.sort();
    files
}

fn seed(dir: &Path) {
    for (name, text) in [
        ("a.txt", "alpha\n"),
        ("b.txt", "bravo\nline two\n"),
        ("c.txt", "charlie\n"),
        ("d.txt", "delta\n"),
        ("keep.txt", "kept\n"),
        ("run.sh", "echo run\n"),
    ] {
        std::fs::write(dir.join(name), text).expect("seed");
    }
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o644))
        .expect("mode");
}

/// One answer, then a turn that writes with `write_file`, `patch` and a shell command.
fn editing_script() -> Vec<MockReply> {
    vec![
        MockReply::text(&["first answer"]),
        batch(&[
            (
                "w",
                "write_file",
                json!({"path": "a.txt", "content": "ALPHA rewritten\n"}),
            ),
            (
                "p",
                "patch",
                json!({"path": "b.txt", "old_string": "line two", "new_string": "LINE 2"}),
            ),
        ]),
        MockReply::tool_call(
            "t",
            "terminal",
            json!({"command": "sed -i 's/charlie/CHARLIE/' c.txt && mv keep.txt moved.txt && rm d.txt && printf 'fresh' > new.txt && chmod 755 run.sh"}),
        ),
        MockReply::text(&["edited"]),
    ]
}

async fn editing_env() -> TestEnv {
    let mut env = TestEnv::new(editing_script()).await;
    env.write_config("mode = \"yolo\"\n");
    seed(env.workspace.path());
    env.unprivileged(&[]);
    env
}

#[tokio::test]
async fn a_rewind_with_files_puts_back_what_tools_and_a_command_changed_byte_for_byte() {
    let env = editing_env().await;
    let dir = env.workspace.path();
    let (mut agent, session) = env.session().await;
    let (first, first_updates) = prompt(&mut agent, &session, "look around").await;
    let (_, first_answer) = ids_of(&first, &first_updates);
    let before = snapshot(dir);
    let (second, _) = prompt(&mut agent, &session, "change things").await;
    assert_eq!(stop_reason(&second), "end_turn");
    let second_user = second["result"]["_meta"]["userMessageId"]
        .as_str()
        .expect("id")
        .to_string();
    assert_ne!(snapshot(dir), before, "the turn changed the workspace");

    let answer = rewind(
        &mut agent,
        json!({
            "sessionId": session,
            "beforeMessage": point(&second_user, "change things"),
            "resumeAtMessage": point(&first_answer, "first answer"),
            "restoreFiles": true,
        }),
    )
    .await;
    assert_eq!(answer["result"]["rewound"], true, "{answer}");
    assert_eq!(answer["result"]["sessionId"], session.as_str());
    let mut restored: Vec<String> = answer["result"]["files"]["restored"]
        .as_array()
        .expect("restored")
        .iter()
        .filter_map(Value::as_str)
        .map(|p| {
            Path::new(p)
                .file_name()
                .expect("name")
                .to_string_lossy()
                .to_string()
        })
        .collect();
    restored.sort();
    assert_eq!(
        restored,
        [
            "a.txt",
            "b.txt",
            "c.txt",
            "d.txt",
            "keep.txt",
            "moved.txt",
            "new.txt",
            "run.sh"
        ]
    );
    assert_eq!(
        snapshot(dir),
        before,
        "every byte and mode as before the turn"
    );

    // The next prompt starts from the first answer: the model never sees the cut turn.
    let sent = next_request(&env, &mut agent, &session, "once more").await;
    assert!(
        sent.contains("first answer") && sent.contains("once more"),
        "{sent}"
    );
    assert!(
        !sent.contains("change things") && !sent.contains("edited"),
        "{sent}"
    );
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());
}

#[tokio::test]
async fn without_restore_files_only_the_conversation_goes_back() {
    let env = editing_env().await;
    let dir = env.workspace.path();
    let (mut agent, session) = env.session().await;
    let params = two_turns(&mut agent, &session).await;
    let changed = snapshot(dir);
    let answer = rewind(&mut agent, params(json!({}))).await;
    assert_eq!(answer["result"]["rewound"], true, "{answer}");
    assert!(answer["result"].get("files").is_none(), "{answer}");
    assert_eq!(snapshot(dir), changed, "no file is touched");
}

#[tokio::test]
async fn a_file_edited_by_hand_after_the_agent_is_listed_and_left_unless_forced() {
    let env = editing_env().await;
    let dir = env.workspace.path();
    let (mut agent, session) = env.session().await;
    let base = two_turns(&mut agent, &session).await;
    std::fs::write(dir.join("a.txt"), "the user's own words\n").expect("edit by hand");
    let params = |force: bool| base(json!({"restoreFiles": true, "force": force}));
    let answer = rewind(&mut agent, params(false)).await;
    let skipped = &answer["result"]["files"]["skipped"];
    assert_eq!(skipped.as_array().map(Vec::len), Some(1), "{answer}");
    assert!(skipped[0].as_str().unwrap_or_default().ends_with("a.txt"));
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).expect("read"),
        "the user's own words\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("c.txt")).expect("read"),
        "charlie\n"
    );

    // Back to the cut branch (its last answer), then rewind again with force.
    let edited = edited_answer_id(&agent);
    let back = rewind(
        &mut agent,
        json!({"sessionId": session, "resumeAtMessage": point(&edited, "edited")}),
    )
    .await;
    assert_eq!(back["result"]["rewound"], true, "{back}");
    let forced = rewind(&mut agent, params(true)).await;
    assert_eq!(forced["result"]["rewound"], true, "{forced}");
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).expect("read"),
        "alpha\n",
        "forced: the file is as before the turn"
    );
}

/// The id of the answer "edited" as the client saw it.
fn edited_answer_id(agent: &AgentProcess) -> String {
    agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| &m["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk" && u["content"]["text"] == "edited")
        .find_map(|u| u["messageId"].as_str())
        .expect("the answer was streamed")
        .to_string()
}

#[tokio::test]
async fn wrong_fingerprints_unknown_ids_and_missing_guards_change_nothing() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let (mut agent, session) = env.session().await;
    let (first, first_updates) = prompt(&mut agent, &session, "first").await;
    let (first_user, first_answer) = ids_of(&first, &first_updates);
    let (second, _) = prompt(&mut agent, &session, "second").await;
    let second_user = second["result"]["_meta"]["userMessageId"]
        .as_str()
        .expect("id")
        .to_string();
    for (params, says) in [
        (
            json!({"sessionId": session, "beforeMessage": point(&second_user, "SECOND"), "resumeAtMessage": point(&first_answer, "one")}),
            "fingerprint",
        ),
        (
            json!({"sessionId": session, "beforeMessage": point("user-999", "nothing"), "resumeAtMessage": point(&first_answer, "one")}),
            "not found",
        ),
        (
            json!({"sessionId": session, "beforeMessage": point(&second_user, "second")}),
            "resumeAtMessage is required",
        ),
        (
            json!({"sessionId": session, "beforeMessage": {"messageId": second_user, "messageFingerprint": "md5:abc"}}),
            "SHA-256",
        ),
        (json!({"sessionId": session}), "required"),
    ] {
        let answer = rewind(&mut agent, params).await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(says),
            "{answer}"
        );
    }
    let unknown = rewind(
        &mut agent,
        json!({"sessionId": "no-such-session", "beforeMessage": point(&first_user, "first")}),
    )
    .await;
    assert_eq!(unknown["result"]["rewound"], false);
    assert_eq!(unknown["result"]["reason"], "session_not_found");
    // Nothing changed: the next request carries both turns.
    let sent = next_request(&env, &mut agent, &session, "third").await;
    assert!(
        sent.contains("first") && sent.contains("second") && sent.contains("two"),
        "{sent}"
    );
}

#[tokio::test]
async fn a_busy_session_refuses_a_rewind_unless_asked_to_interrupt_the_turn() {
    let slow = || MockReply::Text {
        chunks: (0..200).map(|n| format!("{n} ")).collect(),
        reasoning: Vec::new(),
        delay_ms: 50,
        usage: None,
        finish_reason: None,
    };
    let env = TestEnv::new(vec![MockReply::text(&["one"]), slow(), slow()]).await;
    let (mut agent, session) = env.session().await;
    let (first, first_updates) = prompt(&mut agent, &session, "first").await;
    let (first_user, _) = ids_of(&first, &first_updates);
    let running = agent
        .start_request("session/prompt", text_prompt(&session, "slow one"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| m["params"]["update"]["content"]["text"] == "3 ")
        .await
        .expect("the turn streams");
    let busy = rewind(
        &mut agent,
        json!({"sessionId": session, "beforeMessage": point(&first_user, "first")}),
    )
    .await;
    assert_eq!(busy["result"]["rewound"], false, "{busy}");
    assert_eq!(busy["result"]["reason"], "busy");
    // A wrong fingerprint is refused before the turn is touched.
    let wrong = rewind(
        &mut agent,
        json!({"sessionId": session, "beforeMessage": point(&first_user, "not the text"), "interruptIfRunning": true}),
    )
    .await;
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    agent
        .wait_for(WAIT, |m| m["params"]["update"]["content"]["text"] == "12 ")
        .await
        .expect("the turn streams on");
    let interrupted = rewind(
        &mut agent,
        json!({"sessionId": session, "beforeMessage": point(&first_user, "first"), "interruptIfRunning": true}),
    )
    .await;
    assert_eq!(interrupted["result"]["rewound"], true, "{interrupted}");
    let ended = agent
        .wait_response(running, WAIT)
        .await
        .expect("the turn ends");
    assert_eq!(stop_reason(&ended), "cancelled");
    // Back before the first message: the next request holds only the new prompt.
    let sent = next_request(&env, &mut agent, &session, "a fresh start").await;
    assert!(sent.contains("a fresh start"), "{sent}");
    assert!(
        !sent.contains("slow one") && !sent.contains("\"first\""),
        "{sent}"
    );
}

#[tokio::test]
async fn a_load_after_a_rewind_replays_the_kept_branch_and_a_later_rewind_returns_to_the_cut_one() {
    let env = TestEnv::new(vec![
        MockReply::text(&["one"]),
        MockReply::text(&["two"]),
        MockReply::text(&["two again"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (first, first_updates) = prompt(&mut agent, &session, "first").await;
    let (_, first_answer) = ids_of(&first, &first_updates);
    let (second, second_updates) = prompt(&mut agent, &session, "second").await;
    let (second_user, second_answer) = ids_of(&second, &second_updates);
    let answer = rewind(
        &mut agent,
        json!({"sessionId": session, "beforeMessage": point(&second_user, "second"), "resumeAtMessage": point(&first_answer, "one")}),
    )
    .await;
    assert_eq!(answer["result"]["rewound"], true, "{answer}");
    prompt(&mut agent, &session, "second, edited").await;
    agent.close_stdin();
    assert!(agent.wait_exit(WAIT).await.expect("exits").success());

    let replayed_texts = |agent: &AgentProcess, from: usize| -> Vec<String> {
        agent.transcript[from..]
            .iter()
            .filter(|m| m["method"] == "session/update")
            .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
            .map(str::to_string)
            .collect()
    };
    let mut agent = initialized(&env).await;
    let from = agent.transcript.len();
    agent
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    assert_eq!(
        replayed_texts(&agent, from),
        ["first", "one", "second, edited", "two again"],
        "only the kept branch"
    );
    // Back to the branch the rewind cut, in a new process.
    let back = rewind(
        &mut agent,
        json!({"sessionId": session, "resumeAtMessage": point(&second_answer, "two")}),
    )
    .await;
    assert_eq!(back["result"]["rewound"], true, "{back}");
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    let from = agent.transcript.len();
    agent
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    assert_eq!(
        replayed_texts(&agent, from),
        ["first", "one", "second", "two"]
    );
}

#[tokio::test]
async fn initialize_advertises_rewind_with_files() {
    let env = TestEnv::new(vec![]).await;
    let (mut agent, answer) = initialize_answer(&env).await;
    assert_eq!(
        answer["_meta"]["sessionRewind"],
        json!({"supported": true, "restoreFiles": true})
    );
    agent.close_stdin();
}

#[tokio::test]
async fn the_rewind_command_goes_back_a_prompt_with_its_files_and_is_offered_as_a_command() {
    let env = editing_env().await;
    let dir = env.workspace.path();
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "look around").await;
    let names: Vec<String> = agent
        .transcript
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")
        .flat_map(|m| {
            m["params"]["update"]["availableCommands"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    assert!(names.iter().any(|n| n == "rewind"), "{names:?}");
    let before = snapshot(dir);
    prompt(&mut agent, &session, "change things").await;
    let (answer, updates) = prompt(&mut agent, &session, "/rewind files").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let told = chunks(&updates, "agent_message_chunk").join("");
    assert!(
        told.contains("Rewound to before your message \"change things\""),
        "{told}"
    );
    assert!(told.contains("1 turn left the conversation"), "{told}");
    assert!(told.contains(" files put back: "), "{told}");
    assert!(!told.contains("record entries"), "{told}");
    assert_eq!(snapshot(dir), before);
    // The command's answer is not recorded and no model was asked for it.
    assert_eq!(env.mock.requests().len(), 4);
    let sent = next_request(&env, &mut agent, &session, "next prompt").await;
    assert!(
        !sent.contains("change things") && !sent.contains("Rewound"),
        "{sent}"
    );
    let bad = prompt(&mut agent, &session, "/rewind 9").await.0;
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("prompt(s) to go back over"),
        "{bad}"
    );
}

/// Reads `from` until what was read contains `wanted`; returns all of it.
async fn read_until(from: &mut (impl AsyncRead + Unpin), seen: &mut String, wanted: &str) {
    let mut buf = [0u8; 4096];
    let found = tokio::time::timeout(WAIT, async {
        while !seen.contains(wanted) {
            let n = from.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before {wanted:?}: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    assert!(found.is_ok(), "no {wanted:?} in: {seen}");
}

#[tokio::test]
async fn talaria_chat_lists_the_prompts_and_rewinds_with_files() {
    // talaria-chat starts the agent itself, as the user running the test.
    let env = TestEnv::new(editing_script()).await;
    env.write_config("mode = \"yolo\"\n");
    seed(env.workspace.path());
    let dir = env.workspace.path();
    let mut child = tokio::process::Command::new(workspace_bin("talaria-chat", "talaria-chat"))
        .arg("--agent")
        .arg(talaria_bin())
        .arg("--cwd")
        .arg(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .kill_on_drop(true)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawned");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let (mut out, mut err) = (String::new(), String::new());
    stdin.write_all(b"look around\n").await.expect("prompt");
    read_until(&mut stdout, &mut out, "first answer").await;
    let before = snapshot(dir);
    stdin.write_all(b"change things\n").await.expect("prompt");
    read_until(&mut stdout, &mut out, "edited").await;
    stdin.write_all(b"/rewind\n").await.expect("list");
    read_until(&mut stderr, &mut err, "1  change things").await;
    assert!(err.contains("2  look around"), "{err}");
    stdin.write_all(b"/rewind 1 files\n").await.expect("rewind");
    read_until(&mut stderr, &mut err, "files put back: 8").await;
    assert_eq!(snapshot(dir), before, "the files are as before the prompt");
    stdin.write_all(b"/rewind\n").await.expect("list");
    read_until(&mut stderr, &mut err, "1  look around").await;
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("in time")
        .expect("ran");
    assert!(status.success(), "{err}");
}

#[tokio::test]
async fn a_forks_checkpoints_outlive_its_deleted_parent_and_go_with_its_own_deletion() {
    let env = editing_env().await;
    let dir = env.workspace.path();
    let store = env.home.path().join("talaria/checkpoints");
    let (mut agent, session) = env.session().await;
    let params = two_turns(&mut agent, &session).await;
    let held =
        |id: &str| std::fs::read_dir(store.join("sessions").join(id)).map_or(0, Iterator::count);
    assert!(
        held(&session) > 0,
        "the session holds what its turn changed"
    );
    let fork = agent
        .call(
            "session/fork",
            json!({"sessionId": session, "cwd": dir, "mcpServers": []}),
        )
        .await
        .expect("fork");
    let fork_id = fork["sessionId"].as_str().expect("id").to_string();
    assert_eq!(
        held(&fork_id),
        held(&session),
        "the fork holds the same contents"
    );
    agent
        .call("session/delete", json!({"sessionId": session}))
        .await
        .expect("delete");
    assert_eq!(held(&session), 0, "a deleted session's holdings go with it");
    // The fork's record names the same messages; its rewind puts the files back.
    let mut in_fork = params(json!({"restoreFiles": true}));
    in_fork["sessionId"] = json!(fork_id);
    let answer = rewind(&mut agent, in_fork).await;
    assert_eq!(
        answer["result"]["files"]["restored"]
            .as_array()
            .map(Vec::len),
        Some(8),
        "{answer}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).expect("read"),
        "alpha\n"
    );
    agent
        .call("session/delete", json!({"sessionId": fork_id}))
        .await
        .expect("delete");
    assert_eq!(held(&fork_id), 0);
    let blobs = std::fs::read_dir(store.join("blobs")).map_or(0, Iterator::count);
    assert_eq!(blobs, 0, "no content outlives every session that held it");
}

#[tokio::test]
async fn a_session_another_process_holds_is_not_rewound_from_here() {
    let env = editing_env().await;
    let dir = env.workspace.path();
    let (mut holder, session) = env.session().await;
    let params = two_turns(&mut holder, &session).await;
    let changed = snapshot(dir);
    let mut other = initialized(&env).await;
    let answer = rewind(
        &mut other,
        params(json!({"restoreFiles": true, "force": true})),
    )
    .await;
    assert_eq!(answer["result"]["rewound"], false, "{answer}");
    assert_eq!(answer["result"]["reason"], "session_not_found");
    let load = other
        .request("session/load", load_params(&env, &session))
        .await
        .expect("answered");
    assert!(load.get("error").is_some(), "the holder keeps it: {load}");
    assert_eq!(snapshot(dir), changed, "no file is touched");
    // The holder still rewinds it.
    let answer = rewind(&mut holder, params(json!({}))).await;
    assert_eq!(answer["result"]["rewound"], true, "{answer}");
}

#[tokio::test]
async fn what_a_subagent_changed_goes_back_with_its_parents_rewind() {
    const CHILD_MODEL: &str = "child-model";
    let env = TestEnv::new(vec![
        MockReply::text(&["first answer"]),
        MockReply::tool_call(
            "d",
            "delegate_task",
            json!({"goal": "edit the files", "context": "in the working directory"}),
        ),
        MockReply::text(&["delegated"]),
    ])
    .await;
    env.write_config(&format!(
        "mode = \"yolo\"\n[learning]\nskill_review_after = 0\nmemory_review_after = 0\n[auxiliary.subagent]\nmodel = \"{CHILD_MODEL}\"\n"
    ));
    env.mock.script_for_model(
        CHILD_MODEL,
        vec![
            MockReply::tool_call(
                "t",
                "terminal",
                json!({"command": "sed -i 's/charlie/CHARLIE/' c.txt && rm d.txt"}),
            ),
            MockReply::tool_call(
                "w",
                "write_file",
                json!({"path": "a.txt", "content": "child\n"}),
            ),
            MockReply::text(&["child done"]),
        ],
    );
    seed(env.workspace.path());
    let dir = env.workspace.path();
    let (mut agent, session) = env.session().await;
    let (first, first_updates) = prompt(&mut agent, &session, "look around").await;
    let (_, first_answer) = ids_of(&first, &first_updates);
    let before = snapshot(dir);
    let (second, _) = prompt(&mut agent, &session, "delegate it").await;
    assert_eq!(stop_reason(&second), "end_turn", "{second}");
    assert_ne!(snapshot(dir), before, "the child changed the workspace");
    let answer = rewind(
        &mut agent,
        json!({
            "sessionId": session,
            "beforeMessage": point(&user_id(&second), "delegate it"),
            "resumeAtMessage": point(&first_answer, "first answer"),
            "restoreFiles": true,
        }),
    )
    .await;
    assert_eq!(answer["result"]["rewound"], true, "{answer}");
    assert_eq!(snapshot(dir), before, "{answer}");
}
