//! The connection's streams: routing, exact resume, the retention bound and room.

use super::*;
use serde_json::json;

fn note(session: &str, n: usize) -> String {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "n": n}})
        .to_string()
}

fn taken(held: &Held) -> Vec<Value> {
    let mut all = Vec::new();
    held.take_more(usize::MAX, &mut all);
    all.iter()
        .map(|q| serde_json::from_str(&q.text).expect("json"))
        .collect()
}

fn numbers(messages: &[Value]) -> Vec<u64> {
    messages
        .iter()
        .filter_map(|m| m["params"]["n"].as_u64())
        .collect()
}

fn last_cursor(messages: &[Value]) -> String {
    cursor::of(messages.last().expect("one"))
        .expect("stamped")
        .to_string()
}

#[test]
fn a_sessions_messages_go_to_the_connections_stream_until_its_own_is_opened() {
    let outbound = Arc::new(Outbound::new(true));
    let connection = outbound.attach(Stream::Connection, None).expect("held");
    outbound.push(note("s1", 1));
    outbound.route_answer(&json!(7), Stream::Session("s1".into()));
    outbound.push(r#"{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}"#.into());
    let got = taken(&connection);
    assert_eq!(numbers(&got), [1]);
    assert_eq!(got[1]["id"], 7, "the answer too: no session stream is open");
    let session = outbound
        .attach(Stream::Session("s1".into()), None)
        .expect("held");
    outbound.push(note("s1", 2));
    outbound.route_answer(&json!(8), Stream::Session("s1".into()));
    outbound.push(r#"{"jsonrpc":"2.0","id":8,"result":{}}"#.into());
    outbound.push(r#"{"jsonrpc":"2.0","id":9,"result":{}}"#.into());
    let on_session = taken(&session);
    assert_eq!(numbers(&on_session), [2]);
    assert_eq!(on_session[1]["id"], 8);
    assert_eq!(taken(&connection)[0]["id"], 9);
    // Numbered per stream, from 1.
    assert!(cursor::of(&on_session[0]).expect("cursor").ends_with(".1"));
    // Once opened, a session's messages wait on its stream even while no one holds it.
    drop(session);
    outbound.push(note("s1", 3));
    assert!(taken(&connection).is_empty());
    let back = outbound
        .attach(Stream::Session("s1".into()), None)
        .expect("again");
    assert_eq!(numbers(&taken(&back)), [3]);
}

#[test]
fn an_idle_session_stream_keeps_its_history_and_resumes_exactly() {
    let outbound = Arc::new(Outbound::new(true));
    let stream = Stream::Session("s".into());
    let held = outbound.attach(stream.clone(), None).expect("held");
    for n in 1..=5 {
        outbound.push(note("s", n));
    }
    let first = taken(&held);
    let at_two = cursor::of(&first[1]).expect("cursor").to_string();
    // The receiver goes away with nothing left waiting: what it was sent is still kept.
    drop(held);
    outbound.push(note("s", 6));
    let back = outbound
        .attach(stream.clone(), Some(&at_two))
        .expect("kept");
    let again = taken(&back);
    assert_eq!(numbers(&again), [3, 4, 5, 6]);
    assert_eq!(again[..3], first[2..], "the same messages, cursors and all");
    // Another stream's cursor is not taken for this one's.
    drop(back);
    let other = outbound.attach(Stream::Connection, None).expect("held");
    drop(other);
    let foreign = format!(
        "{}.2",
        outbound
            .read_cursor(&Stream::Connection)
            .split('.')
            .next()
            .expect("tag")
    );
    assert!(matches!(
        outbound.attach(stream, Some(&foreign)),
        Err(Busy::Gone {
            why: Unresumable::Unknown,
            ..
        })
    ));
}

#[test]
fn a_point_past_the_retention_bound_is_gone_with_the_turns_state() {
    let outbound = Arc::new(Outbound::new(false));
    outbound
        .client_sent(&json!({"id": 3, "method": "session/prompt", "params": {"sessionId": "s"}}));
    let held = outbound.attach(Stream::Connection, None).expect("held");
    outbound.push(note("s", 0));
    let first = taken(&held);
    let early = last_cursor(&first);
    for n in 1..=RETAIN_MESSAGES + 10 {
        outbound.push(note("s", n));
        if n % 1000 == 0 {
            taken(&held);
        }
    }
    let rest = taken(&held);
    drop(held);
    match outbound.attach(Stream::Connection, Some(&early)) {
        Err(Busy::Gone { why, turn }) => {
            assert_eq!(why, Unresumable::Dropped);
            assert_eq!(turn["state"], "running");
            assert_eq!(turn["promptRequestId"], 3);
        }
        other => panic!("resumed from a dropped point: {:?}", other.is_ok()),
    }
    // The newest ones are still there.
    let recent = cursor::of(&rest[rest.len() - 3])
        .expect("cursor")
        .to_string();
    let back = outbound
        .attach(Stream::Connection, Some(&recent))
        .expect("kept");
    assert_eq!(taken(&back).len(), 2);
}

#[test]
fn the_bytes_kept_are_bounded_over_all_streams_oldest_first() {
    let outbound = Arc::new(Outbound::new(true));
    let a = outbound
        .attach(Stream::Session("a".into()), None)
        .expect("a");
    let b = outbound
        .attach(Stream::Session("b".into()), None)
        .expect("b");
    let big = "x".repeat(1 << 20);
    let chunk = |session: &str| {
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "t": big}})
            .to_string()
    };
    outbound.push(chunk("a"));
    let a_first = last_cursor(&taken(&a));
    for _ in 0..12 {
        outbound.push(chunk("b"));
        taken(&b);
    }
    assert!(lock(&outbound.state).history_bytes <= RETAIN_BYTES);
    drop(a);
    assert!(
        matches!(
            outbound.attach(
                Stream::Session("a".into()),
                Some(&format!("{}.0", a_first.split('.').next().expect("tag")))
            ),
            Err(Busy::Gone {
                why: Unresumable::Dropped,
                ..
            })
        ),
        "a's one message was the oldest"
    );
}

#[tokio::test]
async fn the_agent_waits_for_room_and_a_client_that_takes_nothing_is_cut() {
    let stall = Duration::from_millis(300);
    let outbound = Arc::new(Outbound {
        stalled_after: stall,
        ..Outbound::new(false)
    });
    // One message larger than the bound goes alone.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","method":"m","params":{{"t":"{}"}}}}"#,
        "y".repeat(MOST_WAITING + 10)
    );
    outbound.room().await.expect("room at first");
    outbound.push(huge);
    let waiting = {
        let outbound = outbound.clone();
        tokio::spawn(async move { outbound.room().await })
    };
    tokio::time::sleep(stall / 2).await;
    assert!(!waiting.is_finished(), "full: the agent waits");
    let held = outbound.attach(Stream::Connection, None).expect("held");
    assert_eq!(taken(&held).len(), 1);
    assert_eq!(waiting.await.expect("joined"), Ok(()), "room once read");
    // Full again and nobody takes anything: cut after the stall limit, not before.
    outbound.push(format!(
        r#"{{"jsonrpc":"2.0","method":"m","params":{{"t":"{}"}}}}"#,
        "z".repeat(MOST_WAITING)
    ));
    let started = tokio::time::Instant::now();
    assert_eq!(outbound.room().await, Err(Stalled::NoProgress));
    assert!(started.elapsed() >= stall);
}

#[test]
fn the_initialize_answer_goes_to_its_post_and_a_resume_reports_the_turn() {
    let outbound = Arc::new(Outbound::new(true));
    let mut answer = outbound.await_answer(&json!(0));
    outbound.push(r#"{"jsonrpc":"2.0","id":0,"result":{}}"#.into());
    assert!(answer.try_recv().is_ok());
    let held = outbound.attach(Stream::Connection, None).expect("held");
    outbound.push(note("s", 1));
    outbound.push(note("s", 2));
    let got = taken(&held);
    let at_one = cursor::of(&got[0]).expect("cursor").to_string();
    let turn = outbound.resume(&Stream::Connection, &at_one).expect("kept");
    assert_eq!(turn["state"], "idle");
    assert_eq!(
        numbers(&taken(&held)),
        [2],
        "handed out again on the held stream"
    );
}

#[tokio::test]
async fn a_receiver_that_resumes_takes_the_stream_over_from_one_not_yet_seen_dead() {
    let outbound = Arc::new(Outbound::new(false));
    let old = outbound.attach(Stream::Connection, None).expect("held");
    outbound.push(note("s", 1));
    outbound.push(note("s", 2));
    let got = taken(&old);
    assert!(matches!(
        outbound.attach(Stream::Connection, None),
        Err(Busy::Held)
    ));
    let at_one = cursor::of(&got[0]).expect("cursor").to_string();
    let new = outbound
        .attach(Stream::Connection, Some(&at_one))
        .expect("taken over");
    assert!(old.taken_over());
    let mut none = Vec::new();
    assert!(
        !old.next_batch(10, &mut none).await,
        "the old receiver ends"
    );
    drop(old);
    outbound.push(note("s", 3));
    assert_eq!(
        numbers(&taken(&new)),
        [2, 3],
        "the old hold's end did not free the new one"
    );
    assert!(matches!(
        outbound.attach(Stream::Connection, None),
        Err(Busy::Held)
    ));
}
