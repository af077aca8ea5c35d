//! Where a model call's output goes: the chat (a foreground turn) or nowhere visible (a side
//! task collects it silently and keeps its notices for its caller).

use talaria_provider::Usage;
use tokio::sync::mpsc;

use crate::events::{EngineEvent, NoticeLevel};

/// Receives what a model call produces, as it arrives.
pub(crate) trait CallSink: Send {
    /// A piece of the answer.
    async fn text(&mut self, delta: String);
    /// A piece of the model's reasoning.
    async fn thought(&mut self, delta: String);
    /// The token counts of one call, and the context use and session cost after it.
    async fn usage(&mut self, usage: &Usage, context_used: u64, window: u64, cost: Option<f64>);
    /// A recovery step or failure the user should know about.
    async fn notice(&mut self, level: NoticeLevel, message: String);
}

/// The foreground turn: everything goes to the chat as engine events.
pub(crate) struct ChatSink<'a> {
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub session_id: &'a str,
}

impl CallSink for ChatSink<'_> {
    async fn text(&mut self, delta: String) {
        let _ = self.events.send(EngineEvent::AgentText(delta)).await;
    }

    async fn thought(&mut self, delta: String) {
        let _ = self.events.send(EngineEvent::AgentThought(delta)).await;
    }

    async fn usage(&mut self, _usage: &Usage, context_used: u64, window: u64, cost: Option<f64>) {
        let _ = self
            .events
            .send(EngineEvent::Usage {
                used: context_used,
                size: window,
                cost,
            })
            .await;
    }

    async fn notice(&mut self, level: NoticeLevel, message: String) {
        tracing::info!(session = %self.session_id, ?level, "{message}");
        let _ = self
            .events
            .send(EngineEvent::Notice { level, message })
            .await;
    }
}

/// A side task: collects the answer; nothing reaches the chat. Notices are logged and kept.
#[derive(Debug, Default)]
pub(crate) struct SilentSink {
    pub text: String,
    pub notices: Vec<(NoticeLevel, String)>,
}

impl CallSink for SilentSink {
    async fn text(&mut self, delta: String) {
        self.text.push_str(&delta);
    }

    async fn thought(&mut self, _delta: String) {}

    async fn usage(&mut self, _: &Usage, _: u64, _: u64, _: Option<f64>) {}

    async fn notice(&mut self, level: NoticeLevel, message: String) {
        tracing::info!(?level, "side task: {message}");
        self.notices.push((level, message));
    }
}
