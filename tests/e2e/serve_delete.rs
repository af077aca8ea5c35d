//! `session/delete` in a shared `talaria serve`: refused while another client is attached
//! in any way this process knows of: an attach still under way, a client of this process
//! following the session where another process runs it, the session being or having been
//! handed to another process. (Clients attached plainly: `serve_attach.rs`.)

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::serve_attach::{attach, client, is_answer, prompt, with_session};
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
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
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
