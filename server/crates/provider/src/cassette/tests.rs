//! Record through a scripted provider, replay without it.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use talaria_record::testing::user;

use super::*;
use crate::model::{ChatRequest, FinishReason, ToolCallRequest, Transcript};
use crate::{ChatProvider, EventStream, ProviderError};

use crate::scripted::Scripted;

const WORKSPACE: &str = "/tmp/work-1234";
const KEY: &str = "sk-live-0123456789abcdef";

fn normaliser(workspace: &str) -> Normaliser {
    Normaliser::default()
        .replace(workspace, "<workspace>")
        .secret(KEY)
}

fn transcript(workspace: &str, prompt: &str) -> Transcript {
    let mut transcript = Transcript::with_system_and_environment(
        "You are Talaria.",
        format!("Working directory: {workspace}\nToday is 2026-12-01 (Tuesday)."),
    );
    transcript.push(user(prompt));
    transcript
}

fn request<'a>(transcript: &'a Transcript) -> ChatRequest<'a> {
    ChatRequest {
        model: "m",
        transcript,
        tools: &[],
        max_tokens: None,
        credential: None,
        effort: None,
    }
}

async fn events_of(provider: &dyn ChatProvider, transcript: &Transcript) -> Vec<StreamEvent> {
    match provider.stream(&request(transcript)).await {
        Ok(stream) => {
            stream
                .filter_map(|item| async { item.ok() })
                .collect()
                .await
        }
        Err(error) => panic!("{error}"),
    }
}

fn answer(workspace: &str) -> Vec<StreamEvent> {
    vec![
        StreamEvent::TextDelta(format!("Reading {workspace}/a.txt with key {KEY}")),
        StreamEvent::Finished {
            reason: FinishReason::ToolCalls,
            tool_calls: vec![ToolCallRequest {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: format!("{{\"path\":\"{workspace}/a.txt\"}}"),
            }],
        },
    ]
}

#[tokio::test]
async fn a_recording_replays_in_another_workspace_and_another_day() {
    let log = CassetteLog::default();
    let scripted = Arc::new(Scripted(Mutex::new(vec![answer(WORKSPACE)])));
    let recording = RecordingProvider::new(scripted, normaliser(WORKSPACE), log.clone());
    events_of(&recording, &transcript(WORKSPACE, "read a.txt")).await;
    let text = log.text();
    assert!(
        !text.contains(KEY),
        "a key never reaches a cassette: {text}"
    );
    assert!(!text.contains(WORKSPACE), "{text}");
    assert!(
        text.contains("<workspace>") && text.contains("<date>"),
        "{text}"
    );
    assert!(
        text.lines().all(|line| line.starts_with('{')),
        "one JSON value a line"
    );
    // Replayed elsewhere, on another day: the paths are this run's.
    let elsewhere = "/home/ci/checkout";
    let exchanges = parse(&text).expect("parses").exchanges;
    let replay = ReplayProvider::new(exchanges, normaliser(elsewhere), ReplayTiming::Fast);
    let mut later = transcript(elsewhere, "read a.txt");
    later.set_environment(format!(
        "Working directory: {elsewhere}\nToday is 2027-03-04 (Thursday)."
    ));
    let events = events_of(&replay, &later).await;
    let StreamEvent::Finished { tool_calls, .. } = &events[1] else {
        panic!("{events:?}");
    };
    assert_eq!(
        tool_calls[0].arguments,
        format!("{{\"path\":\"{elsewhere}/a.txt\"}}")
    );
    assert_eq!(
        events[0],
        StreamEvent::TextDelta(format!("Reading {elsewhere}/a.txt with key [REDACTED]"))
    );
}

#[tokio::test]
async fn a_changed_prompt_fails_the_call_naming_the_message_that_changed() {
    let log = CassetteLog::default();
    let scripted = Arc::new(Scripted(Mutex::new(vec![answer(WORKSPACE)])));
    let recording = RecordingProvider::new(scripted, normaliser(WORKSPACE), log.clone());
    events_of(&recording, &transcript(WORKSPACE, "read a.txt")).await;
    let replay = ReplayProvider::new(
        parse(&log.text()).expect("parses").exchanges,
        normaliser(WORKSPACE),
        ReplayTiming::Fast,
    );
    let changed = transcript(WORKSPACE, "read b.txt");
    let Err(error) = replay.stream(&request(&changed)).await else {
        panic!("a changed prompt matched");
    };
    let message = error.to_string();
    assert!(message.contains("message 1 (user)"), "{message}");
    assert!(
        message.contains("read b.txt") && message.contains("read a.txt"),
        "{message}"
    );
}

#[tokio::test]
async fn a_failed_stream_replays_as_the_same_failure() {
    let log = CassetteLog::default();
    struct Failing;
    impl ChatProvider for Failing {
        fn name(&self) -> &str {
            "failing"
        }
        fn stream(
            &self,
            _: &ChatRequest<'_>,
        ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
            Box::pin(async {
                let items = vec![
                    Ok(StreamEvent::TextDelta("par".into())),
                    Err(ProviderError::Request {
                        provider: "failing".into(),
                        detail: "boom".into(),
                    }),
                ];
                Ok(Box::pin(futures_util::stream::iter(items)) as EventStream)
            })
        }
    }
    let recording = RecordingProvider::new(Arc::new(Failing), Normaliser::default(), log.clone());
    let stream = recording
        .stream(&request(&transcript(WORKSPACE, "x")))
        .await
        .expect("starts");
    let _: Vec<_> = stream.collect().await;
    let replay = ReplayProvider::new(
        parse(&log.text()).expect("parses").exchanges,
        Normaliser::default(),
        ReplayTiming::Fast,
    );
    let stream = replay
        .stream(&request(&transcript(WORKSPACE, "x")))
        .await
        .expect("starts");
    let items: Vec<_> = stream.collect().await;
    assert!(matches!(&items[0], Ok(StreamEvent::TextDelta(t)) if t == "par"));
    assert!(
        items[1]
            .as_ref()
            .is_err_and(|e| e.to_string().contains("boom"))
    );
}

#[test]
fn another_version_or_a_stray_line_is_refused_with_a_clear_message() {
    let old = "{\"line\":\"header\",\"cassette\":0,\"talaria\":\"0.1.0\"}\n";
    let error = parse(old).expect_err("refused");
    assert!(error.to_string().contains("version 0"), "{error}");
    assert!(error.to_string().contains("record it again"), "{error}");
    assert_eq!(parse("").expect_err("empty"), CassetteError::NoHeader);
    let stray = format!(
        "{}\n{{\"line\":\"end\",\"after_ms\":3}}\n",
        serde_json::to_string(&header()).expect("json")
    );
    assert!(matches!(
        parse(&stray),
        Err(CassetteError::Orphan { line: 2, .. })
    ));
}

#[tokio::test]
async fn a_stream_left_after_its_answer_ended_and_one_left_before_was_abandoned() {
    let log = CassetteLog::default();
    let scripted = Arc::new(Scripted(Mutex::new(vec![
        answer(WORKSPACE),
        answer(WORKSPACE),
    ])));
    let recording = RecordingProvider::new(scripted, normaliser(WORKSPACE), log.clone());
    let transcript = transcript(WORKSPACE, "read a.txt");
    // Read up to `finished` and dropped, as the turn loop does.
    let mut stream = recording
        .stream(&request(&transcript))
        .await
        .expect("stream");
    while let Some(Ok(event)) = stream.next().await {
        if matches!(event, StreamEvent::Finished { .. }) {
            break;
        }
    }
    drop(stream);
    // Dropped after the first delta, as a cancelled turn does.
    let mut stream = recording
        .stream(&request(&transcript))
        .await
        .expect("stream");
    let _ = stream.next().await;
    drop(stream);
    let text = log.text();
    let kinds: Vec<String> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| line["line"].as_str().map(str::to_string))
        .collect();
    let calls: Vec<&[String]> = kinds.split(|kind| kind == "request").skip(1).collect();
    assert_eq!(calls.len(), 2, "{kinds:?}");
    assert_eq!(
        calls[0].last().map(String::as_str),
        Some("end"),
        "{kinds:?}"
    );
    assert_eq!(
        calls[1].last().map(String::as_str),
        Some("error"),
        "{kinds:?}"
    );
    assert!(text.contains("abandoned before its end"), "{text}");
}
