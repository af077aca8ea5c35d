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

/// How often the claim is tried meanwhile.
const POLL: Duration = Duration::from_millis(250);

/// Claims stored session `id` for this process, asking the process that has it open (as
/// `asker`, unique to this take-over) to hand it over and waiting up to `[store]
/// handover_wait_secs` (at least 1 s); its journal and where it ran. Another take-over of it under way is said at once.
pub async fn claim_from_elsewhere(
    known: Option<Journal>,
    id: &str,
    asker: &str,
) -> Result<(Journal, SessionMeta), SessionError> {
    let config = load_config().await?;
    let wait = Duration::from_secs(config.settings.store().handover_wait_secs().value.max(1));
    let journal = match known {
        Some(journal) => journal,
        None => journal_or_open(None, &config),
    };
    journal
        .first_open_tried(talaria_engine::ANSWER_DEADLINE)
        .await;
    let claimed = take(&journal, id, asker, wait).await;
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
/// claims it once it is free and saved, for at most `wait`. A session whose record
/// is not saved yet (it has just started elsewhere, its creation or claim not written yet) is
/// never claimed: that would take it from under its process. A store that does not answer
/// for a moment (busy, restarting) is asked again, not given up on: the process that runs the
/// session may be handing it over meanwhile.
async fn take(
    journal: &Journal,
    id: &str,
    asker: &str,
    wait: Duration,
) -> Result<SessionMeta, SessionError> {
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    let mut meta = None;
    let mut holder = String::from("the store did not answer");
    // After the store failed to answer, no claim for a while: a database that restarted
    // dropped every process's claims, and the one that runs the session takes its back.
    let mut claim_after = started;
    while tokio::time::Instant::now() < deadline {
        let may_claim = tokio::time::Instant::now() >= claim_after;
        match step(journal, id, asker, &mut meta, may_claim).await {
            Ok(Step::Taken(stored)) => return Ok(*stored),
            Ok(Step::Held(by)) => holder = by,
            Ok(Step::Refused(why)) => return Err(SessionError::Invalid(why)),
            Err(StoreError::NotFound(_)) if started.elapsed() < UNSAVED_GRACE => {
                holder = "its creation is not saved yet".into();
            }
            Err(error) if error.is_store_wide() => {
                holder = error.to_string();
                claim_after = tokio::time::Instant::now() + RECLAIM_GRACE;
            }
            Err(error) => return Err(error.into()),
        }
        tokio::time::sleep(POLL).await;
    }
    // Given up: the ask goes first, then one last try (a runner that let it go meanwhile
    // leaves it to this asker, not to nobody).
    let (session, by) = (id.to_string(), asker.to_string());
    let _ = journal
        .call(move |store| store.withdraw_ask(&session, &by))
        .await;
    if tokio::time::Instant::now() >= claim_after
        && let Ok(Step::Taken(stored)) = claim_saved(journal, id, &mut meta).await
    {
        return Ok(*stored);
    }
    Err(SessionError::Invalid(format!(
        "session {id} was not handed over within {} s by the process that runs it ({holder}): \
         a `talaria serve` hands a session over once its running turn ends, a stdio process \
         never does (close it there); try again",
        wait.as_secs()
    )))
}

/// How long a session not found at all may be one whose creation is still on its way to
/// the store (an id nobody made is said then).
const UNSAVED_GRACE: Duration = Duration::from_secs(5);

/// How long after the store failed to answer no claim is tried.
const RECLAIM_GRACE: Duration = Duration::from_secs(5);

/// Where a take-over stands after one round.
enum Step {
    Taken(Box<SessionMeta>),
    Held(String),
    /// Another take-over of it is under way: said at once.
    Refused(String),
}

/// One round: the ask renewed (another's standing ask refuses at once), then the claim tried
/// once the record is saved.
async fn step(
    journal: &Journal,
    id: &str,
    asker: &str,
    meta: &mut Option<SessionMeta>,
    may_claim: bool,
) -> Result<Step, StoreError> {
    let (session, by) = (id.to_string(), asker.to_string());
    if let Some(other) = journal
        .call(move |store| store.ask_for(&session, &by))
        .await?
    {
        return Ok(Step::Refused(format!(
            "session {id} is being taken over already (by {other}): try again once it has \
             moved"
        )));
    }
    if !may_claim {
        return Ok(Step::Held("the store did not answer a moment ago".into()));
    }
    claim_saved(journal, id, meta).await
}

/// Claims session `id` once its record is saved (read once, kept in `meta`).
async fn claim_saved(
    journal: &Journal,
    id: &str,
    meta: &mut Option<SessionMeta>,
) -> Result<Step, StoreError> {
    if meta.is_none() {
        match journal.view(id).await {
            Ok((stored, _)) => *meta = Some(stored),
            Err(StoreError::NoRecord(_)) => {
                return Ok(Step::Held(
                    "it has just started there and is not saved yet".into(),
                ));
            }
            Err(error) => return Err(error),
        }
    }
    let session = id.to_string();
    match journal.call(move |store| store.claim(&session)).await {
        Ok(()) => Ok(Step::Taken(Box::new(meta.clone().unwrap_or_default()))),
        Err(StoreError::InUse { holder, .. }) => Ok(Step::Held(holder)),
        Err(error) => Err(error),
    }
}
