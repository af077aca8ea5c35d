//! The transcript: entries in order, with ids, and the operations the engine needs.

use serde::{Deserialize, Serialize};

use crate::branches;
use crate::entry::RestoreIntent;
use crate::entry::{
    DisplayContent, Entry, EntryBody, EntryId, ResultStatus, ToolCallRequest, ToolDisplay,
    ToolResultEntry,
};
use crate::model_view::{self, ModelMessage};
use crate::validate::{self, Violation};
use crate::vocabulary::ToolKind;

/// The version of the serialized form. Bumped when a change is not backward compatible;
/// older records are read by migrating them.
pub const RECORD_VERSION: u32 = 1;

/// Why a stored record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("the record is not valid JSON for this version: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the record has version {found}; this build reads up to {RECORD_VERSION}")]
    TooNew { found: u32 },
}

/// A session's conversation record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    version: u32,
    next_id: EntryId,
    /// The path: the conversation as it stands, in order.
    entries: Vec<Entry>,
    /// What rewinds left off the path (cut turns and the rewind markers), in id order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    off_path: Vec<Entry>,
    /// Entries changed in place since a journal last took them (not serialized).
    #[serde(skip)]
    rewritten: Vec<EntryId>,
}

impl Default for Transcript {
    fn default() -> Self {
        Self::new()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Transcript {
    /// An empty record.
    pub fn new() -> Self {
        Self {
            version: RECORD_VERSION,
            next_id: 1,
            entries: Vec::new(),
            off_path: Vec::new(),
            rewritten: Vec::new(),
        }
    }

    /// A record rebuilt from stored entries (any order, rewinds' branches included); new
    /// entries continue after the highest id.
    pub fn from_entries(entries: Vec<Entry>) -> Self {
        let next_id = entries.iter().map(|e| e.id).max().map_or(1, |id| id + 1);
        let (entries, off_path) = branches::split_path(entries);
        Self {
            version: RECORD_VERSION,
            next_id,
            entries,
            off_path,
            rewritten: Vec::new(),
        }
    }

    /// Every entry of the record, on the path or off it, in id order (what a store keeps).
    pub fn all_entries(&self) -> Vec<&Entry> {
        let mut all: Vec<&Entry> = self.entries.iter().chain(&self.off_path).collect();
        all.sort_by_key(|e| e.id);
        all
    }

    /// What rewinds left off the path, in id order.
    pub fn off_path(&self) -> &[Entry] {
        &self.off_path
    }

    /// The lineage of the whole record, on the path and off it.
    fn lineage(&self) -> branches::Lineage {
        branches::Lineage::of(self.all_entries())
    }

    /// The entry `id` follows in its branch (0: the start); `None` for a marker, the system
    /// prompt or an unknown id.
    pub fn parent_of(&self, id: EntryId) -> Option<EntryId> {
        self.lineage().parent(id)
    }

    /// The entries `id` follows in its branch, nearest first (empty for the first); `None`
    /// for a marker, the system prompt or an unknown id.
    pub fn ancestors_of(&self, id: EntryId) -> Option<Vec<EntryId>> {
        let lineage = self.lineage();
        let parent = lineage.parent(id)?;
        Some(lineage.chain(parent))
    }

    /// The last entry of the turn `id` is in, along its branch: the entries that follow it
    /// up to the next user message.
    pub fn turn_end_of(&self, id: EntryId) -> EntryId {
        let all = self.all_entries();
        let users: std::collections::HashSet<EntryId> = all
            .iter()
            .filter(|e| matches!(e.body, EntryBody::User { .. }))
            .map(|e| e.id)
            .collect();
        let children = branches::Lineage::of(all).children();
        let mut at = id;
        while let Some(next) = children
            .get(&at)
            .and_then(|list| list.iter().copied().find(|c| !users.contains(c)))
        {
            at = next;
        }
        at
    }

    /// The ids a rewind to `head` would move off the path, in order (nothing changes).
    pub fn cut_by(&self, head: EntryId) -> Vec<EntryId> {
        let kept: std::collections::HashSet<EntryId> =
            self.lineage().chain(head).into_iter().collect();
        self.entries
            .iter()
            .filter(|e| !matches!(e.body, EntryBody::System { .. }) && !kept.contains(&e.id))
            .map(|e| e.id)
            .collect()
    }

    /// Moves the conversation back: it goes on after entry `head` (0: right after the system
    /// prompt), and what followed stays off the path. `head` may be off the path (a rewind
    /// back to a branch an earlier rewind left). Returns the ids that left the path, in
    /// order.
    pub fn rewind_to(&mut self, head: EntryId) -> Vec<EntryId> {
        self.rewind_with(head, None)
    }

    /// As [`Transcript::rewind_to`], the marker holding what files to put back (the intent a
    /// later load or rewind finishes if this one is cut off).
    pub fn rewind_with(&mut self, head: EntryId, restore: Option<RestoreIntent>) -> Vec<EntryId> {
        let before: Vec<EntryId> = self.entries.iter().map(|e| e.id).collect();
        let mut all = std::mem::take(&mut self.entries);
        all.append(&mut self.off_path);
        let id = self.next_id;
        self.next_id += 1;
        all.push(Entry {
            id,
            at_ms: now_ms(),
            compacted: false,
            body: EntryBody::Rewound { head, restore },
        });
        let (mut path, off_path) = branches::split_path(all);
        for changed in branches::match_compaction(&mut path, &off_path) {
            self.mark_rewritten(changed);
        }
        self.entries = path;
        self.off_path = off_path;
        let on_path: std::collections::HashSet<EntryId> =
            self.entries.iter().map(|e| e.id).collect();
        before
            .into_iter()
            .filter(|id| !on_path.contains(id))
            .collect()
    }

    /// The rewinds whose files are not all back, oldest first, each with what is left to put
    /// back: one never finished (the process stopped while it restored), and, with
    /// `with_failed`, one whose last attempt failed for some files (those files only).
    pub fn open_restores(&self, with_failed: bool) -> Vec<(EntryId, RestoreIntent)> {
        let mut open: Vec<(EntryId, RestoreIntent)> = Vec::new();
        for entry in self.all_entries() {
            match &entry.body {
                EntryBody::Rewound {
                    restore: Some(intent),
                    ..
                } => open.push((entry.id, intent.clone())),
                EntryBody::FilesRestored { rewind, failed, .. } => {
                    let Some(at) = open.iter().position(|(id, _)| id == rewind) else {
                        continue;
                    };
                    if failed.is_empty() || !with_failed {
                        open.remove(at);
                    } else {
                        open[at].1.changes.retain(|c| failed.contains(&c.path));
                    }
                }
                _ => {}
            }
        }
        open
    }

    /// Notes that an entry was changed in place (compaction), so a journal saves it again.
    pub fn mark_rewritten(&mut self, id: EntryId) {
        if !self.rewritten.contains(&id) {
            self.rewritten.push(id);
        }
    }

    /// The entries changed in place since the last call, with their current content.
    pub fn take_rewritten(&mut self) -> Vec<Entry> {
        let ids = std::mem::take(&mut self.rewritten);
        self.entries
            .iter()
            .chain(&self.off_path)
            .filter(|e| ids.contains(&e.id))
            .cloned()
            .collect()
    }

    /// Entries on the path with ids above `id`.
    pub fn entries_after(&self, id: EntryId) -> &[Entry] {
        let start = self.entries.partition_point(|e| e.id <= id);
        &self.entries[start..]
    }

    /// Every entry with an id above `id`, on the path or off it, in id order (what a journal
    /// has not saved yet).
    pub fn all_after(&self, id: EntryId) -> Vec<&Entry> {
        let mut after: Vec<&Entry> = self.entries_after(id).iter().collect();
        let start = self.off_path.partition_point(|e| e.id <= id);
        if start < self.off_path.len() {
            after.extend(&self.off_path[start..]);
            after.sort_by_key(|e| e.id);
        }
        after
    }

    /// The highest id so far (0 when empty).
    pub fn last_id(&self) -> EntryId {
        self.next_id - 1
    }

    /// A record that starts with a system prompt.
    pub fn with_system(text: impl Into<String>) -> Self {
        let mut transcript = Self::new();
        transcript.push(EntryBody::System {
            text: text.into(),
            environment: None,
        });
        transcript
    }

    /// Appends an entry stamped now; returns its id.
    pub fn push(&mut self, body: EntryBody) -> EntryId {
        self.push_at(body, now_ms())
    }

    /// Appends an entry with a given time (for tests and imports).
    pub fn push_at(&mut self, body: EntryBody, at_ms: i64) -> EntryId {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(Entry {
            id,
            at_ms,
            compacted: false,
            body,
        });
        id
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Entries for in-place rewrites (compaction marks and prunes; ids never change).
    pub fn entries_mut(&mut self) -> &mut [Entry] {
        &mut self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A record that starts with the system prompt and its environment.
    pub fn with_system_and_environment(
        text: impl Into<String>,
        environment: impl Into<String>,
    ) -> Self {
        let mut transcript = Self::new();
        let environment: String = environment.into();
        transcript.push(EntryBody::System {
            text: text.into(),
            environment: (!environment.is_empty()).then_some(environment),
        });
        transcript
    }

    /// The system prompt's environment, if it has one.
    pub fn environment(&self) -> Option<&str> {
        self.entries.iter().find_map(|e| match &e.body {
            EntryBody::System { environment, .. } => environment.as_deref(),
            _ => None,
        })
    }

    /// Replaces the system prompt's environment (e.g. after a model switch).
    pub fn set_environment(&mut self, text: impl Into<String>) {
        let text = text.into();
        if let Some(entry) = self
            .entries
            .iter_mut()
            .find(|e| matches!(e.body, EntryBody::System { .. }))
            && let EntryBody::System { environment, .. } = &mut entry.body
        {
            *environment = Some(text);
            let id = entry.id;
            self.mark_rewritten(id);
        }
    }

    /// Replaces the system prompt (e.g. after a model switch), or adds one at the start; the
    /// environment stays.
    pub fn set_system_prompt(&mut self, text: impl Into<String>) {
        let text = text.into();
        match self
            .entries
            .iter_mut()
            .find(|e| matches!(e.body, EntryBody::System { .. }))
        {
            Some(entry) => {
                if let EntryBody::System { text: current, .. } = &mut entry.body
                    && *current != text
                {
                    *current = text;
                    let id = entry.id;
                    self.mark_rewritten(id);
                }
            }
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.entries.insert(
                    0,
                    Entry {
                        id,
                        at_ms: now_ms(),
                        compacted: false,
                        body: EntryBody::System {
                            text,
                            environment: None,
                        },
                    },
                );
            }
        }
    }

    /// The tool calls of the latest assistant entry that have no result yet.
    pub fn open_tool_calls(&self) -> Vec<&ToolCallRequest> {
        let Some(position) = self
            .entries
            .iter()
            .rposition(|e| matches!(e.body, EntryBody::Assistant(_)))
        else {
            return Vec::new();
        };
        let EntryBody::Assistant(assistant) = &self.entries[position].body else {
            return Vec::new();
        };
        let answered: Vec<&str> = self.entries[position + 1..]
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::ToolResult(result) => Some(result.call_id.as_str()),
                _ => None,
            })
            .collect();
        assistant
            .tool_calls
            .iter()
            .filter(|call| !answered.contains(&call.id.as_str()))
            .collect()
    }

    /// Marks the current turn as not completed: every open tool call gets a failed result
    /// (so the record stays valid), then an `Interrupted` marker.
    pub fn interrupt(&mut self, reason: impl Into<String>) {
        let open: Vec<ToolCallRequest> = self.open_tool_calls().into_iter().cloned().collect();
        for call in open {
            self.push(EntryBody::ToolResult(Box::new(ToolResultEntry {
                client_id: call.id.clone(),
                call_id: call.id,
                tool: call.name.clone(),
                status: ResultStatus::Failed,
                display: ToolDisplay {
                    title: call.name,
                    kind: ToolKind::Other,
                    locations: Vec::new(),
                    content: vec![DisplayContent::Text {
                        text: "Interrupted".into(),
                    }],
                },
                raw_input: serde_json::Value::Null,
                raw_output: None,
                model_text: model_view::INTERRUPTED_RESULT.into(),
                images: Vec::new(),
                effects: None,
                changes: Vec::new(),
            })));
        }
        self.push(EntryBody::Interrupted {
            reason: reason.into(),
        });
    }

    /// The provider-neutral messages the model sees.
    pub fn model_messages(&self) -> Vec<ModelMessage<'_>> {
        model_view::render(&self.entries)
    }

    /// Checks the invariants every provider needs, on what the model would see, and that
    /// entry ids increase.
    pub fn validate(&self) -> Result<(), Vec<Violation>> {
        let mut violations = match validate::validate(&self.model_messages()) {
            Ok(()) => Vec::new(),
            Err(found) => found,
        };
        for pair in self.entries.windows(2) {
            if pair[1].id <= pair[0].id {
                violations.push(Violation::IdsNotIncreasing {
                    before: pair[0].id,
                    after: pair[1].id,
                });
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// Serializes the record.
    pub fn to_json(&self) -> Result<String, RecordError> {
        Ok(serde_json::to_string(self)?)
    }

    /// Reads a serialized record, refusing versions newer than this build.
    pub fn from_json(text: &str) -> Result<Self, RecordError> {
        #[derive(Deserialize)]
        struct Header {
            version: u32,
        }
        let header: Header = serde_json::from_str(text)?;
        if header.version > RECORD_VERSION {
            return Err(RecordError::TooNew {
                found: header.version,
            });
        }
        Ok(serde_json::from_str(text)?)
    }
}
