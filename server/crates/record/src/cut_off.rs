//! A record that ends in the middle of a turn (the process stopped while it ran): found and
//! closed, so the next request is valid for every provider and nobody reads it as complete.

use crate::entry::EntryBody;
use crate::transcript::Transcript;

impl Transcript {
    /// Marks a record that ends in the middle of a turn as interrupted: its open calls get
    /// failed results. Returns whether it did. Idempotent.
    pub fn close_cut_off_turn(&mut self) -> bool {
        let cut_off = self.turn_was_cut_off();
        if cut_off {
            self.interrupt("the previous Talaria process stopped during this turn");
        }
        cut_off
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
