//! An observer of a shared session that stops reading does not hold the session for the
//! others: once its output is full (`serve --max-unread-bytes` here, and its queue) it is
//! detached, the controller's turn goes on to its end, the others are told who is attached
//! now (another observer that reads sees it all), and the one behind, when it reads again, gets everything it was sent in order, then a
//! notice that it was detached and how to attach again; attaching again shows it the whole
//! answer from the record.

use serde_json::Value;

use crate::serve_attach::{
    attach, client, is_answer, prompt, slow_answer, turn_ended, with_session,
};
use crate::serve_support::*;
use crate::support::*;

/// `count` numbered chunks of about 8 KB each.
fn big_chunks(count: usize) -> Vec<String> {
    let filler = "x".repeat(8 * 1024);
    (0..count).map(|n| format!("<{n}>{filler}")).collect()
}

fn detached_notice(message: &Value) -> bool {
    message["params"]["update"]["_meta"]["talaria/attachment"]["detached"].is_object()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_that_stops_reading_is_detached_and_the_session_goes_on_for_the_others() {
    // 32 MB: more than the observer's connection (64 KB unread), its socket's buffers and
    // its queue of 1,024 messages hold.
    let chunks = big_chunks(4_000);
    let env = TestEnv::new(vec![slow_answer(&chunks, 0)]).await;
    let served = start(&env, &["--max-unread-bytes", "65536"]).await;
    let (mut controller, session) = with_session(&served, &env, "editor").await;
    let mut observer = client(&served, "phone").await;
    let attached = attach(&mut observer, 2, &session, "observer").await;
    assert_eq!(attached["result"]["role"], "observer", "{attached}");
    let observer_id = attached["result"]["clientId"].clone();
    // A second observer reads all along, on a task of its own.
    let mut reader = client(&served, "browser").await;
    attach(&mut reader, 2, &session, "observer").await;
    let reader_from = reader.messages.len();
    let reading = tokio::spawn(async move {
        reader.until(turn_ended).await;
        reader
    });

    // The controller's turn ends while the observer reads nothing (before, the session
    // waited for it until its connection was ended a minute later).
    let from = controller.messages.len();
    controller
        .send(
            serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
            "params": prompt(&session, "go")}),
        )
        .await;
    let answer = controller.until(is_answer(3)).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(answer_chunks(&controller.messages[from..]), chunks);
    let roster = controller.messages[from..]
        .iter()
        .rev()
        .find_map(|m| m["params"]["update"]["_meta"].get("talaria/attachment"))
        .cloned()
        .expect("the controller is told who is attached now");
    let clients = roster["clients"].as_array().expect("clients");
    assert_eq!(clients.len(), 2, "{roster}");
    assert!(
        clients.iter().all(|c| c["clientId"] != observer_id),
        "{roster}"
    );
    // The observer that read saw the whole answer, and the same roster.
    let reader = reading.await.expect("the reader");
    assert_eq!(answer_chunks(&reader.messages[reader_from..]), chunks);
    let told = reader.messages[reader_from..]
        .iter()
        .rev()
        .find_map(|m| m["params"]["update"]["_meta"].get("talaria/attachment"));
    assert_eq!(told, Some(&roster));

    // The observer reads again: what it was sent, in order and from the start, then why it
    // was sent no more.
    let notice = observer.until(detached_notice).await;
    let detached = &notice["params"]["update"]["_meta"]["talaria/attachment"]["detached"];
    assert_eq!(detached["clientId"], observer_id, "{notice}");
    assert_eq!(detached["attachAgain"], "_session/attach", "{notice}");
    assert!(
        detached["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("fell behind"),
        "{notice}"
    );
    let seen = answer_chunks(&observer.messages);
    assert!(
        !seen.is_empty() && seen.len() < chunks.len(),
        "it saw {} of {} chunks",
        seen.len(),
        chunks.len()
    );
    assert_eq!(seen, chunks[..seen.len()]);

    // Attached again, it is shown the whole answer.
    let from = observer.messages.len();
    let again = attach(&mut observer, 4, &session, "observer").await;
    assert_eq!(again["result"]["role"], "observer", "{again}");
    let shown = answer_chunks(&observer.messages[from..]).concat();
    assert_eq!(shown, chunks.concat());
    let roster = &again["result"]["_meta"]["talaria/attachment"]["clients"];
    assert_eq!(roster.as_array().map(Vec::len), Some(3), "{again}");
}
