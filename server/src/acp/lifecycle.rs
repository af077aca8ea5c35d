//! The durable session lifecycle over ACP: `session/load` (replays the history first),
//! `session/resume`, `session/list`, `session/close`, `session/delete` and `session/fork`,
//! on the store opened with the first session.

use futures_util::FutureExt;
use talaria_engine::{Config, SessionStart};
use talaria_engine::{Journal, SessionJournal};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;
use talaria_record::Transcript;
use talaria_store::{SessionMeta, StoreError};

use super::{
    Agent, Launch, Launched, Reply, config_error, forwarder, replay, session_not_found, to_value,
};

/// Sessions per page of `session/list`.
const LIST_PAGE: usize = 50;

/// How long a request waits for what open sessions queued before it reads (what is still
/// queued after that is read as of the store's last commit).
pub(super) const FLUSH_BEFORE_READ: std::time::Duration = std::time::Duration::from_millis(500);

pub(super) fn store_error(error: StoreError) -> acp::Error {
    match error {
        StoreError::NotFound(id) => errors::invalid_params(format!("no saved session {id}")),
        StoreError::NoRecord(_) | StoreError::Deleted(_) => {
            errors::invalid_params(error.to_string())
        }
        StoreError::InUse { .. } => errors::invalid_params(error.to_string()),
        StoreError::NotOpenYet(_)
        | StoreError::TimedOut(_)
        | StoreError::Busy(_)
        | StoreError::Overloaded(_)
        | StoreError::Unreachable(_) => errors::unavailable(error),
        other => errors::internal_error(other.to_string()),
    }
}

/// Reads a stored session's record — what the store has, then what still waits for it — and
/// claims it for this process (off the loop: what open sessions queued lands first, then the
/// claim, atomic, then the spools of processes that ended are adopted, then the read: a turn
/// an ended process answered is in the record, and this one's next entries follow it). Of
/// two processes loading one session, exactly one wins and the other is told who holds it;
/// a store that cannot be written is still read (the session then runs unsaved and says
/// so). A close of this session here whose release still waits behind its writes hands the
/// claim over instead. A session with no record (no system prompt) is refused.
async fn read_claimed(journal: Journal, id: &str) -> Result<Stored, acp::Error> {
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
            return Err(store_error(error));
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

/// The journal known when a request came, or one opening for `config` (which the agent
/// adopts when the request finishes).
pub(super) fn journal_or_open(known: Option<Journal>, config: &Config) -> Journal {
    known.unwrap_or_else(|| {
        let config = config.clone();
        let spool = config.home.join("spool");
        Journal::opening_spooled(Box::new(move || crate::store::open(&config)), spool)
    })
}

/// A stored session's record, as a launch continues it.
pub(super) struct Stored {
    pub(super) meta: SessionMeta,
    pub(super) transcript: Transcript,
    /// How much of the record the store already has.
    pub(super) journal: SessionJournal,
    /// Why it is not saved yet, when it was answered before the store took it (a fork).
    pub(super) unsaved: Option<String>,
}

/// How a stored session is reopened.
struct Reopen {
    id: String,
    cwd: std::path::PathBuf,
    additional_directories: Vec<std::path::PathBuf>,
    mcp_servers: Vec<acp::McpServer>,
    replay: bool,
    system_prompt: Option<acp::SystemPrompt>,
}

/// `session/load` and `session/resume` carry the same fields; only the replay differs.
macro_rules! reopen_from {
    ($request:ty, replay: $replay:expr) => {
        impl From<$request> for Reopen {
            fn from(params: $request) -> Self {
                Self {
                    id: params.session_id.0.to_string(),
                    cwd: params.cwd,
                    additional_directories: params.additional_directories,
                    mcp_servers: params.mcp_servers,
                    replay: $replay,
                    system_prompt: params.system_prompt,
                }
            }
        }
    };
}
reopen_from!(acp::LoadSessionRequest, replay: true);
reopen_from!(acp::ResumeSessionRequest, replay: false);

impl super::launch::StartsSession for Reopen {
    fn place(&self) -> (&std::path::Path, &[std::path::PathBuf], &[acp::McpServer]) {
        (&self.cwd, &self.additional_directories, &self.mcp_servers)
    }
}

impl Agent {
    /// The store's journal, started (and the store opened in the background, again until it
    /// opens) on first use.
    pub(super) fn journal(&mut self, config: &Config) -> Journal {
        let journal = journal_or_open(self.store.clone(), config);
        self.adopt_store(&journal);
        journal
    }

    /// Keeps a journal a request opened off the loop, unless the agent has one already.
    pub(super) fn adopt_store(&mut self, journal: &Journal) {
        if self.store.is_none() {
            self.store = Some(journal.clone());
        }
    }

    /// `session/load`: replays the history, then the session goes on. Answered now for a
    /// session open in this process, else once it is started (off the loop).
    pub(super) async fn load_session(
        &mut self,
        request: RequestId,
        params: acp::LoadSessionRequest,
    ) -> Option<Reply> {
        self.reopen(request, params.into()).await
    }

    /// `session/resume`: the session goes on without a replay.
    pub(super) async fn resume_session(
        &mut self,
        request: RequestId,
        params: acp::ResumeSessionRequest,
    ) -> Option<Reply> {
        self.reopen(request, params.into()).await
    }

    /// A session open here is answered at once; a stored one starts off the loop (its
    /// configuration, prompt, MCP servers, and its record read and claimed) and is answered
    /// when it is running.
    async fn reopen(&mut self, request: RequestId, reopen: Reopen) -> Option<Reply> {
        // Checked first: a prompt that cannot be applied opens nothing.
        let client = match super::client_prompt::parse(reopen.system_prompt.as_ref()) {
            Ok(client) => client,
            Err(error) => return Some(Err(error)),
        };
        if self.sessions.contains_key(&reopen.id) {
            if client.is_some() {
                return Some(Err(errors::invalid_params(format!(
                    "session {} is running in this process: its system prompt is set when                      it starts (close it, then load or resume it with the new one)",
                    reopen.id
                ))));
            }
            return self.reopen_open(request, reopen).await;
        }
        let mut context = self.start_context();
        context.trust = context.trust.during(&request);
        let store = self.store.clone();
        let slow = async move {
            let ready = super::ready_session(
                context,
                &reopen.cwd,
                &reopen.additional_directories,
                &reopen.mcp_servers,
            )
            .await?
            .with_client_prompt(client);
            let journal = journal_or_open(store, &ready.config);
            let read = read_claimed(journal.clone(), &reopen.id).await?;
            // What a load replays, copied here rather than on the loop. A turn the previous
            // process did not finish reads as interrupted, in the replay too.
            let shown = reopen.replay.then(|| {
                let mut shown = read.transcript.clone();
                shown.close_cut_off_turn();
                shown
            });
            Ok((reopen, ready, read, journal, shown))
        };
        self.defer(
            request,
            "session/load",
            slow,
            |agent, (reopen, ready, read, journal, shown)| {
                async move {
                    agent.adopt_store(&journal);
                    let replay = reopen.replay;
                    let launched = if agent.sessions.contains_key(&reopen.id) {
                        // Opened meanwhile by another request: this one joins it (and
                        // replays the record it read).
                        agent.reopen_live(&reopen, Some(read.transcript)).await
                    } else {
                        agent.reopen_stored(reopen, ready, read, shown).await
                    };
                    launched.and_then(|launched| launched_reply(replay, launched))
                }
                .boxed_local()
            },
        );
        None
    }

    /// A load or resume of a session open here: resume is answered at once; load reads the
    /// record off the loop (what is queued lands first) and replays it.
    async fn reopen_open(&mut self, request: RequestId, reopen: Reopen) -> Option<Reply> {
        if !reopen.replay {
            let launched = self.reopen_live(&reopen, None).await;
            return Some(launched.and_then(|launched| launched_reply(false, launched)));
        }
        let Some(journal) = self.store.clone() else {
            return Some(Err(errors::unavailable(
                "the session store is not open yet",
            )));
        };
        let slow = async move {
            journal.flush(FLUSH_BEFORE_READ).await;
            let (_, transcript) = journal.view(&reopen.id).await.map_err(store_error)?;
            Ok((reopen, transcript))
        };
        self.defer(
            request,
            "session/load",
            slow,
            |agent, (reopen, transcript)| {
                async move {
                    let launched = agent.reopen_live(&reopen, Some(transcript)).await;
                    launched.and_then(|launched| launched_reply(true, launched))
                }
                .boxed_local()
            },
        );
        None
    }

    /// Starts a stored session where it left off (read and claimed off the loop), optionally
    /// replaying it first.
    async fn reopen_stored(
        &mut self,
        reopen: Reopen,
        ready: super::Ready,
        read: Stored,
        shown: Option<Transcript>,
    ) -> Result<Launched, acp::Error> {
        let Stored {
            meta,
            mut transcript,
            journal,
            unsaved,
        } = read;
        // A turn the previous process did not finish reads as interrupted (as in `shown`).
        transcript.close_cut_off_turn();
        let replayed = shown.map(|shown| self.replay_of(shown));
        let launched = self.launch_stored(
            &reopen.id,
            reopen.cwd,
            ready,
            Stored {
                meta,
                transcript,
                journal,
                unsaved,
            },
        )?;
        // The replay goes out through the session's writer; the answer follows it.
        if let (Some(updates), Some(session)) = (replayed, self.sessions.get(&reopen.id)) {
            self.answer_after = Some(session.write_soon(updates));
        }
        Ok(launched)
    }

    /// `session/load` or `session/resume` of a session already open in this connection:
    /// resume changes nothing; load replays `record` (read off the loop) in order with what
    /// the session is writing now, never inside it.
    async fn reopen_live(
        &mut self,
        reopen: &Reopen,
        record: Option<Transcript>,
    ) -> Result<Launched, acp::Error> {
        let Some(session) = self.sessions.get(&reopen.id) else {
            return Err(errors::invalid_params(format!(
                "no open session {}",
                reopen.id
            )));
        };
        let launched = session.launched();
        if reopen.replay {
            let Some(transcript) = record else {
                return Err(errors::unavailable("the session store is not open yet"));
            };
            let written = session.write_soon(self.replay_of(transcript));
            self.answer_after = Some(written);
        }
        Ok(launched)
    }

    /// A record to replay to this client, as the writer's work.
    fn replay_of(&self, transcript: Transcript) -> forwarder::EdgePayload {
        forwarder::EdgePayload::Replay(Box::new(replay::Replay {
            transcript,
            compaction: self.client_caps.compaction,
            subagents: self.client_caps.subagents,
        }))
    }

    /// Starts a session from a stored record (its system prompt, model and mode are kept).
    /// (The prepared system prompt is used only if the record has none.)
    pub(super) fn launch_stored(
        &mut self,
        id: &str,
        cwd: std::path::PathBuf,
        ready: super::Ready,
        stored: Stored,
    ) -> Result<Launched, acp::Error> {
        let Stored {
            meta,
            transcript,
            journal,
            unsaved,
        } = stored;
        let mode = talaria_engine::Mode::from_id(&meta.mode);
        let model = (!meta.model.is_empty()).then(|| meta.model.clone());
        self.launch(Launch {
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
            taps: super::cassettes::SessionTaps::default(),
        })
    }

    /// `session/list`, read off the loop (at most the journal's read deadline).
    pub(super) fn list_sessions(
        &mut self,
        request: RequestId,
        params: acp::ListSessionsRequest,
    ) -> Option<Reply> {
        if let Some(cwd) = &params.cwd
            && !cwd.is_absolute()
        {
            return Some(Err(errors::invalid_params("cwd must be an absolute path")));
        }
        let journal = self.store.clone();
        let slow = async move {
            // A connection that has not needed the store yet opens it now, and the listing
            // waits (at most the read deadline) for the first try to open it.
            let (opened, journal) = match journal {
                Some(journal) => (None, journal),
                None => {
                    let config = super::load_config().await.map_err(config_error)?;
                    let spool = config.home.join("spool");
                    let journal = Journal::opening_spooled(
                        Box::new(move || crate::store::open(&config)),
                        spool,
                    );
                    (Some(journal.clone()), journal)
                }
            };
            journal
                .first_open_tried(talaria_engine::ANSWER_DEADLINE)
                .await;
            Ok((opened, list_page(&journal, params).await))
        };
        self.defer(request, "session/list", slow, |agent, (opened, listed)| {
            async move {
                if let Some(journal) = opened
                    && agent.store.is_none()
                {
                    agent.store = Some(journal);
                }
                listed
            }
            .boxed_local()
        });
        None
    }

    /// Stops a session's work and frees it; it stays in the store. Answered off the loop once
    /// what it recorded is committed (or the journal's deadline passed).
    pub(super) fn close_session(
        &mut self,
        request: RequestId,
        params: acp::CloseSessionRequest,
    ) -> Option<Reply> {
        let id = params.session_id.0.to_string();
        let Some(session) = self.sessions.remove(&id) else {
            return Some(Err(session_not_found(&params.session_id)));
        };
        session.handle.cancel();
        let (handle, journal) = (session.handle.clone(), self.store.clone());
        drop(session);
        let slow = async move {
            // One deadline for the whole close: the session's own wait for its last writes
            // and the release's share it.
            let deadline = tokio::time::Instant::now() + talaria_engine::ANSWER_DEADLINE;
            handle.close_and_wait().await;
            // Then it is free for others (in order, after what it wrote): answered once it
            // is, or once the deadline passed (it is released when the store can).
            if let Some(journal) = journal {
                talaria_util::failpoint::step("close::release::before");
                journal.release(&id);
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                journal.committed_within(&id, left).await;
                talaria_util::failpoint::step("close::release::after");
            }
            tracing::info!(session = %id, "session closed");
            Ok(())
        };
        self.defer(request, "session/close", slow, |_, ()| {
            async move { to_value(acp::CloseSessionResponse::new()) }.boxed_local()
        });
        None
    }

    /// `session/delete`: the session stops here at once; its wind-down, what it queued and the
    /// deletion are waited for off the loop.
    pub(super) fn delete_session(
        &mut self,
        request: RequestId,
        params: acp::DeleteSessionRequest,
    ) -> Option<Reply> {
        let id = params.session_id.0.to_string();
        let running = self.sessions.remove(&id).map(|session| {
            session.handle.cancel();
            session.handle.clone()
        });
        let known = self.store.clone();
        let slow = async move {
            let config = super::load_config().await.map_err(config_error)?;
            let journal = match known {
                Some(journal) => journal,
                None => journal_or_open(None, &config),
            };
            if let Some(handle) = running {
                handle.close_and_wait().await;
            }
            journal.flush(FLUSH_BEFORE_READ).await;
            // As this process sees it: what ended processes spooled of it is adopted first,
            // and a session whose creation still waits here is deleted too (the store keeps
            // its tombstone); a delete that cannot be done says why.
            let deleted = journal.delete(&id).await.map_err(store_error)?;
            if !deleted {
                return Err(errors::invalid_params(format!(
                    "no saved session {}",
                    params.session_id
                )));
            }
            // Its checkpoints go with it.
            let home = config.home.clone();
            let _ = tokio::task::spawn_blocking(move || {
                talaria_engine::prune_checkpoints(&home, &id);
            })
            .await;
            Ok(journal)
        };
        self.defer(request, "session/delete", slow, |agent, journal| {
            agent.adopt_store(&journal);
            async move { to_value(acp::DeleteSessionResponse::new()) }.boxed_local()
        });
        None
    }
}

/// The answer to `session/load` (with `replay`) or `session/resume`.
fn launched_reply(replay: bool, launched: Launched) -> Reply {
    if replay {
        to_value(
            acp::LoadSessionResponse::new()
                .modes(launched.modes)
                .config_options(launched.options)
                .meta(launched.meta),
        )
    } else {
        to_value(
            acp::ResumeSessionResponse::new()
                .modes(launched.modes)
                .config_options(launched.options)
                .meta(launched.meta),
        )
    }
}

/// One page of `session/list`, read after what open sessions queued (for a moment at most).
async fn list_page(journal: &Journal, params: acp::ListSessionsRequest) -> Reply {
    // Read-your-writes: titles and turns queued by open sessions are listed.
    journal.flush(FLUSH_BEFORE_READ).await;
    let cwd = params.cwd.map(|c| c.display().to_string());
    let cursor = params.cursor;
    let page = journal
        .call(move |store| store.list(cwd.as_deref(), cursor.as_deref(), LIST_PAGE))
        .await
        .map_err(store_error)?;
    let sessions: Vec<acp::SessionInfo> = page
        .sessions
        .into_iter()
        .map(|meta| {
            acp::SessionInfo::new(meta.id, meta.cwd)
                .additional_directories(
                    meta.additional_directories
                        .into_iter()
                        .map(std::path::PathBuf::from)
                        .collect::<Vec<_>>(),
                )
                .title(meta.title)
                .updated_at(rfc3339(meta.updated_at))
        })
        .collect();
    to_value(acp::ListSessionsResponse::new(sessions).next_cursor(page.next_cursor))
}

fn rfc3339(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.to_rfc3339())
}
