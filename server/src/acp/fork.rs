//! `session/fork`: a new session with a copy of another's history (its parent recorded).
//! The slow part — configuration, prompt, MCP servers, then the parent's record read and the
//! copy committed and claimed — runs off the dispatch loop; the launch runs on it.

use futures_util::FutureExt;
use talaria_engine::journal::{Journal, SessionJournal};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;
use talaria_record::Transcript;
use talaria_store::SessionMeta;

use super::lifecycle::{FLUSH_BEFORE_READ, Stored, journal_or_open, store_error};
use super::{Agent, Reply, ready_session, to_value};
use crate::acp::launch::StartsSession;

/// The copy a fork starts from, committed and claimed.
struct Copied {
    id: String,
    meta: SessionMeta,
    transcript: Transcript,
    journal: Journal,
}

impl Agent {
    /// `session/fork`: the new session's start and the copy off the loop, then the launch.
    pub(super) fn start_fork(&mut self, request: RequestId, params: acp::ForkSessionRequest) {
        let context = self.start_context();
        let known = self.store.clone();
        let slow = async move {
            let (cwd, directories, mcp_servers) = params.place();
            let ready = ready_session(context, cwd, directories, mcp_servers).await?;
            let journal = journal_or_open(known, &ready.config);
            let copied = copy(journal, &params).await?;
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

/// Reads the parent (after what is queued for it) and commits its copy under a new id,
/// claimed for this process, before the fork is answered.
async fn copy(journal: Journal, params: &acp::ForkSessionRequest) -> Result<Copied, acp::Error> {
    journal.flush(FLUSH_BEFORE_READ).await;
    let parent = params.session_id.0.to_string();
    let (meta, transcript) = journal
        .call(move |store| store.load(&parent))
        .await
        .map_err(store_error)?;
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
        ..meta.clone()
    };
    let (entries, claimed) = (transcript.entries().to_vec(), id.clone());
    let stored = child.clone();
    let saved = journal
        .call(move |store| {
            store.create(&stored)?;
            store.append(&claimed, &entries)?;
            let _ = store.claim(&claimed);
            Ok(())
        })
        .await;
    if let Err(error) = saved {
        return Err(match store_error(error) {
            unavailable if errors::code_of(&unavailable) == errors::UNAVAILABLE => unavailable,
            other => {
                errors::internal_error(format!("the fork could not be saved: {}", other.message))
            }
        });
    }
    Ok(Copied {
        id,
        meta: child,
        transcript,
        journal,
    })
}
