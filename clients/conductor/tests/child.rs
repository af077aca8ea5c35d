//! A scripted ACP child (`talaria-acp-child`) driven through the conductor: its answer and
//! updates, what it asks of the host, and how a crash, a hang and a cancellation end a prompt.

// A test crate: a failed set-up step is a failed test (`expect_used` is for production code).
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use talaria_conductor::{AgentCommand, ChildAgent, ChildError, ChildHost, HostFuture, Timings};
use talaria_protocol::{acp, errors};
use tokio_util::sync::CancellationToken;

/// Serves files under its folder (refusing `secret`), answers questions after `think`, and
/// runs terminals with `sh` at once.
#[derive(Default)]
struct TestHost {
    root: PathBuf,
    updates: Mutex<Vec<Value>>,
    think: Duration,
    terminals: Mutex<Vec<(i32, String)>>,
}

impl TestHost {
    fn new(root: &Path) -> Arc<Self> {
        Arc::new(Self {
            root: root.to_path_buf(),
            ..Self::default()
        })
    }
}

impl ChildHost for TestHost {
    fn update<'a>(&'a self, update: acp::SessionNotification) -> BoxFuture<'a, ()> {
        let value = serde_json::to_value(&update).unwrap_or_default();
        talaria_util::lock(&self.updates).push(value);
        async {}.boxed()
    }

    fn read_text_file<'a>(
        &'a self,
        request: acp::ReadTextFileRequest,
    ) -> HostFuture<'a, acp::ReadTextFileResponse> {
        async move {
            if request.path.ends_with("secret") {
                return Err(errors::invalid_params("that file is hidden"));
            }
            let text = std::fs::read_to_string(self.root.join(&request.path))
                .map_err(errors::internal_error)?;
            Ok(acp::ReadTextFileResponse::new(text))
        }
        .boxed()
    }

    fn write_text_file<'a>(
        &'a self,
        request: acp::WriteTextFileRequest,
    ) -> HostFuture<'a, acp::WriteTextFileResponse> {
        async move {
            std::fs::write(self.root.join(&request.path), &request.content)
                .map_err(errors::internal_error)?;
            Ok(acp::WriteTextFileResponse::default())
        }
        .boxed()
    }

    fn request_permission<'a>(
        &'a self,
        request: acp::RequestPermissionRequest,
    ) -> HostFuture<'a, acp::RequestPermissionResponse> {
        async move {
            tokio::time::sleep(self.think).await;
            let first = request.options[0].option_id.clone();
            Ok(acp::RequestPermissionResponse::new(
                acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(first)),
            ))
        }
        .boxed()
    }

    fn create_terminal<'a>(
        &'a self,
        request: acp::CreateTerminalRequest,
    ) -> HostFuture<'a, acp::CreateTerminalResponse> {
        async move {
            let output = tokio::process::Command::new(&request.command)
                .args(&request.args)
                .output()
                .await
                .map_err(errors::internal_error)?;
            let mut terminals = talaria_util::lock(&self.terminals);
            terminals.push((
                output.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&output.stdout).into_owned(),
            ));
            Ok(acp::CreateTerminalResponse::new(format!(
                "t{}",
                terminals.len()
            )))
        }
        .boxed()
    }

    fn terminal_output<'a>(
        &'a self,
        _request: acp::TerminalOutputRequest,
    ) -> HostFuture<'a, acp::TerminalOutputResponse> {
        let last = talaria_util::lock(&self.terminals).last().cloned();
        async move {
            let (_, output) = last.ok_or_else(|| errors::invalid_params("no terminal"))?;
            Ok(acp::TerminalOutputResponse::new(output, false))
        }
        .boxed()
    }

    fn wait_for_terminal_exit<'a>(
        &'a self,
        _request: acp::WaitForTerminalExitRequest,
    ) -> HostFuture<'a, acp::WaitForTerminalExitResponse> {
        let last = talaria_util::lock(&self.terminals).last().cloned();
        async move {
            let (code, _) = last.ok_or_else(|| errors::invalid_params("no terminal"))?;
            let status = acp::TerminalExitStatus::new().exit_code(u32::try_from(code).ok());
            Ok(acp::WaitForTerminalExitResponse::new(status))
        }
        .boxed()
    }

    fn kill_terminal<'a>(
        &'a self,
        _request: acp::KillTerminalRequest,
    ) -> HostFuture<'a, acp::KillTerminalResponse> {
        async { Ok(acp::KillTerminalResponse::default()) }.boxed()
    }

    fn release_terminal<'a>(
        &'a self,
        _request: acp::ReleaseTerminalRequest,
    ) -> HostFuture<'a, acp::ReleaseTerminalResponse> {
        async { Ok(acp::ReleaseTerminalResponse::default()) }.boxed()
    }

    fn capabilities(&self) -> acp::ClientCapabilities {
        acp::ClientCapabilities::new()
            .fs(acp::FileSystemCapabilities::new()
                .read_text_file(true)
                .write_text_file(true))
            .terminal(true)
    }
}

/// The scripted child, playing `prompts`, in `dir`.
fn scripted(dir: &Path, prompts: Value) -> AgentCommand {
    let script = dir.join("script.json");
    std::fs::write(&script, json!({ "prompts": prompts }).to_string()).expect("script");
    AgentCommand {
        name: "scripted".into(),
        program: talaria_harness::binary::workspace_bin("talaria-harness", "talaria-acp-child"),
        args: Vec::new(),
        env: vec![("TALARIA_CHILD_SCRIPT".into(), script.display().to_string())],
        launcher: Vec::new(),
    }
}

fn quick() -> Timings {
    Timings {
        start: Duration::from_secs(30),
        idle: Duration::from_millis(600),
        cancel_grace: Duration::from_millis(500),
    }
}

async fn started(dir: &Path, host: Arc<TestHost>, prompts: Value) -> (ChildAgent, String) {
    let child = ChildAgent::start(&scripted(dir, prompts), dir, host, quick())
        .await
        .expect("the child starts");
    let session = child.new_session(dir, Vec::new()).await.expect("a session");
    (child, session)
}

fn text(words: &str) -> Vec<acp::ContentBlock> {
    vec![acp::ContentBlock::Text(acp::TextContent::new(words))]
}

#[tokio::test]
async fn a_child_starts_and_its_answer_and_updates_come_through() {
    let dir = tempfile::tempdir().expect("dir");
    let host = TestHost::new(dir.path());
    let script = json!([[{"say": "hello "}, {"tool_call": "looked"}, {"say": "world"},
        {"usage": {"input": 7, "output": 3}}]]);
    let (child, session) = started(dir.path(), host.clone(), script).await;
    let info = child.info();
    assert_eq!(
        info.implementation.as_ref().map(|i| i.name.as_str()),
        Some("acp-child")
    );
    let outcome = child
        .prompt(&session, text("go"), &CancellationToken::new())
        .await
        .expect("an answer");
    assert_eq!(outcome.answer, "hello world");
    assert_eq!(outcome.stop_reason, acp::StopReason::EndTurn);
    assert_eq!(outcome.usage.map(|u| u.total_tokens), Some(10));
    let kinds: Vec<String> = talaria_util::lock(&host.updates)
        .iter()
        .map(|u| {
            u["update"]["sessionUpdate"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        ["agent_message_chunk", "tool_call", "agent_message_chunk"]
    );
    child.stop().await;
}

#[tokio::test]
async fn what_the_child_asks_is_answered_by_the_host() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("notes.txt"), "the notes").expect("notes");
    let host = TestHost::new(dir.path());
    let script = json!([[{"read": "notes.txt"}, {"read": "secret"},
        {"write": {"path": "out.txt", "content": "written"}}, {"ask": "may I?"},
        {"terminal": "echo from-terminal; exit 3"}]]);
    let (child, session) = started(dir.path(), host, script).await;
    let outcome = child
        .prompt(&session, text("work"), &CancellationToken::new())
        .await
        .expect("an answer");
    assert!(
        outcome.answer.contains("read notes.txt: the notes"),
        "{}",
        outcome.answer
    );
    assert!(
        outcome
            .answer
            .contains("read secret: error: Invalid params: that file is hidden"),
        "{}",
        outcome.answer
    );
    assert!(outcome.answer.contains("wrote: ok"), "{}", outcome.answer);
    assert!(
        outcome.answer.contains("permission: yes"),
        "{}",
        outcome.answer
    );
    assert!(
        outcome.answer.contains("terminal exit 3: from-terminal"),
        "{}",
        outcome.answer
    );
    let written = std::fs::read_to_string(dir.path().join("out.txt")).expect("written");
    assert_eq!(written, "written");
}

#[tokio::test]
async fn a_child_that_crashes_mid_turn_is_an_error_with_its_last_words() {
    let dir = tempfile::tempdir().expect("dir");
    let script = json!([[{"say": "starting"}, {"crash": 3}]]);
    let (child, session) = started(dir.path(), TestHost::new(dir.path()), script).await;
    let error = child
        .prompt(&session, text("go"), &CancellationToken::new())
        .await
        .expect_err("the crash ends the prompt");
    assert!(matches!(error, ChildError::Exited { .. }), "{error}");
    assert!(error.to_string().contains("exit status: 3"), "{error}");
    assert!(error.to_string().contains("crashing on purpose"), "{error}");
}

#[tokio::test]
async fn a_child_that_hangs_is_stopped_after_the_idle_limit() {
    let dir = tempfile::tempdir().expect("dir");
    let script = json!([[{"say": "thinking"}, {"hang": true}]]);
    let (child, session) = started(dir.path(), TestHost::new(dir.path()), script).await;
    let error = child
        .prompt(&session, text("go"), &CancellationToken::new())
        .await
        .expect_err("the hang ends the prompt");
    assert!(matches!(error, ChildError::Hung { .. }), "{error}");
    assert!(
        error
            .stderr_tail()
            .iter()
            .any(|l| l.contains("hanging on purpose")),
        "{error}"
    );
}

#[tokio::test]
async fn a_question_the_user_takes_long_to_answer_is_not_a_hang() {
    let dir = tempfile::tempdir().expect("dir");
    let host = Arc::new(TestHost {
        root: dir.path().to_path_buf(),
        think: Duration::from_millis(1500),
        ..TestHost::default()
    });
    let script = json!([[{"ask": "may I?"}, {"say": " done"}]]);
    let (child, session) = started(dir.path(), host, script).await;
    let outcome = child
        .prompt(&session, text("go"), &CancellationToken::new())
        .await
        .expect("waiting on the user is not the child's silence");
    assert!(
        outcome.answer.contains("permission: yes done"),
        "{}",
        outcome.answer
    );
}

#[tokio::test]
async fn a_cancel_reaches_the_child_and_its_turn_ends_cancelled() {
    let dir = tempfile::tempdir().expect("dir");
    let script = json!([[{"say": "working"}, {"wait_cancel": true}]]);
    let (child, session) = started(dir.path(), TestHost::new(dir.path()), script).await;
    let cancel = CancellationToken::new();
    let firing = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        firing.cancel();
    });
    let outcome = child
        .prompt(&session, text("go"), &cancel)
        .await
        .expect("an answer");
    assert_eq!(outcome.stop_reason, acp::StopReason::Cancelled);
    assert_eq!(outcome.answer, "working");
}

#[tokio::test]
async fn a_child_that_ignores_a_cancel_is_killed_after_the_grace() {
    let dir = tempfile::tempdir().expect("dir");
    let script = json!([[{"hang": true}]]);
    let timings = Timings {
        idle: Duration::from_secs(60),
        ..quick()
    };
    let command = scripted(dir.path(), script);
    let child = ChildAgent::start(&command, dir.path(), TestHost::new(dir.path()), timings)
        .await
        .expect("starts");
    let session = child
        .new_session(dir.path(), Vec::new())
        .await
        .expect("session");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let started = std::time::Instant::now();
    let error = child
        .prompt(&session, text("go"), &cancel)
        .await
        .expect_err("killed");
    assert!(matches!(error, ChildError::Cancelled { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_command_that_is_not_there_is_a_start_error_naming_it() {
    let dir = tempfile::tempdir().expect("dir");
    let command = AgentCommand {
        name: "ghost".into(),
        program: dir.path().join("no-such-agent"),
        args: Vec::new(),
        env: Vec::new(),
        launcher: Vec::new(),
    };
    let error = ChildAgent::start(&command, dir.path(), TestHost::new(dir.path()), quick())
        .await
        .err()
        .expect("no start");
    assert!(matches!(error, ChildError::Spawn { .. }), "{error}");
    assert!(error.to_string().contains("no-such-agent"), "{error}");
}

#[tokio::test]
async fn a_child_that_is_not_an_acp_agent_is_an_error_not_a_wait() {
    let dir = tempfile::tempdir().expect("dir");
    let command = AgentCommand {
        name: "echo".into(),
        program: "sh".into(),
        args: vec!["-c".into(), "echo not json; echo oops >&2; exit 2".into()],
        env: Vec::new(),
        launcher: Vec::new(),
    };
    let error = ChildAgent::start(&command, dir.path(), TestHost::new(dir.path()), quick())
        .await
        .err()
        .expect("no start");
    assert!(matches!(error, ChildError::Exited { .. }), "{error}");
    assert!(error.to_string().contains("oops"), "{error}");
}

/// Whether a process whose command line holds `marker` is still running.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|cmdline| {
            String::from_utf8_lossy(&cmdline)
                .replace('\0', " ")
                .contains(marker)
        })
}

#[tokio::test]
async fn what_a_hung_agent_started_ends_with_it() {
    let dir = tempfile::tempdir().expect("dir");
    let inner = scripted(dir.path(), json!([[{"hang": true}]]));
    // A wrapper that starts the real agent beside a process of its own (as `npx` does).
    let marker = format!("sleep 3{}", std::process::id() % 1000 + 1000);
    let command = AgentCommand {
        name: "wrapped".into(),
        program: "sh".into(),
        args: vec![
            "-c".into(),
            format!("{marker} & exec \"$0\""),
            inner.program.display().to_string(),
        ],
        env: inner.env.clone(),
        launcher: Vec::new(),
    };
    let child = ChildAgent::start(&command, dir.path(), TestHost::new(dir.path()), quick())
        .await
        .expect("starts");
    assert!(running(&marker), "the wrapper's own process runs");
    let session = child
        .new_session(dir.path(), Vec::new())
        .await
        .expect("session");
    let error = child
        .prompt(&session, text("go"), &CancellationToken::new())
        .await
        .expect_err("hung");
    assert!(matches!(error, ChildError::Hung { .. }), "{error}");
    child.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!running(&marker), "nothing the agent started outlives it");
}

#[tokio::test]
async fn the_agent_gets_only_what_a_program_needs_and_its_own_env() {
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("env.txt");
    let command = AgentCommand {
        name: "env".into(),
        program: "sh".into(),
        args: vec!["-c".into(), format!("env > {}", out.display())],
        env: vec![("GIVEN".into(), "yes".into())],
        launcher: Vec::new(),
    };
    let _ = ChildAgent::start(&command, dir.path(), TestHost::new(dir.path()), quick()).await;
    let env = std::fs::read_to_string(&out).expect("env written");
    assert!(env.contains("GIVEN=yes"), "{env}");
    assert!(env.contains("PATH="), "{env}");
    for secret in ["OPENAI_API_KEY", "CARGO_", "RUST"] {
        assert!(!env.contains(secret), "{secret} in {env}");
    }
}

#[tokio::test]
async fn every_word_said_before_the_answer_is_in_the_answer() {
    let dir = tempfile::tempdir().expect("dir");
    let words: Vec<Value> = (0..50).map(|i| json!({"say": format!("w{i} ")})).collect();
    let prompts: Vec<Value> = (0..20).map(|_| json!(words)).collect();
    let (child, session) = started(dir.path(), TestHost::new(dir.path()), json!(prompts)).await;
    let expected: String = (0..50).map(|i| format!("w{i} ")).collect();
    for _ in 0..20 {
        let outcome = child
            .prompt(&session, text("go"), &CancellationToken::new())
            .await
            .expect("an answer");
        assert_eq!(outcome.answer, expected);
    }
}
