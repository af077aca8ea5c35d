//! The user's hooks around a prompt: `UserPromptSubmit` before the turn (it may block the
//! prompt — it is then not sent, and the user is told why — or add context the model reads
//! with it, as a resumed session's `SessionStart` hooks' context is with its first prompt), `Stop` when the turn would end (a block continues the turn with its reason, at
//! most [`MAX_STOP_CONTINUATIONS`] times, `stop_hook_active` telling the hook so).

use super::SessionActor;
use crate::events::{StopReason, TurnError};
use crate::hooks::HookEvent;
use crate::session::ops::{OpInbox, Work};
use crate::settings::UserInput;
use crate::turn::TurnEnd;

/// How often `Stop` hooks may send a turn on.
pub(super) const MAX_STOP_CONTINUATIONS: u32 = 3;

impl SessionActor {
    /// The prompt as the `UserPromptSubmit` hooks let it go on (with their context), or the
    /// outcome of a prompt they blocked.
    pub(super) async fn submitted(
        &mut self,
        mut input: UserInput,
    ) -> Result<UserInput, Result<StopReason, TurnError>> {
        let prompt: Vec<String> = input
            .blocks
            .iter()
            .filter_map(|block| match block {
                talaria_record::InputBlock::Text { text } => Some(text.clone()),
                _ => None,
            })
            .collect();
        let outcome = self
            .settings
            .hook_scope()
            .run(
                HookEvent::UserPromptSubmit,
                serde_json::json!({"prompt": prompt.join("\n")}),
                &self.events,
            )
            .await;
        if outcome.blocked.is_some() {
            return Err(Ok(StopReason::Refusal));
        }
        if let Some(context) = self.resumed_context.take() {
            input
                .model_view
                .push(talaria_record::UserPart::text(format!(
                    "[From the user's SessionStart hooks, as the session resumed]\n{context}"
                )));
        }
        if !outcome.context.is_empty() {
            input
                .model_view
                .push(talaria_record::UserPart::text(format!(
                    "[From the user's UserPromptSubmit hooks]\n{}",
                    outcome.context.join("\n")
                )));
        }
        Ok(input)
    }

    /// The session's end: a review in the background ends with it, then its `SessionEnd`
    /// hooks run, once its last op is done.
    pub(super) async fn end_hooks(&mut self, closed: bool) {
        if let Some(review) = self.learning.running.take() {
            review.cancel();
        }
        let reason = if closed { "close" } else { "other" };
        self.settings
            .hook_scope()
            .run(
                HookEvent::SessionEnd,
                serde_json::json!({"reason": reason}),
                &self.events,
            )
            .await;
    }

    /// Runs the turn; while its `Stop` hooks block its end, runs it on with their reason.
    pub(super) async fn run_turn_with_stop_hooks(
        &mut self,
        input: UserInput,
        work: &Work,
        receiver: &mut OpInbox,
    ) -> TurnEnd {
        let mut end = self.run_turn(input, &work.token, receiver).await;
        let mut continued = 0;
        while matches!(end.outcome, Ok(StopReason::EndTurn)) && continued < MAX_STOP_CONTINUATIONS {
            let outcome = self
                .settings
                .hook_scope()
                .run(
                    HookEvent::Stop,
                    serde_json::json!({"stop_hook_active": continued > 0}),
                    &self.events,
                )
                .await;
            let Some(reason) = outcome.blocked else { break };
            continued += 1;
            let more = UserInput::text(&format!("[The user's Stop hook] {reason}"));
            let next = self.run_turn(more, &work.token, receiver).await;
            end.usage.input += next.usage.input;
            end.usage.output += next.usage.output;
            end.usage.cached_read += next.usage.cached_read;
            end.usage.cached_write += next.usage.cached_write;
            end.usage.reasoning += next.usage.reasoning;
            end.kept.extend(next.kept);
            end.outcome = next.outcome;
        }
        end
    }
}
