//! The invariants' reads of the store itself (a real SQLite file or a PostgreSQL database,
//! opened by the test, read off the async runtime): snapshots, every session whole and
//! valid, forks whole or absent, the promises held in each record.

use std::collections::{BTreeMap, HashMap, HashSet};

use talaria_record::{EntryBody, Transcript};
use talaria_store::{SessionStore, StoreError};

use super::record::holds;
use super::{Expected, Problems};
use crate::home::Home;
use crate::ledger::Fact;

/// Every session's entries as the store holds them (JSON per entry, on the path and off it).
pub type Snapshot = BTreeMap<String, Vec<String>>;

/// The records of `sessions` as stored now (those that load).
pub async fn stored(home: &Home, sessions: &[String]) -> HashMap<String, Transcript> {
    let Ok(store) = open_store(home).await else {
        return HashMap::new();
    };
    let sessions = sessions.to_vec();
    tokio::task::spawn_blocking(move || {
        sessions
            .into_iter()
            .filter_map(|id| store.load(&id).ok().map(|(_, t)| (id, t)))
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// The entries of `sessions` now (read off the async runtime: PostgreSQL's client blocks).
pub async fn snapshot(home: &Home, sessions: &[String]) -> anyhow::Result<Snapshot> {
    let store = open_store(home).await?;
    let sessions = sessions.to_vec();
    let taken = tokio::task::spawn_blocking(move || {
        let mut taken = Snapshot::new();
        for session in sessions {
            let (_, transcript) = store.load(&session)?;
            taken.insert(session, entries_json(&transcript));
        }
        Ok::<_, StoreError>(taken)
    })
    .await??;
    Ok(taken)
}

pub(super) async fn open_store(home: &Home) -> anyhow::Result<std::sync::Arc<dyn SessionStore>> {
    let kind = home.store.clone();
    let path = home.sqlite_path();
    let store = tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
        Ok(match kind {
            crate::home::StoreKind::Sqlite => {
                std::sync::Arc::new(talaria_store::SqliteStore::open(&path)?)
                    as std::sync::Arc<dyn SessionStore>
            }
            crate::home::StoreKind::Postgres(url) => {
                std::sync::Arc::new(talaria_store::PgStore::connect(&url)?)
            }
        })
    })
    .await??;
    Ok(store)
}

pub(super) fn entries_json(transcript: &Transcript) -> Vec<String> {
    transcript
        .all_entries()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect()
}

/// The store, read directly once every agent ended.
pub(super) async fn check_store(
    home: &Home,
    expected: &Expected<'_>,
    facts: &[Fact],
    sessions: &[String],
    deleted: &HashSet<String>,
    problems: &mut Problems,
) -> HashMap<String, Transcript> {
    let store = match open_store(home).await {
        Ok(store) => store,
        Err(e) => {
            problems.say(format!("the store does not open: {e}"));
            return HashMap::new();
        }
    };
    let facts = facts.to_vec();
    let sessions = sessions.to_vec();
    let deleted = deleted.clone();
    let bystanders = expected.bystanders.clone();
    let found = tokio::task::spawn_blocking(move || {
        let mut problems = Problems::default();
        let stored = read_store(
            store.as_ref(),
            &facts,
            &sessions,
            &deleted,
            &bystanders,
            &mut problems,
        );
        (problems, stored)
    })
    .await;
    let stored = match found {
        Ok((found, stored)) => {
            problems.0.extend(found.0);
            stored
        }
        Err(e) => {
            problems.say(format!("reading the store panicked: {e}"));
            HashMap::new()
        }
    };
    if !home.spooled().is_empty() {
        problems.say(format!(
            "spools are left after a clean exit on a healthy store: {:?}",
            home.spooled()
        ));
    }
    stored
}

fn read_store(
    store: &dyn SessionStore,
    facts: &[Fact],
    sessions: &[String],
    deleted: &HashSet<String>,
    bystanders: &Snapshot,
    problems: &mut Problems,
) -> HashMap<String, Transcript> {
    let mut stored = HashMap::new();
    for session in sessions {
        match store.load(session) {
            Ok((_, transcript)) => {
                for fact in facts.iter().filter(|f| f.session() == session) {
                    if let Err(why) = holds(fact, &transcript) {
                        problems.say(format!("{session}: {why}"));
                    }
                }
                stored.insert(session.clone(), transcript);
            }
            Err(e) => problems.say(format!("{session} is not in the store: {e}")),
        }
    }
    for fact in facts {
        match fact {
            Fact::WholeOrGone {
                session,
                holds: held,
            } => match store.load(session) {
                Err(StoreError::NotFound(_)) => {}
                Ok((_, transcript)) => {
                    for h in held {
                        if let Err(why) = holds(h, &transcript) {
                            problems.say(format!("{session} is there but not whole: {why}"));
                        }
                    }
                }
                Err(e) => problems.say(format!("{session} does not load: {e}")),
            },
            Fact::CopiesOf { parent, path } => copies_whole(store, parent, path, problems),
            _ => {}
        }
    }
    for session in deleted {
        if store.load(session).is_ok() {
            problems.say(format!("{session} was deleted and is in the store again"));
        }
    }
    for (session, before) in bystanders {
        match store.load(session) {
            Ok((_, transcript)) if entries_json(&transcript) == *before => {}
            Ok((_, transcript)) => problems.say(format!(
                "bystander {session} changed: {} entries before, {} now",
                before.len(),
                transcript.all_entries().len()
            )),
            Err(e) => problems.say(format!("bystander {session} is gone: {e}")),
        }
    }
    for session in every_session_whole(store, problems) {
        // Kept as hollow: a load of it must not have succeeded.
        stored.insert(format!("hollow:{session}"), Transcript::new());
    }
    stored
}

/// Every fork of `parent` in the store starts with exactly `path`.
fn copies_whole(store: &dyn SessionStore, parent: &str, path: &[String], problems: &mut Problems) {
    let listed = store
        .list(None, None, 1000)
        .map(|p| p.sessions)
        .unwrap_or_default();
    for fork in listed
        .iter()
        .filter(|m| m.parent_id.as_deref() == Some(parent))
    {
        let Ok((_, transcript)) = store.load(&fork.id) else {
            continue;
        };
        let copied = entries_json(&transcript);
        if copied.len() < path.len() || copied[..path.len()] != *path {
            problems.say(format!(
                "fork {} of {parent} is not a whole copy: {} of its {} entries",
                fork.id,
                copied.iter().zip(path).take_while(|(a, b)| a == b).count(),
                path.len()
            ));
        }
    }
}

/// Every session in the store loads whole and valid (read while agents run: what is
/// committed is always whole).
pub async fn store_whole(home: &Home) -> Problems {
    let mut problems = Problems::default();
    let store = match open_store(home).await {
        Ok(store) => store,
        Err(e) => {
            problems.say(format!("the store does not open: {e}"));
            return problems;
        }
    };
    match tokio::task::spawn_blocking(move || {
        let mut found = Problems::default();
        // A session with no entry yet is one whose first write is on its way.
        every_session_whole(store.as_ref(), &mut found);
        found
    })
    .await
    {
        Ok(found) => found,
        Err(e) => Problems(vec![format!("reading the store panicked: {e}")]),
    }
}

/// Every session in the store loads, starts with its system prompt and validates.
pub(super) fn every_session_whole(
    store: &dyn SessionStore,
    problems: &mut Problems,
) -> Vec<String> {
    let listed = match store.list(None, None, 1000) {
        Ok(page) => page.sessions,
        Err(e) => {
            problems.say(format!("the store does not list: {e}"));
            return Vec::new();
        }
    };
    let mut hollow = Vec::new();
    for meta in listed {
        match store.load(&meta.id) {
            Ok((_, transcript)) => {
                match transcript.entries().first().map(|e| &e.body) {
                    Some(EntryBody::System { .. }) => {}
                    None => hollow.push(meta.id.clone()),
                    Some(other) => problems.say(format!(
                        "{} (parent {:?}) does not start with its system prompt but {other:?}",
                        meta.id, meta.parent_id
                    )),
                }
                // As a load reads it: a turn cut off by a crash is closed first.
                let mut view = transcript;
                view.close_cut_off_turn();
                if let Err(violations) = view.validate() {
                    problems.say(format!(
                        "{}'s record does not validate: {violations:?}",
                        meta.id
                    ));
                }
            }
            Err(e) => problems.say(format!("{} is listed and does not load: {e}", meta.id)),
        }
    }
    hollow
}

/// The sessions the store lists with no entry at all (a session whose first write has not
/// been made, or never will be).
pub async fn hollow_sessions(home: &Home) -> Vec<String> {
    let Ok(store) = open_store(home).await else {
        return Vec::new();
    };
    tokio::task::spawn_blocking(move || {
        every_session_whole(store.as_ref(), &mut Problems::default())
    })
    .await
    .unwrap_or_default()
}

/// Whether `session`'s stored record has a rewind marker.
pub async fn has_rewind(home: &Home, session: &str) -> bool {
    let Ok(store) = open_store(home).await else {
        return false;
    };
    let session = session.to_string();
    tokio::task::spawn_blocking(move || {
        store.load(&session).is_ok_and(|(_, t)| {
            t.all_entries()
                .iter()
                .any(|e| matches!(e.body, EntryBody::Rewound { .. }))
        })
    })
    .await
    .unwrap_or(false)
}

/// `session`'s path as stored (JSON per entry).
pub async fn path_json(home: &Home, session: &str) -> anyhow::Result<Vec<String>> {
    let store = open_store(home).await?;
    let session = session.to_string();
    let transcript = tokio::task::spawn_blocking(move || store.load(&session))
        .await??
        .1;
    Ok(transcript
        .entries()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect())
}
