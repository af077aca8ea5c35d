//! Many clients on one live session (the shape of ACP PR #533, under `_session/`):
//! `_session/attach {sessionId, role: "observer" | "controller", historyPolicy?: "full" |
//! "pending_only" | "none"}` from any connection of the process, `_session/detach
//! {sessionId}`. A client attaching is shown the session so far
//! (the record up to the running turn's prompt, then what that turn has shown, then the open
//! questions) and then every update live, in the order every other client gets it: the
//! session's forwarder does all of it between two of its messages. The controller prompts,
//! steers, cancels and sets modes and options; an observer asking that is refused
//! (`-32003`, `data.talaria.mustTakeControl`); `role: "controller"` takes control over. Who is
//! attached and who has control is told to every client as a `session_info_update` whose
//! `_meta["talaria/attachment"]` holds the roster. A client whose connection ends leaves (the
//! connection outlives a dropped socket by the reconnect window, so control is kept that
//! long); control passes to the longest-attached client left, or the session waits.

use futures_util::FutureExt;
use serde_json::{Value, json};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;

use super::audience::{
    ATTACH_METHOD, DETACH_METHOD, leave, moved_away, no_longer_attached, roster_update,
};
use super::state::{
    Agent, Attaching, EdgePayload, EdgeUpdates, LiveSession, NotAttached, Reply, member_of,
    session_not_found, to_value,
};

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AttachParams {
    session_id: String,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    history_policy: Option<String>,
    #[serde(default, rename = "_meta")]
    _meta: Option<Value>,
}

/// The request, whether it asks for control, and whether it wants the history.
fn parse(params: &Value) -> Result<(AttachParams, bool, bool), acp::Error> {
    let params: AttachParams = serde_json::from_value(params.clone())
        .map_err(|e| errors::invalid_params(format!("{ATTACH_METHOD}: {e}")))?;
    let controller = match params.role.as_deref() {
        None | Some("observer") => false,
        Some("controller") => true,
        Some(other) => {
            return Err(errors::invalid_params(format!(
                "{ATTACH_METHOD}: unknown role {other:?} (\"observer\" or \"controller\")"
            )));
        }
    };
    let history = match params.history_policy.as_deref() {
        None | Some("full") => true,
        Some("pending_only" | "none") => false,
        Some(other) => {
            return Err(errors::invalid_params(format!(
                "{ATTACH_METHOD}: unknown historyPolicy {other:?} (\"full\", \"pending_only\" \
                 or \"none\")"
            )));
        }
    };
    Ok((params, controller, history))
}

/// `_session/attach`: joins a session running in this process (or changes this client's
/// role in one it holds); answered after the session so far, with the session's modes and
/// options and the roster.
pub(super) fn attach(agent: &mut Agent, request: RequestId, params: &Value) -> Option<Reply> {
    let (params, controller, history) = match parse(params) {
        Ok(parsed) => parsed,
        Err(error) => return Some(Err(error)),
    };
    let id = params.session_id;
    let moved = agent.sessions.get(&id).is_some_and(moved_away);
    if let Some(session) = agent.sessions.get(&id)
        && session.audience.holds(agent.member)
        && !moved
    {
        if controller && session.audience.is_moving() {
            return Some(Err(errors::invalid_params(format!(
                "{ATTACH_METHOD}: session {id} is being handed to a client of another process \
                 (its running turn ends first): take it back once it has moved"
            ))));
        }
        return Some(change_role(agent, &id, controller));
    }
    let Some(shared) = agent.room.live().find::<LiveSession>(&id) else {
        if controller {
            super::take_over::take_over(agent, request, id, history);
            return None;
        }
        if agent.following.contains_key(&id) || moved {
            return Some(to_value(json!({"sessionId": id, "role": "observer"})));
        }
        return super::follow::follow(agent, request, id, history);
    };
    let mut session = (*shared).clone();
    session.booleans = agent.client_caps.booleans;
    session.opened_here = false;
    // Followed from here while it ran in another process (or after it moved away and back):
    // shown what is left of the record that following showed, then from there on.
    let followed = agent
        .following
        .remove(&id)
        .or_else(|| super::audience::left_behind(agent, &id));
    let (told, outcome) = tokio::sync::oneshot::channel();
    let member = member_of(agent);
    let updates = session.updates.clone();
    // Counted as attached (a delete is refused) from now until it has joined or failed.
    let arriving = agent.room.live().mark_client(&id);
    let slow = async move {
        let _arriving = arriving;
        let after = match followed {
            // A turn's steps are stored as it goes: it is followed to its end, so that no
            // step is shown both from the store and from what the turn has shown.
            Some(followed) => {
                let (idle, ended) = tokio::sync::oneshot::channel();
                let _ = updates.send(EdgeUpdates {
                    updates: EdgePayload::WhenIdle(idle),
                    written: None,
                    outcome: None,
                });
                let _ = ended.await;
                followed.finish().await
            }
            None => None,
        };
        let _ = updates.send(EdgeUpdates {
            updates: EdgePayload::Attach(Box::new(Attaching {
                member,
                controller,
                history,
                after,
            })),
            written: None,
            outcome: Some(told),
        });
        let roster = outcome
            .await
            .map_err(|_| errors::internal_error("the session ended while attaching"))??;
        Ok((id, session, roster))
    };
    agent.defer(
        request,
        ATTACH_METHOD,
        slow,
        |agent, (id, session, roster)| {
            let reply = super::attached::reply(agent.member, &id, &session, roster);
            agent.sessions.insert(id, session);
            async move { reply }.boxed_local()
        },
    );
    None
}

/// A client already attached takes control, or gives it up (the session waits for a client
/// to take it).
fn change_role(agent: &mut Agent, id: &str, controller: bool) -> Reply {
    let Some(session) = agent.sessions.get(id) else {
        return Err(session_not_found(&acp::SessionId::new(id)));
    };
    let before = if controller {
        match session.audience.take_control(agent.member) {
            Ok(before) => before,
            Err(NotAttached) => return Err(no_longer_attached(id)),
        }
    } else {
        session.audience.release_control(agent.member);
        None
    };
    let mut roster = session.audience.roster();
    if let Some(before) = before {
        roster["previousController"] = format!("client-{before}").into();
    }
    session.write_later(roster_update(roster.clone()));
    super::attached::reply(agent.member, id, session, roster)
}

/// `_session/detach`: this client leaves the session (which goes on while any client is
/// attached; the last one's detach closes it as `session/close` would).
pub(super) fn detach(agent: &mut Agent, request: RequestId, params: &Value) -> Option<Reply> {
    let Some(id) = params["sessionId"].as_str().map(str::to_string) else {
        return Some(Err(errors::invalid_params(format!(
            "{DETACH_METHOD}: sessionId is required"
        ))));
    };
    if agent.following.remove(&id).is_some() {
        return Some(to_value(json!({})));
    }
    if !agent.sessions.contains_key(&id) {
        return Some(Err(session_not_found(&acp::SessionId::new(id))));
    }
    if leave(agent, &id) {
        return Some(to_value(json!({})));
    }
    let close = acp::CloseSessionRequest::new(acp::SessionId::new(id));
    super::lifecycle::close_session(agent, request, close)
}
