//! Learning: what each turn did toward the review thresholds, and the background review
//! that runs beside the session when one is reached.

use talaria_record::EntryBody;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{SIDE_WORK_PAUSE, SessionActor};
use crate::events::EngineEvent;
use crate::session::ops::Op;

/// Where the session stands toward its next review.
#[derive(Debug, Default)]
pub(super) struct LearningState {
    /// Model calls that used tools since the last skill write.
    pub(super) since_skill_write: u32,
    /// User turns since the last memory write.
    pub(super) since_memory_write: u32,
    /// The running review's token (a child of the cancel epoch it started in).
    pub(super) running: Option<CancellationToken>,
    /// A review gave way to a prompt (one-slot servers) and runs again after it.
    pub(super) retry: bool,
}

impl SessionActor {
    /// Counts what the turn after entry `before` did toward the review thresholds: model
    /// calls that used tools, and the user turn; a call that wrote a skill or memory (`kept`,
    /// by the results' unique ids: what the tools themselves said) resets its count.
    pub(super) fn count_learning(
        &mut self,
        before: talaria_record::EntryId,
        kept: &[(String, talaria_tools::Kept)],
    ) {
        self.learning.since_memory_write += 1;
        for entry in self.history.entries_after(before) {
            match &entry.body {
                EntryBody::Assistant(answer) if !answer.tool_calls.is_empty() => {
                    self.learning.since_skill_write += 1;
                }
                EntryBody::ToolResult(result) => {
                    match kept.iter().find(|(id, _)| *id == result.client_id) {
                        Some((_, talaria_tools::Kept::Skill { .. })) => {
                            self.learning.since_skill_write = 0
                        }
                        Some((_, talaria_tools::Kept::Memory)) => {
                            self.learning.since_memory_write = 0
                        }
                        None => {}
                    }
                }
                _ => {}
            }
        }
    }

    /// Starts the background review when a threshold is reached and none is running; it
    /// begins once the prompt's response has been delivered.
    pub(super) async fn maybe_review(&mut self) {
        let learning = self.settings.learning;
        let skills_due = learning.skill_review_after > 0
            && self.learning.since_skill_write >= learning.skill_review_after;
        let memory_due = learning.memory_review_after > 0
            && self.learning.since_memory_write >= learning.memory_review_after;
        let Some(factory) = self.settings.review.clone() else {
            return;
        };
        if !(skills_due || memory_due || self.learning.retry) || self.learning.running.is_some() {
            return;
        }
        self.learning.retry = false;
        self.learning.since_skill_write = 0;
        self.learning.since_memory_write = 0;
        let id = format!(
            "r{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() % 100_000_000)
        );
        let kit = (factory.0)(&id);
        let mut registry = self.registry.clone();
        // The review may run exactly the tools the edge handed it.
        let allowed: Vec<String> = kit
            .tools
            .iter()
            .map(|tool| tool.definition().name.to_string())
            .collect();
        for tool in kit.tools {
            registry.register(tool);
        }
        // A later `cancel` ends it with the epoch it started in.
        let token = self.epochs.current().child_token();
        self.learning.running = Some(token.clone());
        let job = crate::review::ReviewJob {
            settings: crate::review::ReviewJob::settings_for(&self.settings, &id, &self.model),
            transcript: self.history.clone(),
            registry: registry
                .dispatch_only(&allowed.iter().map(String::as_str).collect::<Vec<_>>()),
            router: self.router.clone(),
            context: self.context.for_side_task(),
            cancel: token,
            max_calls: learning.max_review_calls,
            staged: kit.staged,
        };
        let (delivered, responded) = crate::events::Signal::new();
        let _ = self.events.send(EngineEvent::Delivered(delivered)).await;
        tracing::info!(session = %self.settings.id, review = %id, "background review started");
        tokio::spawn(review_beside(
            job,
            responded,
            self.settings.single_slot,
            self.own_ops.clone(),
        ));
    }

    /// Takes a finished review's usage into the session's and tells the user what it proposes.
    pub(super) async fn review_finished(&mut self, outcome: crate::review::ReviewOutcome) {
        self.learning.running = None;
        self.usage.tokens.merge(&outcome.usage);
        if outcome.priced {
            self.usage.cost += outcome.cost;
            self.usage.priced = true;
        }
        tracing::info!(
            session = %self.settings.id,
            review = %outcome.id,
            calls = outcome.calls,
            proposals = outcome.proposals.len(),
            cancelled = outcome.cancelled,
            error = ?outcome.error,
            "background review finished"
        );
        let staged = self.settings.learning.stage_reviews;
        for proposal in &outcome.proposals {
            let message = if staged {
                format!(
                    "The agent proposes {proposal}. Use /skills to inspect, accept or reject it."
                )
            } else {
                format!("The agent saved {proposal} in the background.")
            };
            self.history.push(EntryBody::Notice {
                level: talaria_record::NoticeLevel::Info,
                text: message.clone(),
            });
            let _ = self
                .events
                .send(EngineEvent::Notice {
                    level: crate::events::NoticeLevel::Info,
                    message,
                })
                .await;
        }
        self.save();
        self.update_meta(talaria_store::MetaUpdate {
            tokens: Some((self.usage.tokens.input, self.usage.tokens.output)),
            cost: self.usage.priced.then_some(self.usage.cost),
            ..Default::default()
        });
        // A threshold reached while this review ran is served now.
        if !outcome.cancelled {
            self.maybe_review().await;
        }
    }
}

/// Runs a review beside its session, once the prompt's response was delivered (and, on a
/// one-slot server, the user paused), and reports back to the session.
async fn review_beside(
    job: crate::review::ReviewJob,
    responded: tokio::sync::oneshot::Receiver<()>,
    single_slot: bool,
    ops: mpsc::WeakUnboundedSender<Op>,
) {
    let cancel = job.cancel.clone();
    let gave_up = |id: &str| crate::review::ReviewOutcome {
        id: id.to_string(),
        cancelled: true,
        ..Default::default()
    };
    let outcome = tokio::select! {
        biased;
        () = cancel.cancelled() => gave_up(&job.settings.id),
        delivered = responded => match delivered {
            Ok(()) => {
                if single_slot {
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        () = tokio::time::sleep(SIDE_WORK_PAUSE) => {}
                    }
                }
                crate::review::run(job).await
            }
            // Nobody reads the events any more: the client is gone.
            Err(_) => gave_up(&job.settings.id),
        },
    };
    if let Some(ops) = ops.upgrade() {
        let _ = ops.send(Op::ReviewFinished(outcome));
    }
}
