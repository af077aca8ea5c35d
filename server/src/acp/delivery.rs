//! Hands a session's messages to the clients attached to it. The client with control (or
//! the only one) is waited for when its output is full, as one editor on stdio is. An
//! observer that far behind (its queue full, and over `serve` its connection's unread bytes
//! too) is detached instead of holding the session for everyone: it is told so once it reads
//! again, after everything it was sent, and the others are told who is attached now. It
//! attaches again to be shown the session so far; nothing it missed is passed over silently.

use serde_json::json;
use talaria_protocol::SerializedNotification;
use talaria_protocol::acp::{self, SessionNotification};

use super::state::{Audience, Member};

/// Hands `message` to `member`: waited for, or detached when it has no room.
pub(super) async fn deliver(
    audience: &Audience,
    member: &Member,
    message: &SerializedNotification,
) {
    if audience.waits_for(member.id) {
        member.peer.notify_serialized(message).await;
        return;
    }
    if member.peer.try_notify_serialized(message).is_err() && !audience.drop_lagging(member.id) {
        // Control passed to it meanwhile: it is waited for now.
        member.peer.notify_serialized(message).await;
    }
}

/// `update` of session `session_id` as one message for any client; `None` (logged) when it
/// does not serialize.
pub(super) fn serialized(
    session_id: &acp::SessionId,
    update: acp::SessionUpdate,
) -> Option<SerializedNotification> {
    let notification = SessionNotification::new(session_id.clone(), update);
    let message = SerializedNotification::new("session/update", &notification);
    if message.is_none() {
        tracing::error!(session = %session_id, "an update does not serialize; not sent");
    }
    message
}

/// Tells each client detached for falling behind, on a task of its own so that the session
/// goes on meanwhile: the roster without it, and why (`_meta["talaria/attachment"].detached`).
/// The clients it was taken from; the caller tells the others the roster.
pub(super) fn tell_the_lagging(audience: &Audience, session_id: &acp::SessionId) -> usize {
    let lagging = audience.take_lagging();
    for member in &lagging {
        tracing::warn!(
            session = %session_id,
            client = member.id,
            "an observer fell behind (its output is full): detached"
        );
        let mut roster = audience.roster();
        roster["detached"] = json!({
            "clientId": format!("client-{}", member.id),
            "reason": "this client fell behind: its output was full while the session went \
                       on, so it was detached rather than holding the session for every \
                       client; what came after was not sent to it",
            "attachAgain": super::audience::ATTACH_METHOD,
        });
        let update = super::audience::roster_update(roster);
        let Some(notice) = serialized(session_id, update) else {
            continue;
        };
        let peer = member.peer.clone();
        tokio::spawn(async move { peer.notify_serialized(&notice).await });
    }
    lagging.len()
}
