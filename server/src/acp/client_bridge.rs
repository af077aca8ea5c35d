//! Serves the engine's client requests over ACP: permission prompts, the editor's file buffers
//! (`fs/*`), the editor's terminals (`terminal/*`) and tool interception, each used exactly
//! when the client advertised it (the engine delegates only then; see
//! [`ClientCaps::delegation`]). A question (permission, form) goes to every attached client
//! that can answer it (`questions.rs`); the editor's files and terminals are the first
//! client's, and this machine's once that client has left the session.

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use talaria_engine::{
    ClientAnswer, ClientAsk, ClientRequest, PermissionAnswer, PermissionChoice, PermissionRequest,
};
use talaria_protocol::acp::{
    self, PermissionOption, PermissionOptionKind, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, ToolCallUpdate, ToolCallUpdateFields,
};
use talaria_protocol::{Peer, errors};

pub use super::state::ClientCaps;
use talaria_tools::FormAnswer;
use talaria_tools::HeadTail;
use talaria_tools::{CommandResult, CommandRunner, CommandSpec};
use talaria_tools::{FileAccess, FileError};
use talaria_tools::{Progress, ProgressSink, ToolError};
use tokio_util::sync::CancellationToken;

/// The bridge of one session.
pub struct AcpBridge {
    /// The first client's: the editor whose files and terminals the session was given.
    peer: Peer,
    /// That client, as the session's audience knows it: once it is no longer attached, the
    /// files and commands are this machine's (`ClientAnswer::Local`).
    opener: super::state::MemberId,
    session_id: acp::SessionId,
    caps: ClientCaps,
    /// Whom the questions go to.
    pub(super) questions: super::questions::Askers,
}

impl AcpBridge {
    pub fn new(
        (peer, opener): (Peer, super::state::MemberId),
        session_id: acp::SessionId,
        caps: ClientCaps,
        questions: super::questions::Askers,
    ) -> Self {
        Self {
            peer,
            opener,
            session_id,
            caps,
            questions,
        }
    }
}

/// How long a request withdrawn from a client that left is given to end.
const WITHDRAW_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The answer to `ask` when the client asked left the session before answering.
fn left_before_answering(ask: &ClientAsk) -> ClientAnswer {
    const LEFT: &str = "the editor that opened the session left it before answering";
    match ask {
        ClientAsk::ReadFile { path } => ClientAnswer::Read(Err(FileError::Other(format!(
            "{LEFT}: {} was not read",
            path.display()
        )))),
        ClientAsk::WriteFile { path, .. } => ClientAnswer::Wrote(Err(FileError::Other(format!(
            "{LEFT}: whether {} was written in its buffer is not known",
            path.display()
        )))),
        ClientAsk::RunCommand { .. } => ClientAnswer::Ran(Err(ToolError::Client(format!(
            "{LEFT}: the command's end in its terminal is not known"
        )))),
        ClientAsk::Intercept(_) => ClientAnswer::Intercepted(Err(
            talaria_engine::InterceptError::Client(format!("{LEFT}: the call was not decided")),
        )),
        ClientAsk::Permission(_) | ClientAsk::Question { .. } => ClientAnswer::Local,
    }
}

fn option(choice: PermissionChoice, server: Option<&str>) -> PermissionOption {
    let (id, name, kind) = match choice {
        PermissionChoice::AllowOnce => (
            "allow_once",
            "Allow once".to_string(),
            PermissionOptionKind::AllowOnce,
        ),
        PermissionChoice::AllowAlways => (
            "allow_always",
            "Always allow in this project".to_string(),
            PermissionOptionKind::AllowAlways,
        ),
        PermissionChoice::AllowAlwaysServer => (
            "allow_always_server",
            match server {
                Some(server) => {
                    format!("Always allow every tool of the MCP server {server} in this project")
                }
                None => "Always allow every tool of this MCP server in this project".to_string(),
            },
            PermissionOptionKind::AllowAlways,
        ),
        PermissionChoice::RunUnsandboxedOnce => (
            "run_unsandboxed_once",
            "Run once outside the sandbox".to_string(),
            PermissionOptionKind::AllowOnce,
        ),
        PermissionChoice::RejectOnce => (
            "reject_once",
            "Reject".to_string(),
            PermissionOptionKind::RejectOnce,
        ),
        PermissionChoice::RejectAlways => (
            "reject_always",
            "Always reject in this project".to_string(),
            PermissionOptionKind::RejectAlways,
        ),
        PermissionChoice::ImplementAsking => (
            "implement_ask",
            "Implement (ask before edits and commands)".to_string(),
            PermissionOptionKind::AllowOnce,
        ),
        PermissionChoice::ImplementAcceptingEdits => (
            "implement_accept_edits",
            "Implement (accept edits)".to_string(),
            PermissionOptionKind::AllowAlways,
        ),
        PermissionChoice::KeepPlanning => (
            "keep_planning",
            "Keep planning".to_string(),
            PermissionOptionKind::RejectOnce,
        ),
    };
    PermissionOption::new(id, name, kind)
}

fn choice_of(option_id: &str) -> Option<PermissionChoice> {
    match option_id {
        "allow_once" => Some(PermissionChoice::AllowOnce),
        "allow_always" => Some(PermissionChoice::AllowAlways),
        "allow_always_server" => Some(PermissionChoice::AllowAlwaysServer),
        "run_unsandboxed_once" => Some(PermissionChoice::RunUnsandboxedOnce),
        "reject_once" => Some(PermissionChoice::RejectOnce),
        "reject_always" => Some(PermissionChoice::RejectAlways),
        "implement_ask" => Some(PermissionChoice::ImplementAsking),
        "implement_accept_edits" => Some(PermissionChoice::ImplementAcceptingEdits),
        "keep_planning" => Some(PermissionChoice::KeepPlanning),
        _ => None,
    }
}

impl AcpBridge {
    /// The bridge of a subagent's session `child` (its questions asked of `questions`).
    pub fn for_child(&self, child: acp::SessionId, questions: super::questions::Askers) -> Self {
        Self::new(
            (self.peer.clone(), self.opener),
            child,
            self.caps,
            questions,
        )
    }

    /// What the client advertised.
    pub fn caps(&self) -> ClientCaps {
        self.caps
    }

    /// Serves one request in the background and answers it.
    pub fn serve(self: &Arc<Self>, request: ClientRequest) {
        let bridge = self.clone();
        tokio::spawn(async move {
            let answer = match request.ask.clone() {
                ClientAsk::Permission(permission) => ClientAnswer::Permission(
                    bridge.request_permission(permission, &request.cancel).await,
                ),
                ClientAsk::Question { message, schema } => {
                    ClientAnswer::Question(bridge.ask_form(&message, schema, &request.cancel).await)
                }
                _ => bridge.ask_the_opener(&request).await,
            };
            request.answer(answer);
        });
    }

    /// Asks the client that opened the session (its files, terminals, interception) while it
    /// stays attached: what it has not answered when it leaves fails (the engine then writes
    /// nothing more to disk in that turn), and what comes after is this machine's
    /// (`ClientAnswer::Local`).
    async fn ask_the_opener(&self, request: &ClientRequest) -> ClientAnswer {
        let audience = &self.questions.audience;
        let mut roles = audience.watch_roles();
        if !audience.holds(self.opener) {
            return ClientAnswer::Local;
        }
        let asked = request.cancel.child_token();
        let work = self.opener_answer(request, &asked);
        tokio::pin!(work);
        loop {
            tokio::select! {
                answer = &mut work => return answer,
                changed = roles.changed() => {
                    if changed.is_ok() && audience.holds(self.opener) {
                        continue;
                    }
                    // Withdrawn from the client (`$/cancel_request`), given a moment to go.
                    asked.cancel();
                    let _ = tokio::time::timeout(WITHDRAW_WAIT, &mut work).await;
                    return left_before_answering(&request.ask);
                }
            }
        }
    }

    /// The opener's answer to `request` (withdrawn when `asked` fires).
    async fn opener_answer(
        &self,
        request: &ClientRequest,
        asked: &CancellationToken,
    ) -> ClientAnswer {
        match request.ask.clone() {
            ClientAsk::ReadFile { path } => {
                ClientAnswer::Read(self.files(asked).read_text(&path).await)
            }
            ClientAsk::WriteFile { path, text } => {
                ClientAnswer::Wrote(self.files(asked).write_text(&path, &text).await)
            }
            ClientAsk::RunCommand { spec } => ClientAnswer::Ran(
                self.terminal()
                    .run(spec, asked, request.progress.clone())
                    .await,
            ),
            ClientAsk::Intercept(call) => ClientAnswer::Intercepted(
                super::interception::ask(&self.peer, &self.session_id, call, asked).await,
            ),
            ClientAsk::Permission(_) | ClientAsk::Question { .. } => ClientAnswer::Local,
        }
    }

    /// Asks the user on the call's card; ends promptly when `cancel` fires.
    pub fn request_permission<'a>(
        &'a self,
        request: PermissionRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, PermissionAnswer> {
        Box::pin(async move {
            let title = match &request.reason {
                Some(reason) => format!("{} ({reason})", request.title),
                None => request.title.clone(),
            };
            let params = RequestPermissionRequest::new(
                self.session_id.clone(),
                ToolCallUpdate::new(
                    request.tool_call_id.clone(),
                    ToolCallUpdateFields::new().title(title),
                ),
                request
                    .choices
                    .iter()
                    .map(|&choice| option(choice, request.server.as_deref()))
                    .collect(),
            );
            let asked = self
                .questions
                .ask(
                    "session/request_permission",
                    &params,
                    cancel,
                    |_: &ClientCaps| true,
                )
                .await;
            if let Ok((by, value)) = &asked {
                self.questions
                    .resolved(&request.tool_call_id, by, &value["outcome"]);
            }
            match asked.map(|(_, value)| value) {
                Ok(value) => match serde_json::from_value::<RequestPermissionResponse>(value) {
                    Ok(response) => match response.outcome {
                        RequestPermissionOutcome::Selected(selected) => {
                            match choice_of(&selected.option_id.0) {
                                Some(choice) if request.choices.contains(&choice) => {
                                    PermissionAnswer::Chosen(choice)
                                }
                                _ => PermissionAnswer::Failed(format!(
                                    "the client chose an unknown option {:?}",
                                    selected.option_id.0
                                )),
                            }
                        }
                        RequestPermissionOutcome::Cancelled => PermissionAnswer::Cancelled,
                        _ => PermissionAnswer::Failed("the client sent an unknown outcome".into()),
                    },
                    Err(e) => {
                        PermissionAnswer::Failed(format!("unreadable permission response: {e}"))
                    }
                },
                Err(error) if errors::is_cancelled(&error) || cancel.is_cancelled() => {
                    PermissionAnswer::Cancelled
                }
                Err(error) => PermissionAnswer::Failed(error.message),
            }
        })
    }

    /// Asks the user to fill in a form through `elicitation/create` (form mode).
    async fn ask_form(
        &self,
        message: &str,
        schema: serde_json::Value,
        cancel: &CancellationToken,
    ) -> Result<FormAnswer, ToolError> {
        let schema: acp::ElicitationSchema = serde_json::from_value(schema)
            .map_err(|e| ToolError::Client(format!("the question's form cannot be asked: {e}")))?;
        let scope = acp::ElicitationSessionScope::new(self.session_id.clone());
        let params = acp::CreateElicitationRequest::new(
            acp::ElicitationFormMode::new(scope, schema),
            message,
        );
        let answer = self
            .questions
            .ask(
                "elicitation/create",
                &params,
                cancel,
                |caps: &ClientCaps| caps.elicitation_form,
            )
            .await
            .and_then(|(_, value)| {
                serde_json::from_value::<acp::CreateElicitationResponse>(value).map_err(|e| {
                    errors::invalid_params(format!("an unreadable answer to the question: {e}"))
                })
            });
        match answer {
            Ok(response) => match response.action {
                acp::ElicitationAction::Accept(accepted) => {
                    let content = accepted.content.unwrap_or_default();
                    serde_json::to_value(content)
                        .map(FormAnswer::Accepted)
                        .map_err(|e| {
                            ToolError::Client(format!("the client's answer could not be read: {e}"))
                        })
                }
                acp::ElicitationAction::Decline => Ok(FormAnswer::Declined),
                acp::ElicitationAction::Cancel => Ok(FormAnswer::Cancelled),
                acp::ElicitationAction::Other(other) => Err(ToolError::Client(format!(
                    "the client answered the question with an unknown action {:?}",
                    other.action
                ))),
                // A later protocol's action this build does not know.
                _ => Err(ToolError::Client(
                    "the client answered the question with an unknown action".into(),
                )),
            },
            Err(error) if errors::is_cancelled(&error) || cancel.is_cancelled() => {
                Ok(FormAnswer::Cancelled)
            }
            Err(error) => Err(ToolError::Client(error.message)),
        }
    }

    /// The editor's files, for one call of the turn whose token is `cancel` (a cancelled turn
    /// stops waiting for the editor, which is told with `$/cancel_request`). The engine asks
    /// only for what the client advertised (`ClientCaps::delegation`); it falls back to local
    /// files itself.
    fn files(&self, cancel: &CancellationToken) -> EditorFiles {
        EditorFiles {
            peer: self.peer.clone(),
            session_id: self.session_id.clone(),
            cancel: cancel.clone(),
        }
    }

    /// The editor's terminals (asked for only when the client offers them).
    fn terminal(&self) -> EditorTerminal {
        EditorTerminal {
            peer: self.peer.clone(),
            session_id: self.session_id.clone(),
        }
    }
}

/// Files through the editor (unsaved buffers are seen; edits land in the editor).
struct EditorFiles {
    peer: Peer,
    session_id: acp::SessionId,
    /// The turn's token.
    cancel: CancellationToken,
}

impl FileAccess for EditorFiles {
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        Box::pin(async move {
            if path.is_dir() {
                return Err(FileError::IsDirectory(path.to_path_buf()));
            }
            let params = acp::ReadTextFileRequest::new(self.session_id.clone(), path);
            let answer: Result<acp::ReadTextFileResponse, _> = self
                .peer
                .call("fs/read_text_file", &params, &self.cancel)
                .await;
            match answer {
                Ok(read) => Ok(read.content),
                Err(error) if errors::is_not_found(&error) => {
                    Err(FileError::NotFound(path.to_path_buf()))
                }
                // Clients answer "no such file" with all kinds of codes: a file that is not on
                // the disk either is a new file; one that is there makes the error real.
                Err(_) if !tokio::fs::try_exists(path).await.unwrap_or(true) => {
                    Err(FileError::NotFound(path.to_path_buf()))
                }
                Err(error) => Err(FileError::Other(format!(
                    "the editor could not read {}: {}",
                    path.display(),
                    error.message
                ))),
            }
        })
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move {
            let params = acp::WriteTextFileRequest::new(self.session_id.clone(), path, text);
            self.peer
                .request("fs/write_text_file", &params, &self.cancel)
                .await
                .map(|_| ())
                .map_err(|error| {
                    FileError::Other(format!(
                        "the editor could not write {}: {}",
                        path.display(),
                        error.message
                    ))
                })
        })
    }
}

/// Commands in an editor terminal, embedded in the tool call card.
struct EditorTerminal {
    peer: Peer,
    session_id: acp::SessionId,
}

impl EditorTerminal {
    /// `terminal/output`, `terminal/wait_for_exit`, `terminal/kill` or `terminal/release` of
    /// one terminal, its answer read as `R`.
    async fn call<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        cancel: &CancellationToken,
    ) -> Result<R, acp::Error> {
        self.peer.call(method, params, cancel).await
    }

    /// Starts the command in an editor terminal, through the sandbox helper (it cleans the
    /// environment the editor passes and enters the OS sandbox before the shell starts).
    async fn create(&self, spec: &CommandSpec) -> Result<acp::TerminalId, ToolError> {
        let Some(launch) = &spec.elsewhere else {
            return Err(ToolError::Client(
                "this command may run only on the agent's machine".into(),
            ));
        };
        let create = acp::CreateTerminalRequest::new(
            self.session_id.clone(),
            launch.program.to_string_lossy(),
        )
        .args(
            launch
                .args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        )
        .env(
            talaria_tools::spec_variable(launch)
                .map(|(name, spec)| acp::EnvVariable::new(name, spec))
                .into_iter()
                .collect(),
        )
        .cwd(spec.cwd.clone())
        .output_byte_limit(u64::try_from(spec.max_output_bytes).ok())
        .meta(shown_command(launch));
        let created: acp::CreateTerminalResponse = self
            .call("terminal/create", &create, &CancellationToken::new())
            .await
            .map_err(|e| {
                ToolError::Client(format!(
                    "the editor could not start a terminal: {}",
                    e.message
                ))
            })?;
        Ok(created.terminal_id)
    }
}

/// The command as the user would have typed it, for the editor to show in place of the
/// helper's arguments (`_meta.talaria.command`).
fn shown_command(launch: &talaria_tools::Launch) -> acp::Meta {
    let mut meta = acp::Meta::new();
    meta.insert(
        "talaria".into(),
        serde_json::json!({ "command": launch.shown }),
    );
    meta
}

impl CommandRunner for EditorTerminal {
    fn run<'a>(
        &'a self,
        spec: CommandSpec,
        cancel: &'a CancellationToken,
        progress: Option<ProgressSink>,
    ) -> BoxFuture<'a, Result<CommandResult, ToolError>> {
        Box::pin(async move {
            let terminal_id = self.create(&spec).await?;
            if let Some(progress) = &progress {
                progress(Progress::Terminal(terminal_id.to_string()));
            }
            let mut result = CommandResult {
                terminal_id: Some(terminal_id.to_string()),
                ..CommandResult::default()
            };
            let session = self.session_id.clone();
            let never = CancellationToken::new();
            let wait_cancel = CancellationToken::new();
            let wait = acp::WaitForTerminalExitRequest::new(session.clone(), terminal_id.clone());
            let waited = tokio::select! {
                waited = self.call::<_, acp::WaitForTerminalExitResponse>("terminal/wait_for_exit", &wait, &wait_cancel) => Some(waited),
                () = tokio::time::sleep(spec.timeout) => { result.timed_out = true; None }
                () = cancel.cancelled() => { result.cancelled = true; None }
            };
            if waited.is_none() {
                wait_cancel.cancel();
                let kill = acp::KillTerminalRequest::new(session.clone(), terminal_id.clone());
                let _ = self
                    .call::<_, serde_json::Value>("terminal/kill", &kill, &never)
                    .await;
            }
            let asked = acp::TerminalOutputRequest::new(session.clone(), terminal_id.clone());
            let output: Result<acp::TerminalOutputResponse, _> =
                self.call("terminal/output", &asked, &never).await;
            let release = acp::ReleaseTerminalRequest::new(session, terminal_id.clone());
            let released: Result<serde_json::Value, _> =
                self.call("terminal/release", &release, &never).await;
            if let Err(e) = released {
                tracing::warn!(%terminal_id, "terminal/release failed: {}", e.message);
            }
            let output = output.map_err(|e| {
                ToolError::Client(format!(
                    "the editor could not report the terminal output: {}",
                    e.message
                ))
            })?;
            let mut kept = HeadTail::new(spec.max_output_bytes);
            kept.push(output.output.as_bytes());
            result.output = kept.render();
            result.elided_bytes = kept.elided();
            let status = waited
                .and_then(Result::ok)
                .map(|exited| exited.exit_status)
                .or(output.exit_status);
            if let Some(status) = status {
                result.exit_code = status.exit_code.and_then(|c| i32::try_from(c).ok());
                result.signal = status.signal;
            }
            Ok(result)
        })
    }
}
