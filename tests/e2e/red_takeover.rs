//! Red-team attacks on control across processes (`_session/attach` role "controller" for a
//! session another `talaria serve` on the same store runs): the move with a turn, a queued
//! prompt, a cancel, a compaction or a question under way; the asker or the runner killed
//! mid-move; two askers at once; a stdio holder; the first process's clients loading,
//! deleting, leaving and coming back; bad input. A test that found a hole is ignored with
//! the hole in one line.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use talaria_harness::MockReply;
use tokio_tungstenite::tungstenite::Message;

use crate::serve_attach::{
    attach, client, is_answer, prompt, prompted_in_one_of_two, slow_answer, with_session,
};
use crate::serve_support::*;
use crate::serve_takeover::host;
use crate::support::*;

/// The handover state a message tells (`moving`, `moved`), if any.
pub(crate) fn handover_state(m: &Value) -> Option<&str> {
    m["params"]["update"]["_meta"]["talaria/attachment"]["handover"]["state"].as_str()
}

pub(crate) fn moving(m: &Value) -> bool {
    handover_state(m) == Some("moving")
}

pub(crate) fn moved(m: &Value) -> bool {
    handover_state(m) == Some("moved")
}

pub(crate) fn chunk(m: &Value) -> bool {
    m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
}

/// The texts among `messages` (prompts' and answers' words, whole per update).
pub(crate) fn texts_of(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| &m["params"]["update"])
        .filter(|u| {
            matches!(
                u["sessionUpdate"].as_str(),
                Some("user_message_chunk" | "agent_message_chunk")
            )
        })
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_string))
        .collect()
}

pub(crate) fn texts(socket: &Socket) -> Vec<String> {
    texts_of(&socket.messages)
}

pub(crate) async fn send_prompt(socket: &mut Socket, id: u64, session: &str, text: &str) {
    socket
        .send(json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt", "params": prompt(session, text)}))
        .await;
}

pub(crate) async fn send_attach(socket: &mut Socket, id: u64, session: &str, role: &str) {
    socket
        .send(json!({"jsonrpc": "2.0", "id": id, "method": "_session/attach", "params": {"sessionId": session, "role": role}}))
        .await;
}

/// Reads until `done` holds for a message, for at most `within` (kept in `messages`); the
/// message, or `None` when the time is up or the socket ended.
pub(crate) async fn until_within(
    socket: &mut Socket,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let frame = tokio::time::timeout(left, socket.socket.next())
            .await
            .ok()??;
        match frame {
            Ok(Message::Text(text)) => {
                let message: Value = serde_json::from_str(&text).expect("JSON");
                socket.messages.push(message.clone());
                if done(&message) {
                    return Some(message);
                }
            }
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Every message that arrives within `within` (the client idle meanwhile).
pub(crate) async fn drain(socket: &mut Socket, within: Duration) {
    until_within(socket, within, |_| false).await;
}

pub(crate) fn refused_elsewhere(answer: &Value) -> bool {
    answer["error"]["code"] == -32003 && answer["error"]["data"]["talaria"]["elsewhere"] == true
}

/// Whether each text appears once: no entry shown twice.
pub(crate) fn assert_each_once(who: &str, seen: &[String]) {
    for text in seen {
        let times = seen.iter().filter(|t| *t == text).count();
        assert_eq!(times, 1, "{who} saw {text:?} {times} times: {seen:?}");
    }
}

// ---------------------------------------------------------------------------------------
// The asker dies.
// ---------------------------------------------------------------------------------------

/// The phone's process is killed (-9) while it waits for the editor's turn to end: its ask
/// stays in the store. The running side closes the session for nobody (its clients are told
/// it moved to the dead phone); a third process then takes it over, and keeps it.
#[tokio::test]
async fn an_asker_killed_mid_wait_does_not_move_the_session_again_once_taken_back() {
    let env = TestEnv::new(vec![
        slow_answer(&words(15), 100),
        MockReply::text(&["back"]),
        MockReply::text(&["again"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let third = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    // kill -9 of the asking process (kill_on_drop sends SIGKILL).
    drop(phone);
    drop(other);
    let answered = editor.until(is_answer(2)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    drain(&mut editor, Duration::from_millis(1500)).await;
    let handed_to_nobody = editor.messages.iter().any(moved);
    // A client of a third process takes the session.
    let mut laptop = client(&third, "laptop").await;
    let taken = attach(&mut laptop, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let first = laptop
        .call(3, "session/prompt", prompt(&session, "back"))
        .await;
    // A while later it still runs there, with nobody asking for it.
    drain(&mut laptop, Duration::from_millis(1500)).await;
    let again = laptop
        .call(4, "session/prompt", prompt(&session, "again"))
        .await;
    assert!(
        !laptop.messages.iter().any(moving),
        "moved away from the laptop with nobody asking (handed to nobody first: \
         {handed_to_nobody}); {first}; {again}"
    );
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    assert_eq!(again["result"]["stopReason"], "end_turn", "{again}");
}

/// As above, but the editor takes it back in its own process: it keeps it (the watcher
/// remembers it handed it over already).
#[tokio::test]
async fn an_asker_killed_mid_wait_lets_the_editor_take_the_session_back() {
    let env = TestEnv::new(vec![
        slow_answer(&words(15), 100),
        MockReply::text(&["back"]),
        MockReply::text(&["again"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    drop(phone);
    drop(other);
    let answered = editor.until(is_answer(2)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    drain(&mut editor, Duration::from_millis(1500)).await;
    let back = attach(&mut editor, 3, &session, "controller").await;
    assert_eq!(back["result"]["role"], "controller", "{back}");
    let from = editor.messages.len();
    let first = editor
        .call(4, "session/prompt", prompt(&session, "back"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    drain(&mut editor, Duration::from_millis(1500)).await;
    let again = editor
        .call(5, "session/prompt", prompt(&session, "again"))
        .await;
    assert!(!editor.messages[from..].iter().any(moving));
    assert_eq!(again["result"]["stopReason"], "end_turn", "{again}");
}

// ---------------------------------------------------------------------------------------
// What runs when the ask comes.
// ---------------------------------------------------------------------------------------

/// The editor cancels its own turn once the handover began: the turn ends cancelled (the
/// handover waits for it anyway), not run to its end behind the user's back.
#[tokio::test]
async fn a_cancel_from_the_controller_during_the_handover_ends_its_turn() {
    let env = TestEnv::new(vec![slow_answer(&words(60), 100)]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    editor
        .send(
            json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
        )
        .await;
    let answered = editor.until(is_answer(2)).await;
    let shown = texts(&editor).len();
    assert_eq!(
        answered["result"]["stopReason"], "cancelled",
        "{shown} chunks shown: {answered}"
    );
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
}

/// A steer once the handover began still reaches the running turn (the turn is its
/// controller's to finish), and the session moves with it, each entry once.
#[tokio::test]
async fn a_steer_during_the_handover_reaches_the_turn_which_moves_whole() {
    let env = TestEnv::new(vec![
        slow_answer(&words(20), 100),
        MockReply::text(&["steered"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    let steer = editor
        .call(
            3,
            "_session/steering",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "faster"}]}),
        )
        .await;
    assert!(steer["result"].is_object(), "{steer}");
    let answered = editor.until(is_answer(2)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let seen = texts(&phone);
    for said in ["long", "faster", "steered"] {
        let times = seen.iter().filter(|t| t.as_str() == said).count();
        assert_eq!(times, 1, "{said:?} once: {seen:?}");
    }
}

/// A prompt queued behind the running turn before anyone asked: it was accepted, so it gets
/// its answer (run before the move) or a clear error, never a cancel the user did not ask
/// for; and the phone is shown each entry once.
#[tokio::test]
async fn a_queued_prompt_gets_its_answer_and_the_move_is_told_after_it() {
    let env = TestEnv::new(vec![
        slow_answer(&words(15), 100),
        slow_answer(&["queued ".to_string(), "answer".to_string()], 300),
        MockReply::text(&["phone"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    send_prompt(&mut editor, 3, &session, "next").await;
    away(300).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    let first = editor.until(is_answer(2)).await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let queued = editor.until(is_answer(3)).await;
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let ok = queued["result"]["stopReason"] == "end_turn" || queued["error"]["message"].is_string();
    assert!(ok, "the queued prompt: {queued}");
    // Its clients are told the session moved once its last turn ended, not while it ran.
    let moved_at = editor.messages.iter().position(moved);
    let queued_at = editor.messages.iter().position(is_answer(3));
    assert!(
        moved_at.is_none() || moved_at > queued_at,
        "told moved at {moved_at:?}, the queued turn answered at {queued_at:?}: {:?}",
        editor.messages
    );
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    assert_each_once("phone", &texts(&phone));
}

const SUMMARY_MODEL: &str = "summary-model";

/// A session of `turns` long exchanges (each reads a long file), for a compaction to have
/// something to compact.
async fn long_session_env(turns: usize) -> TestEnv {
    let long = "The values are computed line by line and nothing else depends on them. ";
    let script = (1..=turns)
        .flat_map(|n| {
            [
                MockReply::tool_call(
                    &format!("read{n}"),
                    "read_file",
                    json!({"path": format!("f{n}.txt")}),
                ),
                MockReply::text(&[&format!("answer {n}. {}", long.repeat(20))]),
            ]
        })
        .collect();
    let mut env = TestEnv::new(script).await;
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), "32000".into()));
    env.write_config(&format!(
        "retry_base_ms = 1\n[auxiliary.compression]\nmodel = \"{SUMMARY_MODEL}\"\n"
    ));
    for n in 1..=turns {
        let text: String = (1..=120)
            .map(|line| format!("module {n} line {line}: let v{line} = compute_{n}({line});\n"))
            .collect();
        std::fs::write(env.workspace.path().join(format!("f{n}.txt")), text).expect("write");
    }
    env
}

/// The editor asks for control back while its turn runs and the handover waits for it:
/// either it keeps the session (the answer says controller and its next prompt runs here)
/// or it is told why not; never "controller" for a session that then moves away.
#[tokio::test]
async fn a_controller_attach_from_the_editor_during_the_handover_is_honest() {
    let env = TestEnv::new(vec![
        slow_answer(&words(20), 100),
        MockReply::text(&["two"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    let mine = attach(&mut editor, 3, &session, "controller").await;
    editor.until(is_answer(2)).await;
    let phone_said = phone.until(is_answer(2)).await;
    if mine["result"]["role"] == "controller" {
        let next = editor
            .call(4, "session/prompt", prompt(&session, "next"))
            .await;
        assert_eq!(
            next["result"]["stopReason"], "end_turn",
            "the editor was answered controller ({mine}); the phone: {phone_said}; then: {next}"
        );
    } else {
        assert!(mine["error"]["message"].is_string(), "{mine}");
    }
}

/// A `/compact` running when the ask comes is a turn too: the session moves once it ended,
/// not in the middle of it.
#[tokio::test]
async fn a_compaction_running_when_asked_for_ends_before_the_session_moves() {
    let env = long_session_env(4).await;
    let mut summary = vec!["## Goal\n".to_string()];
    summary.extend(words(20));
    env.mock
        .script_for_model(SUMMARY_MODEL, vec![slow_answer(&summary, 150)]);
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    for n in 1..=4u64 {
        let ask = format!(
            "step {n}: read f{n}.txt. {}",
            "Explain every change. ".repeat(12)
        );
        let answer = editor
            .call(1 + n, "session/prompt", prompt(&session, &ask))
            .await;
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    }
    env.mock.push(MockReply::text(&["after"]));
    send_prompt(&mut editor, 9, &session, "/compact").await;
    away(600).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    let compacted = editor.until(is_answer(9)).await;
    let summarised = env
        .mock
        .requests()
        .iter()
        .any(|r| r.body["model"] == SUMMARY_MODEL);
    assert!(summarised, "the compaction called its model");
    let asked_at = editor.messages.iter().position(moving);
    let answered_at = editor.messages.iter().position(is_answer(9));
    assert!(
        asked_at.is_some() && asked_at < answered_at,
        "the ask came while the compaction ran"
    );
    assert_eq!(compacted["result"]["stopReason"], "end_turn", "{compacted}");
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let after = phone
        .call(3, "session/prompt", prompt(&session, "after?"))
        .await;
    assert_eq!(after["result"]["stopReason"], "end_turn", "{after}");
    assert_eq!(texts(&phone).last().map(String::as_str), Some("after"));
}

/// A permission question open when the ask comes: the editor answers it there, the turn
/// ends as usual, then the session moves; the file is written once and the phone sees the
/// call.
#[tokio::test]
async fn a_question_open_when_asked_for_is_answered_there_then_the_session_moves() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "out.txt", "content": "one\n"}),
        ),
        MockReply::text(&["written"]),
        MockReply::text(&["phone"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "write one").await;
    let asked = editor
        .until(|m| m["method"] == "session/request_permission")
        .await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))
        .await;
    let answered = editor.until(is_answer(2)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    assert!(
        !phone
            .messages
            .iter()
            .any(|m| m["method"] == "session/request_permission"),
        "the phone is not asked a question already answered"
    );
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    let written = std::fs::read_to_string(env.workspace.path().join("out.txt")).expect("written");
    assert_eq!(written, "one\n");
    // The prompting client is not shown its own prompt.
    assert_eq!(texts(&phone), ["write one", "written", "phone"]);
    let calls = phone
        .messages
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "tool_call")
        .count();
    assert_eq!(calls, 1, "the call shown once: {:?}", phone.messages);
}

// ---------------------------------------------------------------------------------------
// The first process's clients after the move.
// ---------------------------------------------------------------------------------------

/// The editor moves the session to the phone's process, then asks `session/load` of it in
/// its own: it is replayed the session (or told why not), never answered with nothing.
#[tokio::test]
async fn a_load_of_a_moved_session_replays_it_or_says_why() {
    let env = TestEnv::new(vec![MockReply::text(&["one"])]).await;
    let (_running, other, mut editor, session) = prompted_in_one_of_two(&env).await;
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    editor.until(moved).await;
    drain(&mut editor, Duration::from_millis(600)).await;
    let from = editor.messages.len();
    let load = editor
        .call(
            3,
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    let replayed = texts_of(&editor.messages[from..]);
    let said_why = load["error"]["message"].is_string();
    assert!(
        said_why || replayed == ["first", "one"],
        "load answered {load} after replaying {replayed:?}"
    );
}

/// The session moves to the phone's process, where a tablet followed it (as an observer
/// of another process). The tablet then attaches there: it sees each entry once (the
/// record once, then the live updates, not also its old following's).
#[tokio::test]
async fn a_follower_in_the_new_process_that_attaches_there_sees_each_entry_once() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let (_running, other, _editor, session) = prompted_in_one_of_two(&env).await;
    let mut phone = client(&other, "phone").await;
    let mut tablet = client(&other, "tablet").await;
    let followed = attach(&mut tablet, 2, &session, "observer").await;
    assert_eq!(followed["result"]["role"], "observer", "{followed}");
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    // The tablet attaches to it where it now runs (its own process).
    let joined = attach(&mut tablet, 3, &session, "observer").await;
    assert_eq!(joined["result"]["role"], "observer", "{joined}");
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    drain(&mut tablet, Duration::from_millis(1500)).await;
    assert_each_once("tablet", &texts(&tablet));
    assert_eq!(texts(&tablet), ["first", "one", "mine", "two"]);
}

/// A delete of the moved session from the first process, while the phone runs it in its
/// own: refused with a clear error, and the phone's session goes on with its record whole.
#[tokio::test]
async fn a_delete_of_a_moved_session_from_the_first_process_is_refused_and_it_goes_on() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    editor.until(moved).await;
    let deleted = editor
        .call(3, "session/delete", json!({"sessionId": session}))
        .await;
    assert!(
        deleted["error"]["message"].is_string(),
        "a delete of a session running elsewhere: {deleted}"
    );
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    let mut later = client(&other, "later").await;
    let close = phone
        .call(4, "session/close", json!({"sessionId": session}))
        .await;
    assert!(close["result"].is_object(), "{close}");
    let load = later
        .call(
            1,
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    assert!(load["result"].is_object(), "{load}");
    assert_eq!(texts(&later), ["first", "one", "mine", "two"]);
}

/// The first process's other clients during and after the move: one detaches during it
/// (no error), comes back after it as an observer of the other process (shown the record
/// once, then what is new; its prompt refused as elsewhere); the editor closes the moved
/// session and is shown nothing of it any more.
#[tokio::test]
async fn the_first_process_clients_detach_come_back_and_close_around_the_move() {
    let env = TestEnv::new(vec![
        slow_answer(&words(10), 100),
        MockReply::text(&["two"]),
        MockReply::text(&["three"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    let mut browser = client(&running, "browser").await;
    attach(&mut browser, 2, &session, "observer").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    browser.until(moving).await;
    let left = browser
        .call(3, "_session/detach", json!({"sessionId": session}))
        .await;
    assert!(left["result"].is_object(), "{left}");
    editor.until(is_answer(2)).await;
    editor.until(moved).await;
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    // The editor leaves the moved session.
    let closed = editor
        .call(3, "session/close", json!({"sessionId": session}))
        .await;
    assert!(closed["result"].is_object(), "{closed}");
    let editor_saw = editor.messages.len();
    // The browser comes back.
    let from = browser.messages.len();
    let back = attach(&mut browser, 4, &session, "observer").await;
    assert_eq!(back["result"]["role"], "observer", "{back}");
    let whole: String = words(10).concat();
    assert_eq!(
        texts_of(&browser.messages[from..]),
        ["long".to_string(), whole]
    );
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    browser
        .until(|m| m["params"]["update"]["content"]["text"] == "two")
        .await;
    let refused = browser
        .call(5, "session/prompt", prompt(&session, "me?"))
        .await;
    assert!(refused_elsewhere(&refused), "{refused}");
    drain(&mut editor, Duration::from_millis(800)).await;
    assert!(
        !texts_of(&editor.messages[editor_saw..]).contains(&"two".to_string()),
        "the editor closed it, yet is shown it: {:?}",
        &editor.messages[editor_saw..]
    );
    assert_each_once("browser", &texts_of(&browser.messages[from..]));
}

/// The editor, the session's only client, leaves it while the handover waits for its turn
/// (`_session/detach`, which closes it): answered at once, and the phone gets the session
/// (its record whole up to where the turn was cut) and goes on.
#[tokio::test]
async fn the_only_client_leaving_during_the_handover_lets_the_asker_have_it() {
    let env = TestEnv::new(vec![
        slow_answer(&words(40), 100),
        MockReply::text(&["two"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    let left = editor
        .call(3, "_session/detach", json!({"sessionId": session}))
        .await;
    assert!(left["result"].is_object(), "{left}");
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    let seen = texts(&phone);
    assert_eq!(seen.first().map(String::as_str), Some("long"), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("two"), "{seen:?}");
    assert_each_once("phone", &seen);
}

/// The asking client closes its socket normally (its connection ends at once) while it
/// waits: the session is not left claimed by its process and running nowhere; the editor
/// takes it back promptly.
#[tokio::test]
async fn an_asker_that_closes_mid_wait_leaves_no_session_claimed_and_running_nowhere() {
    use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
    let env = TestEnv::new(vec![
        slow_answer(&words(20), 100),
        MockReply::text(&["back"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    let normal = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = futures_util::SinkExt::send(&mut phone.socket, Message::Close(Some(normal))).await;
    drop(phone);
    editor.until(is_answer(2)).await;
    drain(&mut editor, Duration::from_millis(2000)).await;
    let asked = std::time::Instant::now();
    send_attach(&mut editor, 3, &session, "controller").await;
    let back = until_within(&mut editor, Duration::from_secs(75), is_answer(3))
        .await
        .expect("the editor answered");
    let waited = asked.elapsed();
    assert!(
        waited < Duration::from_secs(20) && back["result"]["role"] == "controller",
        "after {waited:?}: {back}"
    );
    let next = editor
        .call(4, "session/prompt", prompt(&session, "back"))
        .await;
    assert_eq!(next["result"]["stopReason"], "end_turn", "{next}");
}

/// A session just opened, whose claim the running process has not written yet (its writer
/// is slow: a failpoint holds the claim 3 s), is asked for: it is still the editor's, so the
/// phone gets it by a handover (or a clear error), never "nobody runs it" while it runs.
#[tokio::test]
async fn a_session_whose_claim_is_not_written_yet_is_still_handed_over() {
    let mut env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    env.extra_env.push((
        "FAILPOINTS".into(),
        "claim::take::before=1*sleep(3000)".into(),
    ));
    let running = start(&env, &[]).await;
    env.extra_env.pop();
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    let editor_prompt = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(
        taken["result"]["role"], "controller",
        "{taken}; the editor's prompt then: {editor_prompt}"
    );
}

/// The runner is slow between its release and its clients' following (a failpoint holds it
/// 2 s after the release): the phone takes the session and prompts meanwhile. The editor,
/// following it there, is still shown the phone's turn (its following starts from what it
/// saw, not from the record read later).
#[tokio::test]
async fn entries_written_there_before_the_runner_follows_are_still_shown() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["one"]),
        MockReply::text(&["two"]),
        MockReply::text(&["three"]),
    ])
    .await;
    env.extra_env.push((
        "FAILPOINTS".into(),
        "close::release::after=1*sleep(2500)".into(),
    ));
    let running = start(&env, &[]).await;
    env.extra_env.pop();
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    away(3000).await;
    let more = phone
        .call(4, "session/prompt", prompt(&session, "more"))
        .await;
    assert_eq!(more["result"]["stopReason"], "end_turn", "{more}");
    let shown = until_within(&mut editor, Duration::from_secs(6), |m| {
        m["params"]["update"]["content"]["text"] == "three"
    })
    .await;
    assert!(shown.is_some(), "the editor follows: {:?}", texts(&editor));
    assert_eq!(texts(&editor), ["one", "mine", "two", "more", "three"]);
}

/// The asking client's socket drops while it waits (its connection stays for the reconnect
/// window): it comes back and gets its attach's answer, with the session in its control.
#[tokio::test]
async fn an_asker_whose_socket_drops_mid_wait_gets_its_answer_on_return() {
    let env = TestEnv::new(vec![
        slow_answer(&words(15), 100),
        MockReply::text(&["two"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    let connection = phone.connection.clone();
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    phone.drop_now();
    editor.until(moved).await;
    away(500).await;
    let mut back = Socket::open(&other, &format!("?connection={connection}"))
        .await
        .expect("back within the window");
    let taken = back.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let mine = back
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
}

/// `session/resume` of a moved session in the first process: a clear error, or the session
/// really resumed here (its prompt runs); never a success for a session that runs elsewhere.
#[tokio::test]
async fn a_resume_of_a_moved_session_is_honest() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    editor.until(moved).await;
    let resumed = editor
        .call(
            3,
            "session/resume",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    if resumed["error"]["message"].is_string() {
        return;
    }
    let next = editor
        .call(4, "session/prompt", prompt(&session, "next"))
        .await;
    assert_eq!(
        next["result"]["stopReason"], "end_turn",
        "resumed: {resumed}; then: {next}"
    );
}

/// The editor asks for the session back the moment it is told it moved (the phone's
/// process is still claiming and reopening it): both attaches are answered promptly, and
/// exactly one of the two runs the session.
#[tokio::test]
async fn an_ask_back_the_moment_it_moved_is_answered_promptly() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moved).await;
    send_attach(&mut editor, 3, &session, "controller").await;
    let started = std::time::Instant::now();
    let long = Duration::from_secs(75);
    let (phone_said, editor_said) = tokio::join!(
        until_within(&mut phone, long, is_answer(2)),
        until_within(&mut editor, long, is_answer(3))
    );
    let waited = started.elapsed();
    let phone_said = phone_said.expect("the phone answered");
    let editor_said = editor_said.expect("the editor answered");
    assert!(
        waited < Duration::from_secs(20),
        "answered after {waited:?}: {phone_said} / {editor_said}"
    );
    // Whoever has it last prompts it; the other is refused.
    let editor_has = editor_said["result"]["role"] == "controller";
    let (mut owner, mut loser) = if editor_has {
        (editor, phone)
    } else {
        (phone, editor)
    };
    away(1500).await;
    let mine = owner
        .call(7, "session/prompt", prompt(&session, "mine"))
        .await;
    let theirs = loser
        .call(7, "session/prompt", prompt(&session, "theirs"))
        .await;
    assert_eq!(
        mine["result"]["stopReason"], "end_turn",
        "editor had it: {editor_has}; {mine}; the other: {theirs}"
    );
    assert!(theirs["error"].is_object(), "{theirs}");
}

/// The phone's process is killed (-9) while it waits: the editor keeps the session (nobody
/// waits for it any more), not closed for nobody and told it moved to a dead client.
#[tokio::test]
async fn an_asker_killed_mid_wait_leaves_the_session_where_it_runs() {
    let env = TestEnv::new(vec![
        slow_answer(&words(15), 100),
        MockReply::text(&["two"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    drop(phone);
    drop(other);
    editor.until(is_answer(2)).await;
    drain(&mut editor, Duration::from_millis(1500)).await;
    let next = editor
        .call(3, "session/prompt", prompt(&session, "next"))
        .await;
    assert_eq!(next["result"]["stopReason"], "end_turn", "{next}");
}

/// The editor deletes the session while the phone waits for it: the phone is told, promptly
/// and clearly, that it is gone (not handed a deleted session, not left waiting 60 s).
#[tokio::test]
async fn a_session_is_not_deleted_while_the_asker_waits_and_the_asker_gets_it() {
    let env = TestEnv::new(vec![slow_answer(&words(30), 100)]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    // Being handed over, it is not deleted by its controller.
    let refused = editor
        .call(3, "session/delete", json!({"sessionId": session}))
        .await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    // Nor, all along the handover, by a client of either process that is not attached.
    let mut stranger = client(&running, "stranger").await;
    let mut other_stranger = client(&other, "other stranger").await;
    let done = std::sync::atomic::AtomicBool::new(false);
    let deletes = async {
        let mut tries = 0;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            tries += 1;
            for socket in [&mut stranger, &mut other_stranger] {
                let refused = socket
                    .call(tries, "session/delete", json!({"sessionId": session}))
                    .await;
                assert!(refused["error"].is_object(), "try {tries}: {refused}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tries
    };
    let answered = async {
        let said = until_within(&mut phone, Duration::from_secs(75), is_answer(2)).await;
        done.store(true, std::sync::atomic::Ordering::Release);
        said.expect("the phone answered")
    };
    let (tries, said) = tokio::join!(deletes, answered);
    assert!(tries > 1, "{tries}");
    assert_eq!(said["result"]["role"], "controller", "{said}");
    let listed = phone.call(3, "session/list", json!({})).await;
    assert!(listed.to_string().contains(&session), "{listed}");
}

/// The session's mode (set by the editor) is the mode it runs in after the move.
#[tokio::test]
async fn the_mode_set_before_the_move_is_the_mode_after_it() {
    let env = TestEnv::new(vec![MockReply::text(&["one"])]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let mut editor = client(&running, "editor").await;
    let opened = editor
        .call(
            1,
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    let session = opened["result"]["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    let modes = &opened["result"]["modes"];
    let current = modes["currentModeId"].as_str().expect("a mode").to_string();
    let other_mode = modes["availableModes"]
        .as_array()
        .expect("modes")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .find(|m| *m != current && *m != "yolo")
        .expect("another mode")
        .to_string();
    let set = editor
        .call(
            2,
            "session/set_mode",
            json!({"sessionId": session, "modeId": other_mode}),
        )
        .await;
    assert!(set["result"].is_object(), "{set}");
    let first = editor
        .call(3, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    assert_eq!(
        taken["result"]["modes"]["currentModeId"],
        other_mode.as_str(),
        "{taken}"
    );
}

// ---------------------------------------------------------------------------------------
// Crashes, contention, holders that never let go, bad input.
// ---------------------------------------------------------------------------------------

/// The running process is killed (-9) as it closes the session for the handover: the asker
/// still gets it (the kernel drops the claim) and goes on with the record.
#[tokio::test]
async fn the_runner_killed_mid_handover_still_lets_the_asker_take_it() {
    let mut env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    env.extra_env
        .push(("TALARIA_CRASH_AT".into(), "close::release::before".into()));
    let running = start(&env, &[]).await;
    env.extra_env.pop();
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let mut phone = client(&other, "phone").await;
    let taken = attach(&mut phone, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    assert_eq!(texts(&phone), ["first", "one", "two"]);
    drop(running);
}

/// The runner killed while its turn runs and the phone waits: the phone's attach is
/// answered (the claim is free), never left hanging.
#[tokio::test]
async fn the_runner_killed_mid_turn_while_asked_still_answers_the_asker() {
    let env = TestEnv::new(vec![
        slow_answer(&words(40), 100),
        MockReply::text(&["two"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    drop(editor);
    drop(running);
    let taken = phone.until(is_answer(2)).await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    assert_each_once("phone", &texts(&phone));
}

/// A controller attach for a session nobody ever made, for a deleted one, and with no
/// session id: each a clear error, at once.
#[tokio::test]
async fn a_controller_attach_for_an_unknown_or_deleted_session_is_a_clear_error() {
    let env = TestEnv::new(vec![]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let mut phone = client(&other, "phone").await;
    let unknown = attach(
        &mut phone,
        2,
        "00000000-0000-4000-8000-000000000000",
        "controller",
    )
    .await;
    assert!(unknown["error"]["message"].is_string(), "{unknown}");
    let odd = attach(&mut phone, 3, "../../etc/passwd", "controller").await;
    assert!(odd["error"]["message"].is_string(), "{odd}");
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    let closed = editor
        .call(2, "session/close", json!({"sessionId": session}))
        .await;
    assert!(closed["result"].is_object(), "{closed}");
    let deleted = editor
        .call(3, "session/delete", json!({"sessionId": session}))
        .await;
    assert!(deleted["result"].is_object(), "{deleted}");
    let gone = attach(&mut phone, 4, &session, "controller").await;
    assert!(gone["error"]["message"].is_string(), "{gone}");
    let missing = phone
        .call(5, "_session/attach", json!({"role": "controller"}))
        .await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    // The phone's process goes on.
    let fresh = phone
        .call(
            6,
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    assert!(fresh["result"]["sessionId"].is_string(), "{fresh}");
}

/// A stdio `talaria acp` holds the session: the controller attach is refused once the wait
/// (`[store] handover_wait_secs`, 3 s here) is over, naming the holder and the wait, not
/// before it; the ask is withdrawn and the stdio session goes on.
#[tokio::test]
async fn an_ask_for_a_session_a_stdio_agent_holds_is_refused_after_the_wait() {
    let env = TestEnv::new(vec![MockReply::text(&["still here"])]).await;
    env.write_config("[store]\nhandover_wait_secs = 3\n");
    let (mut agent, session) = env.session().await;
    let other = start(&env, &[]).await;
    let mut phone = client(&other, "phone").await;
    let asked = std::time::Instant::now();
    send_attach(&mut phone, 2, &session, "controller").await;
    let refused = until_within(&mut phone, Duration::from_secs(30), is_answer(2))
        .await
        .expect("an answer within the wait");
    assert!(asked.elapsed() >= Duration::from_secs(3), "{refused}");
    let said = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("pid"), "names the holder: {refused}");
    assert!(said.contains("within 3 s"), "names the wait: {refused}");
    let (answer, _) = crate::support::prompt(&mut agent, &session, "go on").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
}

/// Two processes ask for the session while its turn runs: exactly one gets it; the other's
/// attach is answered too (a clear error, or the session once handed on again), and the
/// editor is told where it went.
#[tokio::test]
async fn two_processes_asking_at_once_one_wins_and_the_other_is_answered() {
    let env = TestEnv::new(vec![
        slow_answer(&words(20), 100),
        MockReply::text(&["two"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let second = start(&env, &[]).await;
    let third = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&second, "phone").await;
    let mut tablet = client(&third, "tablet").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    send_attach(&mut tablet, 2, &session, "controller").await;
    editor.until(is_answer(2)).await;
    let told = editor.until(moved).await;
    let to = told["params"]["update"]["_meta"]["talaria/attachment"]["handover"]["to"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let long = Duration::from_secs(75);
    let (phone_said, tablet_said) = tokio::join!(
        until_within(&mut phone, long, is_answer(2)),
        until_within(&mut tablet, long, is_answer(2))
    );
    let phone_said = phone_said.expect("the phone answered");
    let tablet_said = tablet_said.expect("the tablet answered");
    let won: Vec<&str> = [("phone", &phone_said), ("tablet", &tablet_said)]
        .into_iter()
        .filter(|(_, said)| said["result"]["role"] == "controller")
        .map(|(name, _)| name)
        .collect();
    assert!(!won.is_empty(), "{phone_said} / {tablet_said}");
    for said in [&phone_said, &tablet_said] {
        assert!(
            said["result"]["role"] == "controller" || said["error"]["message"].is_string(),
            "{said}"
        );
    }
    assert!(
        won.contains(&to.as_str()),
        "the editor was told {to:?}; won: {won:?}"
    );
}

/// Two clients of the same process ask for the session at once: it runs once there, with
/// both attached to it (one in control), not twice (each its own actor of one session).
#[tokio::test]
async fn two_clients_of_one_process_asking_at_once_share_one_session_there() {
    let env = TestEnv::new(vec![
        slow_answer(&words(10), 100),
        MockReply::text(&["two"]),
        MockReply::text(&["three"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    let mut tablet = client(&other, "tablet").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    send_attach(&mut tablet, 2, &session, "controller").await;
    let long = Duration::from_secs(75);
    let started = std::time::Instant::now();
    let (phone_said, tablet_said) = tokio::join!(
        until_within(&mut phone, long, is_answer(2)),
        until_within(&mut tablet, long, is_answer(2))
    );
    let waited = started.elapsed();
    let phone_said = phone_said.expect("the phone answered");
    let tablet_said = tablet_said.expect("the tablet answered");
    assert!(
        waited < Duration::from_secs(20),
        "both answered only after {waited:?}: {phone_said} / {tablet_said}"
    );
    let (mut controller, mut observer) = match (
        phone_said["result"]["role"].as_str(),
        tablet_said["result"]["role"].as_str(),
    ) {
        (Some("controller"), _) => (phone, tablet),
        (_, Some("controller")) => (tablet, phone),
        _ => panic!("nobody got it: {phone_said} / {tablet_said}"),
    };
    // The other was told at once that a take-over was under way; it then joins the session
    // that now runs in its own process.
    let refused = if phone_said["result"]["role"] == "controller" {
        &tablet_said
    } else {
        &phone_said
    };
    if refused.get("error").is_some() {
        let said = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("being taken over already"), "{refused}");
        let joined = attach(&mut observer, 9, &session, "observer").await;
        assert_eq!(joined["result"]["role"], "observer", "{joined}");
    }
    let mine = controller
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    let seen = until_within(&mut observer, Duration::from_secs(5), |m| {
        m["params"]["update"]["content"]["text"] == "two"
    })
    .await;
    assert!(
        seen.is_some(),
        "the other client of that process does not see the session its neighbour runs: \
         {phone_said} / {tablet_said}"
    );
    // The other client's prompt is refused or runs in the same session (never a second run).
    let theirs = observer
        .call(3, "session/prompt", prompt(&session, "theirs"))
        .await;
    if theirs["result"]["stopReason"] == "end_turn" {
        until_within(&mut controller, Duration::from_secs(5), |m| {
            m["params"]["update"]["content"]["text"] == "three"
        })
        .await
        .expect("one session: the controller sees the other's turn");
    } else {
        assert_eq!(theirs["error"]["code"], -32003, "{theirs}");
    }
}

/// One client sends its controller attach twice at once (a double click): the session runs
/// once (one answer per prompt, each entry stored once), and the second attach is answered
/// as soon as the session is here, not after the whole wait.
#[tokio::test]
async fn a_double_controller_attach_from_one_client_runs_the_session_once() {
    let env = TestEnv::new(vec![
        slow_answer(&words(10), 100),
        MockReply::text(&["two"]),
    ])
    .await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    send_attach(&mut phone, 3, &session, "controller").await;
    let first = phone.until(is_answer(2)).await;
    assert_eq!(first["result"]["role"], "controller", "{first}");
    let here = std::time::Instant::now();
    let mine = phone
        .call(4, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
    let second = match phone.messages.iter().find(|m| is_answer(3)(m)).cloned() {
        Some(answered) => answered,
        None => until_within(&mut phone, Duration::from_secs(75), is_answer(3))
            .await
            .expect("the second attach answered"),
    };
    let waited = here.elapsed();
    let answers = phone.messages.iter().filter(|m| is_answer(4)(m)).count();
    assert_eq!(answers, 1, "{:?}", phone.messages);
    let twos = texts(&phone).iter().filter(|t| *t == "two").count();
    assert_eq!(twos, 1, "{:?}", texts(&phone));
    let closed = phone
        .call(5, "session/close", json!({"sessionId": session}))
        .await;
    assert!(closed["result"].is_object(), "{closed}");
    let mut later = client(&running, "later").await;
    let load = later
        .call(
            1,
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    assert!(load["result"].is_object(), "{load}");
    let whole: String = words(10).concat();
    assert_eq!(
        texts(&later),
        ["long".to_string(), whole, "mine".into(), "two".into()]
    );
    // Answered at once: the take-over under way is said (or, once here, control).
    let said = second["error"]["message"].as_str().unwrap_or_default();
    assert!(
        waited < Duration::from_secs(20)
            && (second["result"]["role"] == "controller"
                || said.contains("being taken over already")),
        "the second attach, {waited:?} after the session was here: {second}"
    );
}

// ---------------------------------------------------------------------------------------
// Two hosts on one PostgreSQL database.
// ---------------------------------------------------------------------------------------

/// On PostgreSQL, the running host killed (-9) mid-turn while another asks: the asker's
/// attach is answered once the database drops the dead host's claim, and it goes on.
#[tokio::test]
async fn on_postgresql_the_runner_killed_mid_turn_while_asked_still_answers_the_asker() {
    let (_cluster, url) = throwaway_database().await;
    let first = host(&url, vec![slow_answer(&words(40), 100)]).await;
    let second = host(&url, vec![MockReply::text(&["two"])]).await;
    let running = start(&first, &[]).await;
    let other = start(&second, &[]).await;
    let (mut editor, session) = with_session(&running, &first, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    drop(editor);
    drop(running);
    let taken = until_within(&mut phone, Duration::from_secs(70), is_answer(2))
        .await
        .expect("the phone answered");
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    let mine = phone
        .call(3, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(mine["result"]["stopReason"], "end_turn", "{mine}");
}

/// On PostgreSQL, the asking host killed (-9) mid-wait: its ask stays, and the host that
/// takes the session next hands it to nobody.
#[tokio::test]
async fn on_postgresql_an_asker_killed_mid_wait_leaves_no_ask_behind() {
    let (_cluster, url) = throwaway_database().await;
    let first = host(&url, vec![slow_answer(&words(15), 100)]).await;
    let second = host(&url, vec![]).await;
    let third = host(
        &url,
        vec![MockReply::text(&["back"]), MockReply::text(&["again"])],
    )
    .await;
    let running = start(&first, &[]).await;
    let other = start(&second, &[]).await;
    let later = start(&third, &[]).await;
    let (mut editor, session) = with_session(&running, &first, "editor").await;
    send_prompt(&mut editor, 2, &session, "long").await;
    editor.until(chunk).await;
    let mut phone = client(&other, "phone").await;
    send_attach(&mut phone, 2, &session, "controller").await;
    editor.until(moving).await;
    drop(phone);
    drop(other);
    editor.until(is_answer(2)).await;
    drain(&mut editor, Duration::from_millis(1500)).await;
    let mut laptop = client(&later, "laptop").await;
    let taken = attach(&mut laptop, 2, &session, "controller").await;
    assert_eq!(taken["result"]["role"], "controller", "{taken}");
    laptop
        .call(3, "session/prompt", prompt(&session, "back"))
        .await;
    drain(&mut laptop, Duration::from_millis(1500)).await;
    let again = laptop
        .call(4, "session/prompt", prompt(&session, "again"))
        .await;
    assert!(!laptop.messages.iter().any(moving), "{again}");
    assert_eq!(again["result"]["stopReason"], "end_turn", "{again}");
}
