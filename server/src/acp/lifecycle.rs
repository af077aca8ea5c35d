//! The durable session lifecycle as the client sees it: `session/load` (replays the history
//! first), `session/resume`, `session/list`, `session/close`, `session/delete` and
//! `session/fork`. The session room does the work (`sessions/stored.rs`,
//! `sessions/fork.rs`); these handlers translate, defer the slow parts off the loop, and
//! answer.

use futures_util::FutureExt;
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;
use talaria_record::Transcript;

use super::client_prompt;
use super::start::{self, Launched, StartsSession, launched};
use super::state::{Agent, EdgePayload, LiveSession, Replay, Reply, session_not_found, to_value};
use crate::sessions::{self, Closing, Reopened};

/// How a stored session is reopened.
struct Reopen {
    id: String,
    cwd: std::path::PathBuf,
    replay: bool,
}

/// `session/load`: replays the history, then the session goes on. Answered now for a
/// session open in this process, else once it is started (off the loop).
pub(super) fn load_session(
    agent: &mut Agent,
    request: RequestId,
    params: acp::LoadSessionRequest,
) -> Option<Reply> {
    let id = params.session_id.0.to_string();
    reopen(agent, request, params, id, true)
}

/// `session/resume`: the session goes on without a replay.
pub(super) fn resume_session(
    agent: &mut Agent,
    request: RequestId,
    params: acp::ResumeSessionRequest,
) -> Option<Reply> {
    let id = params.session_id.0.to_string();
    reopen(agent, request, params, id, false)
}

/// A session open here is answered at once; a stored one starts off the loop (its
/// configuration, prompt, MCP servers, and its record read and claimed) and is answered
/// when it is running.
fn reopen<P: StartsSession + HasSystemPrompt>(
    agent: &mut Agent,
    request: RequestId,
    params: P,
    id: String,
    replay: bool,
) -> Option<Reply> {
    // Checked first: a prompt that cannot be applied opens nothing.
    let client = match client_prompt::parse(params.system_prompt()) {
        Ok(client) => client,
        Err(error) => return Some(Err(error)),
    };
    let reopen = Reopen {
        id,
        cwd: params.place().cwd.to_path_buf(),
        replay,
    };
    // Handed to another process: what this client held of it goes; it is opened as any
    // stored session (refused while that process holds it).
    drop(super::audience::left_behind(agent, &reopen.id));
    // Detached from it for falling behind: what this client held of it goes (it attaches
    // again, as told below).
    if (agent.sessions.get(&reopen.id)).is_some_and(|s| !s.audience.holds(agent.member)) {
        agent.sessions.remove(&reopen.id);
    }
    if !agent.sessions.contains_key(&reopen.id)
        && agent.room.live().find::<LiveSession>(&reopen.id).is_some()
    {
        return Some(Err(errors::invalid_params(format!(
            "session {} is in use on another connection of this server: attach to it with \
             _session/attach (role \"controller\" takes it over)",
            reopen.id
        ))));
    }
    if agent.sessions.contains_key(&reopen.id) {
        if client.is_some() {
            return Some(Err(errors::invalid_params(format!(
                "session {} is running in this process: its system prompt is set when \
                 it starts (close it, then load or resume it with the new one)",
                reopen.id
            ))));
        }
        return reopen_open(agent, request, reopen);
    }
    let context = super::trust::start_context(agent, &request);
    let store = agent.room.store().cloned();
    let slow = async move {
        let reopened =
            sessions::reopen(context, store, &reopen.id, params.place(), client, replay).await?;
        Ok((reopen, reopened))
    };
    agent.defer(
        request,
        "session/load",
        slow,
        |agent, (reopen, reopened)| {
            async move {
                agent.room.adopt_store(&reopened.journal);
                let replay = reopen.replay;
                let launched = if agent.sessions.contains_key(&reopen.id) {
                    // Opened meanwhile by another request: this one joins it (and
                    // replays the record it read).
                    reopen_live(agent, &reopen, Some(reopened.read.transcript))
                } else {
                    reopen_stored(agent, reopen, reopened)
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
fn reopen_open(agent: &mut Agent, request: RequestId, reopen: Reopen) -> Option<Reply> {
    if !reopen.replay {
        let launched = reopen_live(agent, &reopen, None);
        return Some(launched.and_then(|launched| launched_reply(false, launched)));
    }
    let Some(journal) = agent.room.store().cloned() else {
        return Some(Err(errors::unavailable(
            "the session store is not open yet",
        )));
    };
    let slow = async move {
        let transcript = sessions::record_of_open(journal, &reopen.id).await?;
        Ok((reopen, transcript))
    };
    agent.defer(
        request,
        "session/load",
        slow,
        |agent, (reopen, transcript)| {
            async move {
                let launched = reopen_live(agent, &reopen, Some(transcript));
                launched.and_then(|launched| launched_reply(true, launched))
            }
            .boxed_local()
        },
    );
    None
}

/// Starts stored session `id`, read and claimed off the loop (a take-over), in `cwd`,
/// replaying it first when `replay`.
pub(super) fn continue_reopened(
    agent: &mut Agent,
    id: String,
    cwd: std::path::PathBuf,
    replay: bool,
    reopened: Reopened,
) -> Result<Launched, acp::Error> {
    agent.room.adopt_store(&reopened.journal);
    reopen_stored(agent, Reopen { id, cwd, replay }, reopened)
}

/// Starts a stored session where it left off (read and claimed off the loop), optionally
/// replaying it first.
fn reopen_stored(
    agent: &mut Agent,
    reopen: Reopen,
    mut reopened: Reopened,
) -> Result<Launched, acp::Error> {
    let replayed = reopened.shown.take().map(|shown| replay_of(agent, shown));
    let abilities = agent.client_caps.abilities();
    let assembled = agent
        .room
        .continue_stored(&reopen.id, reopen.cwd, reopened, abilities)?;
    let launched = start::register(agent, &reopen.id, assembled);
    // The replay goes out through the session's writer; the answer follows it.
    if let (Some(updates), Some(session)) = (replayed, agent.sessions.get(&reopen.id)) {
        agent.answer_after = Some(session.write_soon(updates));
    }
    Ok(launched)
}

/// `session/load` or `session/resume` of a session already open in this connection:
/// resume changes nothing; load replays `record` (read off the loop) in order with what
/// the session is writing now, never inside it.
fn reopen_live(
    agent: &mut Agent,
    reopen: &Reopen,
    record: Option<Transcript>,
) -> Result<Launched, acp::Error> {
    let Some(session) = agent.sessions.get(&reopen.id) else {
        return Err(errors::invalid_params(format!(
            "no open session {}",
            reopen.id
        )));
    };
    let launched = launched(session);
    if reopen.replay {
        let Some(transcript) = record else {
            return Err(errors::unavailable("the session store is not open yet"));
        };
        let written = session.write_soon(replay_of(agent, transcript));
        agent.answer_after = Some(written);
    }
    Ok(launched)
}

/// A record to replay to this client, as the writer's work.
fn replay_of(agent: &Agent, transcript: Transcript) -> EdgePayload {
    EdgePayload::Replay(Box::new(Replay {
        transcript,
        compaction: agent.client_caps.compaction,
        subagents: agent.client_caps.subagents,
        to: Some(agent.member),
    }))
}

/// `session/list`, read off the loop (at most the journal's read deadline).
pub(super) fn list_sessions(
    agent: &mut Agent,
    request: RequestId,
    params: acp::ListSessionsRequest,
) -> Option<Reply> {
    if let Some(cwd) = &params.cwd
        && !cwd.is_absolute()
    {
        return Some(Err(errors::invalid_params("cwd must be an absolute path")));
    }
    let journal = agent.room.store().cloned();
    let slow = async move {
        let cwd = params.cwd.map(|c| c.display().to_string());
        let (opened, page) = sessions::list(journal, cwd, params.cursor).await?;
        Ok((opened, page.map_err(acp::Error::from).and_then(list_reply)))
    };
    agent.defer(request, "session/list", slow, |agent, (opened, listed)| {
        async move {
            if let Some(journal) = opened {
                agent.room.adopt_store(&journal);
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
    agent: &mut Agent,
    request: RequestId,
    params: acp::CloseSessionRequest,
) -> Option<Reply> {
    let id = params.session_id.0.to_string();
    // Others attached to it: it goes on for them, without this client.
    if super::audience::leave(agent, &id) {
        return Some(to_value(acp::CloseSessionResponse::new()));
    }
    let Some(session) = agent.sessions.remove(&id) else {
        return Some(Err(session_not_found(&params.session_id)));
    };
    agent.room.live().withdraw(&id);
    session.handle.cancel();
    let closing = Closing {
        handle: session.handle.clone(),
        journal: session
            .journal
            .clone()
            .or_else(|| agent.room.store().cloned()),
        id,
    };
    drop(session);
    let slow = async move {
        closing.run().await;
        Ok(())
    };
    agent.defer(request, "session/close", slow, |_, ()| {
        async move { to_value(acp::CloseSessionResponse::new()) }.boxed_local()
    });
    None
}

/// `session/delete`: refused while other clients are attached to the session; else it stops
/// here at once, and its wind-down, what it queued and the deletion are waited for off the
/// loop.
pub(super) fn delete_session(
    agent: &mut Agent,
    request: RequestId,
    params: acp::DeleteSessionRequest,
) -> Option<Reply> {
    let id = params.session_id.0.to_string();
    if let Err(refused) = super::audience::refuse_delete_while_shared(agent, &id) {
        return Some(Err(refused));
    }
    agent.room.live().withdraw(&id);
    let removed = agent.sessions.remove(&id);
    let known = removed
        .as_ref()
        .and_then(|session| session.journal.clone())
        .or_else(|| agent.room.store().cloned());
    let running = removed.map(|session| {
        session.handle.cancel();
        session.handle.clone()
    });
    let slow = async move { Ok(sessions::delete(known, running, id).await?) };
    agent.defer(request, "session/delete", slow, |agent, journal| {
        agent.room.adopt_store(&journal);
        async move { to_value(acp::DeleteSessionResponse::new()) }.boxed_local()
    });
    None
}

/// `session/fork`: the new session's start and the copy off the loop, then the launch.
pub(super) fn start_fork(agent: &mut Agent, request: RequestId, params: acp::ForkSessionRequest) {
    let context = super::trust::start_context(agent, &request);
    let known = agent.room.store().cloned();
    let slow = async move {
        // Checked first: a prompt that cannot be applied copies nothing.
        let client = client_prompt::parse(params.system_prompt.as_ref())?;
        let parent = params.session_id.0.to_string();
        let (ready, copied) =
            sessions::prepare_fork(context, known, parent, params.place(), client).await?;
        Ok((params, ready, copied))
    };
    agent.defer(
        request,
        "session/fork",
        slow,
        |agent, (params, ready, copied)| {
            async move {
                let abilities = agent.client_caps.abilities();
                let id = copied.id.clone();
                let assembled = agent
                    .room
                    .launch_fork(params.cwd, ready, copied, abilities)?;
                let launched = start::register(agent, &id, assembled);
                to_value(
                    acp::ForkSessionResponse::new(id)
                        .modes(launched.modes)
                        .config_options(launched.options)
                        .meta(launched.meta),
                )
            }
            .boxed_local()
        },
    );
}

/// `session/load` and `session/resume` carry the client's system prompt alike.
trait HasSystemPrompt {
    fn system_prompt(&self) -> Option<&acp::SystemPrompt>;
}

impl HasSystemPrompt for acp::LoadSessionRequest {
    fn system_prompt(&self) -> Option<&acp::SystemPrompt> {
        self.system_prompt.as_ref()
    }
}

impl HasSystemPrompt for acp::ResumeSessionRequest {
    fn system_prompt(&self) -> Option<&acp::SystemPrompt> {
        self.system_prompt.as_ref()
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

/// One page of `session/list` as ACP's answer.
fn list_reply(page: sessions::ListPage) -> Reply {
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
