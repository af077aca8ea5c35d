//! A turn as the actor runs it: ops that arrive meanwhile (a mode change applies at once,
//! the rest waits), a panic made a failure, a failed or cancelled turn marked interrupted.

use std::collections::VecDeque;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::SessionActor;
use crate::approval::Mode;
use crate::events::{StopReason, TurnError, TurnUsage};
use crate::model_call::ModelCaller;
use crate::session::ops::{Op, OpInbox};
use crate::session_state::Published;
use crate::settings::UserInput;
use crate::turn::{SessionParts, Turn, TurnSpec};

impl SessionActor {
    /// Runs one turn; mode changes that arrive meanwhile apply at once, other ops wait.
    pub(super) async fn run_turn(
        &mut self,
        input: UserInput,
        token: &CancellationToken,
        receiver: &mut OpInbox,
    ) -> crate::turn::TurnEnd {
        let mut mode_set = None;
        self.sync_message_points();
        let result = {
            let caller = ModelCaller::new(
                self.router.as_ref(),
                self.router.chain(&self.model),
                self.settings.retry,
                token,
                &mut self.context,
                &mut self.usage,
            );
            let mut caller = caller;
            caller.effort = self.published.view.borrow().effort;
            caller.hooks = Some((self.settings.hook_scope(), &self.events));
            let turn = Turn::new(
                &self.settings,
                &self.registry,
                &mut self.history,
                caller,
                TurnSpec {
                    max_requests: self.settings.max_turn_requests,
                    approval: &self.approval,
                    sink: &self.events,
                    session: Some(SessionParts {
                        steering: &self.steering,
                        tool_state: &self.tool_state,
                        used_tool_ids: &mut self.used_tool_ids,
                    }),
                    journal: self.journal.as_mut(),
                    file_sides: None,
                },
            )
            .opening_with(self.opening.take());
            let running = std::panic::AssertUnwindSafe(turn.run(input)).catch_unwind();
            tokio::pin!(running);
            loop {
                tokio::select! {
                    result = &mut running => break result,
                    Some(op) = receiver.recv() => {
                        let during = During {
                            published: &self.published,
                            steering: &self.steering,
                            waiting: &mut self.waiting,
                            epochs: &self.epochs,
                            known: &self.message_points.0,
                        };
                        during.take(op, &mut mode_set);
                    }
                }
            }
        };
        let end = self.turn_ended(result, mode_set);
        // Steers the turn took but had no request left for (cancelled, failed, out of
        // requests) stay in the record, after its end (nothing reaches the inbox now).
        if let Some(replies) =
            crate::turn::record_steers(&self.steering, &mut self.history, &self.events).await
        {
            self.save();
            crate::turn::answer_steers(self.journal.as_ref(), replies);
        }
        end
    }

    /// Brings the known messages up to the record's end (after a rewind: from the start).
    pub(super) fn sync_message_points(&mut self) {
        let (points, upto) = &mut self.message_points;
        let on_path = *upto == 0
            || self
                .history
                .entries()
                .binary_search_by_key(upto, |e| e.id)
                .is_ok();
        if !on_path {
            points.clear();
            *upto = 0;
        }
        points.extend(crate::rewind::points_of(self.history.entries_after(*upto)));
        *upto = self.history.last_id();
    }

    /// After a turn: the mode it ended in recorded when a client changed it (however many
    /// sets came, one entry), a panic made a failure, a failed or cut-off turn marked
    /// interrupted, the usage saved.
    pub(super) fn turn_ended(
        &mut self,
        result: std::thread::Result<crate::turn::TurnEnd>,
        mode_set: Option<Mode>,
    ) -> crate::turn::TurnEnd {
        if let Some(mode) = mode_set.filter(|mode| *mode != self.recorded_mode()) {
            self.record_mode(mode);
        }
        let crate::turn::TurnEnd {
            outcome,
            usage,
            kept,
        } = match result {
            Ok(done) => done,
            Err(panic) => {
                let what = panic_message(panic.as_ref());
                tracing::error!(session = %self.settings.id, "turn panicked: {what}");
                let error = TurnError::Internal(format!("the turn failed unexpectedly: {what}"));
                crate::turn::TurnEnd {
                    outcome: Err(error),
                    usage: TurnUsage::default(),
                    kept: Vec::new(),
                }
            }
        };
        // A failed turn stays in the record, marked (open calls get failed results), so the
        // next request is valid for every provider.
        match &outcome {
            Err(error) => self.history.interrupt(error.to_string()),
            // A cancelled turn is marked: before any answer so roles stay valid, and after a
            // partial one so it is not read (by the user on reload, or the model) as complete.
            Ok(StopReason::Cancelled) => {
                self.history.interrupt("the turn was cancelled");
            }
            Ok(_) => {}
        }
        self.save();
        self.update_meta(talaria_store::MetaUpdate {
            tokens: Some((self.usage.tokens.input, self.usage.tokens.output)),
            cost: self.usage.priced.then_some(self.usage.cost),
            ..Default::default()
        });
        crate::turn::TurnEnd {
            outcome,
            usage,
            kept,
        }
    }

    /// On a one-slot server, side work gives way to a prompt that arrives: it is cancelled
    /// (so it never takes the slot, or the prompt cache, from the conversation) and runs again
    /// after the turn.
    pub(super) fn give_way(&mut self) {
        if !self.settings.single_slot {
            return;
        }
        if let Some(task) = &self.titles.task {
            task.cancel();
        }
        let review = self.learning.running.take();
        if let Some(review) = review {
            review.cancel();
            self.learning.retry = true;
        }
    }
}

/// What an op that arrives during a turn may reach.
struct During<'a> {
    published: &'a Published,
    steering: &'a crate::steering::SteerInbox,
    waiting: &'a mut VecDeque<Op>,
    epochs: &'a crate::session_state::CancelEpochs,
    /// The messages known when the turn started (`rewind::precheck`).
    known: &'a [(String, String)],
}

impl During<'_> {
    /// A mode change or a rule applies at once, a steer goes to the turn, a model switch is
    /// shown at once and applied after the turn, anything else waits for it.
    fn take(self, op: Op, mode_set: &mut Option<Mode>) {
        match op {
            Op::SetMode(mode) => {
                self.published.set_mode(mode);
                *mode_set = Some(mode);
            }
            Op::Remember(remember) => {
                let _ = remember
                    .done
                    .send(self.published.remember(&remember.scopes, remember.allow));
            }
            // Answered once it is in the record and that is saved or spooled (`steering`).
            Op::Steer { input, reply, .. } => self.steering.push(input, Some(reply)),
            Op::SetEffort(effort) => self.published.set_effort(effort),
            Op::SetModel(model) => {
                self.published.set_model(&model);
                wait_for_the_turn(self.waiting, Op::SetModel(model));
            }
            // A rewind refuses a busy session, or stops the turn and what is queued and
            // comes first once it has (its target is checked then).
            Op::Rewind { request, reply } if !request.interrupt_if_running => {
                let _ = reply.send(crate::rewind::RewindOutcome::Refused("busy".into()));
            }
            Op::Rewind { request, reply } => {
                if let Err(why) = crate::rewind::precheck(self.known, &request) {
                    let _ = reply.send(crate::rewind::RewindOutcome::Invalid(why.to_string()));
                    return;
                }
                self.epochs.cancel();
                self.waiting.push_front(Op::Rewind { request, reply });
            }
            other => wait_for_the_turn(self.waiting, other),
        }
    }
}

/// Queues `op` behind the running turn. A model or title set replaces the same kind of set
/// queued since the last op that is not a set (applied in a row, the later one wins), so a
/// flood of them during a turn holds one of each between two turns.
fn wait_for_the_turn(waiting: &mut VecDeque<Op>, op: Op) {
    let kind = |op: &Op| match op {
        Op::SetModel(_) => Some(0),
        Op::SetTitle(_) => Some(1),
        _ => None,
    };
    if let Some(mine) = kind(&op) {
        let sets = waiting
            .iter()
            .rev()
            .take_while(|queued| kind(queued).is_some())
            .count();
        let start = waiting.len() - sets;
        if let Some(at) = (start..waiting.len()).find(|&at| kind(&waiting[at]) == Some(mine)) {
            waiting.remove(at);
        }
    }
    waiting.push_back(op);
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(waiting: &VecDeque<Op>) -> Vec<String> {
        waiting
            .iter()
            .map(|op| match op {
                Op::SetModel(model) => format!("model {model}"),
                Op::SetTitle(title) => format!("title {title}"),
                Op::Close(_) => "close".to_string(),
                _ => "other".to_string(),
            })
            .collect()
    }

    #[test]
    fn a_flood_of_sets_during_a_turn_holds_the_last_of_each_between_turns() {
        let mut waiting = VecDeque::new();
        for n in 0..1000 {
            wait_for_the_turn(&mut waiting, Op::SetModel(format!("m{n}")));
            wait_for_the_turn(&mut waiting, Op::SetTitle(format!("t{n}")));
        }
        assert_eq!(shown(&waiting), ["model m999", "title t999"]);
        // An op that is not a set keeps what came before it: the sets after it are its own.
        wait_for_the_turn(&mut waiting, Op::Close(None));
        wait_for_the_turn(&mut waiting, Op::SetModel("after".into()));
        wait_for_the_turn(&mut waiting, Op::SetModel("later".into()));
        assert_eq!(
            shown(&waiting),
            ["model m999", "title t999", "close", "model later"]
        );
    }
}
