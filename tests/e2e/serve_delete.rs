//! `session/delete` in a shared `talaria serve`: refused while another client is attached
//! in any way this process knows of: an attach still under way, a client of this process
//! following the session where another process runs it, the session being or having been
//! handed to another process. (Clients attached plainly: `serve_attach.rs`.)

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::serve_attach::{
    attach, client, is_answer, prompt, prompted_in_one_of_two, with_session,
};
use crate::serve_support::*;
use crate::serve_takeover::handed_over;
use crate::support::*;

fn delete(session: &str) -> Value {
    json!({"sessionId": session})
}

fn refused(answer: &Value, what: &str) {
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    assert_eq!(answer["error"]["data"]["talaria"][what], true, "{answer}");
}

fn others(answer: &Value) -> u64 {
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    answer["error"]["data"]["talaria"]["othersAttached"]
        .as_u64()
        .unwrap_or_else(|| panic!("{answer}"))
}

#[tokio::test]
async fn a_session_handed_over_is_deleted_neither_where_it_ran_nor_under_a_follower() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let (_running, other, mut editor, session) = prompted_in_one_of_two(&env).await;
    // Two clients of the other process follow it; one takes control: it moves there.
    let mut tablet = client(&other, "tablet").await;
    attach(&mut tablet, 2, &session, "observer").await;
    let mut phone = client(&other, "phone").await;
    attach(&mut phone, 2, &session, "observer").await;
    let taken = attach(&mut phone, 3, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    editor.until(handed_over).await;
    // Where it ran, the client it was handed from does not delete it: nothing is touched.
    refused(
        &editor.call(3, "session/delete", delete(&session)).await,
        "elsewhere",
    );
    // Where it runs now, the tablet still follows it: its controller does not delete it.
    assert_eq!(
        others(&phone.call(4, "session/delete", delete(&session)).await),
        1
    );
    // It goes on, and the client it was handed from still follows it.
    let mine = phone
        .call(5, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    editor
        .until(|m| m["params"]["update"]["content"]["text"] == "two")
        .await;
}

#[tokio::test]
async fn a_client_whose_attach_is_under_way_counts_as_attached() {
    let mut env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    // Each commit takes a while: the browser's attach waits for the record to be written.
    env.extra_env.push((
        "FAILPOINTS".into(),
        "journal::commit::after=sleep(1500)".into(),
    ));
    let served = start(&env, &[]).await;
    let (mut editor, session) = with_session(&served, &env, "editor").await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let title = json!({"sessionId": session, "title": "shared"});
    editor.call(3, "session/set_title", title).await;
    let mut browser = client(&served, "browser").await;
    let attach = json!({"sessionId": session, "role": "observer"});
    browser
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "_session/attach", "params": attach}))
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        others(&editor.call(4, "session/delete", delete(&session)).await),
        1
    );
    let attached = browser.until(is_answer(2)).await;
    assert_eq!(attached["result"]["role"], "observer", "{attached}");
    let second = editor
        .call(5, "session/prompt", prompt(&session, "second"))
        .await;
    assert_eq!(second["result"]["stopReason"], "end_turn", "{second}");
}

/// The `ended` of a roster update (`_meta["talaria/attachment"].ended`), when there is one.
fn ended(message: &Value) -> Option<&Value> {
    message["params"]["update"]["_meta"]["talaria/attachment"]
        .get("ended")
        .filter(|ended| !ended.is_null())
}

#[tokio::test]
async fn a_client_of_another_process_following_a_session_is_told_when_it_is_deleted() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let (_running, other, mut editor, session) = prompted_in_one_of_two(&env).await;
    let mut tablet = client(&other, "tablet").await;
    let attached = attach(&mut tablet, 2, &session, "observer").await;
    assert_eq!(
        attached["result"]["_meta"]["talaria/attachment"]["elsewhere"],
        true
    );
    // While the session goes on, the follower is shown it and told of no end.
    let second = editor
        .call(3, "session/prompt", prompt(&session, "second"))
        .await;
    assert_eq!(second["result"]["stopReason"], "end_turn", "{second}");
    tablet
        .until(|m| m["params"]["update"]["content"]["text"] == "two")
        .await;
    crate::red_takeover::drain(&mut tablet, Duration::from_millis(800)).await;
    assert!(tablet.messages.iter().all(|m| ended(m).is_none()));
    // Deleted where it runs (the follower of the other process is not counted there).
    let deleted = editor.call(4, "session/delete", delete(&session)).await;
    assert!(deleted.get("error").is_none(), "{deleted}");
    let told = tablet.until(|m| ended(m).is_some()).await;
    assert_eq!(told["params"]["sessionId"], session.as_str(), "{told}");
    assert_eq!(ended(&told).map(|e| &e["reason"]), Some(&json!("deleted")));
    assert_eq!(
        told["params"]["update"]["sessionUpdate"],
        "session_info_update"
    );
    // Told once: it follows the session no more.
    crate::red_takeover::drain(&mut tablet, Duration::from_millis(1200)).await;
    let times = tablet
        .messages
        .iter()
        .filter(|m| ended(m).is_some())
        .count();
    assert_eq!(times, 1, "{:?}", tablet.messages);
    gone_for(&mut tablet, &session, 5).await;
}

/// What a client told its session was deleted gets for it: no session, as any client would
/// (not "it runs in another process").
async fn gone_for(client: &mut Socket, session: &str, id: u64) {
    let attached = attach(client, id, session, "observer").await;
    assert!(attached.get("error").is_some(), "{attached}");
    let prompted = client
        .call(id + 1, "session/prompt", prompt(session, "more"))
        .await;
    assert!(prompted.get("error").is_some(), "{prompted}");
    assert_ne!(prompted["error"]["code"], -32003, "{prompted}");
    let deleted = client.call(id + 2, "session/delete", delete(session)).await;
    assert_ne!(deleted["error"]["code"], -32003, "{deleted}");
}

/// Handed to another process and deleted there by its only client: the client it was handed
/// from (following it there) is told, and then finds no session here either.
#[tokio::test]
async fn a_client_following_its_handed_over_session_is_told_when_it_is_deleted_there() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let (_running, other, mut editor, session) = prompted_in_one_of_two(&env).await;
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    editor.until(handed_over).await;
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    editor
        .until(|m| m["params"]["update"]["content"]["text"] == "two")
        .await;
    let deleted = phone.call(4, "session/delete", delete(&session)).await;
    assert!(deleted.get("error").is_none(), "{deleted}");
    let told = editor.until(|m| ended(m).is_some()).await;
    assert_eq!(ended(&told).map(|e| &e["reason"]), Some(&json!("deleted")));
    gone_for(&mut editor, &session, 10).await;
}
