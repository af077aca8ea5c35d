//! The store's side of the durable lifecycle: a stored session read and claimed for a load or
//! a resume, continued where it left off; a page of the listing; a close's release; a delete
//! (the wire room, `acp/lifecycle.rs`, answers them).

use talaria_engine::{Journal, SessionHandle, SessionJournal, SessionStart};
use talaria_record::Transcript;
use talaria_store::{SessionMeta, StoreError};

pub use talaria_store::ListPage;

use super::client_prompt::ClientPrompt;
use super::error::SessionError;
use super::launch::{Assembled, ClientAbilities, Launch, Place, Ready, SessionTaps, ready_session};
use super::room::{SessionRoom, StartContext, journal_or_open};

/// Sessions per page of `session/list`.
const LIST_PAGE: usize = 50;

/// How long a request waits for what open sessions queued before it reads (what is still
/// queued after that is read as of the store's last commit).
pub const FLUSH_BEFORE_READ: std::time::Duration = std::time::Duration::from_millis(500);

/// Reads a stored session's record — what the store has, then what still waits for it — and
/// claims it for this process (off the loop: what open sessions queued lands first, then the
/// claim, atomic, then the spools of processes that ended are adopted, then the read: a turn
/// an ended process answered is in the record, and this one's next entries follow it). Of
/// two processes loading one session, exactly one wins and the other is told who holds it;
/// a store that cannot be written is still read (the session then runs unsaved and says
/// so). A close of this session here whose release still waits behind its writes hands the
/// claim over instead. A session with no record (no system prompt) is refused.
async fn read_claimed(journal: Journal, id: &str) -> Result<Stored, SessionError> {
    // A session closed a moment ago may still have writes queued; they land first.
    journal.flush(FLUSH_BEFORE_READ).await;
    journal.hold_again(id);
    let claimed = id.to_string();
    let claim = journal
        .call(move |store| match store.claim(&claimed) {
            Ok(()) | Err(StoreError::ReadOnly(_)) => Ok(()),
            Err(other) => Err(other),
        })
        .await;
    let viewed = match claim {
        // Not open yet: a session this process created and has waiting is still read.
        Ok(()) | Err(StoreError::NotOpenYet(_)) => journal.view(id).await,
        Err(error) => Err(error),
    };
    let (meta, transcript) = match viewed {
        Ok(read) => read,
        Err(error) => {
            if !matches!(error, StoreError::InUse { .. }) {
                journal.release(id);
            }
            return Err(error.into());
        }
    };
    journal.loaded(id, &meta.writer);
    let saved = transcript.last_id();
    Ok(Stored {
        meta,
        transcript,
        journal: SessionJournal::new(journal, id, saved),
        unsaved: None,
    })
}

/// A stored session's record, as a launch continues it.
pub struct Stored {
    pub meta: SessionMeta,
    pub transcript: Transcript,
    /// How much of the record the store already has.
    pub journal: SessionJournal,
    /// Why it is not saved yet, when it was answered before the store took it (a fork).
    pub unsaved: Option<String>,
}

/// A stored session made ready off the loop (for a load or a resume): its configuration,
/// prompt and MCP servers, its record read and claimed, and what a load replays.
pub struct Reopened {
    pub ready: Ready,
    pub read: Stored,
    pub journal: Journal,
    /// What a load replays (a turn the previous process did not finish reads as
    /// interrupted); `None` for a resume.
    pub shown: Option<Transcript>,
}

/// Makes stored session `id` ready to continue (off the loop); `replay`: a load.
pub async fn reopen(
    context: StartContext,
    known: Option<Journal>,
    id: &str,
    place: Place<'_>,
    client: Option<ClientPrompt>,
    replay: bool,
) -> Result<Reopened, SessionError> {
    let ready = ready_session(context, place)
        .await?
        .with_client_prompt(client);
    let journal = journal_or_open(known, &ready.config);
    let read = read_claimed(journal.clone(), id).await?;
    // What a load replays, copied here rather than on the loop. A turn the previous process
    // did not finish reads as interrupted, in the replay too.
    let shown = replay.then(|| {
        let mut shown = read.transcript.clone();
        shown.close_cut_off_turn();
        shown
    });
    Ok(Reopened {
        ready,
        read,
        journal,
        shown,
    })
}

/// The record of a session open here, as the store and what waits for it have it (what is
/// queued lands first).
pub async fn record_of_open(journal: Journal, id: &str) -> Result<Transcript, SessionError> {
    journal.flush(FLUSH_BEFORE_READ).await;
    let (_, transcript) = journal.view(id).await?;
    Ok(transcript)
}

/// The record of session `id` as the store has it now (a session another process runs, for a
/// client following it from here); the journal, when it was opened for this (the room keeps
/// it).
pub async fn record_in_store(
    known: Option<Journal>,
    id: String,
) -> Result<(Option<Journal>, Transcript), SessionError> {
    let (opened, journal) = match known {
        Some(journal) => (None, journal),
        None => {
            let config = super::launch::load_config().await?;
            let journal = journal_or_open(None, &config);
            (Some(journal.clone()), journal)
        }
    };
    journal
        .first_open_tried(talaria_engine::ANSWER_DEADLINE)
        .await;
    let (_, transcript) = journal.view(&id).await?;
    Ok((opened, transcript))
}

impl SessionRoom {
    /// Starts a session from a stored record (its system prompt, model and mode are kept; the
    /// prepared system prompt is used only if the record has none).
    pub fn launch_stored(
        &mut self,
        id: &str,
        cwd: std::path::PathBuf,
        ready: Ready,
        stored: Stored,
        client: ClientAbilities,
    ) -> Result<Assembled, SessionError> {
        let Stored {
            meta,
            transcript,
            journal,
            unsaved,
        } = stored;
        let mode = talaria_engine::Mode::from_id(&meta.mode);
        let model = (!meta.model.is_empty()).then(|| meta.model.clone());
        self.assemble(
            Launch {
                id: id.to_string(),
                cwd,
                ready,
                model,
                mode,
                start: SessionStart {
                    history: Some(transcript),
                    journal: Some(journal),
                    title: meta.title.clone(),
                    commands: None,
                    sizing: None,
                    unsaved,
                },
                taps: SessionTaps::default(),
            },
            client,
        )
    }

    /// Continues a stored session made ready off the loop (a turn the previous process did
    /// not finish reads as interrupted).
    pub fn continue_stored(
        &mut self,
        id: &str,
        cwd: std::path::PathBuf,
        reopened: Reopened,
        client: ClientAbilities,
    ) -> Result<Assembled, SessionError> {
        let Reopened {
            ready,
            mut read,
            journal,
            shown: _,
        } = reopened;
        self.adopt_store(&journal);
        read.transcript.close_cut_off_turn();
        self.launch_stored(id, cwd, ready, read, client)
    }
}

/// One page of `session/list` (off the loop, at most the journal's read deadline): a
/// connection that has not needed the store yet opens it now (`opened`, for the room to
/// adopt), and the listing waits for the first try to open it.
pub async fn list(
    known: Option<Journal>,
    cwd: Option<String>,
    cursor: Option<String>,
) -> Result<(Option<Journal>, Result<ListPage, SessionError>), SessionError> {
    let (opened, journal) = match known {
        Some(journal) => (None, journal),
        None => {
            let config = super::launch::load_config().await?;
            let journal = journal_or_open(None, &config);
            (Some(journal.clone()), journal)
        }
    };
    journal
        .first_open_tried(talaria_engine::ANSWER_DEADLINE)
        .await;
    // Read-your-writes: titles and turns queued by open sessions are listed.
    journal.flush(FLUSH_BEFORE_READ).await;
    let page = journal
        .call(move |store| store.list(cwd.as_deref(), cursor.as_deref(), LIST_PAGE))
        .await
        .map_err(SessionError::from);
    Ok((opened, page))
}

/// A session's close, off the loop: its work ended and what it recorded committed, then it is
/// free for others (in order, after what it wrote), within the journal's answer deadline.
pub struct Closing {
    pub handle: SessionHandle,
    pub journal: Option<Journal>,
    pub id: String,
}

impl Closing {
    pub async fn run(self) {
        let Closing {
            handle,
            journal,
            id,
        } = self;
        // One deadline for the whole close: the session's own wait for its last writes and
        // the release's share it.
        let deadline = tokio::time::Instant::now() + talaria_engine::ANSWER_DEADLINE;
        handle.close_and_wait().await;
        // Then it is free for others (in order, after what it wrote): done once it is, or
        // once the deadline passed (it is released when the store can).
        if let Some(journal) = journal {
            talaria_util::failpoint::step("close::release::before");
            journal.release(&id);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            journal.committed_within(&id, left).await;
            talaria_util::failpoint::step("close::release::after");
        }
        tracing::info!(session = %id, "session closed");
    }
}

/// Deletes session `id` (off the loop): its wind-down (`running`, stopped here already),
/// what it queued, then the deletion and its checkpoints. Returns the journal, for the room
/// to adopt.
pub async fn delete(
    known: Option<Journal>,
    running: Option<SessionHandle>,
    id: String,
) -> Result<Journal, SessionError> {
    let config = super::launch::load_config().await?;
    let journal = journal_or_open(known, &config);
    if let Some(handle) = running {
        handle.close_and_wait().await;
    }
    journal.flush(FLUSH_BEFORE_READ).await;
    // As this process sees it: what ended processes spooled of it is adopted first, and a
    // session whose creation still waits here is deleted too (the store keeps its
    // tombstone); a delete that cannot be done says why.
    let deleted = journal.delete(&id).await?;
    if !deleted {
        return Err(SessionError::Invalid(format!("no saved session {id}")));
    }
    // Its checkpoints go with it.
    let home = config.home.clone();
    let _ = tokio::task::spawn_blocking(move || {
        talaria_engine::prune_checkpoints(&home, &id);
    })
    .await;
    Ok(journal)
}
