//! Sessions shared across hosts through one PostgreSQL database: two agent processes, each
//! with its own `TALARIA_HOME` (two hosts), and a real server started by the test. A session
//! moves from one to the other with its whole record; a holder excludes the other, and its
//! `kill -9` frees the session within seconds; search sees every host's sessions; a server
//! restarted in the middle of a turn loses nothing answered.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::MockReply;
use talaria_record::{EntryBody, Transcript};
use talaria_store::{PgStore, SessionStore};

use crate::support::*;

/// A session's record as the database has it now.
async fn stored(url: &str, session: &str) -> Result<Transcript, talaria_store::StoreError> {
    let (url, session) = (url.to_string(), session.to_string());
    tokio::task::spawn_blocking(move || {
        PgStore::connect(&url)
            .and_then(|store| store.load(&session))
            .map(|(_, transcript)| transcript)
    })
    .await
    .expect("joined")
}

/// A host: a home of its own and the shared database.
async fn host(url: &str, script: Vec<MockReply>) -> TestEnv {
    let mut env = TestEnv::new(script).await;
    env.extra_env
        .push(("TALARIA_STORE_URL".into(), url.to_string()));
    std::fs::write(env.workspace.path().join("notes.txt"), "the notes\n").expect("notes");
    env
}

#[tokio::test]
async fn a_session_moves_between_hosts_with_its_whole_record() {
    let (_cluster, url) = throwaway_database().await;
    let first = host(
        &url,
        vec![
            MockReply::tool_call("read-1", "read_file", json!({"path": "notes.txt"})),
            MockReply::text(&["the notes mention a zebra crossing"]),
        ],
    )
    .await;
    let second = host(
        &url,
        vec![
            MockReply::tool_call("search-1", "session_search", json!({"query": "zebra"})),
            MockReply::text(&["found it on the other host"]),
        ],
    )
    .await;
    let (mut a, session) = first.session().await;
    let (response, _) = prompt(&mut a, &session, "read the notes").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");

    // The second host lists it, but cannot open it while the first holds it.
    let mut b = initialized(&second).await;
    let listed = b.call("session/list", json!({})).await.expect("list");
    assert!(
        listed["sessions"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["sessionId"] == session.as_str())),
        "{listed}"
    );
    let refused = b
        .request("session/load", load_params(&second, &session))
        .await
        .expect("answered");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    let holder_pid = a.pid().expect("pid").to_string();
    assert!(
        message.contains("open in another Talaria process")
            && message.contains("host")
            && message.contains(&holder_pid),
        "{refused}"
    );

    // Closed on the first, it loads on the second with its whole record, tool call included.
    a.call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    let before = b.updates().len();
    b.call("session/load", load_params(&second, &session))
        .await
        .expect("load");
    let replay: Vec<Value> = b.updates()[before..].to_vec();
    assert!(
        replay
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == "read-1"),
        "no tool call in the replay: {replay:?}"
    );
    assert!(
        chunks(&replay, "agent_message_chunk")
            .concat()
            .contains("zebra crossing"),
        "{replay:?}"
    );

    // It goes on there, and search on the second host finds what the first wrote.
    let (response, _) = prompt(&mut b, &session, "where was the zebra?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let found = tool_results(&second.mock, 1).concat();
    assert!(found.contains("zebra"), "{found}");
    b.call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");

    let transcript = stored(&url, &session).await.expect("load");
    assert!(transcript.validate().is_ok());
    assert_eq!(
        assistant_texts(&transcript),
        [
            "the notes mention a zebra crossing",
            "found it on the other host"
        ]
    );
}

#[tokio::test]
async fn a_killed_holder_frees_its_sessions_within_seconds() {
    let (_cluster, url) = throwaway_database().await;
    let first = host(&url, vec![MockReply::text(&["held"])]).await;
    let second = host(&url, Vec::new()).await;
    let (mut a, session) = first.session().await;
    let (response, _) = prompt(&mut a, &session, "hold it").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let mut b = initialized(&second).await;
    let refused = b
        .request("session/load", load_params(&second, &session))
        .await
        .expect("answered");
    assert!(refused.get("error").is_some(), "{refused}");
    kill_now(&a);
    let killed = Instant::now();
    loop {
        let loaded = b
            .request("session/load", load_params(&second, &session))
            .await
            .expect("answered");
        if loaded.get("result").is_some() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "still held 10 s after the holder was killed: {loaded}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_database_restarting_mid_turn_loses_nothing_answered() {
    let (cluster, url) = throwaway_database().await;
    let slow: Vec<String> = (0..8).map(|i| format!("<{i}>")).collect();
    let env = host(
        &url,
        vec![
            MockReply::text(&["first answer"]),
            MockReply::tool_call("read-2", "read_file", json!({"path": "notes.txt"})),
            MockReply::Text {
                chunks: slow.clone(),
                reasoning: Vec::new(),
                delay_ms: 300,
                usage: None,
                finish_reason: None,
            },
            MockReply::text(&["third answer"]),
        ],
    )
    .await;
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "one").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");

    // The server goes away while the second turn streams, and comes back after its answer.
    let turn = agent
        .start_request("session/prompt", text_prompt(&session, "two"))
        .await
        .expect("send");
    agent
        .wait_for(WAIT, |m| m["params"]["update"]["content"]["text"] == "<0>")
        .await
        .expect("streaming");
    cluster.stop();
    let answered = agent.wait_response(turn, WAIT).await.expect("answered");
    assert_eq!(stop_reason(&answered), "end_turn", "{answered}");
    let told: String = agent
        .updates()
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(told.contains("not being saved"), "the client was not told");
    cluster.start_again();
    let (response, _) = prompt(&mut agent, &session, "three").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");

    // Everything answered reaches the database, in order, without holes.
    let expected = [
        "first answer".to_string(),
        slow.concat(),
        "third answer".into(),
    ];
    let started = Instant::now();
    let transcript = loop {
        if let Ok(transcript) = stored(&url, &session).await
            && assistant_texts(&transcript) == expected
        {
            break transcript;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the answers did not all reach the database"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(transcript.validate().is_ok());
    assert!(
        transcript
            .entries()
            .iter()
            .any(|e| matches!(&e.body, EntryBody::ToolResult(r) if r.call_id == "read-2")),
        "the tool result written while the server was away is there"
    );
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
}

#[tokio::test]
async fn doctor_checks_the_connection_the_schema_and_the_privileges() {
    let (cluster, url) = throwaway_database().await;
    let mut env = host(&url, Vec::new()).await;
    let (ok, report) = doctor(&env, &[]).await;
    assert!(ok, "{report}");
    assert!(
        report.contains("✓ session store")
            && report.contains("PostgreSQL")
            && report.contains("schema 0 of 4")
            && report.contains("migrated when the first session opens"),
        "{report}"
    );
    // Migrated, then read by a user who may only read: each missing privilege is named, and
    // the password in the URL is never shown.
    let admin_url = url.clone();
    tokio::task::spawn_blocking(move || {
        PgStore::connect(&admin_url).expect("migrate");
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).expect("admin");
        admin
            .batch_execute(
                "CREATE ROLE reader LOGIN PASSWORD 'reader-secret';
                 GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;",
            )
            .expect("role");
    })
    .await
    .expect("joined");
    let reader_url = url.replace("talaria@", "reader:reader-secret@");
    env.extra_env.push(("TALARIA_STORE_URL".into(), reader_url));
    let (ok, report) = doctor(&env, &[]).await;
    assert!(!ok, "{report}");
    assert!(
        report.contains("schema 4 of 4") && report.contains("INSERT on entries"),
        "{report}"
    );
    assert!(!report.contains("reader-secret"), "{report}");
    // A server that is down is a problem with a fix.
    cluster.stop();
    let (ok, report) = doctor(&env, &[]).await;
    assert!(!ok, "{report}");
    assert!(report.contains("sessions are not saved"), "{report}");
}
