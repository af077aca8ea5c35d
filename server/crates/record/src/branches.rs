//! Branches of the record: a rewind moves the conversation back to an earlier entry; what
//! followed stays in the record, off the path, so a later rewind can return to it.
//!
//! The record is append-only. Each entry follows the entry before it, except after a
//! [`EntryBody::Rewound`] marker, whose `head` is what the next entry follows. The path is
//! the chain of entries that the last head follows back to the start; the system prompt is
//! always on it. Every id on a chain is smaller than the ids after it, so the path in id
//! order is the conversation in order.

use std::collections::{HashMap, HashSet};

use crate::entry::{Entry, EntryBody, EntryId};

/// Who follows whom in a record, and where it stands now.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    /// For every entry that is not a marker or the system prompt: the entry it follows
    /// (0: the start).
    parent: HashMap<EntryId, EntryId>,
    /// The entry the next one follows.
    pub(crate) head: EntryId,
    /// A rewind happened somewhere in the record.
    pub(crate) branched: bool,
}

impl Lineage {
    /// The lineage of `entries` (in id order).
    pub(crate) fn of<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Self {
        let mut lineage = Lineage::default();
        for entry in entries {
            match &entry.body {
                EntryBody::Rewound { head, .. } => {
                    lineage.head = *head;
                    lineage.branched = true;
                }
                EntryBody::System { .. } => {}
                _ => {
                    lineage.parent.insert(entry.id, lineage.head);
                    lineage.head = entry.id;
                }
            }
        }
        lineage
    }

    /// The entry `id` follows (0: the start); `None` for a marker, the system prompt or an
    /// unknown id.
    pub(crate) fn parent(&self, id: EntryId) -> Option<EntryId> {
        self.parent.get(&id).copied()
    }

    /// The ids on the chain that ends at `head`, `head` first.
    pub(crate) fn chain(&self, head: EntryId) -> Vec<EntryId> {
        let mut chain = Vec::new();
        let mut at = head;
        // Every parent is older than its child, so the walk ends; the bound is a guard.
        while at != 0 && chain.len() <= self.parent.len() {
            chain.push(at);
            at = self.parent(at).unwrap_or(0);
        }
        chain
    }

    /// For every entry, the entries that follow it, in id order.
    pub(crate) fn children(&self) -> HashMap<EntryId, Vec<EntryId>> {
        let mut children: HashMap<EntryId, Vec<EntryId>> = HashMap::new();
        for (child, parent) in &self.parent {
            children.entry(*parent).or_default().push(*child);
        }
        for list in children.values_mut() {
            list.sort_unstable();
        }
        children
    }
}

/// Splits a whole record (any order) into the path and what is off it, both in id order.
pub(crate) fn split_path(mut all: Vec<Entry>) -> (Vec<Entry>, Vec<Entry>) {
    all.sort_by_key(|e| e.id);
    let lineage = Lineage::of(&all);
    if !lineage.branched {
        return (all, Vec::new());
    }
    let chain: HashSet<EntryId> = lineage.chain(lineage.head).into_iter().collect();
    all.into_iter()
        .partition(|e| matches!(e.body, EntryBody::System { .. }) || chain.contains(&e.id))
}

/// Marks as compacted what a summary on the path stands for, and unmarks what only summaries
/// off the path stood for; returns the ids it changed. A user message inside a summary's
/// range keeps its mark (compaction may keep the latest one in place), so nothing the
/// summary does not stand for is hidden.
pub(crate) fn match_compaction(path: &mut [Entry], off_path: &[Entry]) -> Vec<EntryId> {
    let ranges = |entries: &[Entry]| -> Vec<(EntryId, EntryId)> {
        entries
            .iter()
            .filter_map(|e| match e.body {
                EntryBody::Summary { first, last, .. } => Some((first, last)),
                _ => None,
            })
            .collect()
    };
    let on = ranges(path);
    let off = ranges(off_path);
    let covered = |ranges: &[(EntryId, EntryId)], id: EntryId| {
        ranges
            .iter()
            .any(|(first, last)| (*first..=*last).contains(&id))
    };
    let mut changed = Vec::new();
    for entry in path.iter_mut() {
        if matches!(entry.body, EntryBody::Summary { .. }) {
            continue;
        }
        let user = matches!(entry.body, EntryBody::User { .. });
        let should = if covered(&on, entry.id) {
            entry.compacted || !user
        } else if covered(&off, entry.id) {
            false
        } else {
            entry.compacted
        };
        if should != entry.compacted {
            entry.compacted = should;
            changed.push(entry.id);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use crate::testing::{assert_valid, assistant, user};
    use crate::{EntryBody, EntryId, Transcript};

    fn texts(t: &Transcript) -> Vec<String> {
        t.entries()
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::User { .. } => Some(format!("u{}", e.id)),
                EntryBody::Assistant(a) => Some(a.text.clone()),
                _ => None,
            })
            .collect()
    }

    /// sys, u2 a1, u4 a2 (ids 1..5).
    fn two_turns() -> (Transcript, EntryId) {
        let mut t = Transcript::with_system("system");
        t.push(user("one"));
        t.push(assistant("a1", &[]));
        let second = t.push(user("two"));
        t.push(assistant("a2", &[]));
        (t, second)
    }

    #[test]
    fn a_rewind_cuts_the_path_keeps_the_branch_and_survives_a_reload() {
        let (mut t, second) = two_turns();
        let head = t.parent_of(second).expect("a parent");
        assert_eq!(head, 3);
        assert_eq!(t.rewind_to(head), vec![4, 5]);
        assert_eq!(texts(&t), vec!["u2", "a1"]);
        t.push(user("again"));
        t.push(assistant("a3", &[]));
        assert_eq!(texts(&t), vec!["u2", "a1", "u7", "a3"]);
        assert_valid(&t);
        let all: Vec<_> = t.all_entries().into_iter().cloned().collect();
        assert_eq!(all.len(), 8, "nothing is dropped");
        let reloaded = Transcript::from_entries(all);
        assert_eq!(texts(&reloaded), texts(&t));
        assert_eq!(reloaded.off_path().len(), 3);
        assert_eq!(reloaded.last_id(), 8);
    }

    #[test]
    fn what_a_rewind_would_cut_is_told_before_it_cuts() {
        let (mut t, second) = two_turns();
        let head = t.parent_of(second).expect("parent");
        assert_eq!(t.cut_by(head), vec![4, 5]);
        assert_eq!(t.cut_by(t.last_id()), Vec::<EntryId>::new());
        assert_eq!(t.cut_by(0), vec![2, 3, 4, 5]);
        assert_eq!(t.rewind_to(head), vec![4, 5], "the same ids leave");
    }

    fn intent(paths: &[&str]) -> crate::RestoreIntent {
        crate::RestoreIntent {
            changes: paths
                .iter()
                .map(|p| crate::FileChange {
                    path: p.to_string(),
                    before: None,
                    after: None,
                })
                .collect(),
            force: false,
        }
    }

    #[test]
    fn a_rewind_whose_files_are_not_all_back_stays_open_until_its_end_is_recorded() {
        let (mut t, second) = two_turns();
        let head = t.parent_of(second).expect("parent");
        t.rewind_with(head, Some(intent(&["a", "b"])));
        let marker = t.last_id();
        // Cut off before its end: open for a load and for a rewind.
        assert_eq!(t.open_restores(false), vec![(marker, intent(&["a", "b"]))]);
        assert_eq!(t.open_restores(true).len(), 1);
        let saved: Vec<_> = t.all_entries().into_iter().cloned().collect();
        assert_eq!(
            Transcript::from_entries(saved).open_restores(false),
            vec![(marker, intent(&["a", "b"]))],
            "the intent is read back from the record"
        );
        // Its end, with one file that failed: closed for a load, open for a rewind (that file).
        t.push(EntryBody::FilesRestored {
            rewind: marker,
            restored: 1,
            skipped: vec![],
            failed: vec!["b".into()],
        });
        assert!(t.open_restores(false).is_empty());
        assert_eq!(t.open_restores(true), vec![(marker, intent(&["b"]))]);
        // Tried again, and back: closed.
        t.push(EntryBody::FilesRestored {
            rewind: marker,
            restored: 1,
            skipped: vec![],
            failed: vec![],
        });
        assert!(t.open_restores(true).is_empty());
        // A rewind without files, and one whose end names another marker, open nothing.
        t.rewind_to(0);
        t.push(EntryBody::FilesRestored {
            rewind: 999,
            restored: 0,
            skipped: vec![],
            failed: vec![],
        });
        assert!(t.open_restores(true).is_empty());
        // The intent survives a reload.
        let all: Vec<_> = t.all_entries().into_iter().cloned().collect();
        let reloaded = Transcript::from_entries(all);
        assert!(reloaded.open_restores(true).is_empty());
    }

    #[test]
    fn a_later_rewind_returns_to_a_cut_branch_whole() {
        let (mut t, second) = two_turns();
        t.rewind_to(t.parent_of(second).expect("parent"));
        t.push(user("again"));
        t.push(assistant("a3", &[]));
        let end = t.turn_end_of(second);
        assert_eq!(end, 5, "the cut turn ends with its answer");
        assert_eq!(t.rewind_to(end), vec![7, 8]);
        assert_eq!(texts(&t), vec!["u2", "a1", "u4", "a2"]);
        t.push(user("three"));
        let all: Vec<_> = t.all_entries().into_iter().cloned().collect();
        assert_eq!(
            texts(&Transcript::from_entries(all)),
            vec!["u2", "a1", "u4", "a2", "u10"]
        );
    }

    #[test]
    fn a_rewind_before_a_summary_shows_the_model_what_it_stood_for_again() {
        let (mut t, _) = two_turns();
        for entry in &mut t.entries_mut()[1..3] {
            entry.compacted = true;
        }
        t.push(EntryBody::Summary {
            text: "summary".into(),
            first: 2,
            last: 3,
        });
        t.take_rewritten();
        t.rewind_to(5);
        assert!(t.entries().iter().all(|e| !e.compacted));
        let rewritten: Vec<EntryId> = t.take_rewritten().iter().map(|e| e.id).collect();
        assert_eq!(rewritten, vec![2, 3]);
        // Back to the branch with the summary: the answer is compacted again.
        t.rewind_to(6);
        let compacted: Vec<EntryId> = t
            .entries()
            .iter()
            .filter(|e| e.compacted)
            .map(|e| e.id)
            .collect();
        assert_eq!(compacted, vec![3], "a user message is never hidden again");
    }
}
