//! `session/fork`: a new session with a copy of another's history (its parent recorded).
//! The slow part — configuration, prompt, MCP servers, then the parent's record read (what
//! the store has, then what still waits for it, the spools of ended processes adopted
//! first) — runs off the dispatch loop; the launch runs on the loop.
//!
//! The copy is written as the session's creation with its entries, in one transaction, and
//! the fork is answered once that is committed — or, when the store does not take it within
//! the journal's answer deadline, once it waits in the spool (the session then says it is
//! not saved yet, like a turn): an answered fork survives a kill, and the store never has
//! the fork's row without its record. A stuck store never refuses a fork it writes later.

use futures_util::FutureExt;
use talaria_engine::{Journal, SessionJournal};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;
use talaria_record::Transcript;
use talaria_store::{EncodedEntry, SessionMeta};

use super::lifecycle::{FLUSH_BEFORE_READ, Stored, journal_or_open, store_error};
use super::{Agent, Reply, ready_session, to_value};
use crate::acp::launch::StartsSession;

/// The copy a fork starts from, committed (or spooled) and claimed.
struct Copied {
    id: String,
    meta: SessionMeta,
    transcript: Transcript,
    journal: Journal,
    /// Why it is not saved yet, when the store did not take it in time.
    unsaved: Option<String>,
}

impl Agent {
    /// `session/fork`: the new session's start and the copy off the loop, then the launch.
    pub(super) fn start_fork(&mut self, request: RequestId, params: acp::ForkSessionRequest) {
        let mut context = self.start_context();
        context.trust = context.trust.during(&request);
        let known = self.store.clone();
        let slow = async move {
            // Checked first: a prompt that cannot be applied copies nothing.
            let client = super::client_prompt::parse(params.system_prompt.as_ref())?;
            let (cwd, directories, mcp_servers) = params.place();
            let ready = ready_session(context, cwd, directories, mcp_servers)
                .await?
                .with_client_prompt(client);
            let journal = journal_or_open(known, &ready.config);
            let copied = copy(journal, &params).await?;
            // The copy names the parent's checkpointed contents: the fork holds them too.
            if let Some(checkpoints) = ready.checkpoints() {
                let (from, to) = (params.session_id.0.to_string(), copied.id.clone());
                let _ = tokio::task::spawn_blocking(move || checkpoints.copy_holdings(&from, &to))
                    .await;
            }
            Ok((params, ready, copied))
        };
        self.defer(
            request,
            "session/fork",
            slow,
            |agent, (params, ready, copied)| {
                async move { agent.fork_session(params, ready, copied) }.boxed_local()
            },
        );
    }

    /// Starts the fork from its committed copy.
    fn fork_session(
        &mut self,
        params: acp::ForkSessionRequest,
        ready: super::Ready,
        copied: Copied,
    ) -> Reply {
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
        let launched = self.launch_stored(
            &id,
            params.cwd,
            ready,
            Stored {
                meta,
                transcript,
                journal,
                unsaved,
            },
        )?;
        to_value(
            acp::ForkSessionResponse::new(id)
                .modes(launched.modes)
                .config_options(launched.options)
                .meta(launched.meta),
        )
    }
}

/// Reads the parent (what the store has, then what still waits for it) and writes its copy
/// under a new id, claimed for this process: committed with its row, or waiting (spooled) in
/// order until the store takes writes. A parent that cannot be read (or has no record)
/// refuses the fork and writes nothing.
async fn copy(journal: Journal, params: &acp::ForkSessionRequest) -> Result<Copied, acp::Error> {
    journal.flush(FLUSH_BEFORE_READ).await;
    let parent = params.session_id.0.to_string();
    let (meta, transcript) = journal.view(&parent).await.map_err(store_error)?;
    let entries = EncodedEntry::all(transcript.entries())
        .map_err(|e| errors::internal_error(format!("the fork could not be copied: {e}")))?;
    let id = uuid::Uuid::new_v4().to_string();
    let now = talaria_store::now_ms();
    let child = SessionMeta {
        id: id.clone(),
        cwd: params.cwd.display().to_string(),
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
