//! Keeps tool pairs whole after a rewrite: a live result whose call is gone is dropped, and a
//! call whose result is gone is removed from its message (a call that never had a result stays:
//! the record's rendering answers it as interrupted).

use std::collections::HashSet;

use talaria_record::{Entry, EntryBody, EntryId};

/// Fixes `entries` in place; returns the entries changed.
pub(crate) fn sanitise(entries: &mut [Entry]) -> Vec<EntryId> {
    let mut live_calls = HashSet::new();
    let mut live_results = HashSet::new();
    let mut all_results = HashSet::new();
    for entry in entries.iter() {
        match &entry.body {
            EntryBody::Assistant(assistant) if !entry.compacted => {
                live_calls.extend(assistant.tool_calls.iter().map(|c| c.id.clone()));
            }
            EntryBody::ToolResult(result) => {
                all_results.insert(result.call_id.clone());
                if !entry.compacted {
                    live_results.insert(result.call_id.clone());
                }
            }
            _ => {}
        }
    }
    let mut changed = Vec::new();
    for entry in entries.iter_mut().filter(|e| !e.compacted) {
        match &mut entry.body {
            EntryBody::ToolResult(result) if !live_calls.contains(&result.call_id) => {
                entry.compacted = true;
                changed.push(entry.id);
            }
            EntryBody::Assistant(assistant) => {
                let before = assistant.tool_calls.len();
                assistant
                    .tool_calls
                    .retain(|c| live_results.contains(&c.id) || !all_results.contains(&c.id));
                if assistant.tool_calls.len() != before {
                    if assistant.tool_calls.is_empty() && assistant.text.trim().is_empty() {
                        entry.compacted = true;
                    }
                    changed.push(entry.id);
                }
            }
            _ => {}
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_record::Transcript;
    use talaria_record::testing::{assert_valid, assistant, result, user};

    #[test]
    fn orphans_on_either_side_are_removed() {
        let mut t = Transcript::with_system("s");
        t.push(user("q"));
        t.push(assistant("", &[("a", "x", "{}"), ("b", "x", "{}")]));
        t.push(result("a", "x", "ra"));
        t.push(result("b", "x", "rb"));
        t.push(assistant("", &[("c", "x", "{}")]));
        t.push(result("c", "x", "rc"));
        t.push(assistant("open", &[("d", "x", "{}")]));
        t.push(user("next"));
        let entries = t.entries_mut();
        entries[4].compacted = true; // b's result gone
        entries[5].compacted = true; // c's call gone
        let changed = sanitise(t.entries_mut());
        assert_eq!(changed, vec![3, 7]);
        let entries = t.entries();
        let EntryBody::Assistant(first) = &entries[2].body else {
            panic!("assistant")
        };
        assert_eq!(first.tool_calls.len(), 1, "b removed");
        assert!(entries[6].compacted, "c's result dropped");
        let EntryBody::Assistant(last) = &entries[7].body else {
            panic!("assistant")
        };
        assert_eq!(last.tool_calls.len(), 1, "an open call stays");
        assert_valid(&t);
    }
}
