//! Entries the store refused because another writer went on with their session (a spool
//! adopted after another process loaded the session without it, across hosts or in a race):
//! neither side's turns may be lost and neither may replace the other's. What the store has
//! stays as it is; the refused entries are saved as a new session, a fork of it where the
//! two part: the session's stored entries before the first refused one, then the refused
//! ones (each at its own id, as it was answered). This process's next writes of the
//! session go to the new one too.
//!
//! The new session's id is made from the session's and the first refused entry's
//! (`<session>-recovered-<id>`), so a recovery done again (its spool adopted again after a
//! kill) finds it there already, the same, and changes nothing; another recovery at the
//! same place gets the next free name.

use std::collections::BTreeMap;

use talaria_record::EntryId;
use talaria_store::{Basis, EncodedEntry, SessionMeta, SessionStore, StoreError};

use super::Shared;

/// Names tried for one recovery before giving up (each a different copy at the same place).
const NAMES: usize = 8;

/// Saves `refused` (entries of `session` the store refused) as a new session; its id.
pub(super) fn recover(
    store: &dyn SessionStore,
    shared: &Shared,
    session: &str,
    refused: &[EncodedEntry],
) -> Result<String, StoreError> {
    let from = refused.iter().map(|e| e.id).min().unwrap_or(0);
    let (meta, stored) = store.load(session)?;
    let before: Vec<_> = stored
        .all_entries()
        .into_iter()
        .filter(|e| e.id < from)
        .collect();
    let mut copy: BTreeMap<EntryId, EncodedEntry> = before
        .into_iter()
        .map(|e| EncodedEntry::of(e).map(|encoded| (e.id, encoded)))
        .collect::<Result<_, _>>()?;
    for entry in refused {
        copy.insert(entry.id, entry.clone());
    }
    let copy: Vec<EncodedEntry> = copy.into_values().collect();
    let basis = Basis {
        writer: shared.token.clone(),
        builds_on: vec![String::new()],
    };
    for n in 1..=NAMES {
        let id = match n {
            1 => format!("{session}-recovered-{from}"),
            n => format!("{session}-recovered-{from}-{n}"),
        };
        let recovered = recovered_meta(&meta, &id);
        if store
            .create_with_entries(&recovered, &copy, &basis)?
            .is_none()
        {
            return Ok(id);
        }
    }
    Err(StoreError::Other(format!(
        "{NAMES} recovered copies of session {session} at entry {from} are there already"
    )))
}

/// The recovered session's metadata: the session's, as a fork of it.
fn recovered_meta(meta: &SessionMeta, id: &str) -> SessionMeta {
    let now = talaria_store::now_ms();
    let title = meta.title.as_deref().unwrap_or("A session");
    SessionMeta {
        id: id.to_string(),
        title: Some(format!(
            "{title} (recovered: turns another process did not see)"
        )),
        created_at: now,
        updated_at: now,
        input_tokens: 0,
        output_tokens: 0,
        cost: None,
        parent_id: Some(meta.id.clone()),
        writer: String::new(),
        ..meta.clone()
    }
}
