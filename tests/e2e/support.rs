//! Shared set-up: a mock LLM, a private TALARIA_HOME and workspace, and the agent process.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::{
    AgentProcess, MockLlm, MockReply, MockToolCall, WireFraming, binary::talaria_bin,
};
use tempfile::TempDir;

pub const WAIT: Duration = Duration::from_secs(20);

pub struct TestEnv {
    pub mock: MockLlm,
    pub home: TempDir,
    pub workspace: TempDir,
    pub extra_env: Vec<(String, String)>,
    /// Arguments after `talaria acp` (`--record DIR`, …).
    pub args: Vec<String>,
    pub api_key: Option<String>,
    /// The agent runs as this user and group (`nobody`) because the test runs as root: a
    /// real home to protect, and no root rights to hide a missing sandbox behind.
    pub user: Option<(u32, u32)>,
}

/// The unprivileged user tests run the agent as when they run as root.
pub const NOBODY: (u32, u32) = (65534, 65534);

/// Whether this test process runs as root.
pub fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Gives `path` and everything below it to `user`.
pub fn give_to(path: &std::path::Path, user: (u32, u32)) {
    let _ = std::os::unix::fs::chown(path, Some(user.0), Some(user.1));
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            give_to(&entry.path(), user);
        }
    }
}

impl TestEnv {
    pub async fn new(script: Vec<MockReply>) -> TestEnv {
        TestEnv {
            mock: MockLlm::start(script).await.expect("mock starts"),
            home: tempfile::tempdir().expect("home"),
            workspace: tempfile::tempdir().expect("workspace"),
            extra_env: Vec::new(),
            args: Vec::new(),
            api_key: Some("test-key".into()),
            user: None,
        }
    }

    /// From now on the agent runs as an unprivileged user when the tests run as root; the
    /// home and workspace (and `also`) become that user's. Call it after writing the files
    /// the test needs.
    pub fn unprivileged(&mut self, also: &[&std::path::Path]) {
        if !running_as_root() {
            return;
        }
        for path in [self.home.path(), self.workspace.path()]
            .into_iter()
            .chain(also.iter().copied())
        {
            give_to(path, NOBODY);
        }
        self.user = Some(NOBODY);
    }

    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("HOME".into(), self.home.path().display().to_string()),
            (
                "TALARIA_HOME".into(),
                self.home.path().join("talaria").display().to_string(),
            ),
            ("OPENAI_BASE_URL".into(), self.mock.base_url()),
            ("TALARIA_MODEL".into(), "mock-model".into()),
            ("TALARIA_CONTEXT_WINDOW".into(), "64000".into()),
            ("TALARIA_LOG".into(), "debug".into()),
            // Titles from a model would add a request to every script; suites that test
            // titles turn them on.
            ("TALARIA_TITLES".into(), "off".into()),
        ];
        if let Some(key) = &self.api_key {
            env.push(("OPENAI_API_KEY".into(), key.clone()));
        }
        // CI runs the sandbox suites a second time without the namespaces layer.
        if let Ok(value) = std::env::var("TALARIA_SANDBOX_NAMESPACES") {
            env.push(("TALARIA_SANDBOX_NAMESPACES".into(), value));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }

    pub fn write_config(&self, text: &str) {
        let dir = self.home.path().join("talaria");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.toml"), text).expect("config");
    }

    pub async fn spawn_with(&self, framing: WireFraming) -> AgentProcess {
        let mut args = vec!["acp"];
        args.extend(self.args.iter().map(String::as_str));
        AgentProcess::spawn_as(&talaria_bin(), &args, &self.env(), framing, self.user)
            .await
            .expect("agent spawns")
    }

    pub async fn spawn(&self) -> AgentProcess {
        self.spawn_with(WireFraming::NewlineDelimited).await
    }

    /// A running agent that advertised `capabilities`, with one session in the workspace;
    /// also returns the `session/new` result.
    pub async fn session_with(&self, capabilities: Value) -> (AgentProcess, String, Value) {
        self.session_given(capabilities, json!([])).await
    }

    /// Like [`TestEnv::session_with`], with these `mcpServers`.
    pub async fn session_given(
        &self,
        capabilities: Value,
        mcp_servers: Value,
    ) -> (AgentProcess, String, Value) {
        let mut agent = self.spawn().await;
        agent
            .call(
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
            )
            .await
            .expect("initialize");
        let created = agent
            .call(
                "session/new",
                json!({"cwd": self.workspace.path(), "mcpServers": mcp_servers}),
            )
            .await
            .expect("session/new");
        let session = created["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        (agent, session, created)
    }

    /// A running agent with one session in the workspace.
    pub async fn session(&self) -> (AgentProcess, String) {
        let mut agent = self.spawn().await;
        let session = agent
            .start_session(self.workspace.path())
            .await
            .expect("session");
        (agent, session)
    }
}

pub fn text_prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// Sends a prompt and waits for its response; returns the response and the updates that
/// arrived before it.
pub async fn prompt(agent: &mut AgentProcess, session: &str, text: &str) -> (Value, Vec<Value>) {
    let before = agent.transcript.len();
    let id = agent
        .start_request("session/prompt", text_prompt(session, text))
        .await
        .expect("send prompt");
    let response = agent
        .wait_response(id, WAIT)
        .await
        .expect("prompt response");
    let updates = agent.transcript[before..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    (response, updates)
}

pub fn stop_reason(response: &Value) -> &str {
    response["result"]["stopReason"]
        .as_str()
        .unwrap_or("<error>")
}

/// The texts of the given update kind, in order.
pub fn chunks(updates: &[Value], kind: &str) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| {
            u["content"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Every stdout frame was a JSON-RPC 2.0 object.
pub fn assert_clean_stdout(agent: &AgentProcess) {
    assert!(
        agent.non_json_output().is_empty(),
        "non-JSON on stdout: {:?}",
        agent.non_json_output()
    );
    for message in &agent.transcript {
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC 2.0: {message}");
    }
}

/// A tool card as the client holds it after these updates: the `tool_call` merged with the
/// `tool_call_update`s that follow it (later fields replace earlier ones).
pub fn card_state<'a>(updates: impl IntoIterator<Item = &'a Value>, id: &str) -> Value {
    let mut card = serde_json::Map::new();
    for update in updates {
        if update["toolCallId"] != id {
            continue;
        }
        if let Some(fields) = update.as_object() {
            for (key, value) in fields {
                if key != "sessionUpdate" {
                    card.insert(key.clone(), value.clone());
                }
            }
        }
    }
    Value::Object(card)
}

/// The text of the last user-role message of a Chat Completions request (without the
/// environment Talaria puts in front of the first one).
pub fn last_user(body: &Value) -> String {
    let text = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    without_environment(text).to_string()
}

/// A user message's text without the environment (`# Environment …`) Talaria puts in front
/// of the first user message.
pub fn without_environment(text: &str) -> &str {
    match text.strip_prefix("# Environment\n") {
        Some(rest) => rest.split_once("\n\n").map_or(text, |(_, after)| after),
        None => text,
    }
}

/// The environment in front of a request's first user message.
pub fn environment_of(body: &Value) -> String {
    let first = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    first
        .strip_prefix("# Environment\n")
        .and_then(|rest| rest.split_once("\n\n"))
        .map(|(environment, _)| environment.to_string())
        .unwrap_or_default()
}

/// Tokens of a Chat Completions request as the model reads it: message texts, tool calls and
/// tool definitions, with a few tokens of framing per message.
pub fn request_tokens(body: &Value) -> u64 {
    let bpe = tiktoken_rs::cl100k_base_singleton();
    let count = |text: &str| bpe.encode_with_special_tokens(text).len() as u64;
    let messages: u64 = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            count(m["content"].as_str().unwrap_or_default())
                + m.get("tool_calls").map_or(0, |c| count(&c.to_string()))
                + 4
        })
        .sum();
    messages + count(&body["tools"].to_string())
}

/// The coding tools every session offers.
pub const CORE_TOOLS: [&str; 6] = [
    "read_file",
    "write_file",
    "patch",
    "search_files",
    "terminal",
    "todo",
];

/// The names of the tools a Chat Completions request offered.
pub fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A client that answers every permission question with `option` (an option id such as
/// `allow_always` or `reject_once`) and refuses any other request.
pub fn choose(
    option: &'static str,
) -> impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)> {
    move |method, _| match method {
        "session/request_permission" => Ok(Some(
            json!({"outcome": {"outcome": "selected", "optionId": option}}),
        )),
        other => Err((-32601, format!("unexpected {other}"))),
    }
}

/// Sends a prompt and drives it to its response, answering permission questions with
/// `option`.
pub async fn prompt_choosing(
    agent: &mut talaria_harness::AgentProcess,
    session: &str,
    text: &str,
    option: &'static str,
) -> Value {
    let id = agent
        .start_request("session/prompt", text_prompt(session, text))
        .await
        .expect("prompt");
    agent
        .drive(id, WAIT, choose(option))
        .await
        .expect("response")
}

/// Sends a prompt, allows the one permission question it asks, and returns its response.
pub async fn prompt_allowing_once(
    agent: &mut talaria_harness::AgentProcess,
    session: &str,
    text: &str,
) -> Value {
    let waiting = agent
        .start_request("session/prompt", text_prompt(session, text))
        .await
        .expect("prompt");
    let asked = agent
        .wait_for(WAIT, |m| m["method"] == "session/request_permission")
        .await
        .expect("asked");
    allow_once(agent, &asked).await;
    agent.wait_response(waiting, WAIT).await.expect("answer")
}

pub async fn allow_once(agent: &mut talaria_harness::AgentProcess, asked: &Value) {
    let allow = asked["params"]["options"]
        .as_array()
        .expect("options")
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .expect("allow")["optionId"]
        .clone();
    agent
        .respond(
            &asked["id"],
            json!({"outcome": {"outcome": "selected", "optionId": allow}}),
        )
        .await
        .expect("answer");
}

/// One model answer with several tool calls `(id, tool, arguments)`.
pub fn batch(calls: &[(&str, &str, Value)]) -> MockReply {
    MockReply::ToolCalls {
        calls: calls
            .iter()
            .map(|(id, name, args)| MockToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: args.to_string(),
            })
            .collect(),
        text: None,
        fragment_chars: None,
        usage: None,
        delay_ms: 0,
    }
}

/// The tool results the model read in request `index`, after those of request `after`.
pub fn tool_results(mock: &MockLlm, index: usize) -> Vec<String> {
    mock.requests()[index].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Every request body the mock received, as text (to assert that something never reached
/// the model).
pub fn everything_sent(mock: &MockLlm) -> String {
    mock.requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// An agent process that answered `initialize`.
pub async fn initialized(env: &TestEnv) -> AgentProcess {
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    agent
}

/// A fresh agent initialized with no client capabilities, and its `initialize` answer.
pub async fn initialize_answer(env: &TestEnv) -> (AgentProcess, Value) {
    let mut agent = env.spawn().await;
    let answer = agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await
        .expect("initialize");
    (agent, answer)
}

/// `session/load` (or `session/resume`) parameters for a session in the env's workspace.
pub fn load_params(env: &TestEnv, session: &str) -> Value {
    json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []})
}

/// `kill -9` of the agent.
pub fn kill_now(agent: &AgentProcess) {
    if let Some(pid) = agent.pid() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Runs `talaria doctor` with the env's variables only; whether it passed, and its report.
pub async fn doctor(env: &TestEnv, args: &[&str]) -> (bool, String) {
    let output = tokio::process::Command::new(talaria_bin())
        .arg("doctor")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .output()
        .await
        .expect("runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Runs `talaria trust ARGS` with the env's variables only; whether it passed, and what it
/// printed (stdout, then stderr).
pub fn trust_cli(env: &TestEnv, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(talaria_bin())
        .arg("trust")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .output()
        .expect("runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

impl TestEnv {
    /// Trusts the workspace as its user would (`talaria trust DIR`): its instructions,
    /// skills and hooks load from now on.
    pub fn trust_workspace(&self) {
        let workspace = self.workspace.path().display().to_string();
        let (ok, said) = trust_cli(self, &[&workspace]);
        assert!(ok, "talaria trust failed: {said}");
    }
}

/// Everything a program wrote to a pseudo-terminal, collected by a thread reading the master
/// side until the terminal closes.
#[derive(Clone)]
pub struct PtyOutput(std::sync::Arc<std::sync::Mutex<String>>);

impl PtyOutput {
    /// Starts collecting what is written to `master`'s terminal.
    pub fn collect(master: &std::fs::File) -> PtyOutput {
        use std::io::Read;
        let mut reader = master.try_clone().expect("the pty master");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let collected = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut text) = collected.lock() {
                    text.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        PtyOutput(seen)
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        self.0.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// The processes whose command line holds `tag` (the sandbox's own helpers aside).
pub fn tagged_processes(tag: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(tag) && !cmdline.contains("__sandbox"))
        .collect()
}

/// Another program holds SQLite's write lock on `path` for `period`; returns once it holds it.
pub fn hold_write_lock(
    path: &std::path::Path,
    period: std::time::Duration,
) -> std::thread::JoinHandle<()> {
    let (held, holding) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    let holder = std::thread::spawn(move || {
        let connection = rusqlite::Connection::open(&path).expect("open");
        connection
            .busy_timeout(std::time::Duration::from_secs(30))
            .expect("busy timeout");
        connection.execute_batch("BEGIN IMMEDIATE").expect("lock");
        held.send(()).expect("told");
        std::thread::sleep(period);
        connection.execute_batch("COMMIT").expect("unlock");
    });
    holding
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the lock was taken");
    holder
}

/// The non-empty answers of a record, in order.
pub fn assistant_texts(transcript: &talaria_record::Transcript) -> Vec<String> {
    transcript
        .entries()
        .iter()
        .filter_map(|e| match &e.body {
            talaria_record::EntryBody::Assistant(answer) if !answer.text.is_empty() => {
                Some(answer.text.clone())
            }
            _ => None,
        })
        .collect()
}

/// A notice's text: an ACP `notice`, or (to a client that did not advertise notices) a
/// thought chunk.
pub fn notice_text(update: &Value) -> Option<String> {
    match update["sessionUpdate"].as_str() {
        Some("notice") => update["title"].as_str().map(str::to_string),
        Some("agent_thought_chunk") => update["content"]["text"].as_str().map(str::to_string),
        _ => None,
    }
}

/// Whether the kernel enforces the sandbox here; fails unless it does or the machine is
/// declared without one (`TALARIA_ALLOW_NO_SANDBOX=1`).
pub fn sandbox_enforced() -> bool {
    if talaria_sandbox::availability().is_enforced() {
        return true;
    }
    assert!(
        std::env::var_os("TALARIA_ALLOW_NO_SANDBOX").is_some(),
        "no OS sandbox on this machine ({}); set TALARIA_ALLOW_NO_SANDBOX=1 where that is expected",
        talaria_sandbox::availability().describe()
    );
    false
}

/// Runs one prompt to its response; any question the agent asks the client fails the test.
pub async fn prompt_unasked(agent: &mut AgentProcess, session: &str) -> Value {
    let id = agent
        .start_request("session/prompt", text_prompt(session, "go"))
        .await
        .expect("prompt");
    agent
        .drive(id, WAIT, |method, params| {
            panic!("the agent asked the client for {method}: {params}")
        })
        .await
        .expect("response")
}

/// `talaria doctor` as the env's user (the unprivileged one when the tests run as root),
/// under a hard process limit when given (`prlimit`); whether it passed, and its report.
pub async fn doctor_as_user(env: &TestEnv, hard_limit: Option<u32>) -> (bool, String) {
    let bin = talaria_bin();
    let mut command = match hard_limit {
        Some(hard) => {
            let mut command = tokio::process::Command::new("/usr/bin/prlimit");
            command
                .arg(format!("--nproc={hard}:{hard}"))
                .arg("--")
                .arg(&bin);
            command
        }
        None => tokio::process::Command::new(&bin),
    };
    if let Some((uid, gid)) = env.user {
        command.uid(uid).gid(gid);
    }
    let output = command
        .arg("doctor")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.env())
        .output()
        .await
        .expect("doctor runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Runs `then` on a thread of its own 0.3 s after `marker` appears (a command under test
/// touches it once it runs; at most a minute's wait), to change the world while it runs.
pub fn once_started(
    marker: std::path::PathBuf,
    then: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !marker.exists() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        then();
    })
}

/// A throwaway PostgreSQL cluster (started off the runtime: the driver blocks) and an empty
/// database's URL on it.
pub async fn throwaway_database() -> (talaria_store::test_cluster::TestCluster, String) {
    tokio::task::spawn_blocking(|| {
        let cluster = talaria_store::test_cluster::TestCluster::start();
        let url = cluster.database();
        (cluster, url)
    })
    .await
    .expect("cluster")
}

/// A bind mount of `source` at `point`, undone when dropped.
pub struct BindMount {
    point: std::path::PathBuf,
}

impl BindMount {
    pub fn new(source: &std::path::Path, point: &std::path::Path) -> Option<BindMount> {
        let done = std::process::Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(point)
            .status()
            .is_ok_and(|status| status.success());
        done.then(|| BindMount {
            point: point.to_path_buf(),
        })
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.point)
            .status();
    }
}

/// The model a subagent asks for in the red-team tests (`[auxiliary.subagent] model`).
pub const CHILD_MODEL: &str = "child-model";

/// The parent's script: one `delegate_task` of `goal` to a subagent, then its own answer.
pub fn delegating_to_a_subagent(goal: &str) -> Vec<MockReply> {
    vec![
        MockReply::tool_call(
            "d1",
            "delegate_task",
            json!({"goal": goal, "context": "in the working directory"}),
        ),
        MockReply::text(&["Delegated."]),
    ]
}
