//! A full disk and the spool (issue 62, F4): the spool keeps room allocated ahead of need,
//! so a turn answered once the disk is full is still in it and survives `kill -9`; and when
//! a spool write fails anyway the client is told the truth — the turn exists only in this
//! process's memory and ending Talaria now loses it.

use std::time::Duration;

use serde_json::Value;
use talaria_harness::MockReply;

use crate::durability::SmallDisk;
use crate::support::*;

fn notices(updates: &[Value]) -> String {
    updates
        .iter()
        .filter_map(notice_text)
        .collect::<Vec<_>>()
        .join("\n")
}

const MEMORY_ONLY: &str = "exists only in this Talaria process's memory";

#[tokio::test]
async fn a_turn_answered_on_a_really_full_disk_is_in_the_spools_reserve_and_survives_kill_9() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["before the disk filled"]),
        MockReply::text(&["while the disk was full"]),
    ])
    .await;
    let disk = SmallDisk::mount(&env.home.path().join("small"), "8m");
    let home = disk.path.join("talaria");
    env.extra_env
        .push(("TALARIA_HOME".into(), home.display().to_string()));
    let mut agent = disk.spawn(&env).await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, _) = prompt(&mut agent, &session, "one").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let filler = disk.fill();
    let (response, updates) = prompt(&mut agent, &session, "two").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let told = notices(&updates);
    let said = agent.stderr();
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    std::fs::remove_file(&filler).expect("room again");
    let mut again = disk.spawn(&env).await;
    again
        .call("initialize", serde_json::json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let from = again.transcript.len();
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("the session loads");
    let replayed: Vec<Value> = again.transcript[from..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect();
    let answers = chunks(&replayed, "agent_message_chunk");
    again.close_stdin();
    let _ = again.wait_exit(WAIT).await;
    assert!(
        answers.iter().any(|a| a == "while the disk was full"),
        "the turn answered on a full disk is gone after kill -9: {answers:?}"
    );
    assert!(told.contains("not being saved"), "{told}");
    assert!(
        told.contains("in the spool") && !told.contains(MEMORY_ONLY),
        "the spool's reserve should have taken the turn: {told}\n{said}"
    );
}

#[tokio::test]
async fn a_turn_the_spool_cannot_take_is_told_to_exist_only_in_memory() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["saved"]),
        MockReply::text(&["held in memory"]),
    ])
    .await;
    env.extra_env
        .push(("FAILPOINTS".into(), "spool::write::before=return".into()));
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, updates) = prompt(&mut agent, &session, "one").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(!notices(&updates).contains("not being saved"));
    let store = env.home.path().join("talaria").join("state.db");
    let holder = hold_write_lock(&store, Duration::from_secs(4));
    let (response, updates) = prompt(&mut agent, &session, "two").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let told = notices(&updates);
    assert!(
        told.contains("not being saved") && told.contains(MEMORY_ONLY),
        "the client was not told the turn is in memory only: {told}"
    );
    assert!(
        !told.contains("in the spool"),
        "the notice claims the spool holds it: {told}"
    );
    holder.join().expect("the lock holder");
    // The store takes it once the lock is gone: told saved again.
    let saved = agent
        .wait_for(Duration::from_secs(15), |m| {
            notice_text(&m["params"]["update"]).is_some_and(|t| t.contains("saved again"))
        })
        .await;
    assert!(saved.is_ok(), "never told saved again");
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
}

#[tokio::test]
async fn a_healthy_spool_is_said_to_hold_a_turn_the_store_did_not_take() {
    let env = TestEnv::new(vec![
        MockReply::text(&["saved"]),
        MockReply::text(&["spooled"]),
    ])
    .await;
    let mut agent = env.spawn().await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    prompt(&mut agent, &session, "one").await;
    let store = env.home.path().join("talaria").join("state.db");
    let holder = hold_write_lock(&store, Duration::from_secs(3));
    let (_, updates) = prompt(&mut agent, &session, "two").await;
    let told = notices(&updates);
    assert!(
        told.contains("in the spool") && !told.contains(MEMORY_ONLY),
        "{told}"
    );
    holder.join().expect("the lock holder");
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
}
