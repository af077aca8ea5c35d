//! Session actor tests against a scripted in-process provider.

use std::sync::Arc;

use std::time::Duration;
use tokio_util::sync::CancellationToken;

use talaria_provider::{FinishReason, ModelMessage, StreamEvent, ToolCallRequest, Transcript};
use tokio::sync::mpsc;

use crate::client::{PermissionAnswer, PermissionChoice};
use crate::testkit::{ScriptedClient, ScriptedProvider as Scripted, Step, calls, text};
use crate::{
    EngineEvent, Mode, SessionHandle, SessionSettings, StopReason, TurnError, TurnId, spawn_session,
};

fn start(
    steps: Vec<Step>,
    cwd: &std::path::Path,
) -> (SessionHandle, mpsc::Receiver<EngineEvent>, Arc<Scripted>) {
    let (session, rx, provider, _) = start_with(steps, cwd, Mode::Ask, vec![]);
    (session, rx, provider)
}

fn start_with(
    steps: Vec<Step>,
    cwd: &std::path::Path,
    mode: Mode,
    answers: Vec<PermissionAnswer>,
) -> (
    SessionHandle,
    mpsc::Receiver<EngineEvent>,
    Arc<Scripted>,
    Arc<ScriptedClient>,
) {
    let provider = Arc::new(Scripted::new(steps));
    let bridge = Arc::new(ScriptedClient::new(answers));
    let router = crate::ModelRouter::single(provider.clone());
    let (handle, rx) = spawn_with(router, bridge.clone(), cwd, mode);
    (handle, rx, provider, bridge)
}

fn spawn_with(
    router: crate::ModelRouter,
    bridge: Arc<ScriptedClient>,
    cwd: &std::path::Path,
    mode: Mode,
) -> (SessionHandle, mpsc::Receiver<EngineEvent>) {
    spawn_with_registry(router, talaria_tools::builtin_registry(), bridge, cwd, mode)
}

/// A session in `Ask` mode with its settings changed by `change`.
fn spawn_configured(
    router: crate::ModelRouter,
    bridge: Arc<ScriptedClient>,
    cwd: &std::path::Path,
    change: impl FnOnce(&mut SessionSettings),
) -> (SessionHandle, mpsc::Receiver<EngineEvent>) {
    spawn_changed(
        router,
        talaria_tools::builtin_registry(),
        bridge,
        cwd,
        Mode::Ask,
        change,
    )
}

fn spawn_with_registry(
    router: crate::ModelRouter,
    registry: talaria_tools::Registry,
    bridge: Arc<ScriptedClient>,
    cwd: &std::path::Path,
    mode: Mode,
) -> (SessionHandle, mpsc::Receiver<EngineEvent>) {
    spawn_changed(router, registry, bridge, cwd, mode, |_| {})
}

fn spawn_changed(
    router: crate::ModelRouter,
    registry: talaria_tools::Registry,
    bridge: Arc<ScriptedClient>,
    cwd: &std::path::Path,
    mode: Mode,
    change: impl FnOnce(&mut SessionSettings),
) -> (SessionHandle, mpsc::Receiver<EngineEvent>) {
    let (tx, events) = mpsc::channel(64);
    let rx = bridge.attach(events);
    let mut settings = settings_in(cwd, mode);
    change(&mut settings);
    let handle = spawn_session(settings, Arc::new(router), registry, tx);
    (handle, rx)
}

/// The settings of a test session in `cwd`.
fn settings_in(cwd: &std::path::Path, mode: Mode) -> SessionSettings {
    SessionSettings {
        id: "s1".into(),
        cwd: cwd.to_path_buf(),
        model: "m".into(),
        system_prompt: "sys".into(),
        environment: "# Environment\n- Model: m\n".into(),
        context_window: 10_000,
        retry: crate::RetryPolicy {
            max_attempts: 1,
            base_ms: 1,
            cap_ms: 1,
            retry_after_cap_secs: 1,
        },
        max_turn_requests: 3,
        max_output_tokens: None,
        home: cwd.join(".talaria-home"),
        roots: vec![cwd.to_path_buf()],
        mode,
        secrets: crate::approval::SecretReads::for_home(&cwd.join(".talaria-home"), true),
        delegation: crate::client::Delegation::default(),
        titles: false,
        nudges: true,
        verify_after_edits: false,
        compression: talaria_compress::Settings::default(),
        tokenizers: Arc::default(),
        learning: crate::config::Learning::default(),
        review: None,
        subagents: None,
        announce_subagents: false,
        images: true,
        shell: Arc::default(),
        checkpoints: None,
        agents: None,
        single_slot: false,
        hooks: Arc::default(),
    }
}

fn tool_results(transcript: &Transcript) -> Vec<(String, String)> {
    transcript
        .model_messages()
        .iter()
        .filter_map(|m| match m {
            ModelMessage::Tool { call_id, content } => {
                Some((call_id.to_string(), content.to_string()))
            }
            _ => None,
        })
        .collect()
}

/// The next event, past a model call's message id.
async fn next_shown(rx: &mut mpsc::Receiver<EngineEvent>) -> Option<EngineEvent> {
    loop {
        match rx.recv().await {
            Some(EngineEvent::MessageStarts(_) | EngineEvent::PromptRecorded(_)) => continue,
            other => return other,
        }
    }
}

async fn finish_of(
    rx: &mut mpsc::Receiver<EngineEvent>,
    turn: u64,
) -> (Vec<EngineEvent>, Result<StopReason, TurnError>) {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("event in time")
            .expect("open");
        if let EngineEvent::TurnFinished {
            turn: t, outcome, ..
        } = &event
        {
            assert_eq!(*t, TurnId::from(turn), "turns finish in order");
            return (seen, outcome.clone());
        }
        // Titles come after a first turn; tests of titles look for them directly. Each
        // model call's message id is checked by the edge's tests.
        if matches!(
            event,
            EngineEvent::SessionTitle(_)
                | EngineEvent::MessageStarts(_)
                | EngineEvent::PromptRecorded(_)
        ) {
            continue;
        }
        seen.push(event);
    }
}

fn say(s: &str) -> crate::UserInput {
    crate::UserInput::text(s)
}

#[tokio::test]
async fn a_panicking_turn_reports_an_error_and_the_session_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (session, mut rx, provider) = start(vec![Step::Panic, text("fine")], dir.path());
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("boom"))
        .expect("queued");
    let (_, outcome) = finish_of(&mut rx, 1).await;
    assert!(
        matches!(outcome, Err(TurnError::Internal(m)) if m.contains("scripted provider panic"))
    );
    session
        .prompt(TurnId::from(2), CancellationToken::new(), say("again"))
        .expect("queued");
    let (events, outcome) = finish_of(&mut rx, 2).await;
    assert_eq!(outcome, Ok(StopReason::EndTurn));
    assert_eq!(events, vec![EngineEvent::AgentText("fine".into())]);
    // The panicked turn stays in the record, marked as interrupted; the second call sees a
    // valid transcript: system, the first ask, a note that it did not complete, the new ask.
    let seen = provider.transcripts();
    let messages = seen[1].model_messages();
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert!(
        matches!(&messages[2], ModelMessage::Assistant { text, .. } if text.contains("did not complete"))
    );
}

#[tokio::test]
async fn cancel_ends_the_running_turn_and_the_queue_but_not_later_prompts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (session, mut rx, provider) = start(
        vec![
            Step::Hang(vec![StreamEvent::TextDelta("partial".into())]),
            text("after"),
        ],
        dir.path(),
    );
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("long"))
        .expect("queued");
    session
        .prompt(
            TurnId::from(2),
            CancellationToken::new(),
            say("queued behind"),
        )
        .expect("queued");
    assert_eq!(
        next_shown(&mut rx).await,
        Some(EngineEvent::AgentText("partial".into()))
    );
    session.cancel();
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::Cancelled));
    assert_eq!(finish_of(&mut rx, 2).await.1, Ok(StopReason::Cancelled));
    session
        .prompt(TurnId::from(3), CancellationToken::new(), say("next"))
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 3).await.1, Ok(StopReason::EndTurn));
    // The partial answer was kept as an assistant message, marked (once) as cut off, so the
    // model does not take it for a complete one; the cancelled queued prompt never ran.
    let seen = provider.transcripts();
    assert_eq!(seen.len(), 2);
    let messages = seen[1].model_messages();
    assert!(
        matches!(&messages[2], ModelMessage::Assistant { text, .. }
            if text.starts_with("partial\n\n[") && text.matches(talaria_record::CUT_OFF).count() == 1),
        "{messages:?}"
    );
}

/// A withdrawn request ends its own prompt — running, or still queued — and no other.
#[tokio::test]
async fn a_withdrawn_request_ends_its_own_prompt_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (session, mut rx, provider) = start(
        vec![
            Step::Hang(vec![StreamEvent::TextDelta("partial".into())]),
            text("the third answers"),
        ],
        dir.path(),
    );
    let (first, second) = (CancellationToken::new(), CancellationToken::new());
    session
        .prompt(TurnId::from(1), first.clone(), say("long"))
        .expect("queued");
    session
        .prompt(
            TurnId::from(2),
            second.clone(),
            say("withdrawn while queued"),
        )
        .expect("queued");
    session
        .prompt(TurnId::from(3), CancellationToken::new(), say("stays"))
        .expect("queued");
    assert_eq!(
        next_shown(&mut rx).await,
        Some(EngineEvent::AgentText("partial".into()))
    );
    second.cancel();
    first.cancel();
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::Cancelled));
    assert_eq!(finish_of(&mut rx, 2).await.1, Ok(StopReason::Cancelled));
    assert_eq!(finish_of(&mut rx, 3).await.1, Ok(StopReason::EndTurn));
    assert_eq!(
        provider.transcripts().len(),
        2,
        "the withdrawn prompt never ran"
    );
}

#[tokio::test]
async fn tool_results_follow_their_calls_and_the_request_cap_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.txt"), "hello\n").expect("write");
    let call = |id: &str| {
        Step::Events(vec![StreamEvent::Finished {
            reason: FinishReason::ToolCalls,
            tool_calls: vec![
                ToolCallRequest {
                    id: id.into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a.txt\"}".into(),
                },
                ToolCallRequest {
                    id: format!("{id}b"),
                    name: "nope".into(),
                    arguments: "{".into(),
                },
            ],
        }])
    };
    let (session, mut rx, provider) = start(vec![call("c1"), call("c1"), call("c1")], dir.path());
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("read it"))
        .expect("queued");
    let (events, outcome) = finish_of(&mut rx, 1).await;
    assert_eq!(outcome, Ok(StopReason::MaxTurnRequests));
    let started: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::ToolCallPending(view) => Some(view.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        ["c1", "c1b", "c1-2", "c1b-2", "c1-3", "c1b-3"],
        "ids made unique"
    );
    let seen = provider.transcripts();
    let second = seen[1].model_messages();
    assert!(
        matches!(&second[3], ModelMessage::Tool { call_id, content } if *call_id == "c1" && content.contains("1|hello"))
    );
    assert!(
        matches!(&second[4], ModelMessage::Tool { content, .. } if content.starts_with("Error: "))
    );
}

#[tokio::test]
async fn writes_ask_and_always_is_remembered_while_reject_reaches_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |id: &str, content: &str| {
        calls(&[(
            id,
            "write_file",
            serde_json::json!({"path": "a.txt", "content": content}),
        )])
    };
    let (session, mut rx, provider, bridge) = start_with(
        vec![
            write("w1", "one"),
            write("w2", "two"),
            text("done"),
            write("w3", "three"),
            text("ok"),
        ],
        dir.path(),
        Mode::Ask,
        vec![PermissionAnswer::Chosen(PermissionChoice::AllowAlways)],
    );
    session
        .prompt(
            TurnId::from(1),
            CancellationToken::new(),
            say("write twice"),
        )
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::EndTurn));
    assert_eq!(
        bridge.asked.lock().expect("lock").len(),
        1,
        "the second write was covered by allow_always"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).expect("read"),
        "two"
    );
    let asked = bridge.asked.lock().expect("lock")[0].clone();
    assert_eq!(asked.tool_call_id, "w1");
    assert_eq!(asked.choices.len(), 4);
    // A remembered rule is per project and persisted under the home.
    let saved = std::fs::read_to_string(dir.path().join(".talaria-home/permissions.json"))
        .expect("rules saved");
    assert!(saved.contains("edit:"), "{saved}");
    drop(asked);
    // Reject once in a new session: the model is told not to retry.
    let (session, mut rx2, provider2, _) = start_with(
        vec![
            calls(&[("t1", "terminal", serde_json::json!({"command": "echo hi"}))]),
            text("fine"),
        ],
        dir.path(),
        Mode::Ask,
        vec![PermissionAnswer::Chosen(PermissionChoice::RejectOnce)],
    );
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("run"))
        .expect("queued");
    assert_eq!(finish_of(&mut rx2, 1).await.1, Ok(StopReason::EndTurn));
    let seen = provider2.transcripts();
    let results = tool_results(&seen[1]);
    assert!(
        results[0].1.contains("declined") && results[0].1.contains("Do not retry"),
        "{results:?}"
    );
    drop(provider);
}

#[tokio::test]
async fn a_cancelled_permission_prompt_cancels_the_turn_with_valid_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (session, mut rx, provider, _bridge) = start_with(
        vec![
            calls(&[
                ("r", "read_file", serde_json::json!({"path": "x"})),
                ("t", "terminal", serde_json::json!({"command": "echo hi"})),
                (
                    "u",
                    "terminal",
                    serde_json::json!({"command": "echo later"}),
                ),
            ]),
            text("next"),
        ],
        dir.path(),
        Mode::Ask,
        vec![PermissionAnswer::Cancelled],
    );
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("go"))
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::Cancelled));
    session
        .prompt(TurnId::from(2), CancellationToken::new(), say("again"))
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 2).await.1, Ok(StopReason::EndTurn));
    let seen = provider.transcripts();
    let results = tool_results(&seen[1]);
    assert_eq!(
        results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["r", "t", "u"],
        "every call has a result"
    );
    assert!(results[2].1.contains("cancelled"));
}

#[tokio::test]
async fn yolo_runs_commands_but_never_the_floor_and_batches_keep_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["a", "b", "c"] {
        std::fs::write(dir.path().join(name), name).expect("write");
    }
    let (session, mut rx, provider, bridge) = start_with(
        vec![
            calls(&[
                ("1", "read_file", serde_json::json!({"path": "a"})),
                (
                    "2",
                    "terminal",
                    serde_json::json!({"command": "sudo env rm -rf ~"}),
                ),
                ("3", "read_file", serde_json::json!({"path": "b"})),
                ("4", "read_file", serde_json::json!({"path": "c"})),
                ("5", "terminal", serde_json::json!({"command": "echo fine"})),
            ]),
            text("done"),
        ],
        dir.path(),
        Mode::Yolo,
        vec![],
    );
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("go"))
        .expect("queued");
    let (events, outcome) = finish_of(&mut rx, 1).await;
    assert_eq!(outcome, Ok(StopReason::EndTurn));
    assert!(
        bridge.asked.lock().expect("lock").is_empty(),
        "yolo asks nothing"
    );
    let seen = provider.transcripts();
    let results = tool_results(&seen[1]);
    assert_eq!(
        results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["1", "2", "3", "4", "5"]
    );
    assert!(results[1].1.contains("safety floor"), "{:?}", results[1]);
    assert!(results[4].1.contains("fine") && results[4].1.contains("Exit code: 0"));
    // Every call was announced (pending) before any ran.
    let first_running = events
        .iter()
        .position(|e| matches!(e, EngineEvent::ToolCallRunning { .. }))
        .expect("running");
    let pending = events
        .iter()
        .filter(|e| matches!(e, EngineEvent::ToolCallPending(_)))
        .count();
    assert_eq!(pending, 5);
    assert!(
        events[..first_running]
            .iter()
            .filter(|e| matches!(e, EngineEvent::ToolCallPending(_)))
            .count()
            == 5
    );
}

fn scripted_target(provider: Arc<Scripted>, model: &str) -> crate::router::ModelTarget {
    crate::router::ModelTarget {
        limits: crate::router::CallLimits::default(),
        provider,
        model: model.into(),
        pool: Arc::new(crate::credentials::CredentialPool::new(
            Vec::new(),
            crate::credentials::KeyStrategy::FillFirst,
            Duration::from_secs(60),
        )),
    }
}

/// A session with titles on after one turn ("fix the parser"): the events between the
/// turn's end and the title, and the title (the title task runs beside the session).
async fn titled_after_one_turn(
    router: crate::ModelRouter,
    cwd: &std::path::Path,
) -> (SessionHandle, Vec<EngineEvent>, String) {
    let (session, mut rx) = spawn_configured(
        router,
        Arc::new(ScriptedClient::default()),
        cwd,
        |settings| settings.titles = true,
    );
    session
        .prompt(
            TurnId::from(1),
            CancellationToken::new(),
            say("fix the parser"),
        )
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::EndTurn));
    let mut between = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a title in time")
            .expect("open");
        if let EngineEvent::SessionTitle(title) = event {
            return (session, between, title);
        }
        between.push(event);
    }
}

/// Whether any of `events` reached the chat as text, a thought or a notice.
fn reached_the_chat(events: &[EngineEvent]) -> bool {
    events.iter().any(|e| {
        matches!(
            e,
            EngineEvent::AgentText(_) | EngineEvent::AgentThought(_) | EngineEvent::Notice { .. }
        )
    })
}

#[tokio::test]
async fn a_title_runs_on_its_auxiliary_model_and_nothing_of_it_reaches_the_chat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let main = Arc::new(Scripted::new(vec![text("main answer")]));
    let aux = Arc::new(Scripted::new(vec![Step::Events(vec![
        StreamEvent::ReasoningDelta("thinking about a title".into()),
        StreamEvent::TextDelta("A short ".into()),
        StreamEvent::TextDelta("title".into()),
        StreamEvent::Usage(talaria_provider::Usage {
            input_tokens: 40,
            output_tokens: 3,
            ..Default::default()
        }),
        StreamEvent::Finished {
            reason: FinishReason::Stop,
            tool_calls: vec![],
        },
    ])]));
    let router = crate::ModelRouter::single(main.clone()).with_auxiliary(
        "title",
        scripted_target(aux.clone(), "aux-model"),
        Duration::from_secs(5),
    );
    let (session, between, title) = titled_after_one_turn(router, dir.path()).await;
    assert_eq!(title, "A short title");
    // Not one of the title call's deltas (answer or reasoning) reached the chat.
    assert!(!reached_the_chat(&between), "{between:?}");
    assert_eq!(aux.models(), ["aux-model"]);
    assert_eq!(main.models(), ["m"], "the session's model was not asked");
    let asked = &aux.transcripts()[0];
    assert!(matches!(
        asked.model_messages()[0],
        ModelMessage::System(system) if system.contains("title")
    ));
    // Its usage counts in the session's totals.
    let snapshot = session.snapshot().await.expect("snapshot");
    assert_eq!(snapshot.usage.input, 40);
}

#[tokio::test]
async fn without_an_auxiliary_model_the_sessions_model_writes_the_title_unseen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let main = Arc::new(Scripted::new(vec![text("main answer"), text("Parser fix")]));
    let (_session, between, title) =
        titled_after_one_turn(crate::ModelRouter::single(main.clone()), dir.path()).await;
    assert_eq!(title, "Parser fix");
    assert!(!reached_the_chat(&between), "{between:?}");
    assert_eq!(main.models(), ["m", "m"]);
}

#[tokio::test]
async fn settings_go_through_the_actor_and_are_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (session, mut rx, provider) = start(vec![text("one"), text("two")], dir.path());
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("first"))
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::EndTurn));
    session.set_mode(Mode::Yolo);
    session.set_model("m2");
    session
        .prompt(TurnId::from(2), CancellationToken::new(), say("second"))
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 2).await.1, Ok(StopReason::EndTurn));
    // The handle reads what the actor applied (it took both ops before the prompt).
    assert_eq!(session.mode(), Mode::Yolo);
    assert_eq!(session.model(), "m2");
    assert_eq!(provider.models(), ["m", "m2"]);
    // The environment follows the model switch (the instructions stay as they were).
    let second = &provider.transcripts()[1];
    assert_eq!(second.environment(), Some("# Environment\n- Model: m2\n"));
    assert!(matches!(
        second.model_messages()[0],
        ModelMessage::System("sys")
    ));
    let snapshot = session.snapshot().await.expect("snapshot");
    assert_eq!((snapshot.mode, snapshot.model.as_str()), (Mode::Yolo, "m2"));
    let markers: Vec<&talaria_record::EntryBody> = snapshot
        .transcript
        .entries()
        .iter()
        .map(|e| &e.body)
        .filter(|b| {
            matches!(
                b,
                talaria_record::EntryBody::ModeChanged { .. }
                    | talaria_record::EntryBody::ModelChanged { .. }
            )
        })
        .collect();
    assert_eq!(markers.len(), 2, "{markers:?}");
}

#[tokio::test]
async fn a_stream_that_breaks_after_output_restarts_and_only_the_complete_answer_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = talaria_provider::ProviderError::Stream {
        provider: "scripted".into(),
        failure: talaria_provider::StreamFailure::Broken,
        detail: "connection reset".into(),
    };
    let bad_request = talaria_provider::ProviderError::Http {
        provider: "scripted".into(),
        status: 400,
        message: "bad".into(),
        retry_after: None,
        limits: None,
    };
    let (session, mut rx, provider) = start(
        vec![
            Step::FailAfter(vec![StreamEvent::TextDelta("Reading main".into())], broken),
            text("The complete answer."),
            Step::FailAfter(vec![StreamEvent::TextDelta("partial".into())], bad_request),
        ],
        dir.path(),
    );
    session
        .prompt(
            TurnId::from(1),
            CancellationToken::new(),
            say("what does main.py do?"),
        )
        .expect("queued");
    let (events, outcome) = finish_of(&mut rx, 1).await;
    assert_eq!(outcome, Ok(StopReason::EndTurn));
    assert!(
        events.iter().any(
            |e| matches!(e, EngineEvent::Notice { message, .. } if message.contains("abandoned"))
        ),
        "{events:?}"
    );
    let snapshot = session.snapshot().await.expect("snapshot");
    let answers: Vec<String> = snapshot
        .transcript
        .model_messages()
        .iter()
        .filter_map(|m| match m {
            ModelMessage::Assistant { text, .. } => Some(text.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(answers, ["The complete answer."]);
    // The restart is a notice that belongs to the history.
    assert!(snapshot.transcript.entries().iter().any(|e| matches!(
        &e.body,
        talaria_record::EntryBody::Notice { text, .. } if text.contains("abandoned")
    )));
    // A failure that is not transient still ends the turn clearly after output.
    session
        .prompt(TurnId::from(2), CancellationToken::new(), say("again"))
        .expect("queued");
    let (_, outcome) = finish_of(&mut rx, 2).await;
    assert!(
        matches!(&outcome, Err(TurnError::Model(failed @ crate::CallError::CutAfterOutput { .. }))
            if failed.to_string().contains("interrupted after it had started")),
        "{outcome:?}"
    );
    assert_eq!(provider.models().len(), 3);
}

#[tokio::test]
async fn a_dispatch_whitelist_refuses_a_call_without_asking_and_without_side_effects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = Arc::new(Scripted::new(vec![
        calls(&[(
            "w",
            "write_file",
            serde_json::json!({"path": "x.txt", "content": "no"}),
        )]),
        text("ok"),
    ]));
    let bridge = Arc::new(ScriptedClient::default());
    let registry = talaria_tools::builtin_registry().dispatch_only(&["read_file"]);
    let (session, mut rx) = spawn_with_registry(
        crate::ModelRouter::single(provider.clone()),
        registry,
        bridge.clone(),
        dir.path(),
        Mode::Yolo,
    );
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("write"))
        .expect("queued");
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::EndTurn));
    let results = tool_results(&provider.transcripts()[1]);
    assert!(results[0].1.contains("may not be used here"), "{results:?}");
    assert!(!dir.path().join("x.txt").exists());
    assert!(bridge.asked.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_card_opens_when_the_model_starts_a_call_and_an_abandoned_one_is_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.txt"), "hello\n").expect("write");
    let cut = talaria_provider::ProviderError::Stream {
        provider: "scripted".into(),
        failure: talaria_provider::StreamFailure::Broken,
        detail: "connection broke".into(),
    };
    let started = |id: &str| StreamEvent::ToolCallStarted {
        id: id.into(),
        name: "read_file".into(),
    };
    let (session, mut rx, _) = start(
        vec![
            Step::FailAfter(
                vec![StreamEvent::TextDelta("x".into()), started("lost")],
                cut,
            ),
            Step::Events(vec![
                started("c1"),
                StreamEvent::Finished {
                    reason: FinishReason::ToolCalls,
                    tool_calls: vec![ToolCallRequest {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: "{\"path\":\"a.txt\"}".into(),
                    }],
                },
            ]),
            text("done"),
        ],
        dir.path(),
    );
    session
        .prompt(TurnId::from(1), CancellationToken::new(), say("read"))
        .expect("queued");
    let (events, outcome) = finish_of(&mut rx, 1).await;
    assert_eq!(outcome, Ok(StopReason::EndTurn));
    let position = |wanted: &dyn Fn(&EngineEvent) -> bool| events.iter().position(wanted);
    let opened = position(&|e| matches!(e, EngineEvent::ToolCallStarted { id, .. } if id == "c1"));
    let detailed =
        position(&|e| matches!(e, EngineEvent::ToolCallPending(v) if v.id == "c1" && v.announced));
    assert!(opened.is_some() && opened < detailed, "{events:?}");
    let closed = events.iter().any(|e| {
        matches!(e, EngineEvent::ToolCallFinished { id, status: talaria_tools::ToolStatus::Failed, .. } if id == "lost")
    });
    assert!(closed, "the abandoned answer's card is closed: {events:?}");
}

/// A rewind with files whose process stopped while it put them back: the session's next
/// start finishes it before it serves anything (the files back, the end recorded, the user
/// told), and a rewind after that tries again only what failed.
#[tokio::test]
async fn a_rewind_cut_off_is_finished_when_the_session_starts_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path().canonicalize().expect("canonical");
    let home = cwd.join(".talaria-home");
    let checkpoints = crate::checkpoints_for(
        &home,
        std::slice::from_ref(&cwd),
        Arc::new(talaria_files::Unguarded),
    );
    let (a, b) = (cwd.join("a.txt"), cwd.join("b.txt"));
    std::fs::write(&a, "a before").expect("a");
    let before = checkpoints.before(&[a.clone(), b.clone()], false).await;
    std::fs::write(&a, "a after").expect("a");
    std::fs::write(&b, "b made").expect("b");
    let capture = checkpoints.after("s1", before).await;
    assert_eq!(capture.changes.len(), 2);
    let mut history = Transcript::with_system("sys");
    history.push(talaria_record::EntryBody::User {
        input: vec![talaria_record::InputBlock::Text { text: "go".into() }],
        model_view: vec![],
    });
    history.rewind_with(
        0,
        Some(talaria_record::RestoreIntent {
            changes: capture.changes,
            force: false,
        }),
    );
    let marker = history.last_id();
    let mut settings = settings_in(&cwd, Mode::Ask);
    settings.checkpoints = Some(checkpoints);
    let (tx, _events) = mpsc::channel(64);
    let provider = Arc::new(Scripted::new(vec![]));
    let handle = crate::session::spawn_session_with(
        settings,
        Arc::new(crate::ModelRouter::single(provider)),
        talaria_tools::builtin_registry(),
        tx,
        crate::session::SessionStart {
            history: Some(history),
            ..crate::session::SessionStart::default()
        },
    );
    let snapshot = handle.snapshot().await.expect("snapshot");
    assert_eq!(std::fs::read_to_string(&a).expect("a"), "a before");
    assert!(!b.exists(), "the file the cut turn made is gone");
    let ends: Vec<_> = snapshot
        .transcript
        .all_entries()
        .into_iter()
        .filter_map(|e| match &e.body {
            talaria_record::EntryBody::FilesRestored {
                rewind,
                restored,
                failed,
                ..
            } => Some((*rewind, *restored, failed.len())),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [(marker, 2, 0)]);
    let told = snapshot.transcript.entries().iter().any(|e| {
        matches!(&e.body, talaria_record::EntryBody::Notice { text, .. } if text.contains("2 files put back"))
    });
    assert!(told, "the user is told");
    assert!(snapshot.transcript.open_restores(true).is_empty());
}
