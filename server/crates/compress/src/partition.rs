//! Splits a record into head, middle and tail. The head is the system prompt and the first few
//! entries; the tail is walked back from the end to a token budget. Neither boundary splits an
//! assistant message from its tool results, and the latest assistant and user messages are
//! never in the middle (the user's is pinned in place when the tail cannot reach it).

use talaria_record::{Entry, EntryBody};

/// Whether the model reads this entry where it stands (live, and not a marker or summary).
pub(crate) fn is_message(entry: &Entry) -> bool {
    !entry.compacted
        && matches!(
            entry.body,
            EntryBody::User { .. }
                | EntryBody::Assistant(_)
                | EntryBody::ToolResult(_)
                | EntryBody::Nudge { .. }
                | EntryBody::Interrupted { .. }
        )
}

fn is_result(entry: &Entry) -> bool {
    !entry.compacted && matches!(entry.body, EntryBody::ToolResult(_))
}

/// The index of the next message at or after `from`.
fn next_message(entries: &[Entry], from: usize) -> Option<usize> {
    (from..entries.len()).find(|&i| is_message(&entries[i]))
}

/// Where the parts are, as indices into the entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Partition {
    /// `entries[..head_end]` is the head.
    pub head_end: usize,
    /// `entries[tail_start..]` is the tail.
    pub tail_start: usize,
    /// Where the tail would start if the head did not reach into it: the cheap pass leaves
    /// everything from here alone.
    pub protect_from: usize,
    /// The latest user message, kept verbatim where it is although the tail starts later.
    pub pinned: Option<usize>,
    /// The latest user message, wherever it is: never rewritten.
    pub latest_user: Option<usize>,
}

impl Partition {
    /// The indices of the messages to summarise.
    pub fn middle(&self, entries: &[Entry]) -> Vec<usize> {
        (self.head_end..self.tail_start)
            .filter(|&i| Some(i) != self.pinned && is_message(&entries[i]))
            .collect()
    }
}

/// The head: system entries plus `keep` messages, extended past the results of a call in it.
fn head_end(entries: &[Entry], keep: usize) -> usize {
    let mut end = 0;
    let mut kept = 0;
    while end < entries.len() {
        let entry = &entries[end];
        if matches!(entry.body, EntryBody::System { .. }) || !is_message(entry) {
            end += 1;
            continue;
        }
        if kept == keep {
            break;
        }
        kept += 1;
        end += 1;
    }
    // A call's results belong with it.
    while let Some(next) = next_message(entries, end) {
        if !is_result(&entries[next]) || kept == 0 {
            break;
        }
        end = next + 1;
    }
    end.min(entries.len())
}

/// The tail walked back from the end to `budget` tokens (at least one message), then moved
/// back so it starts at an assistant message rather than at one of its results.
fn tail_start(entries: &[Entry], tokens: &[u32], budget: u64) -> usize {
    let mut start = entries.len();
    let mut used = 0u64;
    for i in (0..entries.len()).rev() {
        if !is_message(&entries[i]) {
            continue;
        }
        let cost = u64::from(tokens[i]);
        if used + cost > budget && start < entries.len() {
            break;
        }
        used += cost;
        start = i;
    }
    align_back(entries, start)
}

/// Moves a start that falls on a tool result back to the assistant message that made the call.
fn align_back(entries: &[Entry], mut start: usize) -> usize {
    while start < entries.len() && start > 0 && is_result(&entries[start]) {
        start -= 1;
        while start > 0 && !is_message(&entries[start]) {
            start -= 1;
        }
    }
    start
}

fn last_of(entries: &[Entry], kind: fn(&EntryBody) -> bool) -> Option<usize> {
    entries.iter().rposition(|e| !e.compacted && kind(&e.body))
}

/// Splits `entries` (with per-entry `tokens`): `keep` head messages, a tail of `tail_budget`
/// tokens; the latest user message joins the tail when the tail from it stays within
/// `tail_room` tokens less the head's, else it is pinned.
pub(crate) fn partition(
    entries: &[Entry],
    tokens: &[u32],
    keep: usize,
    tail_budget: u64,
    tail_room: u64,
) -> Partition {
    let head_end = head_end(entries, keep);
    let head: u64 = tokens[..head_end].iter().map(|t| u64::from(*t)).sum();
    let tail_room = tail_room.saturating_sub(head);
    let mut start = tail_start(entries, tokens, tail_budget);
    if let Some(assistant) = last_of(entries, |b| matches!(b, EntryBody::Assistant(_))) {
        start = start.min(align_back(entries, assistant));
    }
    let mut pinned = None;
    let latest_user = last_of(entries, |b| matches!(b, EntryBody::User { .. }));
    if let Some(user) = latest_user
        && user < start
    {
        let from_user: u64 = tokens[user..].iter().map(|t| u64::from(*t)).sum();
        if from_user <= tail_room {
            start = user;
        } else {
            pinned = Some(user);
        }
    }
    let tail_start = start.max(head_end);
    Partition {
        head_end,
        tail_start,
        protect_from: start,
        latest_user,
        pinned: pinned.filter(|&user| user >= head_end && user < tail_start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_record::Transcript;
    use talaria_record::testing::{assistant, result, user};

    fn sample() -> Transcript {
        let mut t = Transcript::with_system("s"); // 0
        t.push(user("q1")); // 1
        t.push(assistant("", &[("a", "read_file", "{}")])); // 2
        t.push(EntryBody::Plan { items: Vec::new() }); // 3
        t.push(result("a", "read_file", "r")); // 4
        t.push(assistant("done", &[])); // 5
        t.push(user("q2")); // 6
        t.push(assistant("", &[("b", "terminal", "{}")])); // 7
        t.push(result("b", "terminal", "r")); // 8
        t.push(assistant("", &[("c", "terminal", "{}")])); // 9
        t.push(result("c", "terminal", "r")); // 10
        t
    }

    #[test]
    fn head_keeps_call_groups_whole() {
        let t = sample();
        let tokens = vec![10; t.len()];
        // Two messages: q1 and the call; its result (past the plan marker) joins the head.
        let p = partition(t.entries(), &tokens, 2, 10, 1000);
        assert_eq!(p.head_end, 5);
        assert_eq!(partition(t.entries(), &tokens, 0, 10, 1000).head_end, 1);
    }

    #[test]
    fn tail_starts_at_an_assistant_and_reaches_the_latest_user_when_it_fits() {
        let t = sample();
        let tokens = vec![10; t.len()];
        let p = partition(t.entries(), &tokens, 0, 10, 1000);
        assert_eq!(p.tail_start, 6, "the latest user message is in the tail");
        assert_eq!(p.pinned, None);
        assert_eq!(p.middle(t.entries()), vec![1, 2, 4, 5]);
        // Too little room: the user message is pinned; the tail starts at the last call.
        let p = partition(t.entries(), &tokens, 0, 10, 30);
        assert_eq!(p.tail_start, 9);
        assert_eq!(p.pinned, Some(6));
        assert_eq!(p.middle(t.entries()), vec![1, 2, 4, 5, 7, 8]);
    }
}
