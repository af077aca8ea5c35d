//! Session actor tests against a scripted in-process provider.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use talaria_provider::{
    ChatMessage, ChatProvider, ChatRequest, EventStream, FinishReason, ProviderError, StreamEvent,
    ToolCallRequest, UserPart,
};
use tokio::sync::mpsc;

use crate::{
    EngineEvent, SessionHandle, SessionSettings, StopReason, TurnError, TurnId, spawn_session,
};

enum Step {
    Events(Vec<StreamEvent>),
    /// Sends the events, then never finishes.
    Hang(Vec<StreamEvent>),
    Panic,
}

#[derive(Default)]
struct Scripted {
    steps: Mutex<VecDeque<Step>>,
    seen: Mutex<Vec<Vec<ChatMessage>>>,
}

impl ChatProvider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        self.seen
            .lock()
            .expect("lock")
            .push(request.messages.to_vec());
        let step = self.steps.lock().expect("lock").pop_front();
        Box::pin(async move {
            match step {
                Some(Step::Events(events)) => {
                    Ok(futures_util::stream::iter(events.into_iter().map(Ok)).boxed())
                }
                Some(Step::Hang(events)) => {
                    Ok(futures_util::stream::iter(events.into_iter().map(Ok))
                        .chain(futures_util::stream::pending())
                        .boxed())
                }
                Some(Step::Panic) => panic!("scripted provider panic"),
                None => Err(ProviderError::Stream {
                    provider: "scripted".into(),
                    detail: "script exhausted".into(),
                }),
            }
        })
    }
}

fn text(s: &str) -> Step {
    Step::Events(vec![
        StreamEvent::TextDelta(s.into()),
        StreamEvent::Finished {
            reason: FinishReason::Stop,
            tool_calls: vec![],
        },
    ])
}

fn start(
    steps: Vec<Step>,
    cwd: &std::path::Path,
) -> (SessionHandle, mpsc::Receiver<EngineEvent>, Arc<Scripted>) {
    let provider = Arc::new(Scripted {
        steps: Mutex::new(steps.into()),
        seen: Mutex::default(),
    });
    let (tx, rx) = mpsc::channel(64);
    let settings = SessionSettings {
        id: "s1".into(),
        cwd: cwd.to_path_buf(),
        model: "m".into(),
        system_prompt: "sys".into(),
        context_window: 10_000,
        max_turn_requests: 3,
        max_output_tokens: None,
    };
    let handle = spawn_session(
        settings,
        provider.clone(),
        talaria_tools::builtin_registry(),
        tx,
    );
    (handle, rx, provider)
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
        if let EngineEvent::TurnFinished { turn: t, outcome } = &event {
            assert_eq!(*t, TurnId(turn), "turns finish in order");
            return (seen, outcome.clone());
        }
        seen.push(event);
    }
}

fn say(s: &str) -> Vec<UserPart> {
    vec![UserPart::Text(s.into())]
}

#[tokio::test]
async fn a_panicking_turn_reports_an_error_and_the_session_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (session, mut rx, provider) = start(vec![Step::Panic, text("fine")], dir.path());
    session.prompt(TurnId(1), say("boom")).expect("queued");
    let (_, outcome) = finish_of(&mut rx, 1).await;
    assert!(
        matches!(outcome, Err(TurnError::Internal(m)) if m.contains("scripted provider panic"))
    );
    session.prompt(TurnId(2), say("again")).expect("queued");
    let (events, outcome) = finish_of(&mut rx, 2).await;
    assert_eq!(outcome, Ok(StopReason::EndTurn));
    assert_eq!(events, vec![EngineEvent::AgentText("fine".into())]);
    // The panicked turn was rolled back: the second call sees system + the new user message.
    let seen = provider.seen.lock().expect("lock");
    assert_eq!(seen[1].len(), 2);
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
    session.prompt(TurnId(1), say("long")).expect("queued");
    session
        .prompt(TurnId(2), say("queued behind"))
        .expect("queued");
    assert_eq!(
        rx.recv().await,
        Some(EngineEvent::AgentText("partial".into()))
    );
    session.cancel();
    assert_eq!(finish_of(&mut rx, 1).await.1, Ok(StopReason::Cancelled));
    assert_eq!(finish_of(&mut rx, 2).await.1, Ok(StopReason::Cancelled));
    session.prompt(TurnId(3), say("next")).expect("queued");
    assert_eq!(finish_of(&mut rx, 3).await.1, Ok(StopReason::EndTurn));
    // The partial answer was kept as an assistant message; the cancelled queued prompt never ran.
    let seen = provider.seen.lock().expect("lock");
    assert_eq!(seen.len(), 2);
    assert!(matches!(&seen[1][2], ChatMessage::Assistant { text, .. } if text == "partial"));
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
    session.prompt(TurnId(1), say("read it")).expect("queued");
    let (events, outcome) = finish_of(&mut rx, 1).await;
    assert_eq!(outcome, Ok(StopReason::MaxTurnRequests));
    let started: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::ToolCallStarted(view) => Some(view.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        ["c1", "c1b", "c1-2", "c1b-2", "c1-3", "c1b-3"],
        "ids made unique"
    );
    let seen = provider.seen.lock().expect("lock");
    let second = &seen[1];
    assert!(
        matches!(&second[3], ChatMessage::Tool { call_id, content } if call_id == "c1" && content.contains("1|hello"))
    );
    assert!(
        matches!(&second[4], ChatMessage::Tool { content, .. } if content.starts_with("Error: "))
    );
}
