//! The second half of a session's view: what each session sent the writer that the store has
//! not committed yet (in the queue, in the batch being written, or in a backlog), shared with
//! the writer by reference, never copied. Load, fork, replay and search read the store's
//! entries followed by these (`Journal::view`), so a turn waiting for a stuck store is still
//! part of its session.
//!
//! Also who holds each session's claim: a close queues its release behind its writes; a
//! reload in this process meanwhile takes the claim over, and the stale release is dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use talaria_record::EntryId;
use talaria_store::{EncodedEntry, SessionMeta};

/// One session's writes the store has not committed.
#[derive(Default)]
struct WaitingSession {
    /// Its creation, while the store has not recorded it.
    create: Option<SessionMeta>,
    /// The newest version of each waiting entry, by id.
    entries: BTreeMap<EntryId, EncodedEntry>,
    /// Entries whose newest version is in the spool.
    spooled: std::collections::HashSet<EntryId>,
    /// Its creation is in the spool.
    create_spooled: bool,
}

/// What a session has waiting, as read at one moment.
#[derive(Debug, Clone, Default)]
pub struct WaitingWrites {
    pub create: Option<SessionMeta>,
    pub entries: Vec<EncodedEntry>,
}

impl WaitingWrites {
    pub fn is_empty(&self) -> bool {
        self.create.is_none() && self.entries.is_empty()
    }
}

/// Every session's waiting writes and claim holders.
#[derive(Default)]
pub(super) struct Waiting {
    sessions: Mutex<HashMap<String, WaitingSession>>,
    /// Per session, which of its claims is current: a release made under an older one is
    /// stale (the session was opened again here meanwhile).
    holds: Mutex<HashMap<String, u64>>,
}

impl Waiting {
    pub(super) fn created(&self, meta: &SessionMeta) {
        let mut sessions = talaria_util::lock(&self.sessions);
        sessions.entry(meta.id.clone()).or_default().create = Some(meta.clone());
    }

    pub(super) fn sent(&self, session: &str, entries: &[EncodedEntry]) {
        let mut sessions = talaria_util::lock(&self.sessions);
        let waiting = sessions.entry(session.to_string()).or_default();
        for entry in entries {
            waiting.entries.insert(entry.id, entry.clone());
            waiting.spooled.remove(&entry.id);
        }
    }

    /// These writes of `session` are in the spool (the newest versions of its entries that
    /// are, and its creation with `create`).
    pub(super) fn spooled(&self, session: &str, entries: &[EncodedEntry], create: bool) {
        let mut sessions = talaria_util::lock(&self.sessions);
        let Some(waiting) = sessions.get_mut(session) else {
            return;
        };
        waiting.create_spooled |= create;
        for entry in entries {
            if waiting
                .entries
                .get(&entry.id)
                .is_some_and(|newest| newest.is_same(entry))
            {
                waiting.spooled.insert(entry.id);
            }
        }
    }

    /// What `session` has waiting that is not in the spool yet.
    pub(super) fn unspooled(&self, session: &str) -> WaitingWrites {
        let sessions = talaria_util::lock(&self.sessions);
        sessions
            .get(session)
            .map(|waiting| WaitingWrites {
                create: waiting.create.clone().filter(|_| !waiting.create_spooled),
                entries: waiting
                    .entries
                    .values()
                    .filter(|e| !waiting.spooled.contains(&e.id))
                    .cloned()
                    .collect(),
            })
            .unwrap_or_default()
    }

    /// The store recorded the session's creation.
    pub(super) fn create_committed(&self, session: &str) {
        let mut sessions = talaria_util::lock(&self.sessions);
        if let Some(waiting) = sessions.get_mut(session) {
            waiting.create = None;
            if waiting.entries.is_empty() {
                sessions.remove(session);
            }
        }
    }

    /// The store committed `entries`: each leaves the view unless a newer version of it was
    /// sent meanwhile.
    pub(super) fn committed(&self, session: &str, entries: &[EncodedEntry]) {
        let mut sessions = talaria_util::lock(&self.sessions);
        let Some(waiting) = sessions.get_mut(session) else {
            return;
        };
        for entry in entries {
            if waiting
                .entries
                .get(&entry.id)
                .is_some_and(|newest| newest.is_same(entry))
            {
                waiting.entries.remove(&entry.id);
                waiting.spooled.remove(&entry.id);
            }
        }
        if waiting.entries.is_empty() && waiting.create.is_none() {
            sessions.remove(session);
        }
    }

    /// The session was deleted: what it has waiting is dropped from the view.
    pub(super) fn forget(&self, session: &str) {
        talaria_util::lock(&self.sessions).remove(session);
    }

    /// Whether `session` has anything waiting (its creation or entries).
    pub(super) fn has(&self, session: &str) -> bool {
        talaria_util::lock(&self.sessions).contains_key(session)
    }

    /// Whether no session has anything waiting.
    pub(super) fn is_empty(&self) -> bool {
        talaria_util::lock(&self.sessions).is_empty()
    }

    /// The store can never open: nothing will be written.
    pub(super) fn clear(&self) {
        talaria_util::lock(&self.sessions).clear();
    }

    pub(super) fn of(&self, session: &str) -> WaitingWrites {
        let sessions = talaria_util::lock(&self.sessions);
        sessions
            .get(session)
            .map(|waiting| WaitingWrites {
                create: waiting.create.clone(),
                entries: waiting.entries.values().cloned().collect(),
            })
            .unwrap_or_default()
    }

    /// The sessions with something waiting.
    pub(super) fn sessions(&self) -> Vec<String> {
        talaria_util::lock(&self.sessions).keys().cloned().collect()
    }

    /// Every session's waiting entries (for search).
    pub(super) fn all(&self) -> Vec<(String, Vec<EncodedEntry>)> {
        let sessions = talaria_util::lock(&self.sessions);
        sessions
            .iter()
            .map(|(id, waiting)| (id.clone(), waiting.entries.values().cloned().collect()))
            .collect()
    }

    /// The session's current claim.
    pub(super) fn hold(&self, session: &str) -> u64 {
        talaria_util::lock(&self.holds)
            .get(session)
            .copied()
            .unwrap_or(0)
    }

    /// The session is opened again here: releases made before now are stale.
    pub(super) fn hold_again(&self, session: &str) {
        *talaria_util::lock(&self.holds)
            .entry(session.to_string())
            .or_default() += 1;
    }
}
