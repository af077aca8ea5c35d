//! A child's requests of its client, from ACP into the engine's terms (and the answers
//! back); its updates shown as progress lines on the delegation's card.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use talaria_conductor::{ChildHost, HostFuture};
use talaria_engine::{
    ChildAnswer, ChildCallKind, ChildCommand, ChildOption, ChildOptionKind, ChildQuestion,
    ExternalHost, HostError,
};
use talaria_protocol::acp;

/// The longest line of the child's words held back waiting for its end.
const LINE_CHARS: usize = 100;

/// The engine's host as an ACP client's side.
pub(super) struct HostOnAcp {
    name: String,
    inner: Arc<dyn ExternalHost>,
    /// The child's words since the last full line.
    line: Mutex<String>,
}

impl HostOnAcp {
    pub(super) fn new(name: &str, inner: Arc<dyn ExternalHost>) -> Self {
        Self {
            name: name.to_string(),
            inner,
            line: Mutex::default(),
        }
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
                self.flush();
                self.inner.step(format!("{} — {}", self.name, call.title));
            }
            acp::SessionUpdate::ToolCallUpdate(update) => {
                let mark = match update.fields.status {
                    Some(acp::ToolCallStatus::Completed) => "✓",
                    Some(acp::ToolCallStatus::Failed) => "✗",
                    _ => "",
                };
                if let (false, Some(title)) = (mark.is_empty(), update.fields.title) {
                    self.inner.step(format!("{} {mark} {title}", self.name));
                }
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
            let text = self
                .inner
                .read_text(request.path, request.line, request.limit)
                .await
                .map_err(refused)?;
            Ok(acp::ReadTextFileResponse::new(text))
        }
        .boxed()
    }

    fn write_text_file<'a>(
        &'a self,
        request: acp::WriteTextFileRequest,
    ) -> HostFuture<'a, acp::WriteTextFileResponse> {
        async move {
            self.inner
                .write_text(request.path, request.content)
                .await
                .map_err(refused)?;
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
            let id = self.inner.start_command(command).await.map_err(refused)?;
            Ok(acp::CreateTerminalResponse::new(id))
        }
        .boxed()
    }

    fn terminal_output<'a>(
        &'a self,
        request: acp::TerminalOutputRequest,
    ) -> HostFuture<'a, acp::TerminalOutputResponse> {
        let answer = self.inner.command_output(&request.terminal_id.0);
        async move {
            let output = answer.map_err(refused)?;
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

    fn capabilities(&self) -> acp::ClientCapabilities {
        capabilities()
    }
}

/// What Talaria serves a child: its files and terminals.
pub(super) fn capabilities() -> acp::ClientCapabilities {
    acp::ClientCapabilities::new()
        .fs(acp::FileSystemCapabilities::new()
            .read_text_file(true)
            .write_text_file(true))
        .terminal(true)
}

fn exit_status(exit: talaria_engine::ChildExit) -> acp::TerminalExitStatus {
    acp::TerminalExitStatus::new()
        .exit_code(exit.code.and_then(|c| u32::try_from(c).ok()))
        .signal(exit.signal)
}

/// The child's question in the engine's terms.
fn question_of(request: &acp::RequestPermissionRequest) -> ChildQuestion {
    let fields = &request.tool_call.fields;
    let kind = match fields.kind {
        Some(acp::ToolKind::Read) => ChildCallKind::Read,
        Some(acp::ToolKind::Search) => ChildCallKind::Search,
        Some(acp::ToolKind::Think) => ChildCallKind::Think,
        Some(acp::ToolKind::Fetch) => ChildCallKind::Fetch,
        Some(acp::ToolKind::Edit) => ChildCallKind::Edit,
        Some(acp::ToolKind::Delete) => ChildCallKind::Delete,
        Some(acp::ToolKind::Move) => ChildCallKind::Move,
        Some(acp::ToolKind::Execute) => ChildCallKind::Execute,
        _ => ChildCallKind::Other,
    };
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
