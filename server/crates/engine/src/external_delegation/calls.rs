//! The agent's file and terminal requests as calls of the session's own tools, each through
//! a one-call batch of the session's orchestrator (its mode, rules, sandbox and hidden
//! places), on cards relayed to the parent's session under the agent's name.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use talaria_provider::ToolCallRequest;
use talaria_record::{ResultStatus, ToolResultEntry};
use talaria_tools::{FileAccess, FileError, Progress, ToolContext};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::terminals::Terminals;
use crate::delegation_kit::SubagentKit;
use crate::events::EngineEvent;
use crate::external_agents::{
    ChildAnswer, ChildCall, ChildCallEnd, ChildCommand, ChildExit, ChildOutput, ChildQuestion,
    ExternalHost, HostError,
};

/// The id an agent's own call has on its session's cards (apart from Talaria's own calls).
fn agent_call_id(id: &str) -> String {
    format!("agent-{id}")
}

/// The agents' calls in this process, for their cards' ids (unique across delegations).
static CALLS: AtomicU64 = AtomicU64::new(0);

/// One delegation's side of the agent's requests.
pub struct ChildCalls {
    pub(super) kit: Arc<SubagentKit>,
    pub(super) name: String,
    pub(super) ctx: ToolContext,
    /// Where the calls' events go (the relay to the parent's session), until the end.
    events: Mutex<Option<mpsc::Sender<EngineEvent>>>,
    relaying: Mutex<Option<tokio::task::JoinHandle<crate::delegation_kit::Relay>>>,
    pub(super) terminals: Terminals,
    pub(super) me: Weak<ChildCalls>,
    /// The agent's own session id, when the client shows subagents as sessions.
    pub(super) child_session: Option<String>,
    /// The delegation's turns: what the agent's current turn asks (files, questions,
    /// terminals) ends with it, as a steer cuts it.
    pub(super) steers: Option<crate::external_agents::Steers>,
}

impl ChildCalls {
    pub(crate) fn new(
        kit: Arc<SubagentKit>,
        name: &str,
        parent: &ToolContext,
        cancel: CancellationToken,
        task: &str,
    ) -> Self {
        let mut ctx = parent.clone();
        ctx.cancel = cancel;
        let (events, relaying) = crate::delegation_kit::start_relay(&kit, &ctx, None, name, task);
        Self {
            kit,
            name: name.to_string(),
            ctx,
            events: Mutex::new(Some(events)),
            relaying: Mutex::new(Some(relaying)),
            terminals: Terminals::default(),
            me: Weak::new(),
            child_session: None,
            steers: None,
        }
    }

    /// Ends the delegation's relay (its terminals are stopped) once its last events are out.
    pub(crate) async fn end(&self) {
        self.terminals.stop_all();
        let events = talaria_util::lock(&self.events).take();
        drop(events);
        let relaying = talaria_util::lock(&self.relaying).take();
        if let Some(relaying) = relaying {
            let _ = relaying.await;
        }
    }

    /// Shows `event` on the agent's own session, when the client shows subagents.
    async fn on_child_session(&self, event: EngineEvent) {
        if let Some(session_id) = &self.child_session {
            let wrapped = EngineEvent::ChildEvent {
                session_id: session_id.clone(),
                event: Box::new(event),
            };
            let _ = self.kit.events.send(wrapped).await;
        }
    }

    /// Ends what the agent's current turn asked: the turn's token (a steer cuts it), else
    /// the delegation's.
    pub(super) fn turn_cancel(&self) -> CancellationToken {
        self.steers.as_ref().map_or_else(
            || self.ctx.cancel.clone(),
            crate::external_agents::Steers::turn,
        )
    }

    pub(super) fn events(&self) -> Option<mpsc::Sender<EngineEvent>> {
        talaria_util::lock(&self.events).clone()
    }

    /// Runs `tool` with `args` as one call of the session's orchestrator; its record entry,
    /// or why it could not run.
    pub(super) async fn run_tool(
        &self,
        tool: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<ToolResultEntry, HostError> {
        self.run_tool_on(tool, args, cancel, None).await
    }

    /// Like [`ChildCalls::run_tool`], the call's files through `files` when given.
    async fn run_tool_on(
        &self,
        tool: &str,
        args: Value,
        cancel: &CancellationToken,
        files: Option<Arc<dyn FileAccess>>,
    ) -> Result<ToolResultEntry, HostError> {
        let events = self.events().ok_or(HostError::Ended)?;
        let number = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{}-call-{number}", self.name.replace(' ', "-"));
        let request = ToolCallRequest {
            id: id.clone(),
            name: tool.to_string(),
            arguments: args.to_string(),
        };
        let mut ctx = self.ctx.clone();
        ctx.cancel = cancel.clone();
        if let Some(files) = files {
            ctx.files = files;
        }
        let call = crate::turn::LoneCall {
            settings: &self.kit.settings,
            registry: &self.kit.registry,
            approval: &self.kit.approval,
            events: &events,
            cancel,
            ctx,
        };
        call.run(id, request)
            .await
            .ok_or_else(|| HostError::Refused("the call gave no result".into()))
    }
}

/// The session's files for one read, keeping the text the read took.
struct KeptRead {
    files: Arc<dyn FileAccess>,
    text: Mutex<Option<String>>,
}

impl FileAccess for KeptRead {
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        async move {
            let text = self.files.read_text(path).await?;
            *talaria_util::lock(&self.text) = Some(text.clone());
            Ok(text)
        }
        .boxed()
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        self.files.write_text(path, text)
    }
}

/// A completed entry's text, or its text as the refusal.
fn completed(entry: &ToolResultEntry) -> Result<(), HostError> {
    match entry.status {
        ResultStatus::Completed => Ok(()),
        _ => Err(HostError::Refused(entry.model_text.clone())),
    }
}

impl ExternalHost for ChildCalls {
    fn step(&self, line: String) {
        self.ctx
            .report_progress(Progress::Output(format!("{line}\n")));
    }

    fn said<'a>(&'a self, text: String) -> BoxFuture<'a, ()> {
        self.on_child_session(EngineEvent::AgentText(text)).boxed()
    }

    fn thought<'a>(&'a self, text: String) -> BoxFuture<'a, ()> {
        self.on_child_session(EngineEvent::AgentThought(text))
            .boxed()
    }

    fn call_started<'a>(&'a self, call: ChildCall) -> BoxFuture<'a, ()> {
        async move {
            let id = agent_call_id(&call.id);
            let view = crate::events::ToolCallView {
                announced: false,
                id: id.clone(),
                name: call.title.clone(),
                title: call.title,
                kind: call.kind.tool_kind(),
                locations: call.paths.into_iter().map(|path| (path, None)).collect(),
                raw_input: call.raw_input,
                preview: Vec::new(),
            };
            self.on_child_session(EngineEvent::ToolCallPending(view))
                .await;
            self.on_child_session(EngineEvent::ToolCallRunning { id })
                .await;
        }
        .boxed()
    }

    fn call_ended<'a>(&'a self, ended: ChildCallEnd) -> BoxFuture<'a, ()> {
        let status = if ended.failed {
            talaria_tools::ToolStatus::Failed
        } else {
            talaria_tools::ToolStatus::Completed
        };
        let display = talaria_record::ToolDisplay {
            title: ended.title.unwrap_or_default(),
            kind: talaria_record::ToolKind::Other,
            locations: Vec::new(),
            content: (!ended.text.is_empty())
                .then_some(talaria_record::DisplayContent::Text { text: ended.text })
                .into_iter()
                .collect(),
        };
        self.on_child_session(EngineEvent::ToolCallFinished {
            id: agent_call_id(&ended.id),
            status,
            display,
            raw_output: None,
            skills_changed: false,
        })
        .boxed()
    }

    fn read_text<'a>(
        &'a self,
        path: PathBuf,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> BoxFuture<'a, Result<String, HostError>> {
        async move {
            // Decided, checked and read once as the session's own read (its card, its
            // refusals); the agent gets the text that read took, as it is, not numbered.
            let args = json!({"path": path, "offset": line, "limit": limit});
            let kept = Arc::new(KeptRead {
                files: self.ctx.files.clone(),
                text: Mutex::default(),
            });
            let files: Arc<dyn FileAccess> = kept.clone();
            let entry = self
                .run_tool_on("read_file", args, &self.turn_cancel(), Some(files))
                .await?;
            completed(&entry)?;
            let text = talaria_util::lock(&kept.text)
                .take()
                .ok_or_else(|| HostError::Refused("the file was not read".into()))?;
            Ok(lines_of(&text, line, limit))
        }
        .boxed()
    }

    fn write_text<'a>(
        &'a self,
        path: PathBuf,
        text: String,
    ) -> BoxFuture<'a, Result<(), HostError>> {
        async move {
            // Only what the delegation's checkpoint covers may be written: a rewind must be
            // able to take every write back.
            let resolved = self.ctx.resolve(&path.display().to_string());
            let roots = &self.kit.settings.roots;
            let real = super::questions::real_path(&resolved).await;
            if !super::questions::inside_roots(&resolved, roots)
                || !super::questions::inside_roots(&real, roots)
            {
                return Err(HostError::Refused(format!(
                    "{} is outside the session's folders: another agent writes only inside them \
                     (where a rewind can take its writes back)",
                    resolved.display()
                )));
            }
            let args = json!({"path": path, "content": text});
            let entry = self
                .run_tool("write_file", args, &self.turn_cancel())
                .await?;
            completed(&entry)
        }
        .boxed()
    }

    fn ask<'a>(&'a self, question: ChildQuestion) -> BoxFuture<'a, ChildAnswer> {
        async move {
            let cancel = self.turn_cancel();
            let asker = super::questions::Asker {
                name: &self.name,
                kit: &self.kit,
                events: self.events(),
                cancel: &cancel,
            };
            super::questions::ask(asker, question).await
        }
        .boxed()
    }

    fn ask_form<'a>(
        &'a self,
        message: String,
        schema: Value,
    ) -> BoxFuture<'a, Result<talaria_tools::FormAnswer, HostError>> {
        async move {
            let Some(questions) = self.ctx.questions.clone() else {
                return Ok(talaria_tools::FormAnswer::Declined);
            };
            let message = format!("{} asks: {message}", self.name);
            questions
                .ask_form(&message, &schema, &self.ctx.cancel)
                .await
                .map_err(|e| HostError::Refused(e.to_string()))
        }
        .boxed()
    }

    fn start_command<'a>(
        &'a self,
        command: ChildCommand,
    ) -> BoxFuture<'a, Result<String, HostError>> {
        async move {
            let me = self.me.upgrade().ok_or(HostError::Ended)?;
            let run: super::terminals::RunCommand = Box::new(move |args, cancel| {
                async move { me.run_tool("terminal", args, &cancel).await }.boxed()
            });
            self.terminals.start(run, &self.turn_cancel(), command)
        }
        .boxed()
    }

    fn command_output(&self, terminal: &str) -> Result<ChildOutput, HostError> {
        self.terminals.output(terminal)
    }

    fn wait_command<'a>(
        &'a self,
        terminal: &'a str,
    ) -> BoxFuture<'a, Result<ChildExit, HostError>> {
        self.terminals.wait(terminal).boxed()
    }

    fn kill_command(&self, terminal: &str) -> Result<(), HostError> {
        self.terminals.kill(terminal)
    }

    fn release_command(&self, terminal: &str) -> Result<(), HostError> {
        self.terminals.release(terminal)
    }
}

/// `limit` lines of `text` from line `line` (1-based), or all of it.
fn lines_of(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_string();
    }
    let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |l| l as usize);
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

#[cfg(test)]
mod tests {
    use super::lines_of;

    #[test]
    fn a_read_with_a_line_and_limit_gives_those_lines_as_they_are() {
        let text = "one\ntwo\nthree\nfour";
        assert_eq!(lines_of(text, None, None), text);
        assert_eq!(lines_of(text, Some(2), Some(2)), "two\nthree\n");
        assert_eq!(lines_of(text, Some(4), None), "four");
        assert_eq!(lines_of(text, None, Some(1)), "one\n");
    }
}
