//! One view of a session: the store's entries followed by the ones still waiting for it (in
//! the writer's queue, its batch or a backlog), in id order. Load, fork and search read
//! sessions through it, so a turn the store has not committed yet is never missing from a
//! replay, a copy, or the record a reloaded session continues (its ids continue after the
//! waiting ones: none is reused). A session whose record has no system prompt (its creation
//! was saved, its first entries never were) is no session to continue: `NoRecord`.

use std::collections::BTreeMap;

use talaria_record::{Entry, EntryId, Transcript};
use talaria_store::{EncodedEntry, SearchHit, SessionMeta, SessionStore, StoreError};

use super::{Journal, WaitingWrites};

impl Journal {
    /// The session as it stands: stored, then waiting (what the spools of ended processes
    /// held is adopted first).
    pub async fn view(&self, session: &str) -> Result<(SessionMeta, Transcript), StoreError> {
        self.view_after(session, |_| Ok(())).await
    }

    /// The session as it stands, read after `first` ran in the same store call (a claim:
    /// nobody else can write it between the two).
    pub async fn view_after(
        &self,
        session: &str,
        first: impl FnOnce(&dyn SessionStore) -> Result<(), StoreError> + Send + 'static,
    ) -> Result<(SessionMeta, Transcript), StoreError> {
        // What ended processes spooled joins the waiting set first (after `first`, a claim,
        // would be later than the claim: `first` runs in the same call as the read).
        if !self.adopt_orphans(super::READ_DEADLINE).await {
            return Err(StoreError::TimedOut(super::READ_DEADLINE));
        }
        // Read around the store's read: an entry committed meanwhile leaves the waiting set
        // only after it is in the store, so it is in one of the three reads.
        let before = self.waiting(session);
        let id = session.to_string();
        let stored = self
            .call(move |store| {
                first(store)?;
                store.load(&id)
            })
            .await;
        let after = self.waiting(session);
        let (meta, transcript) = overlaid(stored, &before, &after)?;
        if !has_system_prompt(&transcript) {
            return Err(StoreError::NoRecord(session.to_string()));
        }
        Ok((meta, transcript))
    }

    /// What `session` sent that the store has not committed yet.
    pub fn waiting(&self, session: &str) -> WaitingWrites {
        self.shared.waiting.of(session)
    }

    /// Hits among the entries still waiting for the store (the store's own search cannot see
    /// them): every word of `query` (split as the stores split it) appears in the entry's
    /// searchable text.
    pub fn search_waiting(&self, query: &str, limit: usize) -> Vec<SearchHit> {
        let words: Vec<String> = talaria_store::query_words(query)
            .into_iter()
            .map(str::to_lowercase)
            .collect();
        let Some(first) = words.first() else {
            return Vec::new();
        };
        let mut hits = Vec::new();
        for (session, entries) in self.shared.waiting.all() {
            for entry in entries {
                let Some(text) = entry.search_text() else {
                    continue;
                };
                let lower = text.to_lowercase();
                if words.iter().all(|w| lower.contains(w.as_str())) {
                    hits.push(hit_in(&session, &entry, &text, &lower, first));
                }
            }
        }
        hits.sort_by_key(|h| std::cmp::Reverse(h.at_ms));
        hits.truncate(limit);
        hits
    }
}

/// A waiting entry as a search hit (ranked before the store's: it is the newest); `lower` is
/// `text` lower-cased, where `word` was found.
fn hit_in(session: &str, entry: &EncodedEntry, text: &str, lower: &str, word: &str) -> SearchHit {
    let snippet = match lower.find(word) {
        // Lower-casing can move byte offsets; mark the match only where it did not.
        Some(at) if lower.len() == text.len() && text.is_char_boundary(at + word.len()) => {
            format!(
                "{}[{}]{}",
                &text[..at],
                &text[at..at + word.len()],
                &text[at + word.len()..]
            )
        }
        _ => text.to_string(),
    };
    let snippet = match talaria_util::head(&snippet, 300) {
        Some((kept, _)) => format!("{kept}…"),
        None => snippet,
    };
    SearchHit {
        session_id: session.to_string(),
        session_title: None,
        entry_id: entry.id,
        rank: f64::MIN,
        snippet,
        at_ms: entry.at_ms,
    }
}

/// Whether a record starts as every session's does, with its system prompt.
fn has_system_prompt(transcript: &Transcript) -> bool {
    transcript
        .entries()
        .iter()
        .any(|e| matches!(e.body, talaria_record::EntryBody::System { .. }))
}

/// The store's read with the waiting entries laid over it by id (the newest read wins). A
/// session the store has not recorded yet is its waiting creation.
fn overlaid(
    stored: Result<(SessionMeta, Transcript), StoreError>,
    before: &WaitingWrites,
    after: &WaitingWrites,
) -> Result<(SessionMeta, Transcript), StoreError> {
    let created = after.create.as_ref().or(before.create.as_ref());
    let (meta, transcript) = match (stored, created) {
        (Ok(read), _) => read,
        (Err(StoreError::NotFound(_) | StoreError::NotOpenYet(_)), Some(meta)) => {
            (meta.clone(), Transcript::new())
        }
        (Err(error), _) => return Err(error),
    };
    if before.entries.is_empty() && after.entries.is_empty() {
        return Ok((meta, transcript));
    }
    let mut entries: BTreeMap<EntryId, Entry> = transcript
        .all_entries()
        .into_iter()
        .map(|e| (e.id, e.clone()))
        .collect();
    for waiting in before.entries.iter().chain(&after.entries) {
        entries.insert(waiting.id, waiting.decoded()?);
    }
    Ok((
        meta,
        Transcript::from_entries(entries.into_values().collect()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(transcript: &Transcript) -> Vec<EncodedEntry> {
        EncodedEntry::all(transcript.entries()).expect("encodes")
    }

    #[test]
    fn waiting_entries_follow_the_stored_ones_and_new_ids_continue_after_them() {
        let mut record = Transcript::with_system("system");
        record.push(talaria_record::testing::user("first"));
        let stored = Transcript::from_entries(record.entries().to_vec());
        record.push(talaria_record::testing::user("waiting"));
        let waiting = WaitingWrites {
            create: None,
            entries: encoded(&record)[2..].to_vec(),
        };
        let meta = SessionMeta::default();
        let (_, mut view) =
            overlaid(Ok((meta, stored)), &waiting, &WaitingWrites::default()).expect("view");
        assert_eq!(view.entries().len(), 3);
        assert_eq!(
            view.push(talaria_record::testing::user("next")),
            4,
            "no id reused"
        );
    }

    #[test]
    fn a_session_the_store_has_not_recorded_is_its_waiting_creation() {
        let meta = SessionMeta {
            id: "s".into(),
            ..SessionMeta::default()
        };
        let record = Transcript::with_system("system");
        let waiting = WaitingWrites {
            create: Some(meta.clone()),
            entries: encoded(&record),
        };
        let (read, view) = overlaid(
            Err(StoreError::NotFound("s".into())),
            &WaitingWrites::default(),
            &waiting,
        )
        .expect("view");
        assert_eq!(read, meta);
        assert_eq!(view.entries().len(), 1);
        let missing = overlaid(
            Err(StoreError::NotFound("s".into())),
            &WaitingWrites::default(),
            &WaitingWrites::default(),
        );
        assert!(matches!(missing, Err(StoreError::NotFound(_))));
    }
}
