//! The client's side of a turn's work, over the session's event stream: files through its
//! buffers, commands in its terminals and questions in its forms when it offers them (else,
//! and once that client has left the session, this machine's), each asked as a
//! [`ClientRequest`] and awaited.

use std::path::Path;
use std::sync::atomic::Ordering;

use futures_util::future::BoxFuture;
use serde_json::Value;
use talaria_tools::ProgressSink;
use talaria_tools::{CommandResult, CommandRunner, CommandSpec, LocalRunner};
use talaria_tools::{FileAccess, FileError, FileSides, LocalFiles};
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
    /// Which side answered this turn's delegated file requests (shared with its subagents'
    /// turns): once the editor has, and this machine's disk has since (the editor left),
    /// the turn writes nothing more to disk; once the disk has, the turn stays on it.
    pub sides: FileSides,
}

impl ClientFiles {
    fn editor_answered(&self) {
        self.sides.editor.store(true, Ordering::Release);
    }

    /// Whether this turn already worked on this machine's files while reads are delegated
    /// (the editor had left): it stays on them, so nothing read from disk is written into
    /// the editor's buffer should the editor come back.
    fn on_disk(&self) -> bool {
        self.sides.disk.load(Ordering::Acquire)
    }

    fn disk_answered(&self) {
        self.sides.disk.store(true, Ordering::Release);
    }

    /// Refuses a change to disk in a turn whose files the editor answered for before it left
    /// (this machine's disk has answered since).
    fn not_after_the_editor(&self, path: &Path) -> Result<(), FileError> {
        if self.on_disk() && self.sides.editor.load(Ordering::Acquire) {
            return Err(FileError::Other(format!(
                "not written: {} was not written to disk because this turn worked on the \
                 editor's buffers, and that editor has left the session since; the next turn \
                 works on this machine's files (read the file again then)",
                path.display(),
            )));
        }
        Ok(())
    }
}

impl FileAccess for ClientFiles {
    fn may_change_disk(&self, path: &Path) -> Result<(), FileError> {
        self.not_after_the_editor(path)
    }

    fn sides(&self) -> Option<FileSides> {
        Some(self.sides.clone())
    }

    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        Box::pin(async move {
            if !self.delegation.read_files || self.on_disk() {
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
                Some(ClientAnswer::Read(result)) => {
                    self.editor_answered();
                    result
                }
                Some(ClientAnswer::Local) => {
                    self.disk_answered();
                    self.local.read_text(path).await
                }
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
            if self.on_disk() {
                self.not_after_the_editor(path)?;
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
                Some(ClientAnswer::Wrote(result)) => {
                    self.editor_answered();
                    result
                }
                Some(ClientAnswer::Local) => {
                    self.disk_answered();
                    self.not_after_the_editor(path)?;
                    self.local.write_text(path, text).await
                }
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
            let asked = ClientAsk::RunCommand { spec: spec.clone() };
            match ask(&self.events, asked, cancel.clone(), progress.clone()).await {
                Some(ClientAnswer::Ran(result)) => result,
                Some(ClientAnswer::Local) => LocalRunner.run(spec, cancel, progress).await,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A consumer that answers every request: the client the session was given has left.
    fn client_gone() -> mpsc::Sender<EngineEvent> {
        let (events, mut asked) = mpsc::channel(4);
        tokio::spawn(async move {
            while let Some(EngineEvent::ClientRequest(request)) = asked.recv().await {
                request.answer(ClientAnswer::Local);
            }
        });
        events
    }

    /// A turn's files, delegated to the client `events` reaches.
    fn delegated_files(events: mpsc::Sender<EngineEvent>) -> ClientFiles {
        ClientFiles {
            events,
            delegation: delegated(),
            cancel: CancellationToken::new(),
            local: LocalFiles::default(),
            sides: FileSides::default(),
        }
    }

    fn delegated() -> Delegation {
        Delegation {
            read_files: true,
            write_files: true,
            terminal: true,
            ..Delegation::default()
        }
    }

    /// A consumer whose editor reads `buffer` and then leaves: every later request is
    /// answered `Local`.
    fn editor_reads_then_leaves(buffer: &'static str) -> mpsc::Sender<EngineEvent> {
        let (events, mut asked) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut first = true;
            while let Some(EngineEvent::ClientRequest(request)) = asked.recv().await {
                if std::mem::take(&mut first) {
                    request.answer(ClientAnswer::Read(Ok(buffer.to_string())));
                } else {
                    request.answer(ClientAnswer::Local);
                }
            }
        });
        events
    }

    #[tokio::test]
    async fn a_turn_that_worked_on_the_editors_buffers_writes_nothing_to_disk_once_it_left() {
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("a.txt");
        std::fs::write(&path, "disk line\n").expect("written");
        let files = delegated_files(editor_reads_then_leaves("unsaved buffer\n"));
        let read = files.read_text(&path).await.expect("read");
        assert_eq!(read, "unsaved buffer\n");
        let refused = files.write_text(&path, "edited buffer\n").await;
        let Err(FileError::Other(why)) = refused else {
            panic!("written: {refused:?}");
        };
        assert!(why.contains("the next turn"), "{why}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "disk line\n");
        // Read again, from disk now, it is still not written in this turn, nor is another
        // file (a move's new one).
        assert_eq!(files.read_text(&path).await.expect("read"), "disk line\n");
        assert!(files.write_text(&path, "edited\n").await.is_err());
        let other = folder.path().join("b.txt");
        assert!(files.write_text(&other, "moved\n").await.is_err());
        assert!(!other.exists());
        // The next turn's files are this machine's.
        let next_turn = delegated_files(client_gone());
        next_turn
            .write_text(&path, "edited\n")
            .await
            .expect("written");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "edited\n");
    }

    /// A consumer whose editor is away for the first request and back for the others.
    fn editor_away_then_back() -> mpsc::Sender<EngineEvent> {
        let (events, mut asked) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut first = true;
            while let Some(EngineEvent::ClientRequest(request)) = asked.recv().await {
                if std::mem::take(&mut first) {
                    request.answer(ClientAnswer::Local);
                } else {
                    request.answer(ClientAnswer::Wrote(Ok(())));
                }
            }
        });
        events
    }

    #[tokio::test]
    async fn a_turn_that_read_from_disk_stays_on_disk_when_the_editor_comes_back() {
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("a.txt");
        std::fs::write(&path, "disk line\n").expect("written");
        let files = delegated_files(editor_away_then_back());
        assert_eq!(files.read_text(&path).await.expect("read"), "disk line\n");
        // Not asked of the editor (its buffer is not what was read): written to disk.
        files.write_text(&path, "edited\n").await.expect("written");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "edited\n");
        assert!(files.may_change_disk(&path).is_ok());
    }

    #[tokio::test]
    async fn nothing_is_removed_from_disk_after_the_editor_answered_and_left() {
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("a.txt");
        std::fs::write(&path, "disk line\n").expect("written");
        let files = delegated_files(editor_reads_then_leaves("unsaved buffer\n"));
        files.read_text(&path).await.expect("read");
        // Still attached as far as the turn knows: a removal may go on.
        assert!(files.may_change_disk(&path).is_ok());
        files.read_text(&path).await.expect("read from disk now");
        assert!(files.may_change_disk(&path).is_err());
    }

    #[tokio::test]
    async fn once_the_client_has_left_files_and_commands_are_this_machines() {
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("left.txt");
        let files = delegated_files(client_gone());
        files.write_text(&path, "on disk\n").await.expect("written");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "on disk\n");
        assert_eq!(files.read_text(&path).await.expect("read"), "on disk\n");

        let shell = talaria_tools::Shell::default();
        let spec = CommandSpec {
            command: "echo ran here".into(),
            cwd: folder.path().to_path_buf(),
            timeout: Duration::from_secs(10),
            max_output_bytes: 1000,
            local: shell.local("echo ran here", true),
            elsewhere: shell.elsewhere("echo ran here", true),
        };
        assert!(spec.elsewhere.is_some(), "an editor terminal could run it");
        let commands = ClientCommands {
            events: client_gone(),
            delegation: delegated(),
        };
        let never = CancellationToken::new();
        let ran = commands.run(spec, &never, None).await.expect("ran");
        assert_eq!(ran.exit_code, Some(0), "{ran:?}");
        assert!(ran.output.contains("ran here") && ran.terminal_id.is_none());
    }
}
