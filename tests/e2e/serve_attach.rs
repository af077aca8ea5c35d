//! Many clients on one session of a `talaria serve`: clients attached with `_session/attach`
//! see the same updates in the same order (one attaching mid-answer first sees the answer so
//! far, then the rest, nothing twice); a permission question goes to every client, the first
//! answer wins and every client is told who answered; control is handed over and back, an
//! observer's prompt is refused with a clear error, a controller that leaves hands control to
//! the longest-attached observer; no client deletes a session another is attached to; an
//! observer that drops mid-answer resumes exactly, and one whose point is gone gets 410 with
//! the turn's state.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::serve_support::*;
use crate::support::*;

/// A streamed answer of `words`, `delay_ms` apart.
pub(crate) fn slow_answer(words: &[String], delay_ms: u64) -> MockReply {
    MockReply::Text {
        chunks: words.to_vec(),
        reasoning: Vec::new(),
        delay_ms,
        usage: None,
        finish_reason: None,
    }
}

pub(crate) fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// A WebSocket client of `served`, initialized as `name`.
pub(crate) async fn client(served: &Served, name: &str) -> Socket {
    let mut socket = Socket::open(served, "").await.expect("opened");
    let init = socket
        .call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": name, "version": "1"}}),
        )
        .await;
    assert!(
        init["result"]["_meta"]["sessionAttach"]["attach"] == "_session/attach",
        "{init}"
    );
    socket
}

/// A client with a new session: the client and the session's id.
pub(crate) async fn with_session(served: &Served, env: &TestEnv, name: &str) -> (Socket, String) {
    let mut socket = client(served, name).await;
    let opened = socket
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
    (socket, session)
}

/// Two `talaria serve` processes on one home and a session the editor opened in the first
/// and prompted once ("first", answered): where the tests of following a session from
/// another process, handing it over and deleting it start. The two processes, the editor
/// and the session's id.
pub(crate) async fn prompted_in_one_of_two(env: &TestEnv) -> (Served, Served, Socket, String) {
    let running = start(env, &[]).await;
    let other = start(env, &[]).await;
    let (mut editor, session) = with_session(&running, env, "editor").await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    (running, other, editor, session)
}

/// Attaches `socket` to `session` as `role`; the answer.
pub(crate) async fn attach(socket: &mut Socket, id: u64, session: &str, role: &str) -> Value {
    socket
        .call(
            id,
            "_session/attach",
            json!({"sessionId": session, "role": role}),
        )
        .await
}

/// The updates a client got, without the transport's cursor, from `from` on.
pub(crate) fn updates(messages: &[Value], from: usize) -> Vec<Value> {
    messages[from..]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .map(|mut u| {
            if let Some(meta) = u.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.remove("acp/cursor");
            }
            u
        })
        .collect()
}

/// The updates of the session's work (not who is attached, not the slash commands).
pub(crate) fn work(updates: Vec<Value>) -> Vec<Value> {
    updates
        .into_iter()
        .filter(|u| {
            !matches!(
                u["sessionUpdate"].as_str(),
                Some("session_info_update" | "available_commands_update")
            )
        })
        .collect()
}

pub(crate) fn is_answer(id: u64) -> impl Fn(&Value) -> bool {
    move |m| m["id"] == id && m.get("method").is_none()
}

pub(crate) fn turn_ended(m: &Value) -> bool {
    m["params"]["update"]["_meta"]["talaria/turn"]["state"] == "idle"
}

#[tokio::test]
async fn attached_clients_see_the_same_updates_in_the_same_order_and_a_late_one_the_answer_so_far()
{
    let all = words(200);
    let env = TestEnv::new(vec![slow_answer(&all, 4)]).await;
    let served = start(&env, &[]).await;
    let (mut first, session) = with_session(&served, &env, "editor").await;
    let mut second = client(&served, "browser").await;
    let mut third = client(&served, "phone").await;
    // A load from another connection says to attach instead.
    let load = second
        .call(
            1,
            "session/load",
            json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    let said = load["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("_session/attach"), "{load}");
    let answer = attach(&mut second, 2, &session, "observer").await;
    assert_eq!(answer["result"]["role"], "observer", "{answer}");
    assert!(answer["result"]["modes"].is_object(), "{answer}");
    attach(&mut third, 2, &session, "observer").await;
    let roster = third
        .messages
        .iter()
        .find_map(|m| {
            m["params"]["update"]["_meta"]
                .get("talaria/attachment")
                .cloned()
        })
        .expect("the roster");
    assert_eq!(
        roster["clients"].as_array().map(Vec::len),
        Some(3),
        "{roster}"
    );
    let starts = [
        first.messages.len(),
        second.messages.len(),
        third.messages.len(),
    ];
    first
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt(&session, "count")}))
        .await;
    first
        .until(|m| m["params"]["update"]["content"]["text"] == "w60 ")
        .await;
    // A fourth attaches mid-answer: the session so far first, then the rest.
    let mut late = client(&served, "terminal").await;
    let late_start = late.messages.len();
    attach(&mut late, 2, &session, "observer").await;
    first.until(is_answer(7)).await;
    assert_eq!(
        first.messages.last().expect("answer")["result"]["stopReason"],
        "end_turn"
    );
    for observer in [&mut second, &mut third, &mut late] {
        observer.until(turn_ended).await;
    }
    let seen: Vec<Vec<Value>> = [&first, &second, &third]
        .iter()
        .zip(starts)
        .map(|(client, from)| work(updates(&client.messages, from)))
        .collect();
    // The observers were shown the prompt the first client sent; the rest is the same.
    for observer in &seen[1..] {
        assert_eq!(observer[0]["sessionUpdate"], "user_message_chunk");
        assert_eq!(observer[0]["content"]["text"], "count");
        assert_eq!(
            &observer[1..],
            &seen[0][..],
            "the same updates in the same order"
        );
    }
    assert_eq!(answer_chunks(&first.messages), all);
    let late_seen = work(updates(&late.messages, late_start));
    assert_eq!(
        late_seen[0]["sessionUpdate"], "user_message_chunk",
        "{late_seen:?}"
    );
    assert_eq!(late_seen[0]["content"]["text"], "count");
    let text: String = late_seen
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(
        text,
        all.concat(),
        "the answer so far, then the rest: every word once"
    );
    assert!(
        late.messages.iter().all(|m| cursor_of(m).is_some()),
        "every message carries its cursor"
    );
    // It was told whose turn was running when it attached, as the others were when it began.
    let told: Vec<Value> = updates(&late.messages, late_start)
        .into_iter()
        .filter_map(|u| u["_meta"].get("talaria/turn").cloned())
        .collect();
    assert_eq!(
        told.first().map(|t| t["state"].clone()),
        Some(json!("running")),
        "{told:?}"
    );
    assert_eq!(told[0]["promptedBy"], "client-1", "{told:?}");
}

#[tokio::test]
async fn a_question_goes_to_every_client_the_first_answer_wins_and_all_are_told() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "out.txt", "content": "one\n"}),
        ),
        MockReply::text(&["written"]),
    ])
    .await;
    let served = start(&env, &[]).await;
    let (mut first, session) = with_session(&served, &env, "editor").await;
    let mut second = client(&served, "browser").await;
    let mut third = client(&served, "phone").await;
    attach(&mut second, 2, &session, "observer").await;
    let third_attached = attach(&mut third, 2, &session, "observer").await;
    let second_id = second
        .messages
        .iter()
        .find(|m| m["id"] == 2)
        .and_then(|m| m["result"]["clientId"].as_str())
        .expect("the second's id")
        .to_string();
    assert_ne!(third_attached["result"]["clientId"], second_id.as_str());
    first
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt(&session, "write one")}))
        .await;
    let mut asked = Vec::new();
    for socket in [&mut first, &mut second, &mut third] {
        let ask = socket
            .until(|m| m["method"] == "session/request_permission")
            .await;
        assert_eq!(ask["params"]["toolCall"]["toolCallId"], "w1");
        asked.push(ask);
    }
    // The second answers first.
    second
        .send(json!({"jsonrpc": "2.0", "id": asked[1]["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))
        .await;
    let told = |m: &Value| m["params"]["update"]["_meta"]["talaria/permissionResolved"].is_object();
    for (n, socket) in [&mut first, &mut second, &mut third]
        .into_iter()
        .enumerate()
    {
        let resolved = socket.until(told).await;
        let said = &resolved["params"]["update"]["_meta"]["talaria/permissionResolved"];
        assert_eq!(said["by"]["clientId"], second_id.as_str(), "{resolved}");
        assert_eq!(said["by"]["name"], "browser");
        assert_eq!(said["outcome"]["optionId"], "allow_once");
        assert_eq!(resolved["params"]["update"]["toolCallId"], "w1");
        if n != 1 {
            // The others' questions are withdrawn.
            let withdrawn = socket.messages.iter().any(|m| {
                m["method"] == "$/cancel_request" && m["params"]["requestId"] == asked[n]["id"]
            });
            assert!(
                withdrawn,
                "client {n}: its question withdrawn: {:?}",
                socket.messages
            );
        }
    }
    // A late answer from another client changes nothing.
    first
        .send(json!({"jsonrpc": "2.0", "id": asked[0]["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject_once"}}}))
        .await;
    let answer = first.until(is_answer(7)).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let written = std::fs::read_to_string(env.workspace.path().join("out.txt")).expect("written");
    assert_eq!(written, "one\n");
}

#[tokio::test]
async fn control_is_handed_over_twice_and_an_observers_prompt_is_refused() {
    let env = TestEnv::new(vec![
        MockReply::text(&["from the browser"]),
        MockReply::text(&["from the editor"]),
    ])
    .await;
    let served = start(&env, &[]).await;
    let (mut editor, session) = with_session(&served, &env, "editor").await;
    let mut browser = client(&served, "browser").await;
    attach(&mut browser, 2, &session, "observer").await;
    // An observer's prompt is refused, and says what to do.
    let refused = browser
        .call(3, "session/prompt", prompt(&session, "hi"))
        .await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    let message = refused["error"]["message"].as_str().expect("message");
    assert!(message.contains("must take control first"), "{message}");
    assert_eq!(refused["error"]["data"]["talaria"]["mustTakeControl"], true);
    let mode = browser
        .call(
            4,
            "session/set_mode",
            json!({"sessionId": session, "modeId": "plan"}),
        )
        .await;
    assert_eq!(mode["error"]["code"], -32003, "{mode}");
    // The browser takes control: the editor is told and observes.
    let took = attach(&mut browser, 5, &session, "controller").await;
    assert_eq!(took["result"]["role"], "controller", "{took}");
    let roster = editor
        .until(|m| {
            m["params"]["update"]["_meta"]["talaria/attachment"]["controller"]
                == took["result"]["clientId"]
        })
        .await;
    let roster = &roster["params"]["update"]["_meta"]["talaria/attachment"];
    assert!(roster["previousController"].is_string(), "{roster}");
    let refused = editor
        .call(6, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    let answered = browser
        .call(7, "session/prompt", prompt(&session, "go"))
        .await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    // The editor saw the browser's prompt and its answer, and how the turn ended.
    editor.until(turn_ended).await;
    assert!(
        answer_chunks(&editor.messages)
            .concat()
            .contains("from the browser")
    );
    // And takes it back.
    let back = attach(&mut editor, 8, &session, "controller").await;
    assert_eq!(back["result"]["role"], "controller", "{back}");
    browser
        .until(|m| {
            m["params"]["update"]["_meta"]["talaria/attachment"]["controller"]
                == back["result"]["clientId"]
        })
        .await;
    let refused = browser
        .call(9, "session/prompt", prompt(&session, "again"))
        .await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    let answered = editor
        .call(10, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
}

#[tokio::test]
async fn no_client_deletes_a_session_another_client_is_attached_to() {
    let env = TestEnv::new(vec![MockReply::text(&["still here"])]).await;
    let served = start(&env, &[]).await;
    let (mut editor, session) = with_session(&served, &env, "editor").await;
    let mut browser = client(&served, "browser").await;
    attach(&mut browser, 2, &session, "observer").await;
    let mut stranger = client(&served, "stranger").await;
    // Refused to the observer, to a client not attached and to the controller alike.
    let askers = [
        (&mut browser, 3, 1),
        (&mut stranger, 1, 2),
        (&mut editor, 2, 1),
    ];
    for (socket, id, others) in askers {
        let refused = socket
            .call(id, "session/delete", json!({"sessionId": session}))
            .await;
        assert_eq!(refused["error"]["code"], -32003, "{refused}");
        let message = refused["error"]["message"].as_str().expect("message");
        assert!(
            message.contains(&format!("{others} other client(s) are attached")),
            "{message}"
        );
        assert_eq!(
            refused["error"]["data"]["talaria"]["othersAttached"],
            others
        );
    }
    // The session goes on, for both.
    let answered = editor
        .call(4, "session/prompt", prompt(&session, "go"))
        .await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    browser.until(turn_ended).await;
    // Once the observer has left, its controller deletes it.
    let left = browser
        .call(4, "session/close", json!({"sessionId": session}))
        .await;
    assert!(left["result"].is_object(), "{left}");
    let deleted = editor
        .call(5, "session/delete", json!({"sessionId": session}))
        .await;
    assert!(deleted["result"].is_object(), "{deleted}");
    let listed = stranger.call(3, "session/list", json!({})).await;
    assert!(listed["result"]["sessions"].is_array(), "{listed}");
    assert!(!listed.to_string().contains(&session), "{listed}");
}

#[tokio::test]
async fn a_controller_that_leaves_hands_control_to_the_longest_attached_observer() {
    // It detaches, or its client closes its socket (its connection ends).
    for closes in [false, true] {
        let env = TestEnv::new(vec![MockReply::text(&["still here"])]).await;
        let served = start(&env, &[]).await;
        let (mut editor, session) = with_session(&served, &env, "editor").await;
        let mut browser = client(&served, "browser").await;
        let mut phone = client(&served, "phone").await;
        let browser_id =
            attach(&mut browser, 2, &session, "observer").await["result"]["clientId"].clone();
        attach(&mut phone, 2, &session, "observer").await;
        if closes {
            use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
            let normal = CloseFrame {
                code: CloseCode::Normal,
                reason: "done".into(),
            };
            editor.socket.close(Some(normal)).await.expect("closed");
        } else {
            let detached = editor
                .call(3, "_session/detach", json!({"sessionId": session}))
                .await;
            assert!(detached["result"].is_object(), "{detached}");
        }
        // The session goes on for the others; control passed to the longest attached.
        phone
            .until(|m| {
                m["params"]["update"]["_meta"]["talaria/attachment"]["controller"] == browser_id
            })
            .await;
        let refused = phone
            .call(4, "session/prompt", prompt(&session, "me?"))
            .await;
        assert_eq!(refused["error"]["code"], -32003, "{refused}");
        let answered = browser
            .call(5, "session/prompt", prompt(&session, "on"))
            .await;
        assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
        if !closes {
            let gone = editor
                .call(6, "session/prompt", prompt(&session, "mine"))
                .await;
            assert!(
                gone["error"].is_object(),
                "a detached client holds no session: {gone}"
            );
        }
        // What the session did after the hand-over is saved: the last ones leave, and a new
        // client loads it.
        for socket in [&mut browser, &mut phone] {
            let left = socket
                .call(7, "_session/detach", json!({"sessionId": session}))
                .await;
            assert!(left["result"].is_object(), "{left}");
        }
        let mut later = client(&served, "later").await;
        let loaded = later
            .call(
                1,
                "session/load",
                json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []}),
            )
            .await;
        assert!(loaded["result"].is_object(), "{loaded}");
        assert_eq!(answer_chunks(&later.messages).concat(), "still here");
    }
}

#[tokio::test]
async fn an_observer_offline_mid_answer_resumes_exactly_and_a_gone_point_is_410() {
    let all = words(300);
    let env = TestEnv::new(vec![slow_answer(&all, 4)]).await;
    let served = start(&env, &[]).await;
    let (mut editor, session) = with_session(&served, &env, "editor").await;
    // The observer over HTTP, on the session's own stream.
    let (observer, _) = HttpClient::initialize(&served, None).await;
    let mut stream = observer
        .open(Some(&session), None)
        .await
        .expect("the session's stream");
    observer
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "_session/attach", "params": {"sessionId": session, "role": "observer"}}))
        .await;
    stream
        .until(|e| e.message["id"] == 2 && e.message.get("method").is_none())
        .await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt(&session, "count")}))
        .await;
    let mut seen = stream
        .until(|e| e.message["params"]["update"]["content"]["text"] == "w40 ")
        .await;
    // Offline while the answer streams on.
    away(300).await;
    drop(stream);
    // A point that is not one of this stream's: 410 and the turn's state (the other
    // client's turn runs), never a gap.
    let refused = observer
        .open(Some(&session), Some("not-a-cursor.5"))
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.status(), 410);
    let body: Value = serde_json::from_str(&refused.text().await.expect("body")).expect("JSON");
    let state = &body["_meta"]["acp/turnState"];
    assert_eq!(state["state"], "running", "{body}");
    assert!(state["promptedBy"].is_string(), "{body}");
    let point = seen
        .last()
        .and_then(|e| e.id.clone())
        .expect("events carry ids");
    let mut again = observer
        .open(Some(&session), Some(&point))
        .await
        .expect("resumed: 200");
    seen.extend(again.until(|e| turn_ended(&e.message)).await);
    let got: Vec<Value> = seen.iter().map(|e| e.message.clone()).collect();
    assert_eq!(answer_chunks(&got), all, "every word once, in order");
    let ids: Vec<u64> = seen
        .iter()
        .filter_map(|e| e.id.as_deref()?.rsplit('.').next()?.parse().ok())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "contiguous cursors {ids:?}"
    );
    editor.until(is_answer(7)).await;
    drop(again);
    let refused = observer
        .open(Some(&session), Some("not-a-cursor.5"))
        .await
        .err()
        .expect("refused");
    let body: Value = serde_json::from_str(&refused.text().await.expect("body")).expect("JSON");
    assert_eq!(
        body["_meta"]["acp/turnState"]["stopReason"], "end_turn",
        "{body}"
    );
}

#[tokio::test]
async fn an_observer_in_a_second_process_follows_a_session_entry_by_entry() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let running = start(&env, &[]).await;
    // A second server on the same home and store.
    let following = start(&env, &[]).await;
    let (mut editor, session) = with_session(&running, &env, "editor").await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let mut phone = client(&following, "phone").await;
    let attached = attach(&mut phone, 2, &session, "observer").await;
    assert_eq!(attached["result"]["role"], "observer", "{attached}");
    // The session so far, before the answer.
    let shown = updates(&phone.messages, 0);
    let texts: Vec<&str> = shown
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(texts, ["first", "one"], "{shown:?}");
    // Then what the other process's session does.
    let second = editor
        .call(3, "session/prompt", prompt(&session, "second"))
        .await;
    assert_eq!(second["result"]["stopReason"], "end_turn", "{second}");
    phone
        .until(|m| m["params"]["update"]["content"]["text"] == "two")
        .await;
    let texts: Vec<String> = updates(&phone.messages, 0)
        .iter()
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(texts, ["first", "one", "second", "two"]);
    // It observes: no prompt from here (taking control moves the session: serve_takeover).
    let refused = phone
        .call(4, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    // Nor is it deleted from here, under the process that runs it.
    let refused = phone
        .call(5, "session/delete", json!({"sessionId": session}))
        .await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    assert_eq!(refused["error"]["data"]["talaria"]["elsewhere"], true);
    let left = phone
        .call(6, "_session/detach", json!({"sessionId": session}))
        .await;
    assert!(left["result"].is_object(), "{left}");
}

#[tokio::test]
async fn a_controller_that_drops_keeps_control_for_the_reconnect_window_then_it_passes_on() {
    let env = TestEnv::new(vec![
        MockReply::text(&["back"]),
        MockReply::text(&["mine now"]),
    ])
    .await;
    let served = start(&env, &["--reconnect-window", "3"]).await;
    let (editor, session) = with_session(&served, &env, "editor").await;
    let editor_connection = editor.connection.clone();
    let mut browser = client(&served, "browser").await;
    let browser_id =
        attach(&mut browser, 2, &session, "observer").await["result"]["clientId"].clone();
    // The editor's socket drops as a network drops it: its connection, and control, wait.
    editor.drop_now();
    away(500).await;
    let refused = browser
        .call(3, "session/prompt", prompt(&session, "me?"))
        .await;
    assert_eq!(
        refused["error"]["code"], -32003,
        "control is kept meanwhile: {refused}"
    );
    // It comes back within the window: still in control.
    let mut back = Socket::open(&served, &format!("?connection={editor_connection}"))
        .await
        .expect("taken back");
    let answered = back
        .call(4, "session/prompt", prompt(&session, "again"))
        .await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    // It drops again and stays away past the window: control passes to the browser.
    back.drop_now();
    browser
        .until(|m| m["params"]["update"]["_meta"]["talaria/attachment"]["controller"] == browser_id)
        .await;
    let answered = browser
        .call(5, "session/prompt", prompt(&session, "mine"))
        .await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
}
