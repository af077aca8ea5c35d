//! Control across processes: a client of one `talaria serve` takes over a session another
//! process on the same store runs (two processes on one home and SQLite file; two hosts, each
//! with its own home, on one PostgreSQL database). The session moves as claims move: the
//! running process hands it over once its turn ends, its clients are told and follow it
//! there, and control comes back the same way. Nobody misses an entry or sees one twice.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::serve_attach::{attach, client, is_answer, prompt, slow_answer, updates, with_session};
use crate::serve_support::*;
use crate::support::*;

/// The texts a client was shown (its prompts' and answers' words, whole per update).
fn texts(socket: &Socket) -> Vec<String> {
    updates(&socket.messages, 0)
        .iter()
        .filter(|u| {
            matches!(
                u["sessionUpdate"].as_str(),
                Some("user_message_chunk" | "agent_message_chunk")
            )
        })
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_string))
        .collect()
}

/// Whether `m` tells that the session was handed to another process.
pub(crate) fn handed_over(m: &Value) -> bool {
    m["params"]["update"]["_meta"]["talaria/attachment"]["handover"]["state"] == "moved"
}

fn refused_elsewhere(answer: &Value) {
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    assert_eq!(
        answer["error"]["data"]["talaria"]["elsewhere"], true,
        "{answer}"
    );
}

/// The editor (process `running`) and the phone (process `other`, following it) pass the
/// session there and back; the scripts answer "one", "two" and "four" where the editor runs
/// it, "three" where the phone does.
async fn there_and_back(running: &Served, other: &Served, env: &TestEnv) {
    let (mut editor, session) = with_session(running, env, "editor").await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let mut phone = client(other, "phone").await;
    let followed = attach(&mut phone, 2, &session, "observer").await;
    assert_eq!(followed["result"]["role"], "observer", "{followed}");
    // It follows what the other process does, live.
    let second = editor
        .call(7, "session/prompt", prompt(&session, "second"))
        .await;
    assert_eq!(second["result"]["stopReason"], "end_turn", "{second}");
    phone
        .until(|m| m["params"]["update"]["content"]["text"] == "two")
        .await;

    // The phone takes control: the session moves to its process.
    let taken = attach(&mut phone, 3, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let told = editor.until(handed_over).await;
    let to = &told["params"]["update"]["_meta"]["talaria/attachment"]["handover"]["to"];
    assert_eq!(to["name"], "phone", "{told}");
    refused_elsewhere(
        &editor
            .call(3, "session/prompt", prompt(&session, "me?"))
            .await,
    );
    let mine = phone
        .call(4, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    // The editor follows it there, entry by entry.
    editor
        .until(|m| m["params"]["update"]["content"]["text"] == "three")
        .await;

    // And takes it back.
    let back = attach(&mut editor, 4, &session, "controller").await;
    assert_eq!(back["result"]["role"], "controller", "{back}");
    phone.until(handed_over).await;
    let again = editor
        .call(5, "session/prompt", prompt(&session, "again"))
        .await;
    assert_eq!(again["result"]["stopReason"], "end_turn", "{again}");
    phone
        .until(|m| m["params"]["update"]["content"]["text"] == "four")
        .await;
    refused_elsewhere(
        &phone
            .call(5, "session/prompt", prompt(&session, "mine?"))
            .await,
    );

    // Every entry once, in order, for both.
    assert_eq!(texts(&editor), ["one", "two", "mine", "three", "four"]);
    assert_eq!(
        texts(&phone),
        ["first", "one", "second", "two", "three", "again", "four"]
    );
}

#[tokio::test]
async fn control_moves_between_two_processes_on_one_store_and_back() {
    let env = TestEnv::new(vec![
        MockReply::text(&["one"]),
        MockReply::text(&["two"]),
        MockReply::text(&["three"]),
        MockReply::text(&["four"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    there_and_back(&running, &other, &env).await;
}

#[tokio::test]
async fn a_take_over_waits_for_the_running_turn_which_ends_whole() {
    let words: Vec<String> = (0..15).map(|i| format!("w{i} ")).collect();
    let env = TestEnv::new(vec![slow_answer(&words, 100), MockReply::text(&["after"])]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(&session, "long")}))
        .await;
    editor
        .until(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .await;
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    // The editor's turn ended as usual, before the session moved.
    let answered = editor.until(is_answer(2)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    editor.until(handed_over).await;
    let whole: String = words.concat();
    let editor_saw: String = texts(&editor).concat();
    assert_eq!(editor_saw, whole);
    // The phone was shown the record (the whole turn), then goes on.
    let after = phone
        .call(3, "session/prompt", prompt(&session, "next"))
        .await;
    assert_eq!(after["result"]["stopReason"], "end_turn", "{after}");
    assert_eq!(
        texts(&phone),
        ["long".to_string(), whole, "after".to_string()]
    );
}

/// A host: a home of its own on the shared database.
pub(crate) async fn host(url: &str, script: Vec<MockReply>) -> TestEnv {
    let mut env = TestEnv::new(script).await;
    env.extra_env
        .push(("TALARIA_STORE_URL".into(), url.to_string()));
    env
}

#[tokio::test]
async fn control_moves_between_two_hosts_on_one_postgresql_database_and_back() {
    let (_cluster, url) = throwaway_database().await;
    let first = host(
        &url,
        vec![
            MockReply::text(&["one"]),
            MockReply::text(&["two"]),
            MockReply::text(&["four"]),
        ],
    )
    .await;
    let second = host(&url, vec![MockReply::text(&["three"])]).await;
    let running = start(&first, &[]).await;
    let other = start(&second, &[]).await;
    there_and_back(&running, &other, &first).await;
}

/// Whether `m` tells that the session is being handed to another process.
fn handing_over(m: &Value) -> bool {
    m["params"]["update"]["_meta"]["talaria/attachment"]["handover"]["state"] == "moving"
}

#[tokio::test]
async fn a_turn_waiting_to_be_handed_over_can_be_cancelled_and_no_new_one_starts() {
    let words: Vec<String> = (0..60).map(|i| format!("w{i} ")).collect();
    let env = TestEnv::new(vec![slow_answer(&words, 100), MockReply::text(&["after"])]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(&session, "long")}))
        .await;
    editor
        .until(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .await;
    let mut phone = client(&other, "phone").await;
    phone
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "_session/attach", "params": {"sessionId": session, "role": "controller"}}))
        .await;
    editor.until(handing_over).await;
    // No new turn starts here meanwhile; the running one is still the editor's to end.
    refused_elsewhere(
        &editor
            .call(3, "session/prompt", prompt(&session, "more"))
            .await,
    );
    editor
        .send(
            json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
        )
        .await;
    let cancelled = editor.until(is_answer(2)).await;
    assert_eq!(
        cancelled["result"]["stopReason"], "cancelled",
        "{cancelled}"
    );
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let after = phone
        .call(3, "session/prompt", prompt(&session, "next"))
        .await;
    assert_eq!(after["result"]["stopReason"], "end_turn", "{after}");
}
