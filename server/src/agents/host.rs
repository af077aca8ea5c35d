//! A child's requests of its client, from ACP into the engine's terms (and the answers
//! back); its updates shown as progress lines on the delegation's card, and kept with its
//! requests as the turn's steps (`steps.rs`, a batch task's trajectory).

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use talaria_conductor::{ChildHost, HostFuture};
use talaria_engine::{
    ChildAnswer, ChildCall, ChildCallEnd, ChildCallKind, ChildCommand, ChildOption,
    ChildOptionKind, ChildQuestion, ExternalHost, HostError,
};
use talaria_protocol::acp;

use super::steps::Steps;

/// The longest line of the child's words held back waiting for its end.
const LINE_CHARS: usize = 100;

/// The engine's host as an ACP client's side.
pub(super) struct HostOnAcp {
    name: String,
    inner: Arc<dyn ExternalHost>,
    /// The child's words since the last full line.
    line: Mutex<String>,
    /// What it said and did, for the trajectory.
    steps: Mutex<Steps>,
    /// Its requests so far (their steps' ids).
    requests: std::sync::atomic::AtomicU64,
}

impl HostOnAcp {
    pub(super) fn new(name: &str, inner: Arc<dyn ExternalHost>) -> Self {
        Self {
            name: name.to_string(),
            inner,
            line: Mutex::default(),
            steps: Mutex::default(),
            requests: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The steps so far, taken out.
    pub(super) fn take_steps(&self) -> Steps {
        std::mem::take(&mut *talaria_util::lock(&self.steps))
    }

    /// A request of the child as a step; its id.
    fn step_call(&self, method: &str, arguments: &Value) -> String {
        let number = self
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{method}-{}", number + 1);
        talaria_util::lock(&self.steps).call(&id, method, arguments);
        id
    }

    /// A request's answer as its step's result.
    fn step_result<T>(
        &self,
        id: &str,
        answer: &Result<T, acp::Error>,
        shown: impl Fn(&T) -> String,
    ) {
        let content = match answer {
            Ok(value) => shown(value),
            Err(error) => format!("error: {}", error.message),
        };
        talaria_util::lock(&self.steps).result(id, &content);
    }

    /// Shows what is left of the child's words.
    pub(super) fn flush(&self) {
        let rest = std::mem::take(&mut *talaria_util::lock(&self.line));
        if !rest.trim().is_empty() {
            self.inner.step(format!("{}: {}", self.name, rest.trim()));
        }
    }

    fn words(&self, text: &str) {
        let mut line = talaria_util::lock(&self.line);
        line.push_str(text);
        // A long line without an end is shown as it is.
        if line.len() > LINE_CHARS && !line.contains('\n') {
            line.push('\n');
        }
        while let Some(at) = line.find('\n') {
            let full: String = line.drain(..=at).collect();
            if !full.trim().is_empty() {
                self.inner.step(format!("{}: {}", self.name, full.trim()));
            }
        }
    }
}

/// A request the session refused: the refusal as the session's model would read it.
fn refused(why: HostError) -> acp::Error {
    acp::Error::new(-32000, why.to_string())
}

impl ChildHost for HostOnAcp {
    fn update<'a>(&'a self, update: acp::SessionNotification) -> BoxFuture<'a, ()> {
        match update.update {
            acp::SessionUpdate::AgentMessageChunk(chunk) => {
                if let acp::ContentBlock::Text(text) = chunk.content {
                    talaria_util::lock(&self.steps).said(&text.text);
                    self.words(&text.text);
                    return self.inner.said(text.text);
                }
            }
            acp::SessionUpdate::AgentThoughtChunk(chunk) => {
                if let acp::ContentBlock::Text(text) = chunk.content {
                    return self.inner.thought(text.text);
                }
            }
            acp::SessionUpdate::ToolCall(call) => {
                let arguments = call.raw_input.clone().unwrap_or(Value::Null);
                talaria_util::lock(&self.steps).call(&call.tool_call_id.0, &call.title, &arguments);
                self.flush();
                self.inner.step(format!("{} — {}", self.name, call.title));
                // A call announced already ended (as some agents do) ends on its card too.
                let ended = match call.status {
                    acp::ToolCallStatus::Completed | acp::ToolCallStatus::Failed => {
                        Some(ChildCallEnd {
                            id: call.tool_call_id.0.to_string(),
                            failed: call.status == acp::ToolCallStatus::Failed,
                            title: None,
                            text: content_text(&call.content),
                        })
                    }
                    _ => None,
                };
                let started = ChildCall {
                    id: call.tool_call_id.0.to_string(),
                    kind: kind_of(Some(call.kind)),
                    paths: call.locations.into_iter().map(|l| l.path).collect(),
                    title: call.title,
                    raw_input: arguments,
                };
                return async move {
                    self.inner.call_started(started).await;
                    if let Some(ended) = ended {
                        self.inner.call_ended(ended).await;
                    }
                }
                .boxed();
            }
            acp::SessionUpdate::ToolCallUpdate(update) => {
                let mark = match update.fields.status {
                    Some(acp::ToolCallStatus::Completed) => "✓",
                    Some(acp::ToolCallStatus::Failed) => "✗",
                    _ => "",
                };
                if mark.is_empty() {
                    return async {}.boxed();
                }
                let shown = update.fields.content.as_deref().map(content_text);
                let content = shown.clone().unwrap_or_else(|| mark.to_string());
                talaria_util::lock(&self.steps).result(&update.tool_call_id.0, &content);
                if let Some(title) = &update.fields.title {
                    self.inner.step(format!("{} {mark} {title}", self.name));
                }
                return self.inner.call_ended(ChildCallEnd {
                    id: update.tool_call_id.0.to_string(),
                    failed: mark == "✗",
                    title: update.fields.title,
                    text: shown.unwrap_or_default(),
                });
            }
            _ => {}
        }
        async {}.boxed()
    }

    fn read_text_file<'a>(
        &'a self,
        request: acp::ReadTextFileRequest,
    ) -> HostFuture<'a, acp::ReadTextFileResponse> {
        async move {
            let arguments =
                json!({"path": request.path, "line": request.line, "limit": request.limit});
            let step = self.step_call("fs/read_text_file", &arguments);
            let text = self
                .inner
                .read_text(request.path, request.line, request.limit)
                .await
                .map_err(refused);
            self.step_result(&step, &text, Clone::clone);
            Ok(acp::ReadTextFileResponse::new(text?))
        }
        .boxed()
    }

    fn write_text_file<'a>(
        &'a self,
        request: acp::WriteTextFileRequest,
    ) -> HostFuture<'a, acp::WriteTextFileResponse> {
        async move {
            let arguments = json!({"path": request.path, "content": request.content});
            let step = self.step_call("fs/write_text_file", &arguments);
            let written = self
                .inner
                .write_text(request.path, request.content)
                .await
                .map_err(refused);
            self.step_result(&step, &written, |()| "written".to_string());
            written?;
            Ok(acp::WriteTextFileResponse::default())
        }
        .boxed()
    }

    fn request_permission<'a>(
        &'a self,
        request: acp::RequestPermissionRequest,
    ) -> HostFuture<'a, acp::RequestPermissionResponse> {
        async move {
            let question = question_of(&request);
            let outcome = match self.inner.ask(question).await {
                ChildAnswer::Chosen(id) => {
                    acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(id))
                }
                ChildAnswer::Cancelled => acp::RequestPermissionOutcome::Cancelled,
            };
            Ok(acp::RequestPermissionResponse::new(outcome))
        }
        .boxed()
    }

    fn create_terminal<'a>(
        &'a self,
        request: acp::CreateTerminalRequest,
    ) -> HostFuture<'a, acp::CreateTerminalResponse> {
        async move {
            let command = ChildCommand {
                command: request.command,
                args: request.args,
                cwd: request.cwd,
                env: request.env.into_iter().map(|v| (v.name, v.value)).collect(),
                output_limit: request.output_byte_limit,
            };
            let arguments = json!({"command": command.command, "args": command.args,
                "cwd": command.cwd});
            let step = self.step_call("terminal/create", &arguments);
            let id = self.inner.start_command(command).await.map_err(refused);
            self.step_result(&step, &id, |id| format!("terminal {id}"));
            Ok(acp::CreateTerminalResponse::new(id?))
        }
        .boxed()
    }

    fn terminal_output<'a>(
        &'a self,
        request: acp::TerminalOutputRequest,
    ) -> HostFuture<'a, acp::TerminalOutputResponse> {
        let answer = self.inner.command_output(&request.terminal_id.0);
        let step = self.step_call(
            "terminal/output",
            &json!({"terminalId": request.terminal_id.0.as_ref()}),
        );
        let answer = answer.map_err(refused);
        self.step_result(&step, &answer, |output| output.output.clone());
        async move {
            let output = answer?;
            let status = output.exit.map(exit_status);
            Ok(
                acp::TerminalOutputResponse::new(output.output, output.truncated)
                    .exit_status(status),
            )
        }
        .boxed()
    }

    fn wait_for_terminal_exit<'a>(
        &'a self,
        request: acp::WaitForTerminalExitRequest,
    ) -> HostFuture<'a, acp::WaitForTerminalExitResponse> {
        async move {
            let exit = self
                .inner
                .wait_command(&request.terminal_id.0)
                .await
                .map_err(refused)?;
            Ok(acp::WaitForTerminalExitResponse::new(exit_status(exit)))
        }
        .boxed()
    }

    fn kill_terminal<'a>(
        &'a self,
        request: acp::KillTerminalRequest,
    ) -> HostFuture<'a, acp::KillTerminalResponse> {
        let answer = self.inner.kill_command(&request.terminal_id.0);
        async move {
            answer.map_err(refused)?;
            Ok(acp::KillTerminalResponse::default())
        }
        .boxed()
    }

    fn release_terminal<'a>(
        &'a self,
        request: acp::ReleaseTerminalRequest,
    ) -> HostFuture<'a, acp::ReleaseTerminalResponse> {
        let answer = self.inner.release_command(&request.terminal_id.0);
        async move {
            answer.map_err(refused)?;
            Ok(acp::ReleaseTerminalResponse::default())
        }
        .boxed()
    }

    fn create_elicitation<'a>(
        &'a self,
        request: acp::CreateElicitationRequest,
    ) -> HostFuture<'a, acp::CreateElicitationResponse> {
        async move {
            let acp::ElicitationMode::Form(form) = request.mode else {
                return Err(talaria_protocol::errors::invalid_params(
                    "elicitation/create: only forms are shown to the user",
                ));
            };
            let schema = serde_json::to_value(&form.requested_schema)
                .map_err(|e| talaria_protocol::errors::invalid_params(e.to_string()))?;
            let arguments = json!({"message": request.message, "schema": schema});
            let step = self.step_call("elicitation/create", &arguments);
            let answer = self.inner.ask_form(request.message, schema).await;
            let response = match answer {
                Ok(talaria_tools::FormAnswer::Accepted(content)) => {
                    let content = serde_json::from_value(content).map_err(|e| {
                        talaria_protocol::errors::internal_error(format!(
                            "the user's answer could not be passed on: {e}"
                        ))
                    })?;
                    acp::ElicitationAction::Accept(acp::ElicitationAcceptAction::new().content(
                        Some::<std::collections::BTreeMap<String, acp::ElicitationContentValue>>(
                            content,
                        ),
                    ))
                }
                Ok(talaria_tools::FormAnswer::Declined) => acp::ElicitationAction::Decline,
                Ok(talaria_tools::FormAnswer::Cancelled) => acp::ElicitationAction::Cancel,
                // No one could show it (a client without forms): not answered.
                Err(why) => {
                    tracing::info!(agent = %self.name, "an agent's form was not shown: {why}");
                    acp::ElicitationAction::Cancel
                }
            };
            let answer = Ok(acp::CreateElicitationResponse::new(response));
            self.step_result(&step, &answer, |r| {
                serde_json::to_string(&r.action).unwrap_or_default()
            });
            answer
        }
        .boxed()
    }

    fn capabilities(&self) -> acp::ClientCapabilities {
        capabilities()
    }
}

/// What Talaria serves a child: its files, terminals and forms (shown to the user with the
/// agent's name on them).
pub(super) fn capabilities() -> acp::ClientCapabilities {
    acp::ClientCapabilities::new()
        .fs(acp::FileSystemCapabilities::new()
            .read_text_file(true)
            .write_text_file(true))
        .terminal(true)
        .elicitation(
            acp::ElicitationCapabilities::new().form(acp::ElicitationFormCapabilities::new()),
        )
}

/// The agent session a form is tied to (none for one tied to a request, or a URL).
pub(super) fn form_session(request: &acp::CreateElicitationRequest) -> Option<&acp::SessionId> {
    match &request.mode {
        acp::ElicitationMode::Form(acp::ElicitationFormMode {
            scope: acp::ElicitationScope::Session(scope),
            ..
        }) => Some(&scope.session_id),
        _ => None,
    }
}

/// The text of a call's content (its diffs and terminals named).
fn content_text(content: &[acp::ToolCallContent]) -> String {
    content
        .iter()
        .map(|part| match part {
            acp::ToolCallContent::Content(content) => match &content.content {
                acp::ContentBlock::Text(text) => text.text.clone(),
                _ => "(non-text content)".to_string(),
            },
            acp::ToolCallContent::Diff(diff) => format!("(a diff of {})", diff.path.display()),
            acp::ToolCallContent::Terminal(terminal) => {
                format!("(terminal {})", terminal.terminal_id.0)
            }
            _ => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn exit_status(exit: talaria_engine::ChildExit) -> acp::TerminalExitStatus {
    acp::TerminalExitStatus::new()
        .exit_code(exit.code.and_then(|c| u32::try_from(c).ok()))
        .signal(exit.signal)
}

/// An ACP tool kind in the engine's terms.
fn kind_of(kind: Option<acp::ToolKind>) -> ChildCallKind {
    match kind {
        Some(acp::ToolKind::Read) => ChildCallKind::Read,
        Some(acp::ToolKind::Search) => ChildCallKind::Search,
        Some(acp::ToolKind::Think) => ChildCallKind::Think,
        Some(acp::ToolKind::Fetch) => ChildCallKind::Fetch,
        Some(acp::ToolKind::Edit) => ChildCallKind::Edit,
        Some(acp::ToolKind::Delete) => ChildCallKind::Delete,
        Some(acp::ToolKind::Move) => ChildCallKind::Move,
        Some(acp::ToolKind::Execute) => ChildCallKind::Execute,
        _ => ChildCallKind::Other,
    }
}

/// The child's question in the engine's terms.
fn question_of(request: &acp::RequestPermissionRequest) -> ChildQuestion {
    let fields = &request.tool_call.fields;
    let kind = kind_of(fields.kind);
    let options = request
        .options
        .iter()
        .filter_map(|option| {
            let kind = match option.kind {
                acp::PermissionOptionKind::AllowOnce => ChildOptionKind::AllowOnce,
                acp::PermissionOptionKind::AllowAlways => ChildOptionKind::AllowAlways,
                acp::PermissionOptionKind::RejectOnce => ChildOptionKind::RejectOnce,
                acp::PermissionOptionKind::RejectAlways => ChildOptionKind::RejectAlways,
                _ => return None,
            };
            Some(ChildOption {
                id: option.option_id.0.to_string(),
                kind,
            })
        })
        .collect();
    ChildQuestion {
        title: fields.title.clone().unwrap_or_else(|| "a call".to_string()),
        kind,
        paths: fields
            .locations
            .iter()
            .flatten()
            .map(|l| l.path.clone())
            .collect(),
        options,
    }
}
