//! `talaria-chat` in a pseudo-terminal, as a user runs it: Ctrl-C (to the whole process group
//! while a turn runs; as a key at a prompt or a question), a line typed during a turn steering
//! it, `/queue TEXT` queueing TEXT behind it.

use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use talaria_harness::MockReply;
use talaria_harness::binary::{talaria_bin, workspace_bin};

use crate::support::*;

/// The pseudo-terminal's size.
pub(crate) const ROWS: u16 = 50;
pub(crate) const COLUMNS: u16 = 120;

/// A running `talaria-chat` on a pseudo-terminal, and everything it wrote there.
pub(crate) struct Pty {
    pub(crate) child: tokio::process::Child,
    master: std::fs::File,
    pub(crate) seen: PtyOutput,
}

impl Pty {
    pub(crate) fn spawn(env: &TestEnv) -> Pty {
        Pty::spawn_with(env.workspace.path(), &env.env(), &[])
    }

    /// `talaria-chat ARGS` in `cwd` with only these variables (and PATH, TERM).
    pub(crate) fn spawn_with(
        cwd: &std::path::Path,
        vars: &[(String, String)],
        args: &[&str],
    ) -> Pty {
        let size = nix::pty::Winsize {
            ws_row: ROWS,
            ws_col: COLUMNS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
        let slave: OwnedFd = pty.slave;
        let mut command =
            tokio::process::Command::new(workspace_bin("talaria-chat", "talaria-chat"));
        command
            .arg("--agent")
            .arg(talaria_bin())
            .arg("--agent-arg")
            .arg("acp")
            .arg("--cwd")
            .arg(cwd)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TERM", "xterm")
            .envs(vars.iter().cloned())
            .stdin(Stdio::from(slave.try_clone().expect("fd")))
            .stdout(Stdio::from(slave.try_clone().expect("fd")))
            .stderr(Stdio::from(slave))
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().expect("spawned");
        let master = std::fs::File::from(pty.master);
        let seen = PtyOutput::collect(&master);
        Pty {
            child,
            master,
            seen,
        }
    }

    pub(crate) fn type_keys(&mut self, keys: &str) {
        use std::io::Write;
        self.master.write_all(keys.as_bytes()).expect("type");
        self.master.flush().expect("flush");
    }

    pub(crate) fn text(&self) -> String {
        self.seen.text()
    }

    pub(crate) async fn wait_for(&self, needle: &str) {
        let found = tokio::time::timeout(WAIT, async {
            while !self.text().contains(needle) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "waited for {needle:?}; the terminal shows:\n{}",
            self.text()
        );
    }

    /// Waits for `needle` to appear after the last `marker`.
    pub(crate) async fn wait_for_after(&self, marker: &str, needle: &str) {
        let found = tokio::time::timeout(WAIT, async {
            loop {
                let text = self.text();
                if text
                    .rfind(marker)
                    .is_some_and(|at| text[at + marker.len()..].contains(needle))
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "waited for {needle:?} after {marker:?}; the terminal shows:\n{}",
            self.text()
        );
    }

    fn interrupt_group(&self) {
        let pid = i32::try_from(self.child.id().expect("pid")).expect("pid");
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        )
        .expect("ctrl-c");
    }

    pub(crate) async fn exit_code(mut self) -> Option<i32> {
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("exits in time")
            .expect("waited")
            .code()
    }
}

#[tokio::test]
async fn ctrl_c_in_a_terminal_cancels_the_turn_and_the_next_prompt_works() {
    let env = TestEnv::new(vec![
        MockReply::Hang {
            chunks: vec!["thinking".into()],
        },
        MockReply::text(&["second answer"]),
    ])
    .await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    // The banner says whether commands run in the OS sandbox.
    let sandbox = if talaria_sandbox::availability().is_enforced() {
        "· sandboxed ·"
    } else {
        "· NO SANDBOX on this machine ·"
    };
    assert!(pty.text().contains(sandbox), "{}", pty.text());
    pty.type_keys("think hard\r");
    pty.wait_for("thinking").await;
    pty.interrupt_group();
    pty.wait_for("(cancelled)").await;
    pty.type_keys("again\r");
    pty.wait_for("second answer").await;
    assert_eq!(env.mock.requests().len(), 2, "the same agent answered");
    // Ctrl-C twice at the prompt quits (a second after the Ctrl-C that cancelled the turn).
    pty.wait_for_after("second answer", "> ").await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    pty.type_keys("\u{3}");
    pty.wait_for("Ctrl-C again to quit").await;
    // The second press quits. On a loaded machine a press can land between two line reads,
    // where the terminal turns it into a signal that may merge with the next: press again
    // until it quits (a few times at most).
    let mut code = None;
    for _ in 0..6 {
        pty.type_keys("\u{3}");
        if let Ok(status) = tokio::time::timeout(Duration::from_millis(400), pty.child.wait()).await
        {
            code = status.expect("waited").code();
            break;
        }
    }
    assert_eq!(code, Some(130));
}

#[tokio::test]
async fn a_line_typed_during_a_turn_steers_it_and_shows_where_it_entered() {
    let env = TestEnv::new(vec![
        MockReply::Hang {
            chunks: vec!["slow start".into()],
        },
        MockReply::text(&["steered answer"]),
    ])
    .await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    pty.type_keys("first question\r");
    pty.wait_for("slow start").await;
    pty.type_keys("change of plan\r");
    pty.wait_for("» steered: change of plan").await;
    pty.wait_for("steered answer").await;
    let requests = env.mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "the streaming request was ended for the steer"
    );
    let messages = requests[1].body["messages"].to_string();
    let partial = messages.find("slow start").expect("what streamed stays");
    let steer = messages.find("change of plan").expect("the steer is sent");
    assert!(
        partial < steer,
        "the steer follows what streamed: {messages}"
    );
    assert!(
        !pty.text().contains("(queued: change of plan)"),
        "steered, not queued"
    );
}

#[tokio::test]
async fn a_line_queued_during_a_turn_waits_and_is_not_echoed_into_the_answer() {
    let env = TestEnv::new(vec![
        MockReply::Text {
            chunks: vec!["slow ".into(), "first ".into(), "answer".into()],
            reasoning: Vec::new(),
            delay_ms: 400,
            usage: None,
            finish_reason: None,
        },
        MockReply::text(&["queued answer"]),
    ])
    .await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    pty.type_keys("first question\r");
    pty.wait_for("slow").await;
    pty.type_keys("/queue next question\r");
    pty.wait_for("(queued: next question)").await;
    pty.wait_for("queued answer").await;
    let shown = pty.text();
    // What was typed shows only as the queued notice and, later, as the prompt sent.
    let typed = shown.matches("next question").count();
    let accounted = shown.matches("(queued: next question)").count()
        + shown.matches("> next question").count()
        + shown.matches("/queue next question").count();
    assert_eq!(
        typed, accounted,
        "typing is not echoed into the answer: {shown}"
    );
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].body.to_string().contains("next question"));
}

#[tokio::test]
async fn ctrl_c_at_a_permission_question_answers_cancel() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "made.txt", "content": "x"}),
        ),
        MockReply::text(&["understood"]),
    ])
    .await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    pty.type_keys("make a file\r");
    pty.wait_for("? Allow").await;
    pty.type_keys("\u{3}");
    pty.wait_for("(question cancelled)").await;
    pty.wait_for("(cancelled)").await;
    assert!(!env.workspace.path().join("made.txt").exists());
    pty.wait_for_after("(cancelled)", "> ").await;
    pty.type_keys("/quit\r");
    assert_eq!(pty.exit_code().await, Some(0));
}

#[tokio::test]
async fn tab_completes_built_in_and_agent_commands() {
    let env = TestEnv::new(Vec::new()).await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    pty.type_keys("/he\t\r");
    pty.wait_for("Commands:").await;
    // The agent's own command, completed from its available_commands_update.
    pty.wait_for_after("The agent's commands:", "/compact")
        .await;
    pty.type_keys("/comp\t\r");
    pty.wait_for("Context compaction failed").await;
    // A command's argument: the session's mode ids (typed at the prompt, not during a turn).
    pty.wait_for_after("Context compaction failed", "> ").await;
    pty.type_keys("/mode yo\t\r");
    pty.wait_for_after("/mode yolo", "ok").await;
    assert!(
        env.mock.requests().is_empty(),
        "no model call: the command went to the agent"
    );
    pty.type_keys("/quit\r");
    assert_eq!(pty.exit_code().await, Some(0));
}

/// What `talaria-chat` showed when it could not start a session, and its exit code.
async fn set_up_failure(env: &TestEnv) -> (String, Option<i32>) {
    let pty = Pty::spawn(env);
    pty.wait_for("could not start a session").await;
    let seen = pty.seen.clone();
    let code = pty.exit_code().await;
    // What was written before the exit reaches the reader.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = seen.text();
    (text, code)
}

#[tokio::test]
async fn a_set_up_problem_is_shown_as_readable_text_with_exit_code_2() {
    // A broken configuration file: the message keeps its line breaks and the caret diagram.
    let env = TestEnv::new(Vec::new()).await;
    env.write_config("model = \"qwen2.5-coder\n");
    let (broken, code) = set_up_failure(&env).await;
    assert_eq!(code, Some(2), "{broken}");
    assert!(broken.contains("config.toml, line 1"), "{broken}");
    assert!(broken.contains("1 | model = \"qwen2.5-coder"), "{broken}");
    // No configuration and no key at all.
    let mut bare = TestEnv::new(Vec::new()).await;
    bare.api_key = None;
    bare.extra_env
        .push(("OPENAI_BASE_URL".into(), "https://api.openai.com/v1".into()));
    let (missing, code) = set_up_failure(&bare).await;
    assert_eq!(code, Some(2), "{missing}");
    // Told in a short line with the set-up command (not the text written for editors).
    assert!(
        missing.contains("no API key for the openai provider"),
        "{missing}"
    );
    assert!(missing.contains("talaria setup`"), "{missing}");
    assert!(!missing.contains("Editors and SDK clients"), "{missing}");
    for screen in [broken, missing] {
        assert!(!screen.contains("jsonrpc"), "{screen}");
        assert!(!screen.contains("{\"error\""), "{screen}");
        assert!(!screen.contains("\\n"), "escaped line breaks: {screen}");
        assert!(!screen.contains("Invalid params"), "{screen}");
    }
}
