//! The bounds on what a client can pile up in the agent (ARCHITECTURE.md, "Queues and their
//! bounds"): a session holds at most `MAX_QUEUED_TURNS` turns queued or running, and a
//! connection at most `MAX_DEFERRED` requests being answered; past either, a request is
//! refused at once with `-32010` (try again later) and the session goes on.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};
use talaria_record::{EntryBody, Transcript};

use crate::support::*;

/// The code of a request that may succeed later.
const UNAVAILABLE: i64 = -32010;

fn slow_answer(words: usize, delay_ms: u64) -> MockReply {
    MockReply::Text {
        chunks: (0..words).map(|n| format!("w{n} ")).collect(),
        reasoning: Vec::new(),
        delay_ms,
        usage: None,
        finish_reason: None,
    }
}

fn refused_as_busy(answer: &Value, says: &str) -> bool {
    answer["error"]["code"] == UNAVAILABLE
        && answer["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains(says))
}

#[tokio::test]
async fn a_session_holds_at_most_64_turns_and_refuses_the_next_until_one_ends() {
    let env = TestEnv::new(vec![
        slow_answer(100, 100),
        MockReply::text(&["after the flood"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let running = streaming(&mut agent, &session).await;
    let sent = queued_prompts(&mut agent, &session, 70).await;
    // One runs and 63 wait: the last 7 are refused at once, while the answer still streams.
    for id in &sent[63..] {
        let answer = agent.wait_response(*id, WAIT).await.expect("answered");
        assert!(
            refused_as_busy(&answer, "64 prompts waiting or running"),
            "{answer}"
        );
    }
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    for id in std::iter::once(&running).chain(&sent[..63]) {
        let answer = agent.wait_response(*id, WAIT).await.expect("answered");
        assert_eq!(stop_reason(&answer), "cancelled", "{answer}");
    }
    // The slots came back with the turns' ends: the session takes prompts again.
    let (answer, _) = prompt(&mut agent, &session, "and now").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    assert_eq!(
        env.mock.requests().len(),
        2,
        "the refused prompts reached no model"
    );
}

#[tokio::test]
async fn a_connection_past_256_requests_being_answered_is_refused_at_once() {
    let env = TestEnv::new(vec![
        MockReply::text(&["stored"]),
        MockReply::text(&["alive"]),
    ])
    .await;
    let mut agent = env.spawn().await;
    let stored = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (answer, _) = prompt(&mut agent, &stored, "hello").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    agent
        .call("session/close", json!({"sessionId": stored}))
        .await
        .expect("closed");
    // With the store's write lock held elsewhere, each delete waits for the store in turn.
    let store = env.home.path().join("talaria").join("state.db");
    let holder = hold_write_lock(&store, Duration::from_secs(4));
    let before = agent.transcript.len();
    let mut sent = Vec::new();
    for _ in 0..400 {
        let params = json!({"sessionId": stored});
        sent.push(
            agent
                .start_request("session/delete", params)
                .await
                .expect("sent"),
        );
    }
    for id in &sent {
        agent
            .wait_response(*id, Duration::from_secs(120))
            .await
            .expect("every request answered");
    }
    holder.join().expect("the lock holder");
    // In the order the agent answered: each refusal came while 256 earlier requests were
    // still unanswered, and only then.
    let mut answered = 0;
    let mut refused = 0;
    for message in &agent.transcript[before..] {
        let Some(id) = message["id"].as_i64().filter(|id| sent.contains(id)) else {
            continue;
        };
        let earlier = sent.iter().filter(|sent| **sent < id).count();
        if refused_as_busy(
            message,
            "requests of this connection are still being answered",
        ) {
            refused += 1;
            assert!(
                earlier - answered >= 256,
                "{} in flight: {message}",
                earlier - answered
            );
        }
        answered += 1;
    }
    assert!(refused >= 1, "nothing refused of 400 sent at once");
    // The connection goes on.
    let fresh = agent
        .start_session(env.workspace.path())
        .await
        .expect("a new session");
    let (answer, _) = prompt(&mut agent, &fresh, "still there?").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
}

/// The stored record of `session`.
fn stored(env: &TestEnv, session: &str) -> Transcript {
    use talaria_store::SessionStore;
    let path = env.home.path().join("talaria").join("state.db");
    let store = talaria_store::SqliteStore::open(&path).expect("store");
    store.load(session).expect("session").1
}

fn mode_changes(record: &Transcript) -> usize {
    record
        .entries()
        .iter()
        .filter(|entry| matches!(entry.body, EntryBody::ModeChanged { .. }))
        .count()
}

/// A prompt whose long answer has begun to stream; its request's id.
async fn streaming(agent: &mut AgentProcess, session: &str) -> i64 {
    let running = agent
        .start_request("session/prompt", text_prompt(session, "a long answer"))
        .await
        .expect("prompt");
    agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await
        .expect("the answer streams");
    running
}

/// `n` prompts sent without waiting; their requests' ids.
async fn queued_prompts(agent: &mut AgentProcess, session: &str, n: usize) -> Vec<i64> {
    let mut sent = Vec::new();
    for n in 0..n {
        let prompt = text_prompt(session, &format!("queued {n}"));
        sent.push(
            agent
                .start_request("session/prompt", prompt)
                .await
                .expect("sent"),
        );
    }
    sent
}

/// `n` mode sets sent without waiting, yolo and accept-edits in turn (the last accept-edits
/// when `n` is even); their requests' ids.
pub(crate) async fn mode_sets(agent: &mut AgentProcess, session: &str, n: usize) -> Vec<i64> {
    let mut sets = Vec::new();
    for n in 0..n {
        let mode = if n % 2 == 0 { "yolo" } else { "accept-edits" };
        let params = json!({"sessionId": session, "modeId": mode});
        sets.push(
            agent
                .start_request("session/set_mode", params)
                .await
                .expect("sent"),
        );
    }
    sets
}

/// One prompt streaming and 63 waiting behind it: every slot taken.
async fn full_session(agent: &mut AgentProcess, session: &str) -> Vec<i64> {
    let mut sent = vec![streaming(agent, session).await];
    sent.extend(queued_prompts(agent, session, 63).await);
    sent
}

/// A `/plan` prompt refused for room leaves the mode as it was (it used to switch the
/// session to plan mode, and the running turn with it, before it was refused).
#[tokio::test]
async fn a_plan_prompt_refused_for_room_changes_no_mode() {
    let env = TestEnv::new(vec![slow_answer(100, 100)]).await;
    let (mut agent, session) = env.session().await;
    let sent = full_session(&mut agent, &session).await;
    let plan = text_prompt(&session, "/plan rewrite everything");
    let plan = agent
        .start_request("session/prompt", plan)
        .await
        .expect("sent");
    let answer = agent.wait_response(plan, WAIT).await.expect("answered");
    assert!(refused_as_busy(&answer, "64 prompts"), "{answer}");
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    for id in sent {
        agent.wait_response(id, WAIT).await.expect("answered");
    }
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("closed");
    let told_plan = agent.transcript.iter().any(|m| {
        m["params"]["update"]["sessionUpdate"] == "current_mode_update"
            && m["params"]["update"]["currentModeId"] == "plan"
    });
    assert!(!told_plan, "the client was told plan mode");
    assert_eq!(mode_changes(&stored(&env, &session)), 0);
}

/// A client setting the mode 2,000 times during one turn leaves one entry in the record
/// (each was recorded before), and the turn ends in the mode last set.
#[tokio::test]
async fn a_flood_of_mode_sets_during_a_turn_records_one_change() {
    let env = TestEnv::new(vec![slow_answer(40, 100)]).await;
    let (mut agent, session) = env.session().await;
    let running = streaming(&mut agent, &session).await;
    let sets = mode_sets(&mut agent, &session, 2000).await;
    for id in sets {
        agent.wait_response(id, WAIT).await.expect("answered");
    }
    let answer = agent.wait_response(running, WAIT).await.expect("answered");
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("closed");
    let record = stored(&env, &session);
    assert_eq!(mode_changes(&record), 1);
    let last = record
        .entries()
        .iter()
        .rev()
        .find_map(|entry| match &entry.body {
            EntryBody::ModeChanged { mode } => Some(mode.clone()),
            _ => None,
        });
    assert_eq!(last.as_deref(), Some("accept-edits"));
}
