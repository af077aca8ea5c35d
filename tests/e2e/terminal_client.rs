//! The terminal client `talaria-chat` driving the real agent.

use std::process::Stdio;

use serde_json::json;
use talaria_harness::MockReply;
use talaria_harness::binary::{talaria_bin, workspace_bin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

pub(crate) fn chat(env: &TestEnv, args: &[&str]) -> tokio::process::Command {
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
        without_environment(
            env.mock.requests()[0].body["messages"][1]["content"]
                .as_str()
                .unwrap_or_default()
        ),
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
            || !seen[seen.find("? Allow").unwrap_or(0)..]
                .contains("[N] Always reject in this project")
        {
            let n = stderr.read(&mut buf).await.expect("read");
            assert!(n > 0, "stderr closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    assert!(asked.is_ok(), "no question asked: {seen}");
    assert!(seen.contains("Write made.txt"), "{seen}");
    // The question shows the edit as a diff, without colours (stderr is not a terminal).
    assert!(seen.contains("+typed yes"), "{seen}");
    assert!(
        !seen.contains('\u{1b}'),
        "no escape codes off a terminal: {seen:?}"
    );
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

#[tokio::test]
async fn ctrl_c_on_the_terminal_cancels_the_turn_and_the_agent_lives_on() {
    let env = TestEnv::new(vec![
        MockReply::Hang {
            chunks: vec!["thinking".into()],
        },
        MockReply::text(&["second answer"]),
    ])
    .await;
    let mut command = chat(&env, &[]);
    // The client in a group of its own, as a shell's job is: Ctrl-C goes to that whole group.
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().expect("spawned");
    let group = nix::unistd::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid"));
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let errors = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let collected = errors.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Ok(mut text) = collected.lock() {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    });
    let stderr_text = move || errors.lock().map(|t| t.clone()).unwrap_or_default();
    stdin.write_all(b"think hard\n").await.expect("prompt");
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(WAIT, async {
        while !seen.contains("thinking") {
            let n = stdout.read(&mut buf).await.expect("read");
            assert!(n > 0, "stdout closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await
    .expect("the answer started");
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).expect("ctrl-c");
    // The turn is cancelled, then the next prompt is answered by the same agent.
    tokio::time::timeout(WAIT, async {
        while !stderr_text().contains("(cancelled)") {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the turn was cancelled");
    stdin.write_all(b"again\n").await.expect("prompt");
    let answered = tokio::time::timeout(WAIT, async {
        while !seen.contains("second answer") {
            let n = stdout.read(&mut buf).await.expect("read");
            if n == 0 {
                return;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    if answered.is_err() || !seen.contains("second answer") {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        panic!(
            "the agent did not answer again.\nstdout: {seen}\nstderr: {}",
            stderr_text()
        );
    }
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("in time")
        .expect("waited");
    assert!(status.success());
    assert_eq!(env.mock.requests().len(), 2);
}

#[tokio::test]
async fn one_shot_exit_codes_say_how_the_turn_ended_and_notices_stay_off_stdout() {
    let env = TestEnv::new(vec![
        MockReply::Error {
            status: 400,
            body: json!({"error": {"message": "the mock refuses"}}).to_string(),
            headers: vec![],
        },
        MockReply::Hang {
            chunks: vec!["working".into()],
        },
    ])
    .await;
    let failed = tokio::time::timeout(WAIT, chat(&env, &["-p", "fail please"]).output())
        .await
        .expect("in time")
        .expect("ran");
    assert_eq!(failed.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert!(
        !stdout.contains("mock refuses") && !stdout.contains("[error]"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("mock refuses"), "{stderr}");
    assert_eq!(
        stderr.matches("mock refuses").count(),
        1,
        "the failure is told once: {stderr}"
    );

    let mut command = chat(&env, &["-p", "take your time"]);
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().expect("spawned");
    let group = nix::unistd::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid"));
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = String::new();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(WAIT, async {
        while !seen.contains("working") {
            let n = stdout.read(&mut buf).await.expect("read");
            assert!(n > 0, "stdout closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await
    .expect("started");
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).expect("ctrl-c");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("in time")
        .expect("waited");
    assert_eq!(status.code(), Some(130));
}

#[tokio::test]
async fn an_empty_line_at_a_permission_question_means_no() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "made.txt", "content": "no\n"}),
        ),
        MockReply::text(&["Declined."]),
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
    tokio::time::timeout(WAIT, async {
        while !seen.contains("[N] Always reject in this project") {
            let n = stderr.read(&mut buf).await.expect("read");
            assert!(n > 0, "stderr closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await
    .expect("asked");
    assert!(seen.contains("[n] Reject (Enter)"), "{seen}");
    stdin.write_all(b"\n").await.expect("answer");
    drop(stdin);
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("in time")
        .expect("ran");
    assert!(output.status.success());
    assert!(!env.workspace.path().join("made.txt").exists());
}

#[tokio::test]
async fn agent_runs_exactly_the_command_given() {
    let env = TestEnv::new(vec![MockReply::text(&["from the wrapper"])]).await;
    let dir = tempfile::tempdir().expect("dir");
    let wrapper = dir.path().join("my-agent");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n[ $# -eq 0 ] || {{ echo \"unexpected arguments: $*\" >&2; exit 3; }}\nexec {} acp\n",
            talaria_bin().display()
        ),
    )
    .expect("write");
    let mut permissions = std::fs::metadata(&wrapper).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&wrapper, permissions).expect("chmod");
    let output = tokio::process::Command::new(workspace_bin("talaria-chat", "talaria-chat"))
        .arg("--agent")
        .arg(&wrapper)
        .arg("--cwd")
        .arg(env.workspace.path())
        .args(["-p", "hi"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .output()
        .await
        .expect("ran");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "from the wrapper\n"
    );
}
