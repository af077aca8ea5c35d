//! Hands a session's messages to the clients attached to it. The client with control (or
//! the only one) is waited for when its output is full, as one editor on stdio is, until
//! control or the roster changes. An observer that far behind (its queue full, and over
//! `serve` its connection's unread bytes too) is detached instead of holding the session for
//! everyone: it is told so once it reads again, after everything it was sent, and the others
//! are told who is attached now. Nothing more of the session goes to a client not attached;
//! it attaches again to be shown the session so far. What comes while a client is shown the
//! session so far is kept for it (`catching_up.rs`).

use serde_json::json;
use talaria_protocol::acp::{self, RequestId, SessionNotification};
use talaria_protocol::{Peer, SerializedNotification};

#[cfg(test)]
use super::state::CatchUp;
use super::state::{Audience, Delivery, Kept, Member};

/// Hands `message` to `member`: waited for, tried and detached when it has no room, or
/// skipped when it is not attached.
pub(super) async fn deliver(
    audience: &Audience,
    member: &Member,
    message: &SerializedNotification,
) {
    loop {
        let mut roles = audience.watch_roles();
        match audience.delivery(member.id) {
            Delivery::Gone => return,
            Delivery::Keep => match audience.keep_for(member.id, message) {
                Kept::Held | Kept::Dropped => return,
                // The only client, too far behind: it is waited for until it catches up.
                Kept::Wait => {
                    let _ = roles.changed().await;
                }
            },
            Delivery::Try => {
                if member.peer.try_notify_serialized(message).is_ok()
                    || audience.drop_lagging(member.id)
                {
                    return;
                }
                // Control passed to it meanwhile: it is waited for now.
            }
            Delivery::Wait => {
                tokio::select! {
                    () = member.peer.notify_serialized(message) => return,
                    // Not sent (a send given up is never half-sent): decided again.
                    _ = roles.changed() => {}
                }
            }
        }
    }
}

/// Answers a prompt on `peer` as [`deliver`] hands an update: at once if there is room;
/// else waited for while its client is (until control or the roster changes), or, once it
/// is not, on a task of its own (the client detached if still attached).
pub(super) async fn answer<R: serde::Serialize>(
    audience: &Audience,
    (asker, peer): (super::state::MemberId, Peer),
    request: RequestId,
    result: Result<R, acp::Error>,
) {
    let Err(unsent) = peer.try_respond(&request, result) else {
        return;
    };
    loop {
        let mut roles = audience.watch_roles();
        match audience.delivery(asker) {
            Delivery::Wait => tokio::select! {
                () = peer.send_answer(&unsent) => return,
                _ = roles.changed() => continue,
            },
            Delivery::Try => {
                if peer.try_send_answer(&unsent).is_ok() {
                    return;
                }
                if !audience.drop_lagging(asker) {
                    continue;
                }
            }
            Delivery::Gone | Delivery::Keep => {}
        }
        break;
    }
    // Owed whatever happens: it follows what the client was sent once it has room.
    tokio::spawn(async move { peer.send_answer(&unsent).await });
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
/// How many there were; the caller tells the others the roster.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acp::state::{ClientCaps, Leaving, NotAttached};
    use serde_json::Value;
    use std::time::Duration;
    use talaria_protocol::{Connection, PeerOptions, connect};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, duplex};

    /// A client whose output holds `capacity` messages; nothing leaves until it speaks.
    struct Client {
        member: Member,
        input: DuplexStream,
        output: tokio::io::Lines<BufReader<DuplexStream>>,
        _connection: Connection,
    }

    fn client(id: u64, capacity: usize) -> Client {
        let (input, agent_in) = duplex(1 << 20);
        let (agent_out, output) = duplex(1 << 20);
        let options = PeerOptions {
            outgoing_capacity: capacity,
            ..PeerOptions::default()
        };
        let connection = connect(agent_in, agent_out, options);
        let member = Member {
            id,
            name: None,
            peer: connection.peer.clone(),
            caps: ClientCaps::default(),
            followings_ended: std::sync::Arc::default(),
        };
        Client {
            member,
            input,
            output: BufReader::new(output).lines(),
            _connection: connection,
        }
    }

    fn note(n: u32) -> SerializedNotification {
        SerializedNotification::new("note", &json!({"n": n})).expect("serializes")
    }

    impl Client {
        /// Speaks (so its output flows) and reads what it was sent within 1 s.
        async fn read(&mut self) -> Vec<serde_json::Value> {
            let hello = b"{\"jsonrpc\":\"2.0\",\"method\":\"hello\"}\n";
            self.input.write_all(hello).await.expect("write");
            let mut got = Vec::new();
            let wait = Duration::from_secs(1);
            while let Ok(Ok(Some(line))) = tokio::time::timeout(wait, self.output.next_line()).await
            {
                got.push(
                    serde_json::from_str::<serde_json::Value>(&line).expect("json")["params"]["n"]
                        .clone(),
                );
            }
            got
        }
    }

    #[tokio::test]
    async fn an_observer_with_no_room_is_detached_and_sent_nothing_after_the_gap() {
        let controller = client(1, 16);
        let mut observer = client(2, 2);
        let audience = Audience::with_controller(controller.member.clone());
        audience.join(observer.member.clone());
        for n in 1..=3 {
            deliver(&audience, &observer.member, &note(n)).await;
        }
        assert_eq!(audience.delivery(2), Delivery::Gone);
        assert_eq!(audience.take_lagging().len(), 1);
        // A loop holding the member from before goes on: nothing more reaches it, even
        // once it reads again.
        let held = observer.member.clone();
        let reading = observer.read();
        deliver(&audience, &held, &note(4)).await;
        assert_eq!(reading.await, vec![json!(1), json!(2)]);
    }

    /// A controller whose output is full (its queue, and the one message its writer holds
    /// until the client speaks) and another client; both kept alive with the audience.
    async fn a_stuck_controller() -> (std::sync::Arc<Audience>, Client, Client) {
        let stuck = client(1, 1);
        let other = client(2, 16);
        let audience = std::sync::Arc::new(Audience::with_controller(stuck.member.clone()));
        audience.join(other.member.clone());
        deliver(&audience, &stuck.member, &note(1)).await;
        deliver(&audience, &stuck.member, &note(2)).await;
        (audience, stuck, other)
    }

    /// `waiting` is still waiting a while later.
    async fn still_waits(waiting: &tokio::task::JoinHandle<()>) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the controller is waited for");
    }

    /// `waiting` ends soon, the stuck client detached.
    async fn ends_detaching(waiting: tokio::task::JoinHandle<()>, audience: &Audience) {
        tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("the wait ended")
            .expect("joined");
        assert_eq!(
            audience.delivery(1),
            Delivery::Gone,
            "the stuck client was detached"
        );
    }

    /// A write of note 3 to the stuck controller, on a task of its own.
    fn writing(audience: &std::sync::Arc<Audience>, stuck: &Client) -> tokio::task::JoinHandle<()> {
        let (audience, member) = (audience.clone(), stuck.member.clone());
        tokio::spawn(async move { deliver(&audience, &member, &note(3)).await })
    }

    #[tokio::test]
    async fn a_wait_for_the_controller_ends_when_another_client_takes_control() {
        let (audience, stuck, _other) = a_stuck_controller().await;
        let waiting = writing(&audience, &stuck);
        still_waits(&waiting).await;
        assert_eq!(audience.take_control(2), Ok(Some(1)));
        ends_detaching(waiting, &audience).await;
    }

    #[tokio::test]
    async fn control_never_goes_to_a_client_that_was_detached() {
        let (a, b) = (client(1, 16), client(2, 16));
        let audience = Audience::with_controller(a.member.clone());
        audience.join(b.member.clone());
        assert!(
            !audience.drop_lagging(1),
            "the controller is waited for, never dropped"
        );
        assert!(audience.drop_lagging(2));
        assert_eq!(audience.take_control(2), Err(NotAttached));
        assert_eq!(audience.controller(), Some(1));
    }

    #[tokio::test]
    async fn the_last_client_never_leaves_a_session_with_nobody() {
        let (a, b) = (client(1, 16), client(2, 16));
        let audience = Audience::with_controller(a.member.clone());
        audience.join(b.member.clone());
        assert!(audience.drop_lagging(2));
        assert_eq!(audience.leave_unless_last(1), Leaving::Last);
        assert_eq!(audience.members().len(), 1);
        // Not the last: it leaves, control passing on.
        audience.join(b.member.clone());
        assert_eq!(audience.leave_unless_last(1), Leaving::Left(Some(2)));
        assert!(!audience.drop_lagging(2), "the only client is waited for");
    }

    #[tokio::test]
    async fn a_wait_to_answer_the_controller_ends_when_another_client_takes_control() {
        let (audience, stuck, _other) = a_stuck_controller().await;
        let waiting = {
            let (audience, peer) = (audience.clone(), stuck.member.peer.clone());
            tokio::spawn(async move {
                let done = Ok(json!({"stopReason": "end_turn"}));
                answer::<Value>(&audience, (1, peer), RequestId::Number(7), done).await
            })
        };
        still_waits(&waiting).await;
        assert_eq!(audience.take_control(2), Ok(Some(1)));
        ends_detaching(waiting, &audience).await;
    }

    #[tokio::test]
    async fn what_comes_while_a_client_catches_up_is_kept_in_order_then_it_is_attached() {
        let (a, b) = (client(1, 16), client(2, 16));
        let audience = Audience::with_controller(a.member.clone());
        assert!(audience.join_catching_up(b.member.clone()));
        assert!(
            !audience.join_catching_up(b.member.clone()),
            "one attach at a time"
        );
        for n in 1..=2 {
            deliver(&audience, &b.member, &note(n)).await;
        }
        let CatchUp::More(kept) = audience.next_kept(2) else {
            panic!("kept");
        };
        assert_eq!(kept.len(), 2);
        deliver(&audience, &b.member, &note(3)).await;
        assert!(matches!(audience.next_kept(2), CatchUp::More(more) if more.len() == 1));
        assert!(matches!(audience.next_kept(2), CatchUp::CaughtUp(_)));
        assert_eq!(audience.delivery(2), Delivery::Try);
    }

    #[tokio::test]
    async fn a_client_catching_up_past_the_bound_is_detached_unless_it_is_the_only_one() {
        let (a, b) = (client(1, 16), client(2, 16));
        let big = SerializedNotification::new("note", &json!({"text": "x".repeat(1 << 20)}))
            .expect("serializes");
        let audience = Audience::with_controller(a.member.clone());
        assert!(audience.join_catching_up(b.member.clone()));
        // It attached taking control: dropped, control passes back.
        assert_eq!(audience.take_control(2), Ok(Some(1)));
        let mut kept = 0;
        while audience.keep_for(2, &big) == Kept::Held {
            kept += 1;
        }
        assert!(kept >= 15, "{kept} MiB kept");
        assert_eq!(audience.delivery(2), Delivery::Gone);
        assert_eq!(audience.controller(), Some(1));
        assert!(matches!(audience.next_kept(2), CatchUp::Gone));
        assert_eq!(audience.take_lagging().len(), 1);
        // The only client catching up is waited for instead.
        let lone = Audience::default();
        assert!(lone.join_catching_up(a.member.clone()));
        while lone.keep_for(1, &big) == Kept::Held {}
        assert_eq!(lone.keep_for(1, &big), Kept::Wait);
    }

    #[tokio::test]
    async fn a_wait_for_the_controller_ends_when_it_gives_control_back() {
        let (audience, stuck, _other) = a_stuck_controller().await;
        let waiting = writing(&audience, &stuck);
        still_waits(&waiting).await;
        audience.release_control(1);
        assert_eq!(audience.controller(), None);
        ends_detaching(waiting, &audience).await;
    }
}
