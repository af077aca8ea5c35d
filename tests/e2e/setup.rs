//! `talaria setup` in a pseudo-terminal, as the registry's clients run it (the "terminal"
//! auth method): the provider, the server's address, the key typed without echo, the model;
//! a one-token check against the server; `config.toml` written with mode 0600; the key never
//! shown; and the agent then starts sessions with what was written.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_harness::{AgentProcess, MockReply, WireFraming, binary::talaria_bin};

use crate::support::*;

const KEY: &str = "sk-typed-in-setup-7741";

/// `talaria setup` on a pseudo-terminal; everything it wrote there is collected.
struct Setup {
    child: tokio::process::Child,
    master: std::fs::File,
    seen: PtyOutput,
}

impl Setup {
    fn spawn(env: &TestEnv) -> Setup {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let slave: OwnedFd = pty.slave;
        let mut command = tokio::process::Command::new(talaria_bin());
        command
            .arg("setup")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TERM", "xterm")
            .env("HOME", env.home.path())
            .env("TALARIA_HOME", env.home.path().join("talaria"))
            .stdin(Stdio::from(slave.try_clone().expect("fd")))
            .stdout(Stdio::from(slave.try_clone().expect("fd")))
            .stderr(Stdio::from(slave))
            .kill_on_drop(true);
        let child = command.spawn().expect("talaria setup");
        let master = std::fs::File::from(pty.master);
        let seen = PtyOutput::collect(&master);
        Setup {
            child,
            master,
            seen,
        }
    }

    fn text(&self) -> String {
        self.seen.text()
    }

    /// Waits until the terminal shows `needle` (after what was seen before), then types.
    async fn answer(&mut self, needle: &str, typed: &str) {
        self.wait_for(needle).await;
        self.master.write_all(typed.as_bytes()).expect("type");
        self.master.flush().expect("flush");
    }

    /// Picks "another OpenAI-compatible server" at the mock's address.
    async fn other_server_at(&mut self, base_url: &str) {
        self.answer("Provider [", "3\n").await;
        self.answer("Server address", &format!("{base_url}\n"))
            .await;
    }

    /// Declines to try again and to save; setup ends, unsuccessfully.
    async fn give_up(&mut self) {
        self.answer("Try again?", "n\n").await;
        self.answer("Save these settings anyway?", "n\n").await;
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("setup ends")
            .expect("status");
        assert!(!status.success());
    }

    async fn wait_for(&self, needle: &str) {
        let started = Instant::now();
        while !self.text().contains(needle) {
            assert!(
                started.elapsed() < WAIT,
                "waited for {needle:?}; the terminal shows:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn setup_in_a_terminal_checks_and_writes_the_config_without_showing_the_key() {
    let mut env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    env.api_key = None;
    let mut setup = Setup::spawn(&env);
    setup.other_server_at(&env.mock.base_url()).await;
    setup.answer("API key", &format!("{KEY}\n")).await;
    setup.answer("Model [mock-model]", "\n").await;
    setup.wait_for("Talaria is ready").await;
    let status = tokio::time::timeout(WAIT, setup.child.wait())
        .await
        .expect("setup ends")
        .expect("status");
    assert!(status.success(), "{}", setup.text());
    let shown = setup.text();
    assert!(!shown.contains(KEY), "the key was shown:\n{shown}");
    assert!(shown.contains("✓ It answers"), "{shown}");
    // The check was a real call with the key typed.
    let requests = env.mock.requests();
    let call = requests
        .iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .expect("a check call");
    assert!(
        call.headers
            .iter()
            .any(|(name, value)| name.eq_ignore_ascii_case("authorization")
                && value == &format!("Bearer {KEY}")),
        "{:?}",
        call.headers
    );
    assert_eq!(call.body["model"], "mock-model");
    let path = env.home.path().join("talaria/config.toml");
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&path)
            .expect("config")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode, 0o600, "readable only by its owner");
    let written = std::fs::read_to_string(&path).expect("config");
    assert!(
        written.contains(KEY) && written.contains("mock-model"),
        "{written}"
    );
    // The agent starts sessions with it, no variable set.
    let agent_env: Vec<(String, String)> = vec![
        ("HOME".into(), env.home.path().display().to_string()),
        (
            "TALARIA_HOME".into(),
            env.home.path().join("talaria").display().to_string(),
        ),
        ("TALARIA_TITLES".into(), "off".into()),
    ];
    let mut agent = AgentProcess::spawn(
        &talaria_bin(),
        &["acp"],
        &agent_env,
        WireFraming::NewlineDelimited,
    )
    .await
    .expect("agent");
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("a session with the written configuration");
}

#[tokio::test]
async fn setup_says_why_a_check_failed_and_keeps_an_existing_config_unless_asked() {
    let env = TestEnv::new(vec![]).await;
    env.write_config("model = \"kept\"\n");
    let mut setup = Setup::spawn(&env);
    setup
        .answer("Change its provider, model and key", "\n")
        .await;
    let status = tokio::time::timeout(WAIT, setup.child.wait())
        .await
        .expect("setup ends")
        .expect("status");
    assert!(!status.success());
    setup.wait_for("left as it was").await;
    assert_eq!(
        std::fs::read_to_string(env.home.path().join("talaria/config.toml")).expect("config"),
        "model = \"kept\"\n"
    );
    // Changed on request; a server that refuses is named, with its fix, and nothing is
    // written unless asked.
    let mut setup = Setup::spawn(&env);
    setup
        .answer("Change its provider, model and key", "y\n")
        .await;
    setup.answer("Provider [", "3\n").await;
    setup.answer("Server address", "127.0.0.1:9\n").await;
    setup
        .answer("starts with http", "http://127.0.0.1:9/v1\n")
        .await;
    setup.answer("API key", "\n").await;
    setup.answer("Model:", "some-model\n").await;
    setup.give_up().await;
    setup.wait_for("talaria setup: cannot connect").await;
    let shown = setup.text();
    assert!(
        shown.contains("connection refused") && shown.contains("fix:"),
        "{shown}"
    );
    assert_eq!(
        std::fs::read_to_string(env.home.path().join("talaria/config.toml")).expect("config"),
        "model = \"kept\"\n"
    );
}

#[tokio::test]
async fn setup_flags_a_refused_key_as_soon_as_it_is_typed_and_asks_again() {
    let mut env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    env.api_key = None;
    env.mock.require_key(KEY);
    let mut setup = Setup::spawn(&env);
    setup.other_server_at(&env.mock.base_url()).await;
    setup.answer("API key", "sk-mistyped\n").await;
    // Refused at once, before the model is asked for: the key is asked for again.
    setup.wait_for("refused this key (HTTP 401)").await;
    let before_retry = setup.text();
    assert!(!before_retry.contains("Model"), "{before_retry}");
    let asked_again = before_retry.matches("API key").count();
    assert_eq!(asked_again, 2, "{before_retry}");
    setup
        .answer("Type the key again.", &format!("{KEY}\n"))
        .await;
    setup.answer("Model [mock-model]", "\n").await;
    setup.wait_for("Talaria is ready").await;
    let status = tokio::time::timeout(WAIT, setup.child.wait())
        .await
        .expect("setup ends")
        .expect("status");
    assert!(status.success(), "{}", setup.text());
    let written =
        std::fs::read_to_string(env.home.path().join("talaria/config.toml")).expect("config");
    assert!(
        written.contains(KEY) && !written.contains("sk-mistyped"),
        "{written}"
    );
}

#[tokio::test]
async fn a_failed_check_names_the_file_the_user_edits_never_a_temporary_copy() {
    let mut env = TestEnv::new(vec![MockReply::Error {
        status: 401,
        body: r#"{"error":{"message":"Incorrect API key provided.","code":"invalid_api_key"}}"#
            .into(),
        headers: vec![],
    }])
    .await;
    env.api_key = None;
    let mut setup = Setup::spawn(&env);
    setup.other_server_at(&env.mock.base_url()).await;
    setup.answer("API key", "sk-revoked\n").await;
    setup.answer("Model [mock-model]", "\n").await;
    setup.give_up().await;
    let shown = setup.text();
    let real = env.home.path().join("talaria/config.toml");
    let fix = shown
        .lines()
        .find(|line| line.contains("fix:"))
        .unwrap_or_else(|| panic!("no fix shown:\n{shown}"));
    assert!(fix.contains(&real.display().to_string()), "{fix}");
    assert_eq!(fix.matches("config.toml").count(), 1, "{fix}");
}

/// A configuration with comments, another service's key and an MCP server's `api_key`.
const KEPT_BY_HAND: &str = "# My settings, kept by hand.\n\
provider = \"anthropic\"   # for now\n\
model = \"claude-sonnet-4-5\"\n\
\n\
[anthropic]\n\
api_key = \"sk-ant-kept\"  # anthropic stays\n\
\n\
[mcp_servers.notes]\n\
command = \"notes-mcp\"\n\
env = { api_key = \"mcp-key-stays\" }\n";

#[tokio::test]
async fn setup_on_an_existing_file_changes_only_the_provider_model_and_key_and_says_no_key_was_typed()
 {
    let mut env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    env.api_key = None;
    env.write_config(KEPT_BY_HAND);
    let mut setup = Setup::spawn(&env);
    setup
        .answer("every other setting and comment stays", "y\n")
        .await;
    setup.other_server_at(&env.mock.base_url()).await;
    // A local server: Enter for no key.
    setup.answer("Enter for none", "\n").await;
    setup.answer("Model [mock-model]", "\n").await;
    setup.wait_for("Talaria is ready").await;
    let status = tokio::time::timeout(WAIT, setup.child.wait())
        .await
        .expect("setup ends")
        .expect("status");
    assert!(status.success(), "{}", setup.text());
    let shown = setup.text();
    assert!(!shown.contains("the key is stored"), "{shown}");
    assert!(
        shown.contains("no key was typed, and none is stored"),
        "{shown}"
    );
    let written =
        std::fs::read_to_string(env.home.path().join("talaria/config.toml")).expect("config");
    let expected = KEPT_BY_HAND
        .replace("\"anthropic\"   # for now", "\"openai\"   # for now")
        .replace("\"claude-sonnet-4-5\"", "\"mock-model\"")
        + &format!(
            "\n[openai]\nbase_url = \"{}\"\napi_key = \"\"\n",
            env.mock.base_url()
        );
    assert_eq!(written, expected);
}

#[tokio::test]
async fn setup_offers_the_built_in_demo_and_the_agent_then_answers_with_it_and_no_key() {
    let mut env = TestEnv::new(Vec::new()).await;
    env.api_key = None;
    let mut setup = Setup::spawn(&env);
    setup.wait_for("Provider [").await;
    let menu = setup.text();
    let number = menu
        .lines()
        .find(|line| line.contains("the built-in demo"))
        .and_then(|line| line.trim().split(')').next())
        .unwrap_or_else(|| panic!("the demo is offered:\n{menu}"))
        .to_string();
    setup.answer("Provider [", &format!("{number}\n")).await;
    setup.wait_for("Talaria is ready with its demo model").await;
    let status = tokio::time::timeout(WAIT, setup.child.wait())
        .await
        .expect("setup ends")
        .expect("status");
    assert!(status.success(), "{}", setup.text());
    assert!(
        setup.text().contains("no key was typed"),
        "{}",
        setup.text()
    );
    let written =
        std::fs::read_to_string(env.home.path().join("talaria/config.toml")).expect("config");
    assert!(
        written.contains("provider = \"demo\"\nmodel = \"talaria-demo\"\n"),
        "{written}"
    );
    // An editor's session starts with no key and the demo answers.
    let mut agent = initialized(&env).await;
    let created = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("a session with the demo");
    let session = created["sessionId"].as_str().expect("id").to_string();
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "hi"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, WAIT, choose("reject_once"))
        .await
        .expect("answered");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let text = chunks(&agent.updates(), "agent_message_chunk").join("");
    assert!(text.contains("**Talaria demo**"), "{text}");
    assert!(text.contains("nothing was written"), "declined: {text}");
    assert!(env.mock.requests().is_empty(), "no model was called");
}
