//! What both kinds of delegation share: the session's parts a child works with
//! ([`SubagentKit`]), and the relay that shows a child's work on its parent's session — its
//! steps as progress on the parent's card, its permission questions on the parent's session
//! under its name, its events on its own session id when the client shows subagents.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use talaria_tools::{Progress, Registry, ToolContext, ToolStatus};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::client::{ClientAsk, ClientRequest};
use crate::events::{EngineEvent, ToolCallView};
use crate::router::ModelRouter;
use crate::settings::SessionSettings;

/// What every child of a session shares.
pub(crate) struct SubagentKit {
    pub settings: SessionSettings,
    pub router: Arc<ModelRouter>,
    /// The parent's tools, without `delegate_task`.
    pub registry: Registry,
    /// The parent's mode, model and rules as its actor publishes them (it may switch the
    /// model mid-session: children without `[auxiliary.subagent]` follow).
    pub approval: crate::session_state::ApprovalState,
    pub events: mpsc::Sender<EngineEvent>,
    pub slots: Arc<Semaphore>,
    pub children: AtomicU64,
    /// Where children's records are saved (with their parent recorded), when the session is.
    pub journal: Option<crate::journal::Journal>,
}

/// The child's events, as the parent's session shows them.
pub(crate) struct Relay {
    pub(crate) name: String,
    /// The child's own session id when the client shows subagents as sessions.
    pub(crate) session: Option<String>,
    pub(crate) parent: mpsc::Sender<EngineEvent>,
    pub(crate) progress: Option<talaria_tools::ProgressSink>,
    /// The child's calls seen so far, and those shown on the parent's session.
    pub(crate) views: HashMap<String, ToolCallView>,
    pub(crate) shown: HashSet<String>,
}

impl Relay {
    pub(crate) fn step(&self, text: String) {
        if let Some(progress) = &self.progress {
            progress(Progress::Output(format!("{text}\n")));
        }
    }

    fn parent_id(&self, id: &str) -> String {
        format!("{}:{id}", self.name.replace(' ', "-"))
    }

    async fn forward(&mut self, event: EngineEvent) {
        if let Some(session_id) = &self.session {
            // The client shows the child as a session: its events stream on its own id.
            match event {
                EngineEvent::Delivered(signal) => signal.fire(),
                EngineEvent::TurnFinished { .. } => {}
                event => {
                    if let EngineEvent::ToolCallPending(view) = &event {
                        self.views.insert(view.id.clone(), view.clone());
                    }
                    let wrapped = EngineEvent::ChildEvent {
                        session_id: session_id.clone(),
                        event: Box::new(event),
                    };
                    let _ = self.parent.send(wrapped).await;
                }
            }
            return;
        }
        match event {
            EngineEvent::ToolCallPending(view) => {
                self.step(format!("{} — {}", self.name, view.title));
                self.views.insert(view.id.clone(), view);
            }
            EngineEvent::ToolCallFinished {
                id,
                status,
                display,
                raw_output,
                skills_changed,
            } => {
                let mark = if status == ToolStatus::Completed {
                    "✓"
                } else {
                    "✗"
                };
                self.step(format!("{} {mark} {}", self.name, display.title));
                if self.shown.contains(&id) {
                    let finished = EngineEvent::ToolCallFinished {
                        id: self.parent_id(&id),
                        status,
                        display,
                        raw_output,
                        skills_changed,
                    };
                    let _ = self.parent.send(finished).await;
                }
            }
            EngineEvent::ClientRequest(request) => self.ask_parent(request).await,
            EngineEvent::Notice { message, .. } => {
                self.step(format!("{}: {message}", self.name));
            }
            EngineEvent::Delivered(signal) => signal.fire(),
            _ => {}
        }
    }

    /// A child's request to the client goes to the parent's session; a permission question
    /// gets a card there first, named after the child.
    async fn ask_parent(&mut self, request: ClientRequest) {
        let ClientAsk::Permission(mut permission) = request.ask.clone() else {
            let _ = self.parent.send(EngineEvent::ClientRequest(request)).await;
            return;
        };
        let child_id = permission.tool_call_id.clone();
        let parent_id = self.parent_id(&child_id);
        if let Some(view) = self.views.get(&child_id) {
            let mut card = view.clone();
            card.id = parent_id.clone();
            card.announced = false;
            card.title = format!("[{}] {}", self.name, view.title);
            let _ = self.parent.send(EngineEvent::ToolCallPending(card)).await;
            self.shown.insert(child_id);
        }
        permission.tool_call_id = parent_id;
        permission.title = format!("[{}] {}", self.name, permission.title);
        let _ = self
            .parent
            .send(EngineEvent::ClientRequest(
                request.with_ask(ClientAsk::Permission(permission)),
            ))
            .await;
    }
}

/// Starts relaying the child's events onto the parent's stream; returns where the child
/// sends them and the relay (back when the child's sender is dropped).
pub(crate) fn start_relay(
    kit: &SubagentKit,
    ctx: &ToolContext,
    session: Option<String>,
    name: &str,
    goal: &str,
) -> (mpsc::Sender<EngineEvent>, tokio::task::JoinHandle<Relay>) {
    let (child_events, mut from_child) = mpsc::channel(256);
    let mut relay = Relay {
        session,
        name: name.to_string(),
        parent: kit.events.clone(),
        progress: ctx.progress.clone(),
        views: HashMap::new(),
        shown: HashSet::new(),
    };
    relay.step(format!("{name} started: {goal}"));
    let relaying = tokio::spawn(async move {
        while let Some(event) = from_child.recv().await {
            relay.forward(event).await;
        }
        relay
    });
    (child_events, relaying)
}

/// What the parent's client is told of the child: its session and whether it works, how it
/// ended, the messages between them.
pub(crate) struct Announcement<'a> {
    pub session_id: &'a str,
    pub name: &'a str,
    pub goal: &'a str,
    pub running: bool,
    pub stop: Option<crate::events::SubagentStop>,
    pub message: Option<crate::events::SubagentMessage>,
}

pub(crate) async fn announce(kit: &SubagentKit, announcement: Announcement<'_>) {
    let view = crate::events::SubagentView {
        session_id: announcement.session_id.to_string(),
        title: announcement.name.to_string(),
        description: announcement.goal.chars().take(200).collect(),
        running: announcement.running,
        stop: announcement.stop,
        message: announcement.message,
    };
    let _ = kit.events.send(EngineEvent::Subagent(view)).await;
}

/// The running children's own cancellation, by session id: a client cancels one child's
/// work (`session/cancel` on its id) without ending its parent's turn.
static RUNNING: std::sync::LazyLock<std::sync::Mutex<HashMap<String, CancellationToken>>> =
    std::sync::LazyLock::new(Default::default);

/// Cancels the running subagent with this session id; `false` when there is none.
pub fn cancel_subagent(session_id: &str) -> bool {
    let running = talaria_util::lock(&RUNNING);
    match running.get(session_id) {
        Some(token) => {
            token.cancel();
            true
        }
        None => false,
    }
}

/// A child's entry in [`RUNNING`], removed when it ends however it ends.
pub(crate) struct Running(String);

impl Running {
    pub(crate) fn register(session_id: &str, token: CancellationToken) -> Self {
        talaria_util::lock(&RUNNING).insert(session_id.to_string(), token);
        Self(session_id.to_string())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        talaria_util::lock(&RUNNING).remove(&self.0);
    }
}
