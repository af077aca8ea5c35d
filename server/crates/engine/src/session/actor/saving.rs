//! Saving: the record goes to the journal as it grows, a turn is answered once it is
//! committed (or the journal's deadline passed), and the client is told once when the
//! session is not being saved and once when it is again.

use super::SessionActor;
use crate::session::ops::Op;

/// What the client was told about saving.
#[derive(Debug, Default)]
pub(super) struct SavingState {
    /// The client was told the session is not being saved (and will be told when it is).
    pub(super) told_unsaved: bool,
    /// A task waits for the journal to say the session is saved again.
    pub(super) watching: bool,
    /// How the store's first opening went was told (or there was nothing to tell).
    pub(super) store_told: bool,
    /// Why the record was not saved when the session started (a fork answered before its
    /// copy was committed), to be told at once.
    pub(super) at_start: Option<String>,
    /// The client was told its turns are saved as another session (a refusal moved them).
    pub(super) told_moved: bool,
    /// The client was told the session's last writes exist in this process's memory only
    /// (told again if that happens again after the spool took them).
    pub(super) told_in_memory_only: bool,
}

impl SessionActor {
    /// Sends what the record gained to the store.
    pub(super) fn save(&mut self) {
        if let Some(journal) = &mut self.journal {
            journal.save(&mut self.history);
        }
    }

    /// Sends what the record gained and waits until the store committed it: a turn is
    /// answered once it is saved, or once the journal's deadline passed (a store that blocks
    /// never holds an answer). Not being saved is told once (the entries wait in memory and
    /// are written, in order, when the store accepts writes again), and so is the recovery.
    /// Whether what the session recorded survives a kill (committed, or spooled).
    pub(super) async fn commit(&mut self) -> bool {
        self.save();
        let Some(journal) = &self.journal else {
            return true;
        };
        let report = journal.committed().await;
        if let Some(moved) = &report.moved_to
            && !std::mem::replace(&mut self.saving.told_moved, true)
        {
            let message = format!(
                "Another Talaria process went on with this session while it was open here \
                 (a turn it had not seen was written meanwhile). Nothing of either is \
                 overwritten: this session's turns from here on are saved as session \
                 {moved}, a fork of it; load that one to go on with them."
            );
            self.notice(crate::events::NoticeLevel::Warning, message)
                .await;
        }
        let in_memory_only = report.error.is_some() && report.in_memory_only;
        match (&report.error, self.saving.told_unsaved) {
            (Some(error), _) if in_memory_only && !self.saving.told_in_memory_only => {
                self.saving.told_in_memory_only = true;
                let message = format!(
                    "This session is not being saved: {error}. This turn is not saved yet, \
                     and it could not be written to the spool either (the disk is full, or \
                     the home cannot be written): it exists only in this Talaria process's \
                     memory, and ending Talaria now loses it. The session goes on and writes \
                     it, in order, as soon as the store accepts writes again."
                );
                self.tell_unsaved(message).await;
            }
            (Some(error), false) if !in_memory_only => {
                let message = format!(
                    "This session is not being saved: {error}. This turn is not saved yet; \
                     the session goes on, keeps it in memory and in the spool, and writes it, \
                     in order, as soon as the store accepts writes again (if Talaria ends \
                     first, the next Talaria started on this home writes it)."
                );
                self.tell_unsaved(message).await;
            }
            (None, true) => self.save_settled(true).await,
            _ => {}
        }
        if !in_memory_only {
            self.saving.told_in_memory_only = false;
        }
        if report.error.is_some() {
            self.watch_saved();
        }
        report.survives_a_kill()
    }

    /// Once opening the store was tried (or a moment passed), the session hears whether it
    /// opened ([`Op::StoreTried`]): the session was answered without waiting for the store,
    /// and nothing it is asked waits for this either.
    pub(super) fn watch_store_opening(&mut self) {
        let Some(journal) = self.journal.as_ref().map(|j| j.journal.clone()) else {
            return;
        };
        let ops = self.own_ops.clone();
        tokio::spawn(async move {
            journal
                .first_open_tried(crate::journal::ANSWER_DEADLINE)
                .await;
            if let Some(ops) = ops.upgrade() {
                let _ = ops.send(Op::StoreTried);
            }
        });
    }

    /// Once opening the store was tried: what the store says about how it opened (a damaged
    /// file moved aside, a migration), if no session told it yet, and, when it did not open,
    /// that this session is not saved yet. Once per session: when the attempt ends, or before
    /// its first turn, which waits for the attempt as long as an answer waits for the store
    /// at most (`session/new` itself never does).
    /// `waited`: the attempt ended, or the wait for it did ([`Op::StoreTried`]).
    pub(super) async fn tell_store_once(&mut self, waited: bool) {
        if std::mem::replace(&mut self.saving.store_told, true) {
            return;
        }
        if !waited && let Some(journal) = self.journal.as_ref().map(|j| j.journal.clone()) {
            journal
                .first_open_tried(crate::journal::ANSWER_DEADLINE)
                .await;
        }
        self.tell_if_store_not_open().await;
    }

    async fn tell_if_store_not_open(&mut self) {
        let notes = self
            .journal
            .as_ref()
            .map(|j| j.journal.take_notes())
            .unwrap_or_default();
        for note in notes {
            self.notice(crate::events::NoticeLevel::Warning, note).await;
        }
        let Some(why) = self.journal.as_ref().and_then(|j| j.journal.not_open()) else {
            return;
        };
        self.tell_unsaved(format!(
            "This session is not saved yet: {why}. The session goes on, keeps everything in \
             memory and writes it, in order, once the store opens."
        ))
        .await;
        self.watch_saved();
    }

    /// A session answered before its record was committed (a fork's copy that waits) says
    /// so as soon as it starts, and once it is saved.
    pub(super) async fn tell_unsaved_at_start(&mut self) {
        let Some(why) = self.saving.at_start.take() else {
            return;
        };
        self.tell_unsaved(format!(
            "This session is not saved yet: {why}. Its copy is kept in memory and in the \
             spool, and written, in order, as soon as the store accepts writes again."
        ))
        .await;
        self.watch_saved();
    }

    pub(super) async fn tell_unsaved(&mut self, message: String) {
        self.saving.told_unsaved = true;
        self.notice(crate::events::NoticeLevel::Warning, message)
            .await;
    }

    /// Waits, beside the session, for the journal to have written everything unsaved.
    pub(super) fn watch_saved(&mut self) {
        let Some(journal) = &self.journal else {
            return;
        };
        if std::mem::replace(&mut self.saving.watching, true) {
            return;
        }
        let saved = journal.when_saved();
        let ops = self.own_ops.clone();
        tokio::spawn(async move {
            let saved = saved.await;
            if let Some(ops) = ops.upgrade() {
                let _ = ops.send(Op::SaveSettled(saved));
            }
        });
    }

    /// The journal settled what was unsaved: told once, when it is saved again.
    pub(super) async fn save_settled(&mut self, saved: bool) {
        self.saving.watching = false;
        if saved && std::mem::take(&mut self.saving.told_unsaved) {
            self.notice(
                crate::events::NoticeLevel::Info,
                "The session is saved again: everything it recorded meanwhile is written.".into(),
            )
            .await;
        }
    }
}
