//! A record that ends in the middle of a turn (the process stopped while it ran): found and
//! closed, so the next request is valid for every provider and nobody reads it as complete.

use crate::entry::{EntryBody, EntryId};
use crate::transcript::Transcript;

impl Transcript {
    /// Marks a record that ends in the middle of a turn as interrupted: its open calls get
    /// failed results. Returns whether it did. Idempotent.
    /// Steers the turn had accepted but not taken yet ([`EntryBody::SteerWaiting`]) are
    /// entered after it, as the user messages they are, and closed as interrupted too.
    pub fn close_cut_off_turn(&mut self) -> bool {
        let cut_off = self.turn_was_cut_off();
        if cut_off {
            self.interrupt("the previous Talaria process stopped during this turn");
        }
        let entered = self.enter_waiting_steers();
        if entered {
            self.interrupt("the previous Talaria process stopped before it answered these steers");
        }
        cut_off || entered
    }

    /// Enters every accepted steer on the path that never entered as a user message (each
    /// marker then names it); whether there was one. A marker naming an entry that is not
    /// its user message (a kill between the two writes left the marker's change alone) has
    /// not entered either.
    fn enter_waiting_steers(&mut self) -> bool {
        let waiting: Vec<(EntryId, EntryBody)> = self
            .entries()
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::SteerWaiting {
                    input,
                    model_view,
                    entered,
                } if !self.is_user_message(*entered, input) => Some((
                    e.id,
                    EntryBody::User {
                        input: input.clone(),
                        model_view: model_view.clone(),
                    },
                )),
                _ => None,
            })
            .collect();
        for (marker, user) in &waiting {
            let user = self.push(user.clone());
            self.steer_entered(*marker, user);
        }
        !waiting.is_empty()
    }

    /// Whether `id` names a user message of `input`, on the path or off it.
    fn is_user_message(&self, id: Option<EntryId>, input: &[crate::InputBlock]) -> bool {
        id.is_some_and(|id| {
            self.all_entries().into_iter().any(|e| {
                e.id == id
                    && matches!(&e.body, EntryBody::User { input: entered, .. } if entered == input)
            })
        })
    }

    /// The waiting steer `marker` entered as the user message `user` (the marker is saved
    /// again so).
    pub fn steer_entered(&mut self, marker: EntryId, user: EntryId) {
        let Some(entry) = self.entries_mut().iter_mut().find(|e| e.id == marker) else {
            return;
        };
        if let EntryBody::SteerWaiting { entered, .. } = &mut entry.body {
            *entered = Some(user);
            self.mark_rewritten(marker);
        }
    }

    /// Whether the record ends in the middle of a turn: calls without results, or the user's
    /// message with no answer and no interruption marker after it.
    fn turn_was_cut_off(&self) -> bool {
        if !self.open_tool_calls().is_empty() {
            return true;
        }
        let last = self.entries().iter().rev().find(|e| {
            matches!(
                e.body,
                EntryBody::User { .. }
                    | EntryBody::Nudge { .. }
                    | EntryBody::Assistant(_)
                    | EntryBody::ToolResult(_)
                    | EntryBody::Interrupted { .. }
            )
        });
        matches!(
            last.map(|e| &e.body),
            Some(EntryBody::User { .. } | EntryBody::Nudge { .. } | EntryBody::ToolResult(_))
        )
    }
}
