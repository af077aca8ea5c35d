//! The terminal client `talaria-chat` driving the real agent.

use std::process::Stdio;

use serde_json::json;
use talaria_harness::MockReply;
use talaria_harness::binary::{talaria_bin, workspace_bin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

fn chat(env: &TestEnv, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(workspace_bin("talaria-chat", "talaria-chat"));
    command
        .arg("--agent")
        .arg(talaria_bin())
        .arg("--cwd")
        .arg(env.workspace.path())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .kill_on_drop(true);
    command
}

#[tokio::test]
async fn one_shot_prints_just_the_answer_on_stdout() {
    let env = TestEnv::new(vec![MockReply::text(&["Hello ", "from the terminal."])]).await;
    let output = tokio::time::timeout(WAIT, chat(&env, &["-p", "say hello"]).output())
        .await
        .expect("in time")
        .expect("ran");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "Hello from the terminal.\n"
    );
    assert_eq!(
        env.mock.requests()[0].body["messages"][1]["content"],
        "say hello"
    );
}

#[tokio::test]
async fn interactive_permission_questions_are_answered_on_the_terminal() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "made.txt", "content": "typed yes\n"}),
        ),
        MockReply::text(&["Done."]),
    ])
    .await;
    let mut child = chat(&env, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawned");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stderr = child.stderr.take().expect("stderr");
    stdin
        .write_all(b"please write the file\n")
        .await
        .expect("prompt");
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let asked = tokio::time::timeout(WAIT, async {
        // The whole question, up to its choices (stderr may arrive in pieces).
        while !seen.contains("? Allow")
            || !seen[seen.find("? Allow").unwrap_or(0)..].contains("[N] never")
        {
            let n = stderr.read(&mut buf).await.expect("read");
            assert!(n > 0, "stderr closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    assert!(asked.is_ok(), "no question asked: {seen}");
    assert!(seen.contains("Write made.txt"), "{seen}");
    stdin.write_all(b"y\n").await.expect("answer");
    drop(stdin);
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("in time")
        .expect("ran");
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Done.\n");
    let written = std::fs::read_to_string(env.workspace.path().join("made.txt")).expect("file");
    assert_eq!(written, "typed yes\n");
}
