//! `session/fork` (answered by `acp/lifecycle.rs`): a new session with a copy of another's
//! history (its parent recorded).
//! The slow part — configuration, prompt, MCP servers, then the parent's record read (what
//! the store has, then what still waits for it, the spools of ended processes adopted
//! first) — runs off the dispatch loop; the launch runs on the loop.
//!
//! The copy is written as the session's creation with its entries, in one transaction, and
//! the fork is answered once that is committed — or, when the store does not take it within
//! the journal's answer deadline, once it waits in the spool (the session then says it is
//! not saved yet, like a turn): an answered fork survives a kill, and the store never has
//! the fork's row without its record. A stuck store never refuses a fork it writes later.

use talaria_engine::{Journal, SessionJournal};
use talaria_record::Transcript;
use talaria_store::{EncodedEntry, SessionMeta};

use super::client_prompt::ClientPrompt;
use super::error::SessionError;
use super::launch::{Assembled, ClientAbilities, Place, Ready, ready_session};
use super::room::{SessionRoom, StartContext, journal_or_open};
use super::stored::{FLUSH_BEFORE_READ, Stored};

/// The copy a fork starts from, committed (or spooled) and claimed.
pub struct Copied {
    pub id: String,
    meta: SessionMeta,
    transcript: Transcript,
    journal: Journal,
    /// Why it is not saved yet, when the store did not take it in time.
    unsaved: Option<String>,
}

/// The slow part of a fork of `parent` (off the loop): the new session's start, then the
/// copy.
pub async fn prepare(
    context: StartContext,
    known: Option<Journal>,
    parent: String,
    place: Place<'_>,
    client: Option<ClientPrompt>,
) -> Result<(Ready, Copied), SessionError> {
    let cwd = place.cwd;
    let ready = ready_session(context, place)
        .await?
        .with_client_prompt(client);
    let journal = journal_or_open(known, &ready.config);
    let copied = copy(journal, &parent, cwd).await?;
    // The copy names the parent's checkpointed contents: the fork holds them too.
    if let Some(checkpoints) = ready.checkpoints() {
        let to = copied.id.clone();
        let _ = tokio::task::spawn_blocking(move || checkpoints.copy_holdings(&parent, &to)).await;
    }
    Ok((ready, copied))
}

impl SessionRoom {
    /// Starts the fork from its committed copy.
    pub fn launch_fork(
        &mut self,
        cwd: std::path::PathBuf,
        ready: Ready,
        copied: Copied,
        client: ClientAbilities,
    ) -> Result<Assembled, SessionError> {
        let Copied {
            id,
            meta,
            transcript,
            journal,
            unsaved,
        } = copied;
        self.adopt_store(&journal);
        let last = transcript.last_id();
        let journal = SessionJournal::new(journal, &id, last);
        self.launch_stored(
            &id,
            cwd,
            ready,
            Stored {
                meta,
                transcript,
                journal,
                unsaved,
            },
            client,
        )
    }
}

/// Reads the parent (what the store has, then what still waits for it) and writes its copy
/// under a new id, claimed for this process: committed with its row, or waiting (spooled) in
/// order until the store takes writes. A parent that cannot be read (or has no record)
/// refuses the fork and writes nothing.
async fn copy(
    journal: Journal,
    parent: &str,
    cwd: &std::path::Path,
) -> Result<Copied, SessionError> {
    journal.flush(FLUSH_BEFORE_READ).await;
    let (meta, transcript) = journal.view(parent).await?;
    let entries = EncodedEntry::all(transcript.entries())
        .map_err(|e| SessionError::Internal(format!("the fork could not be copied: {e}")))?;
    let id = uuid::Uuid::new_v4().to_string();
    let now = talaria_store::now_ms();
    let child = SessionMeta {
        id: id.clone(),
        cwd: cwd.display().to_string(),
        title: meta.title.clone().map(|t| format!("{t} (fork)")),
        created_at: now,
        updated_at: now,
        parent_id: Some(meta.id.clone()),
        input_tokens: 0,
        output_tokens: 0,
        cost: None,
        writer: String::new(),
        ..meta.clone()
    };
    talaria_util::failpoint::step("fork::copy::before");
    journal.create_with(child.clone(), entries);
    journal.claim(&id);
    let report = journal
        .committed_within(&id, talaria_engine::ANSWER_DEADLINE)
        .await;
    talaria_util::failpoint::step("fork::copy::after");
    Ok(Copied {
        id,
        meta: child,
        transcript,
        journal,
        unsaved: report.error,
    })
}
