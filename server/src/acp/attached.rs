//! The answer to a client that attached to a session (or took it over from another
//! process): its role, its client id, the session's modes and options, and the roster.

use serde_json::{Value, json};

use super::audience::ROSTER_KEY;
use super::start::launched;
use super::state::{LiveSession, MemberId, Reply, to_value};

/// The answer for client `member` attached to session `id`, with `roster`.
pub(super) fn reply(member: MemberId, id: &str, session: &LiveSession, roster: Value) -> Reply {
    let role = if session.audience.is_controller(member) {
        "controller"
    } else {
        "observer"
    };
    let now = launched(session);
    let mut meta = now.meta;
    meta.insert(ROSTER_KEY.into(), roster);
    to_value(json!({
        "sessionId": id,
        "role": role,
        "clientId": format!("client-{member}"),
        "modes": now.modes,
        "configOptions": now.options,
        "_meta": meta,
    }))
}
