//! A running child agent: started, initialized, and driven through its sessions.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_protocol::{Framing, Peer, PeerOptions, acp};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::command::AgentCommand;
use crate::error::ChildError;
use crate::host::ChildHost;
use crate::requests::{Activity, answer_child};
use crate::stderr_tail::StderrTail;

/// How long a child is given for each thing.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// To answer `initialize` (its own start included).
    pub start: Duration,
    /// Silence during a prompt, while nothing waits on the host, before it counts as hung.
    pub idle: Duration,
    /// After `session/cancel`, before the process is killed.
    pub cancel_grace: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            start: Duration::from_secs(60),
            idle: Duration::from_secs(300),
            cancel_grace: Duration::from_secs(5),
        }
    }
}

/// What the child said of itself at `initialize`.
#[derive(Debug, Clone)]
pub struct AgentInfo {
    /// The name it is configured under.
    pub name: String,
    /// Its own name and version, when it gave them.
    pub implementation: Option<acp::Implementation>,
    pub protocol_version: talaria_protocol::ProtocolVersion,
    pub capabilities: acp::AgentCapabilities,
    pub auth_methods: Vec<acp::AuthMethod>,
}

/// How a prompt ended.
#[derive(Debug, Clone)]
pub struct PromptOutcome {
    pub stop_reason: acp::StopReason,
    /// The text the child streamed as its answer during this prompt.
    pub answer: String,
    pub usage: Option<acp::Usage>,
}

/// A child agent's process and connection; the process is killed when this is dropped.
pub struct ChildAgent {
    info: AgentInfo,
    peer: Peer,
    process: tokio::sync::Mutex<tokio::process::Child>,
    stderr: StderrTail,
    activity: Arc<Activity>,
    timings: Timings,
    tasks: Vec<JoinHandle<()>>,
    /// Its process group, killed when this ends however it ends.
    group: Group,
}

/// A child's process group (it leads it); dropping this kills every process left in it.
struct Group(Option<i32>);

impl Group {
    fn kill(&self) {
        if let Some(id) = self.0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(id),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

impl ChildAgent {
    /// Starts `command` in `cwd` and initializes it with what `host` serves.
    pub async fn start(
        command: &AgentCommand,
        cwd: &Path,
        host: Arc<dyn ChildHost>,
        timings: Timings,
    ) -> Result<Self, ChildError> {
        let name = command.name.clone();
        let mut process = command
            .process(cwd)
            .spawn()
            .map_err(|source| ChildError::Spawn {
                name: name.clone(),
                program: command.program.display().to_string(),
                source,
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) else {
            return Err(ChildError::Spawn {
                name,
                program: command.program.display().to_string(),
                source: std::io::Error::other("its standard streams were not piped"),
            });
        };
        let group = Group(process.id().and_then(|id| i32::try_from(id).ok()));
        let stderr = StderrTail::follow(stderr, name.clone());
        let options = PeerOptions {
            framing: Some(Framing::NewlineDelimited),
            ..PeerOptions::default()
        };
        let connection = talaria_protocol::connect(stdout, stdin, options);
        let (activity, settles) = Activity::new();
        let activity = Arc::new(activity);
        let answering = tokio::spawn(answer_child(
            connection.incoming,
            settles,
            connection.peer.clone(),
            host.clone(),
            activity.clone(),
        ));
        let mut child = Self {
            info: AgentInfo {
                name,
                implementation: None,
                protocol_version: talaria_protocol::ProtocolVersion::V1,
                capabilities: acp::AgentCapabilities::default(),
                auth_methods: Vec::new(),
            },
            peer: connection.peer,
            process: tokio::sync::Mutex::new(process),
            stderr,
            activity,
            timings,
            tasks: vec![answering, connection.reader],
            group,
        };
        child.initialize(host.capabilities()).await?;
        Ok(child)
    }

    async fn initialize(
        &mut self,
        capabilities: acp::ClientCapabilities,
    ) -> Result<(), ChildError> {
        let params = json!({
            "protocolVersion": talaria_protocol::ProtocolVersion::V1,
            "clientCapabilities": capabilities,
            "clientInfo": {"name": "talaria", "version": env!("CARGO_PKG_VERSION")},
        });
        let answer = tokio::time::timeout(self.timings.start, self.call("initialize", &params));
        let answer = match answer.await {
            Ok(answer) => answer?,
            Err(_) => return Err(self.hung(self.timings.start).await),
        };
        let answer: acp::InitializeResponse =
            serde_json::from_value(answer).map_err(|e| self.malformed("initialize", e))?;
        self.info.implementation = answer.agent_info;
        self.info.protocol_version = answer.protocol_version;
        self.info.capabilities = answer.agent_capabilities;
        self.info.auth_methods = answer.auth_methods;
        Ok(())
    }

    /// Whether its connection is still open (it has not ended or been killed).
    pub fn running(&self) -> bool {
        !self.peer.closed().is_cancelled()
    }

    pub fn info(&self) -> &AgentInfo {
        &self.info
    }

    /// The child's last lines of stderr.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr.lines()
    }

    /// Opens a session in `cwd` with these MCP servers; its id.
    pub async fn new_session(
        &self,
        cwd: &Path,
        mcp_servers: Vec<acp::McpServer>,
    ) -> Result<String, ChildError> {
        let params = acp::NewSessionRequest::new(cwd.to_path_buf()).mcp_servers(mcp_servers);
        let answer = tokio::time::timeout(self.timings.start, self.call("session/new", &params));
        let answer = match answer.await {
            Ok(answer) => answer?,
            Err(_) => return Err(self.hung(self.timings.start).await),
        };
        let answer: acp::NewSessionResponse =
            serde_json::from_value(answer).map_err(|e| self.malformed("session/new", e))?;
        Ok(answer.session_id.0.to_string())
    }

    /// Hands `session` a prompt and waits for its end (see the crate's invariants); the
    /// updates it streams meanwhile go to the host.
    pub async fn prompt(
        &self,
        session: &str,
        prompt: Vec<acp::ContentBlock>,
        cancel: &CancellationToken,
    ) -> Result<PromptOutcome, ChildError> {
        let params = acp::PromptRequest::new(acp::SessionId::new(session), prompt);
        self.activity.begin_answer(session);
        self.activity.heard();
        let never = CancellationToken::new();
        let answer = self.peer.request("session/prompt", &params, &never);
        tokio::pin!(answer);
        let mut tick = tokio::time::interval(self.tick());
        let mut cancelled_at: Option<Instant> = None;
        let answer = loop {
            tokio::select! {
                answer = &mut answer => break answer,
                () = cancel.cancelled(), if cancelled_at.is_none() => {
                    let params = acp::CancelNotification::new(acp::SessionId::new(session));
                    self.peer.notify("session/cancel", &params).await;
                    cancelled_at = Some(Instant::now());
                }
                _ = tick.tick() => {
                    if cancelled_at.is_some_and(|at| at.elapsed() > self.timings.cancel_grace) {
                        self.kill().await;
                        return Err(ChildError::Cancelled { name: self.info.name.clone() });
                    }
                    let quiet = self.activity.quiet_for();
                    if !self.activity.waits_on_host() && quiet > self.timings.idle {
                        return Err(self.hung(quiet).await);
                    }
                }
            }
        };
        let answer = self.answered("session/prompt", answer).await?;
        self.activity.settled().await;
        let response: acp::PromptResponse =
            serde_json::from_value(answer).map_err(|e| self.malformed("session/prompt", e))?;
        Ok(PromptOutcome {
            stop_reason: response.stop_reason,
            answer: self.activity.take_answer(session),
            usage: response.usage,
        })
    }

    /// Ends the child: its input closed, then killed if it has not ended within the grace.
    pub async fn stop(self) {
        let grace = self.timings.cancel_grace;
        let Self {
            peer,
            process,
            tasks,
            group,
            ..
        } = self;
        for task in &tasks {
            task.abort();
        }
        drop(peer);
        let mut process = process.into_inner();
        if tokio::time::timeout(grace, process.wait()).await.is_err() {
            let _ = process.kill().await;
        }
        // What it started and left behind ends with it.
        drop(group);
    }

    fn tick(&self) -> Duration {
        (self.timings.idle / 10).clamp(Duration::from_millis(20), Duration::from_secs(1))
    }

    async fn call<P: serde::Serialize>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, ChildError> {
        let answer = self
            .peer
            .request(method, params, &CancellationToken::new())
            .await;
        self.answered(method, answer).await
    }

    /// A request's answer, or what ended it: the child's end, or its refusal.
    async fn answered(
        &self,
        method: &str,
        answer: Result<Value, acp::Error>,
    ) -> Result<Value, ChildError> {
        match answer {
            Ok(value) => Ok(value),
            Err(_) if self.peer.closed().is_cancelled() => Err(self.exited().await),
            Err(error) => Err(ChildError::Refused {
                name: self.info.name.clone(),
                method: method.to_string(),
                message: error.message,
            }),
        }
    }

    /// The child's output ended: how it ended (waited for briefly), with its last words.
    async fn exited(&self) -> ChildError {
        let mut process = self.process.lock().await;
        let status = match tokio::time::timeout(Duration::from_secs(2), process.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(e)) => format!("its status is unknown: {e}"),
            Err(_) => {
                self.group.kill();
                let _ = process.kill().await;
                "its output closed; it was killed".to_string()
            }
        };
        // The last lines may still be on their way from its stderr.
        tokio::time::sleep(Duration::from_millis(50)).await;
        ChildError::Exited {
            name: self.info.name.clone(),
            status,
            stderr_tail: self.stderr.lines(),
        }
    }

    async fn hung(&self, idle: Duration) -> ChildError {
        self.kill().await;
        ChildError::Hung {
            name: self.info.name.clone(),
            idle,
            stderr_tail: self.stderr.lines(),
        }
    }

    async fn kill(&self) {
        self.group.kill();
        let mut process = self.process.lock().await;
        let _ = process.kill().await;
    }

    fn malformed(&self, method: &str, error: serde_json::Error) -> ChildError {
        ChildError::Malformed {
            name: self.info.name.clone(),
            method: method.to_string(),
            detail: error.to_string(),
        }
    }
}
