//! Spawn an ACP agent and drive it over stdio, or reach one in a `talaria serve` over
//! WebSocket ([`crate::websocket`]), recording every message it sends.
//!
//! Every line (or frame) the agent writes to stdout is kept in order. A line that is not JSON
//! is recorded in [`AgentProcess::non_json_output`], so tests can assert that stdout carries
//! only protocol messages.

use std::collections::VecDeque;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use std::time::Duration;
use talaria_util::lock;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// How messages are framed on the agent's stdin/stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFraming {
    NewlineDelimited,
    ContentLength,
}

/// A running agent: a child process over stdio, or a `talaria serve` over a WebSocket.
pub struct AgentProcess {
    peer: Peer,
    writer: Option<Writer>,
    framing: WireFraming,
    incoming: mpsc::UnboundedReceiver<Value>,
    /// Messages received but not yet consumed by a `wait_*` call.
    backlog: VecDeque<Value>,
    /// Every message received, in order.
    pub transcript: Vec<Value>,
    non_json: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    next_id: i64,
}

/// What the agent runs as.
enum Peer {
    Process(Child),
    /// The task that holds the socket (and takes it back after a drop).
    Socket(tokio::task::JoinHandle<()>),
}

/// Where messages to the agent go.
enum Writer {
    Pipe(ChildStdin),
    /// Whole messages, one per frame.
    Socket(mpsc::UnboundedSender<String>),
}

/// The default time to wait for any one message.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(20);

impl AgentProcess {
    /// Spawns `program args…` with exactly the given environment (plus `PATH`).
    pub async fn spawn(
        program: &Path,
        args: &[&str],
        env: &[(String, String)],
        framing: WireFraming,
    ) -> anyhow::Result<Self> {
        Self::spawn_as(program, args, env, framing, None).await
    }

    /// Like [`AgentProcess::spawn`], as the user and group `user` when given (the test must
    /// run as root to switch).
    pub async fn spawn_as(
        program: &Path,
        args: &[&str],
        env: &[(String, String)],
        framing: WireFraming,
        user: Option<(u32, u32)>,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(program);
        if let Some((uid, gid)) = user {
            command.uid(uid).gid(gid);
        }
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a terminal's Ctrl-C (sent to the foreground group) is
            // the client's to handle, not a kill signal for the agent.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("spawning {}", program.display()))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr_pipe = child.stderr.take().context("no stderr")?;
        // Unbounded: a test's agent under test, read to its end by the test (test support).
        let (tx, incoming) = mpsc::unbounded_channel();
        let non_json = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = non_json.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout);
            loop {
                let frame = match framing {
                    WireFraming::NewlineDelimited => read_line_frame(&mut reader).await,
                    WireFraming::ContentLength => read_content_length_frame(&mut reader).await,
                };
                let Some(frame) = frame else { break };
                match serde_json::from_str::<Value>(&frame) {
                    Ok(value) if value.is_object() => {
                        if tx.send(value).is_err() {
                            break;
                        }
                    }
                    _ => lock(&sink).push(frame),
                }
            }
        });
        let stderr_sink = stderr.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr_pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut text = lock(&stderr_sink);
                text.push_str(&line);
                text.push('\n');
            }
        });
        Ok(Self {
            peer: Peer::Process(child),
            writer: Some(Writer::Pipe(stdin)),
            framing,
            incoming,
            backlog: VecDeque::new(),
            transcript: Vec::new(),
            non_json,
            stderr,
            next_id: 1,
        })
    }

    /// An agent reached over a WebSocket: `incoming` what its task receives, `outgoing` where
    /// messages to it go, `log` what the task tells (see [`crate::websocket::connect`]).
    pub(crate) fn over_socket(
        task: tokio::task::JoinHandle<()>,
        incoming: mpsc::UnboundedReceiver<Value>,
        outgoing: mpsc::UnboundedSender<String>,
        log: Arc<Mutex<String>>,
    ) -> Self {
        Self {
            peer: Peer::Socket(task),
            writer: Some(Writer::Socket(outgoing)),
            framing: WireFraming::NewlineDelimited,
            incoming,
            backlog: VecDeque::new(),
            transcript: Vec::new(),
            non_json: Arc::default(),
            stderr: log,
            next_id: 1,
        }
    }

    /// The process id (none for an agent over a socket).
    pub fn pid(&self) -> Option<u32> {
        match &self.peer {
            Peer::Process(child) => child.id(),
            Peer::Socket(_) => None,
        }
    }

    /// Everything the agent wrote to stderr so far (over a socket: what the link told).
    pub fn stderr(&self) -> String {
        lock(&self.stderr).clone()
    }

    /// Output frames that were not JSON objects (must stay empty for a correct agent).
    pub fn non_json_output(&self) -> Vec<String> {
        lock(&self.non_json).clone()
    }

    /// Writes raw bytes to the agent's stdin (over a socket: one frame of them, as text).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match self.writer.as_mut().context("stdin closed")? {
            Writer::Pipe(stdin) => {
                stdin.write_all(bytes).await?;
                stdin.flush().await?;
            }
            Writer::Socket(frames) => {
                let text = String::from_utf8_lossy(bytes);
                frames
                    .send(text.trim_end_matches(['\r', '\n']).to_string())
                    .ok()
                    .context("the connection is closed")?;
            }
        }
        Ok(())
    }

    /// Sends one JSON message in the agent's framing.
    pub async fn send(&mut self, message: &Value) -> anyhow::Result<()> {
        let text = message.to_string();
        if let Some(Writer::Socket(frames)) = &self.writer {
            return frames.send(text).ok().context("the connection is closed");
        }
        let bytes = match self.framing {
            WireFraming::NewlineDelimited => format!("{text}\n"),
            WireFraming::ContentLength => format!("Content-Length: {}\r\n\r\n{text}", text.len()),
        };
        self.send_raw(bytes.as_bytes()).await
    }

    /// Sends a request and returns its id without waiting.
    pub async fn start_request(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        Ok(id)
    }

    /// Sends a request and waits for its response (the whole response object).
    pub async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.start_request(method, params).await?;
        self.wait_response(id, DEFAULT_WAIT).await
    }

    /// Sends a request and returns its `result`, failing on an error response.
    pub async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let response = self.request(method, params).await?;
        match response.get("result") {
            Some(result) => Ok(result.clone()),
            None => bail!("{method} failed: {response}"),
        }
    }

    /// Sends a notification.
    pub async fn notify(&mut self, method: &str, params: Value) -> anyhow::Result<()> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    async fn receive(&mut self, timeout: Duration) -> anyhow::Result<Value> {
        match tokio::time::timeout(timeout, self.incoming.recv()).await {
            Ok(Some(message)) => {
                self.transcript.push(message.clone());
                Ok(message)
            }
            Ok(None) => bail!("agent output closed; stderr:\n{}", self.stderr()),
            Err(_) => bail!(
                "no message from the agent within {timeout:?}; stderr:\n{}",
                self.stderr()
            ),
        }
    }
    /// The next message, whatever it is (backlog first); `None` when the agent's output ended.
    pub async fn next_message(&mut self) -> Option<Value> {
        if let Some(message) = self.backlog.pop_front() {
            return Some(message);
        }
        let message = self.incoming.recv().await?;
        self.transcript.push(message.clone());
        Some(message)
    }

    /// Waits for the first message (backlog first) matching `predicate`; others stay queued.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        predicate: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        if let Some(pos) = self.backlog.iter().position(&predicate) {
            return self.backlog.remove(pos).context("backlog");
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let message = self.receive(left).await?;
            if predicate(&message) {
                return Ok(message);
            }
            self.backlog.push_back(message);
        }
    }

    /// Waits for the response to request `id`.
    pub async fn wait_response(&mut self, id: i64, timeout: Duration) -> anyhow::Result<Value> {
        self.wait_for(timeout, |m| {
            m.get("id") == Some(&json!(id)) && m.get("method").is_none()
        })
        .await
    }

    /// Answers a request the agent sent.
    pub async fn respond(&mut self, id: &Value, result: Value) -> anyhow::Result<()> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await
    }

    /// Answers a request the agent sent with an error.
    pub async fn respond_error(
        &mut self,
        id: &Value,
        code: i64,
        message: &str,
    ) -> anyhow::Result<()> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
            .await
    }

    /// Waits for the response to request `id`, answering every request the agent sends
    /// meanwhile with `handler(method, params)` (`Err((code, message))` for an error answer;
    /// `Ok(None)` to leave the request unanswered). Returns the response.
    pub async fn drive(
        &mut self,
        id: i64,
        timeout: Duration,
        mut handler: impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)>,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let message = self
                .wait_for(left, |m| {
                    (m.get("id") == Some(&json!(id)) && m.get("method").is_none())
                        || (m.get("method").is_some() && m.get("id").is_some())
                })
                .await?;
            let Some(method) = message.get("method").and_then(Value::as_str) else {
                return Ok(message);
            };
            let request_id = message["id"].clone();
            match handler(method, &message["params"]) {
                Ok(Some(result)) => self.respond(&request_id, result).await?,
                Ok(None) => {}
                Err((code, text)) => self.respond_error(&request_id, code, &text).await?,
            }
        }
    }

    /// Every request the agent sent to the client so far (method and params), in order.
    pub fn agent_requests(&self) -> Vec<(String, Value)> {
        self.transcript
            .iter()
            .filter(|m| m.get("id").is_some())
            .filter_map(|m| Some((m.get("method")?.as_str()?.to_string(), m["params"].clone())))
            .collect()
    }

    /// Waits for the next `session/update` of any kind.
    pub async fn next_update(&mut self, timeout: Duration) -> anyhow::Result<Value> {
        let message = self
            .wait_for(timeout, |m| m["method"] == "session/update")
            .await?;
        Ok(message["params"]["update"].clone())
    }

    /// Waits for a request from the agent to the client (e.g. a permission request).
    pub async fn next_agent_request(&mut self, timeout: Duration) -> anyhow::Result<Value> {
        self.wait_for(timeout, |m| {
            m.get("method").is_some() && m.get("id").is_some()
        })
        .await
    }

    /// Consumes and returns the queued messages.
    pub fn drain_backlog(&mut self) -> Vec<Value> {
        self.backlog.drain(..).collect()
    }

    /// All `session/update` payloads received so far, in order.
    pub fn updates(&self) -> Vec<Value> {
        self.transcript
            .iter()
            .filter(|m| m["method"] == "session/update")
            .map(|m| m["params"]["update"].clone())
            .collect()
    }

    /// `initialize` then `session/new` in `cwd`; returns the session id.
    pub async fn start_session(&mut self, cwd: &Path) -> anyhow::Result<String> {
        self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await?;
        let result = self
            .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await?;
        let session = result["sessionId"]
            .as_str()
            .map(str::to_string)
            .context("no sessionId")?;
        // The session's slash commands follow its creation; take them so the next update a
        // test waits for is its prompt's.
        self.wait_for(Duration::from_secs(10), |m| {
            m["method"] == "session/update"
                && m["params"]["sessionId"] == session.as_str()
                && m["params"]["update"]["sessionUpdate"] == "available_commands_update"
        })
        .await
        .context("no available_commands_update after session/new")?;
        Ok(session)
    }

    /// Closes stdin (EOF for the agent; over a socket, the socket is closed normally).
    pub fn close_stdin(&mut self) {
        self.writer = None;
    }

    /// Waits for the process to exit (over a socket: for the socket to be closed).
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let ended = match &mut self.peer {
            Peer::Process(child) => tokio::time::timeout(timeout, child.wait()).await,
            Peer::Socket(task) => {
                tokio::time::timeout(timeout, async {
                    let _ = task.await;
                    Ok(std::os::unix::process::ExitStatusExt::from_raw(0))
                })
                .await
            }
        };
        match ended {
            Ok(status) => Ok(status?),
            Err(_) => bail!("agent did not exit within {timeout:?}"),
        }
    }

    /// Drains remaining output after exit into the transcript.
    pub async fn collect_remaining(&mut self) {
        while let Ok(Some(message)) =
            tokio::time::timeout(Duration::from_millis(200), self.incoming.recv()).await
        {
            self.transcript.push(message);
        }
    }
}

async fn read_line_frame<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R) -> Option<String> {
    let mut line = String::new();
    match reader.read_line(&mut line).await {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end_matches(['\r', '\n']).to_string()),
    }
}

async fn read_content_length_frame<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Option<String> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            if length.is_some() {
                break;
            }
            continue;
        }
        match line.split_once(':') {
            Some((name, value)) if name.eq_ignore_ascii_case("content-length") => {
                length = value.trim().parse::<usize>().ok();
            }
            Some(_) => {}
            // A line that is not a header: report it as non-protocol output.
            None => return Some(line.to_string()),
        }
    }
    let mut body = vec![0u8; length?];
    reader.read_exact(&mut body).await.ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}
