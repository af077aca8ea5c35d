//! Titles: after the first turn, through the title model beside the session (on a one-slot
//! server only when the user pauses, giving way to a prompt), else the first prompt's line.

use talaria_record::{EntryBody, UserPart};
use tokio_util::sync::CancellationToken;

use super::{SIDE_WORK_PAUSE, SessionActor};
use crate::events::EngineEvent;
use crate::model_call::SessionUsage;
use crate::session::ops::Op;
use crate::side_task::{SideRequest, SideTaskError};

/// The session's title, and the task asking a model for one.
#[derive(Debug)]
pub(super) struct TitleState {
    pub(super) title: Option<String>,
    /// The title task running beside the session, if any.
    pub(super) task: Option<CancellationToken>,
    /// The client set the title: a generated one never replaces it.
    pub(super) by_client: bool,
}

/// The instruction for the title task.
const TITLE_SYSTEM: &str = "You name conversations. Answer with a title of at most 8 words \
    for the conversation that starts with the user's message below: no quotes, no final \
    period, nothing else.";

/// A title from a model's answer or a prompt: its first line, trimmed, at most 80 characters.
fn clean_title(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line
        .trim_matches(|c: char| c == '"' || c == '\'' || c == '*' || c == '#' || c.is_whitespace())
        .trim_end_matches('.');
    let mut title: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        title.push('…');
    }
    (!title.is_empty()).then_some(title)
}

impl SessionActor {
    /// The text of the session's first prompt.
    pub(super) fn first_prompt(&self) -> Option<String> {
        self.history.entries().iter().find_map(|e| match &e.body {
            EntryBody::User { model_view, .. } => Some(UserPart::joined_text(model_view, "\n")),
            _ => None,
        })
    }

    /// Titles the session after its first turn: through the title model, beside the session
    /// (a prompt that arrives meanwhile is served at once), when titles are on; else from the
    /// first prompt's first line.
    pub(super) async fn start_title(&mut self) {
        if self.titles.task.is_some() || self.titles.by_client {
            return;
        }
        let Some(first) = self.first_prompt() else {
            return;
        };
        if !self.settings.titles {
            self.set_title(clean_title(&first)).await;
            return;
        }
        let token = CancellationToken::new();
        self.titles.task = Some(token.clone());
        let call = self.side_call(token.clone(), false);
        let request = SideRequest {
            task: "title".into(),
            system: TITLE_SYSTEM.into(),
            prompt: first.chars().take(2000).collect(),
            with_history: false,
            max_tokens: Some(40),
        };
        let ops = self.own_ops.clone();
        let single_slot = self.settings.single_slot;
        tokio::spawn(async move {
            // On a one-slot server, wait for the user to pause: a prompt cancels this.
            if single_slot {
                tokio::select! {
                    () = token.cancelled() => {}
                    () = tokio::time::sleep(SIDE_WORK_PAUSE) => {}
                }
            }
            let (answer, usage) = if token.is_cancelled() {
                (Err(SideTaskError::Cancelled), SessionUsage::default())
            } else {
                crate::side_task::run(call, request).await
            };
            if let Some(ops) = ops.upgrade() {
                let _ = ops.send(Op::TitleFinished {
                    answer: answer.map(|a| a.text),
                    usage,
                });
            }
        });
    }

    /// The title task ended: its title (or the first prompt's line), unless it gave way to a
    /// prompt, in which case it starts again (ops are handled between turns, so after it).
    pub(super) async fn title_finished(
        &mut self,
        answer: Result<String, SideTaskError>,
        usage: SessionUsage,
    ) {
        let gave_way = self
            .titles
            .task
            .take()
            .is_some_and(|task| task.is_cancelled());
        self.usage.merge(&usage);
        if self.titles.by_client {
            return;
        }
        if gave_way {
            // Asked again; on a one-slot server it waits for the user to pause again.
            self.start_title().await;
            return;
        }
        let title = match answer {
            Ok(text) => clean_title(&text),
            Err(why) => {
                tracing::info!(session = %self.settings.id, "no title from the model: {why}");
                None
            }
        };
        let title = title.or_else(|| self.first_prompt().as_deref().and_then(clean_title));
        self.set_title(title).await;
    }

    /// The title the client set: it stays, and a title task still running is let go.
    pub(super) async fn title_from_client(&mut self, title: String) {
        self.titles.by_client = true;
        if let Some(task) = &self.titles.task {
            task.cancel();
        }
        self.set_title(Some(title)).await;
    }

    pub(super) async fn set_title(&mut self, title: Option<String>) {
        let Some(title) = title else {
            return;
        };
        self.titles.title = Some(title.clone());
        self.update_meta(talaria_store::MetaUpdate {
            title: Some(title.clone()),
            ..Default::default()
        });
        let _ = self.events.send(EngineEvent::SessionTitle(title)).await;
    }

    /// What a side task needs of this session (a side task never lowers the session's own
    /// window nor compacts its record).
    pub(super) fn side_call(
        &self,
        cancel: CancellationToken,
        with_history: bool,
    ) -> crate::side_task::SideCall {
        crate::side_task::SideCall {
            router: self.router.clone(),
            model: self.model.clone(),
            retry: self.settings.retry,
            context: self.context.for_side_task(),
            cancel,
            history: with_history.then(|| self.history.clone()),
        }
    }
}
