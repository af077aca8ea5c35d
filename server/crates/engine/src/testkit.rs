//! A test kit for any crate that drives sessions without a network: a scripted model
//! provider (which asserts the record's invariants on every request it receives) and a
//! scripted client that answers the session's client requests. Enabled for this crate's tests and by the `test-support` feature.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use talaria_util::lock;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use talaria_provider::{
    ChatProvider, ChatRequest, EventStream, FinishReason, ProviderError, StreamEvent,
    StreamFailure, ToolCallRequest, Transcript,
};
use talaria_record::testing::assert_valid;

use talaria_tools::{CommandRunner, LocalRunner};
use talaria_tools::{FileAccess, LocalFiles};
use tokio::sync::mpsc;

use crate::client::{ClientAnswer, ClientAsk, ClientRequest, PermissionAnswer, PermissionRequest};
use crate::events::EngineEvent;

/// A client for tests: answers permission requests from a script (or waits for cancel when
/// the script is out), and serves files and commands from this machine.
#[derive(Default)]
pub struct ScriptedClient {
    pub answers: Mutex<VecDeque<PermissionAnswer>>,
    pub asked: Mutex<Vec<PermissionRequest>>,
}

impl ScriptedClient {
    pub fn new(answers: Vec<PermissionAnswer>) -> Self {
        Self {
            answers: Mutex::new(answers.into()),
            asked: Mutex::default(),
        }
    }

    /// Answers one request (in the background when the answer takes time).
    pub fn serve(&self, request: ClientRequest) {
        match request.ask.clone() {
            ClientAsk::Permission(permission) => {
                lock(&self.asked).push(permission);
                match lock(&self.answers).pop_front() {
                    Some(answer) => request.answer(ClientAnswer::Permission(answer)),
                    None => {
                        tokio::spawn(async move {
                            request.cancel.cancelled().await;
                            request.answer(ClientAnswer::Permission(PermissionAnswer::Cancelled));
                        });
                    }
                }
            }
            ClientAsk::ReadFile { path } => {
                tokio::spawn(async move {
                    let read = LocalFiles::default().read_text(&path).await;
                    request.answer(ClientAnswer::Read(read));
                });
            }
            ClientAsk::WriteFile { path, text } => {
                tokio::spawn(async move {
                    let wrote = LocalFiles::default().write_text(&path, &text).await;
                    request.answer(ClientAnswer::Wrote(wrote));
                });
            }
            ClientAsk::RunCommand { spec } => {
                tokio::spawn(async move {
                    let ran = LocalRunner
                        .run(spec, &request.cancel, request.progress.clone())
                        .await;
                    request.answer(ClientAnswer::Ran(ran));
                });
            }
            // The scripted client shows no forms.
            ClientAsk::Question { .. } => request.answer(ClientAnswer::Question(Err(
                talaria_tools::ToolError::Client(
                    "the scripted client cannot show questions".into(),
                ),
            ))),
            // It advertises no interception, so it is never asked.
            ClientAsk::Intercept(_) => request.answer(ClientAnswer::Intercepted(Err(
                crate::client::InterceptError::NoAnswer,
            ))),
        }
    }

    /// Consumes a session's events: answers client requests, forwards everything else.
    pub fn attach(
        self: &Arc<Self>,
        mut events: mpsc::Receiver<EngineEvent>,
    ) -> mpsc::Receiver<EngineEvent> {
        let (tx, rx) = mpsc::channel(256);
        let client = self.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                match event {
                    EngineEvent::ClientRequest(request) => client.serve(request),
                    EngineEvent::Delivered(signal) => signal.fire(),
                    other => {
                        if tx.send(other).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        rx
    }
}

/// One scripted model reply.
pub enum Step {
    Events(Vec<StreamEvent>),
    /// Sends the events, then never finishes.
    Hang(Vec<StreamEvent>),
    /// Sends the events, then fails with the error.
    FailAfter(Vec<StreamEvent>, ProviderError),
    Panic,
}

/// A provider that replies from a script and records every request.
#[derive(Default)]
pub struct ScriptedProvider {
    pub steps: Mutex<VecDeque<Step>>,
    /// The model and the record of each request (each checked against the record's
    /// invariants when it arrived).
    pub seen: Mutex<Vec<(String, Transcript)>>,
}

impl ScriptedProvider {
    pub fn new(steps: Vec<Step>) -> Self {
        Self {
            steps: Mutex::new(steps.into()),
            seen: Mutex::default(),
        }
    }

    /// The records of the requests so far.
    pub fn transcripts(&self) -> Vec<Transcript> {
        lock(&self.seen).iter().map(|(_, t)| t.clone()).collect()
    }

    /// The models asked so far.
    pub fn models(&self) -> Vec<String> {
        lock(&self.seen).iter().map(|(m, _)| m.clone()).collect()
    }
}

impl ChatProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        assert_valid(request.transcript);
        lock(&self.seen).push((request.model.to_string(), request.transcript.clone()));
        let step = lock(&self.steps).pop_front();
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
                Some(Step::FailAfter(events, error)) => Ok(futures_util::stream::iter(
                    events
                        .into_iter()
                        .map(Ok)
                        .chain(std::iter::once(Err(error))),
                )
                .boxed()),
                Some(Step::Panic) => panic!("scripted provider panic"),
                None => Err(ProviderError::Stream {
                    provider: "scripted".into(),
                    failure: StreamFailure::EndedEarly,
                    detail: "script exhausted: no step for this request".into(),
                }),
            }
        })
    }
}

/// A reply with this text.
pub fn text(s: &str) -> Step {
    Step::Events(vec![
        StreamEvent::TextDelta(s.into()),
        StreamEvent::Finished {
            reason: FinishReason::Stop,
            tool_calls: vec![],
        },
    ])
}

/// A reply calling tools: `(id, name, arguments)`.
pub fn calls(list: &[(&str, &str, serde_json::Value)]) -> Step {
    Step::Events(vec![StreamEvent::Finished {
        reason: FinishReason::ToolCalls,
        tool_calls: list
            .iter()
            .map(|(id, name, args)| ToolCallRequest {
                id: id.to_string(),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
    }])
}

/// A model caller on model `m` of `router` that tries each call once.
pub(crate) fn caller<'a>(
    router: &'a crate::ModelRouter,
    cancel: &'a tokio_util::sync::CancellationToken,
    context: &'a mut crate::context::ContextState,
    usage: &'a mut crate::model_call::SessionUsage,
) -> crate::model_call::ModelCaller<'a> {
    crate::model_call::ModelCaller::new(
        router,
        router.chain("m"),
        quick_retry(),
        cancel,
        context,
        usage,
    )
}

/// A retry policy that gives up at once, for tests that look at one attempt.
pub fn quick_retry() -> crate::RetryPolicy {
    crate::RetryPolicy {
        max_attempts: 1,
        base_ms: 1,
        cap_ms: 1,
        retry_after_cap_secs: 1,
    }
}
