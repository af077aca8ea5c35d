//! `_session/attach` with role "controller" for a session not running in this process: the
//! session moves here, as claims move. The session room asks the process that runs it
//! through the store and claims it once that process let it go (`sessions/take_over.rs`;
//! the running side is `handover.rs`); it then continues here with this client in control. A
//! client that followed it from here first sees the rest of its record, so it misses no entry
//! and sees none twice; another is shown the record as its `historyPolicy` says.

use futures_util::FutureExt;
use talaria_protocol::acp::{self, RequestId};

use super::audience::ATTACH_METHOD;
use super::state::{Agent, Followed, Reply, member_of};
use crate::sessions::{self, Place, Reopened};

/// What the slow part came to: the session claimed and ready, or why not (the client's
/// following, to go on).
enum TakeOver {
    Ready(String, std::path::PathBuf, bool, Box<Reopened>),
    Refused(String, acp::Error, Option<Followed>),
}

/// Takes session `id` over from the process that runs it (or from the store, when none
/// does); answered once it runs here with this client in control.
pub(super) fn take_over(agent: &mut Agent, request: RequestId, id: String, history: bool) {
    let followed = agent
        .following
        .remove(&id)
        .or_else(|| super::audience::left_behind(agent, &id));
    let replay = history && followed.is_none();
    let context = super::trust::start_context(agent, &request);
    let known = agent.room.store().cloned();
    // Who asks, unique to this take-over (client ids are per process).
    let mut asker = member_of(agent).described();
    asker["ask"] = uuid::Uuid::new_v4().to_string().into();
    let asker = asker.to_string();
    // Counted as a client attaching (a delete here is refused) until it runs here.
    let arriving = agent.room.live().mark_client(&id);
    let slow = async move {
        let (journal, meta) = match sessions::claim_from_elsewhere(known, &id, &asker).await {
            Ok(claimed) => claimed,
            Err(error) => return Ok(TakeOver::Refused(id, error.into(), followed)),
        };
        if let Some(followed) = followed {
            followed.finish().await;
        }
        let cwd = std::path::PathBuf::from(&meta.cwd);
        let directories: Vec<std::path::PathBuf> = meta
            .additional_directories
            .iter()
            .map(std::path::PathBuf::from)
            .collect();
        let place = Place {
            cwd: &cwd,
            additional_directories: &directories,
            mcp_servers: &[],
        };
        let reopened =
            sessions::reopen(context, Some(journal.clone()), &id, place, None, replay).await;
        match reopened {
            Ok(reopened) => Ok(TakeOver::Ready(id, cwd, replay, Box::new(reopened))),
            Err(error) => {
                journal.release(&id);
                Ok(TakeOver::Refused(id, error.into(), None))
            }
        }
    };
    let slow = async move { slow.await.map(|outcome| (outcome, arriving)) };
    agent.defer(
        request,
        ATTACH_METHOD,
        slow,
        |agent, (outcome, arriving)| {
            let reply = match outcome {
                TakeOver::Ready(id, cwd, replay, reopened) => {
                    running_here(agent, id, cwd, replay, *reopened)
                }
                TakeOver::Refused(id, error, followed) => {
                    if let Some(followed) = followed {
                        agent.following.insert(id, followed);
                    }
                    Err(error)
                }
            };
            drop(arriving);
            async move { reply }.boxed_local()
        },
    );
}

fn running_here(
    agent: &mut Agent,
    id: String,
    cwd: std::path::PathBuf,
    replay: bool,
    reopened: Reopened,
) -> Reply {
    super::lifecycle::continue_reopened(agent, id.clone(), cwd, replay, reopened)?;
    let Some(session) = agent.sessions.get(&id) else {
        return Err(talaria_protocol::errors::internal_error(
            "the session ended as it started",
        ));
    };
    let roster = session.audience.roster();
    super::attached::reply(agent.member, &id, session, roster)
}
