//! An observer of a shared session that stops reading does not hold the session for the
//! others: once its output is full (`serve --max-unread-bytes` here, and its queue) it is
//! detached, the controller's turn goes on to its end, the others are told who is attached
//! now (another observer that reads sees it all), and the one behind, when it reads again, gets everything it was sent in order, then a
//! notice that it was detached and how to attach again; attaching again shows it the whole
//! answer from the record.

use serde_json::Value;
use talaria_harness::MockReply;

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

/// Reads `socket` until `done` or `limit` passes: the message, or `None`.
async fn until_within(
    socket: &mut Socket,
    limit: std::time::Duration,
    done: impl Fn(&Value) -> bool,
) -> Option<Value> {
    tokio::time::timeout(limit, socket.until(done)).await.ok()
}

fn request(id: u64, method: &str, params: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn is_chunk(message: &Value) -> bool {
    message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
}

/// A detached observer that still reads nothing attaches again, eight times at once: it
/// joins as catching up, shown the session so far at its own pace (the rest wait on its own
/// connection, or are refused while it catches up), and the session goes on meanwhile (before, the session waited on the replay to it
/// until that connection was ended a minute later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_observer_attaching_again_without_reading_does_not_hold_the_session() {
    const ATTACHES: u64 = 8;
    let env = TestEnv::new(vec![
        slow_answer(&words(3000), 0),
        slow_answer(&words(5), 0),
    ])
    .await;
    let served = start(&env, &["--max-unread-bytes", "1024"]).await;
    let (mut controller, session) = with_session(&served, &env, "editor").await;
    // An observer over HTTP that never opens a stream: it reads nothing.
    let (observer, _) = HttpClient::initialize(&served, None).await;
    let attach_params = serde_json::json!({"sessionId": session, "role": "observer"});
    observer
        .post(request(2, "_session/attach", attach_params.clone()))
        .await;
    away(500).await;
    controller
        .send(request(3, "session/prompt", prompt(&session, "go")))
        .await;
    controller.until(is_answer(3)).await;
    assert!(
        served.logged().contains("fell behind"),
        "{}",
        served.logged()
    );
    for n in 0..ATTACHES {
        observer
            .post(request(10 + n, "_session/attach", attach_params.clone()))
            .await;
    }
    away(300).await;
    controller
        .send(request(5, "session/prompt", prompt(&session, "again")))
        .await;
    let answered = controller.until(is_answer(5)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    // The one that joined is catching up: attached, and the others were told so.
    let roster = controller
        .messages
        .iter()
        .rev()
        .find_map(|m| m["params"]["update"]["_meta"].get("talaria/attachment"))
        .cloned()
        .expect("a roster");
    assert_eq!(
        roster["clients"].as_array().map(Vec::len),
        Some(2),
        "{roster}"
    );
}

/// A `serve` letting a client leave `unread` bytes unread, an editor with a session, a phone
/// attached to it as observer, and the editor's prompt (id 3) answered with `answer` sent.
struct Shared {
    _env: TestEnv,
    served: Served,
    editor: Socket,
    phone: Socket,
    session: String,
}

async fn prompted_with_an_observer(answer: MockReply, unread: &str) -> Shared {
    let env = TestEnv::new(vec![answer]).await;
    let served = start(&env, &["--max-unread-bytes", unread]).await;
    let (mut editor, session) = with_session(&served, &env, "editor").await;
    let mut phone = client(&served, "phone").await;
    attach(&mut phone, 2, &session, "observer").await;
    editor
        .send(request(3, "session/prompt", prompt(&session, "go")))
        .await;
    Shared {
        _env: env,
        served,
        editor,
        phone,
        session,
    }
}

/// A client whose prompt runs, that hands control to another and then falls behind, is
/// detached, and still gets its prompt's answer (after what it was sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_whose_client_was_detached_meanwhile_is_still_answered() {
    let shared = prompted_with_an_observer(slow_answer(&big_chunks(4_000), 1), "1024").await;
    let Shared {
        served,
        editor: mut first,
        phone: mut second,
        session,
        ..
    } = shared;
    first.until(is_chunk).await;
    // The second takes control while the turn runs; the first stops reading.
    let took = attach(&mut second, 3, &session, "controller").await;
    assert_eq!(took["result"]["role"], "controller", "{took}");
    second.until(turn_ended).await;
    assert!(
        served.logged().contains("fell behind"),
        "{}",
        served.logged()
    );
    // The first reads again: its notice and its answer, in whichever order they left.
    let seen = |first: &Socket| {
        let notice = first.messages.iter().any(detached_notice);
        let answer = first.messages.iter().any(is_answer(3));
        notice && answer
    };
    while !seen(&first) {
        first.until(|m| detached_notice(m) || is_answer(3)(m)).await;
    }
    let answer = first.messages.iter().find(|m| is_answer(3)(m)).cloned();
    let answer = answer.expect("answered");
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
}

/// The controller stops reading mid-turn (the session waits for it, as for one editor); an
/// observer that takes control gets the session going again at once: the stuck client is
/// detached then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_control_from_a_controller_that_stopped_reading_gets_the_session_going() {
    let chunks = big_chunks(6_000);
    let shared = prompted_with_an_observer(slow_answer(&chunks, 0), "1024").await;
    let Shared {
        editor: first,
        phone: mut second,
        session,
        ..
    } = shared;
    // The first reads nothing more; the second reads until the updates stop coming.
    let short = std::time::Duration::from_secs(2);
    while until_within(&mut second, short, is_chunk).await.is_some() {}
    let shown = answer_chunks(&second.messages).len();
    assert!(shown < chunks.len(), "the session waits for its controller");
    let took = attach(&mut second, 3, &session, "controller").await;
    assert_eq!(took["result"]["role"], "controller", "{took}");
    // The rest of the turn reaches the new controller.
    second.until(turn_ended).await;
    assert_eq!(answer_chunks(&second.messages), chunks);
    drop(first);
}

/// A detached observer that prompts or resumes the session (which its connection still
/// named) is told to attach again instead of being answered as if it were attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_observer_resuming_the_session_is_told_to_attach_again() {
    let shared = prompted_with_an_observer(slow_answer(&big_chunks(4_000), 0), "65536").await;
    let Shared {
        _env: env,
        editor: mut controller,
        phone: mut observer,
        session,
        ..
    } = shared;
    controller.until(is_answer(3)).await;
    observer.until(detached_notice).await;
    let prompted = observer
        .call(5, "session/prompt", prompt(&session, "me"))
        .await;
    let said = prompted["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("no longer attached"), "{prompted}");
    let place =
        serde_json::json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []});
    let resumed = observer.call(6, "session/resume", place).await;
    let said = resumed["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("_session/attach"), "{resumed}");
    // Attached again, it is shown the session and follows it.
    let again = attach(&mut observer, 7, &session, "observer").await;
    assert_eq!(again["result"]["role"], "observer", "{again}");
}

/// A client attaching while a permission question is open is asked it only once it has been
/// shown the session so far: after the call's card, never before the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_open_when_a_client_attaches_is_asked_after_the_session_so_far() {
    let env = TestEnv::new(vec![
        MockReply::text(&["hello there"]),
        MockReply::tool_call(
            "w1",
            "write_file",
            serde_json::json!({"path": "out.txt", "content": "one\n"}),
        ),
        MockReply::text(&["written"]),
    ])
    .await;
    let served = start(&env, &[]).await;
    let (mut editor, session) = with_session(&served, &env, "editor").await;
    editor
        .call(2, "session/prompt", prompt(&session, "hi"))
        .await;
    editor
        .send(request(3, "session/prompt", prompt(&session, "write one")))
        .await;
    let asked = editor
        .until(|m| m["method"] == "session/request_permission")
        .await;
    let mut phone = client(&served, "phone").await;
    attach(&mut phone, 2, &session, "observer").await;
    let is_question = |m: &Value| m["method"] == "session/request_permission";
    if !phone.messages.iter().any(is_question) {
        phone.until(is_question).await;
    }
    let at = |found: &dyn Fn(&Value) -> bool| phone.messages.iter().position(found);
    let question = at(&|m| m["method"] == "session/request_permission").expect("asked");
    let card = at(&|m| {
        m["params"]["update"]["sessionUpdate"] == "tool_call"
            && m["params"]["update"]["toolCallId"] == "w1"
    });
    let history = at(&|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk");
    assert!(question > card.expect("the card") && question > history.expect("the history"));
    let allow = serde_json::json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
    editor
        .send(serde_json::json!({"jsonrpc": "2.0", "id": asked["id"], "result": allow}))
        .await;
    editor.until(is_answer(3)).await;
}
