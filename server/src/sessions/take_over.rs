//! Taking a session over from the process that runs it (the session room's side of
//! `_session/attach` with role "controller" for a session running elsewhere on the same
//! store): ask for it through the store, wait until that process lets it go (its claim is
//! free once its turn ended and it closed the session), and claim it here. The session is then
//! reopened here as a resume would (`reopen`), and its record is already claimed.

use std::time::Duration;

use talaria_engine::Journal;
use talaria_store::{SessionMeta, StoreError};

use super::SessionError;
use super::launch::load_config;
use super::room::journal_or_open;

/// How long a take-over waits for the process that runs the session to let it go.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(60);

/// How often the claim is tried meanwhile.
const POLL: Duration = Duration::from_millis(250);

/// Claims stored session `id` for this process, asking the process that has it open (as
/// `asker`, unique to this take-over) to hand it over and waiting up to [`HANDOVER_WAIT`];
/// its journal and where it ran. Another take-over of it under way is said at once.
pub async fn claim_from_elsewhere(
    known: Option<Journal>,
    id: &str,
    asker: &str,
) -> Result<(Journal, SessionMeta), SessionError> {
    let journal = match known {
        Some(journal) => journal,
        None => journal_or_open(None, &load_config().await?),
    };
    journal
        .first_open_tried(talaria_engine::ANSWER_DEADLINE)
        .await;
    let claimed = take(&journal, id, asker).await;
    let (session, by) = (id.to_string(), asker.to_string());
    if let Err(error) = journal
        .call(move |store| store.withdraw_ask(&session, &by))
        .await
    {
        tracing::warn!(session = id, "the ask for it stays in the store: {error}");
    }
    claimed.map(|meta| (journal, meta))
}

/// Asks for session `id` (again each time: an ask not renewed soon counts for nothing) and
/// claims it once it is free and saved, for at most [`HANDOVER_WAIT`]. A session whose record
/// is not saved yet (it has just started elsewhere, its claim not written yet) is never
/// claimed: that would take it from under its process.
async fn take(journal: &Journal, id: &str, asker: &str) -> Result<SessionMeta, SessionError> {
    let deadline = tokio::time::Instant::now() + HANDOVER_WAIT;
    let mut meta = None;
    loop {
        let (session, by) = (id.to_string(), asker.to_string());
        let standing = journal
            .call(move |store| store.ask_for(&session, &by))
            .await?;
        if let Some(other) = standing {
            return Err(SessionError::Invalid(format!(
                "session {id} is being taken over already (by {other}): try again once it \
                 has moved"
            )));
        }
        if meta.is_none() {
            meta = match journal.view(id).await {
                Ok((stored, _)) => Some(stored),
                Err(talaria_store::StoreError::NoRecord(_)) => None,
                Err(error) => return Err(error.into()),
            };
        }
        let holder = match &meta {
            Some(stored) => match claim(journal, id).await? {
                None => return Ok(stored.clone()),
                Some(holder) => holder,
            },
            None => "it has just started there and is not saved yet".to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(SessionError::Invalid(format!(
                "session {id} was not handed over within {} s by the process that runs it \
                 ({holder}): a `talaria serve` hands a session over once its running turn \
                 ends, a stdio process never does (close it there); try again",
                HANDOVER_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Claims session `id` here: `None` when claimed, else who holds it.
async fn claim(journal: &Journal, id: &str) -> Result<Option<String>, SessionError> {
    let session = id.to_string();
    match journal.call(move |store| store.claim(&session)).await {
        Ok(()) => Ok(None),
        Err(StoreError::InUse { holder, .. }) => Ok(Some(holder)),
        Err(error) => Err(error.into()),
    }
}
