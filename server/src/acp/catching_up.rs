//! A client attaching is shown the session so far off the session's writer: the writer
//! reads it, joins the client as catching up, and goes on; a task of the client's own
//! makes it into messages and sends them at the client's pace, then what was kept for it meanwhile
//! (`Audience::keep_for`, up to `CATCH_UP_BYTES`, past which it is detached as a client
//! behind is), until nothing is left, and only then answers the attach. So a slow or
//! stalled client attaching never holds the session for the others.

use std::sync::Arc;

use serde_json::Value;
use talaria_protocol::errors;

use super::audience::SoFar;
use super::state::{Audience, CatchUp, Member, Reply};

/// Sends `member` the session so far and what comes meanwhile, then tells the attach
/// (`told`) the roster, or why it failed.
pub(super) fn show(
    audience: Arc<Audience>,
    member: Member,
    so_far: SoFar,
    (roster, told): (Value, Option<tokio::sync::oneshot::Sender<Reply>>),
) {
    tokio::spawn(async move {
        for message in so_far.messages() {
            member.peer.notify_serialized(&message).await;
        }
        drop(so_far);
        let outcome = loop {
            match audience.next_kept(member.id) {
                CatchUp::More(kept) => {
                    for message in &kept {
                        member.peer.notify_serialized(message).await;
                    }
                }
                CatchUp::CaughtUp(questions) => {
                    for ask in questions {
                        ask(&member);
                    }
                    break Ok(roster);
                }
                CatchUp::Gone => {
                    break Err(errors::unavailable(
                        "this client fell behind while it was shown the session so far, and \
                         was detached: read what was sent, then attach again",
                    ));
                }
            }
        };
        if let Some(told) = told {
            let _ = told.send(outcome);
        }
    });
}
