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
/// `asker`) to hand it over and waiting up to [`HANDOVER_WAIT`]; its journal and where it
/// ran.
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
    let (meta, _) = journal.view(id).await?;
    // Free already (closed there, or its process ended): claimed at once.
    if claim(&journal, id).await?.is_none() {
        return Ok((journal, meta));
    }
    let (session, by) = (id.to_string(), asker.to_string());
    journal
        .call(move |store| store.ask_for(&session, &by))
        .await?;
    let claimed = wait_for_claim(&journal, id).await;
    let session = id.to_string();
    if let Err(error) = journal
        .call(move |store| store.withdraw_ask(&session))
        .await
    {
        tracing::warn!(session = id, "the ask for it stays in the store: {error}");
    }
    claimed.map(|()| (journal, meta))
}

/// Tries the claim until it is free or [`HANDOVER_WAIT`] passed.
async fn wait_for_claim(journal: &Journal, id: &str) -> Result<(), SessionError> {
    let deadline = tokio::time::Instant::now() + HANDOVER_WAIT;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(holder) = claim(journal, id).await? else {
            return Ok(());
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(SessionError::Invalid(format!(
                "session {id} was not handed over within {} s by the process that runs it \
                 ({holder}): a `talaria serve` hands a session over once its running turn \
                 ends, a stdio process never does (close it there); try again",
                HANDOVER_WAIT.as_secs()
            )));
        }
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
