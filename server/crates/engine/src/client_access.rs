//! The client's side of a turn's work, over the session's event stream: files through its
//! buffers, commands in its terminals and questions in its forms when it offers them (else
//! this machine's), each asked as a [`ClientRequest`] and awaited.

use std::path::Path;

use futures_util::future::BoxFuture;
use serde_json::Value;
use talaria_tools::ProgressSink;
use talaria_tools::{CommandResult, CommandRunner, CommandSpec, LocalRunner};
use talaria_tools::{FileAccess, FileError, LocalFiles};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::client::{ClientAnswer, ClientAsk, ClientRequest, Delegation};
use crate::events::EngineEvent;

/// Sends a request down the event stream and waits for its answer; `None` when the consumer
/// is gone or dropped the request unanswered.
pub(crate) async fn ask(
    events: &mpsc::Sender<EngineEvent>,
    ask: ClientAsk,
    cancel: CancellationToken,
    progress: Option<ProgressSink>,
) -> Option<ClientAnswer> {
    let (request, answer) = ClientRequest::new(ask, cancel, progress);
    events
        .send(EngineEvent::ClientRequest(request))
        .await
        .ok()?;
    answer.await.ok()
}

const NO_ANSWER: &str = "the client did not answer";

/// Files through the client when it offers them, else the local disk.
pub(crate) struct ClientFiles {
    pub events: mpsc::Sender<EngineEvent>,
    pub delegation: Delegation,
    /// The turn's token: a cancelled turn stops waiting for the editor.
    pub cancel: CancellationToken,
    /// The local disk, for what the client does not take.
    pub local: LocalFiles,
}

impl FileAccess for ClientFiles {
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        Box::pin(async move {
            if !self.delegation.read_files {
                return self.local.read_text(path).await;
            }
            // The editor opens what it is given by name: where it leads is judged here first
            // (a file only the editor's buffer holds is the editor's).
            if let Err(refused @ FileError::Other(_)) = self.local.judge(path, false).await {
                return Err(refused);
            }
            let asked = ClientAsk::ReadFile {
                path: path.to_path_buf(),
            };
            match ask(&self.events, asked, self.cancel.clone(), None).await {
                Some(ClientAnswer::Read(result)) => result,
                _ => Err(FileError::Other(NO_ANSWER.into())),
            }
        })
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move {
            if !self.delegation.write_files {
                return self.local.write_text(path, text).await;
            }
            if let Err(refused @ FileError::Other(_)) = self.local.judge(path, true).await {
                return Err(refused);
            }
            let asked = ClientAsk::WriteFile {
                path: path.to_path_buf(),
                text: text.to_string(),
            };
            match ask(&self.events, asked, self.cancel.clone(), None).await {
                Some(ClientAnswer::Wrote(result)) => result,
                _ => Err(FileError::Other(NO_ANSWER.into())),
            }
        })
    }
}

/// Commands in the client's terminals when it offers them, else on this machine.
pub(crate) struct ClientCommands {
    pub events: mpsc::Sender<EngineEvent>,
    pub delegation: Delegation,
}

impl CommandRunner for ClientCommands {
    fn run<'a>(
        &'a self,
        spec: CommandSpec,
        cancel: &'a CancellationToken,
        progress: Option<ProgressSink>,
    ) -> BoxFuture<'a, Result<CommandResult, talaria_tools::ToolError>> {
        Box::pin(async move {
            if !self.delegation.terminal || spec.elsewhere.is_none() {
                return LocalRunner.run(spec, cancel, progress).await;
            }
            let asked = ClientAsk::RunCommand { spec };
            match ask(&self.events, asked, cancel.clone(), progress).await {
                Some(ClientAnswer::Ran(result)) => result,
                _ => Err(talaria_tools::ToolError::Client(NO_ANSWER.into())),
            }
        })
    }
}

/// Questions to the user through the client (its forms).
pub(crate) struct ClientQuestions {
    pub events: mpsc::Sender<EngineEvent>,
}

impl talaria_tools::UserQuestions for ClientQuestions {
    fn ask_form<'a>(
        &'a self,
        message: &'a str,
        schema: &'a Value,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<talaria_tools::FormAnswer, talaria_tools::ToolError>> {
        Box::pin(async move {
            let asked = ClientAsk::Question {
                message: message.to_string(),
                schema: schema.clone(),
            };
            match ask(&self.events, asked, cancel.clone(), None).await {
                Some(ClientAnswer::Question(answer)) => answer,
                _ if cancel.is_cancelled() => Ok(talaria_tools::FormAnswer::Cancelled),
                _ => Err(talaria_tools::ToolError::Client(NO_ANSWER.into())),
            }
        })
    }
}
