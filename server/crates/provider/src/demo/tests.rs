//! The demo's script, step by step, on conversations as the engine renders them; and its
//! stream: labelled, paced, with its calls announced before they finish.

use std::borrow::Cow;

use futures_util::StreamExt;

use super::*;
use crate::model::{ToolSpec, Transcript};

const TOOLS: &[&str] = &[
    "todo",
    "search_files",
    "read_file",
    "write_file",
    "terminal",
];

fn user(text: &str) -> ModelMessage<'static> {
    ModelMessage::User(Cow::Owned(vec![
        UserPart::text("Working directory: /w"),
        UserPart::text(text),
    ]))
}

/// Plays the script: each reply's calls get `results` (by tool name) as their results.
fn play(
    mut messages: Vec<ModelMessage<'static>>,
    offered: &[&str],
    results: &[(&str, &str)],
) -> (Vec<Reply>, Vec<ModelMessage<'static>>) {
    let mut replies = Vec::new();
    for _ in 0..8 {
        let reply = Conversation::read(&messages).next(offered);
        let calls: &'static [ToolCallRequest] = Box::leak(reply.calls.clone().into_boxed_slice());
        messages.push(ModelMessage::Assistant {
            text: Cow::Owned(reply.text.clone()),
            reasoning: None,
            tool_calls: calls,
        });
        for call in calls {
            let content = results
                .iter()
                .find(|(tool, _)| *tool == call.name)
                .map_or("done", |(_, content)| content);
            messages.push(ModelMessage::Tool {
                call_id: &call.id,
                content: Cow::Owned(content.to_string()),
            });
        }
        let done = reply.calls.is_empty();
        replies.push(reply);
        if done {
            break;
        }
    }
    (replies, messages)
}

fn names(reply: &Reply) -> Vec<&str> {
    reply.calls.iter().map(|c| c.name.as_str()).collect()
}

const LISTING: &str = "src/main.rs\nREADME.md\nnotes.txt\n\n(3 files)";
const README: &str = "     1|# Greeter\n     2|\n     3|Says hello.\n";

#[test]
fn a_prompt_gets_the_tour_plan_read_edit_and_a_closing_answer() {
    let (replies, _) = play(
        vec![
            ModelMessage::System("You are Talaria."),
            user("fix the bug"),
        ],
        TOOLS,
        &[
            ("search_files", LISTING),
            ("read_file", README),
            ("write_file", "Created TALARIA-DEMO.md (4 lines)."),
        ],
    );
    let steps: Vec<Vec<&str>> = replies.iter().map(names).collect();
    assert_eq!(
        steps,
        [
            vec!["todo", "search_files"],
            vec!["read_file", "todo"],
            vec!["write_file", "todo"],
            vec!["todo"],
            vec![],
        ]
    );
    assert!(replies[0].text.starts_with(LABEL), "{}", replies[0].text);
    assert!(replies[0].text.contains("“fix the bug”"));
    let read: Value = serde_json::from_str(&replies[1].calls[0].arguments).expect("json");
    assert_eq!(read["path"], "README.md", "a README first");
    assert!(
        replies[2].text.contains("“# Greeter”"),
        "{}",
        replies[2].text
    );
    let written: Value = serde_json::from_str(&replies[2].calls[0].arguments).expect("json");
    assert_eq!(written["path"], DEMO_FILE);
    assert!(
        written["content"]
            .as_str()
            .unwrap_or("")
            .contains("README.md")
    );
    assert!(replies[3].text.contains("Written"), "{}", replies[3].text);
    let done: Value = serde_json::from_str(&replies[3].calls[0].arguments).expect("json");
    assert!(
        done["todos"]
            .as_array()
            .expect("todos")
            .iter()
            .all(|t| t["status"] == "completed")
    );
    assert!(replies[4].text.starts_with(LABEL));
    assert!(replies[4].text.contains("talaria setup"));
    // Every call id is the step's, and unique.
    let ids: Vec<&str> = replies
        .iter()
        .flat_map(|r| r.calls.iter().map(|c| c.id.as_str()))
        .collect();
    let unique: std::collections::HashSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
}

#[test]
fn a_declined_edit_is_told_and_a_mode_without_writes_leaves_it_out() {
    let (replies, _) = play(
        vec![user("hello")],
        TOOLS,
        &[
            ("search_files", LISTING),
            ("read_file", README),
            ("write_file", "The user declined this write_file call."),
        ],
    );
    assert!(
        replies[3].text.contains("nothing was written"),
        "{replies:?}"
    );
    let read_only = ["todo", "search_files", "read_file"];
    let (replies, _) = play(
        vec![user("hello")],
        &read_only,
        &[("search_files", LISTING), ("read_file", README)],
    );
    assert!(
        replies.iter().all(|r| !names(r).contains(&"write_file")),
        "{replies:?}"
    );
    assert!(replies[2].text.contains("lets nothing be written"));
    assert!(replies.last().is_some_and(|r| r.calls.is_empty()));
}

#[test]
fn an_empty_folder_skips_the_read_and_a_later_prompt_gets_a_short_answer() {
    let (replies, mut messages) = play(
        vec![user("hi")],
        TOOLS,
        &[
            ("search_files", "No files found."),
            ("write_file", "Created."),
        ],
    );
    assert_eq!(names(&replies[1]), ["write_file", "todo"], "{replies:?}");
    assert!(replies[1].text.contains("no file here to read"));
    messages.push(user("what is 2 + 2?"));
    let later = Conversation::read(&messages).next(TOOLS);
    assert!(later.calls.is_empty());
    assert!(later.text.starts_with(LABEL) && later.text.contains("“what is 2 + 2?”"));
    messages.push(ModelMessage::Assistant {
        text: Cow::Owned(later.text),
        reasoning: None,
        tool_calls: &[],
    });
    messages.push(user("show me the tour again"));
    assert_eq!(
        names(&Conversation::read(&messages).next(TOOLS)),
        ["todo", "search_files"]
    );
}

fn request_with<'a>(transcript: &'a Transcript, tools: &'a [ToolSpec]) -> ChatRequest<'a> {
    ChatRequest {
        model: DEMO_MODEL,
        transcript,
        tools,
        max_tokens: None,
        credential: None,
        effort: None,
    }
}

#[tokio::test]
async fn a_title_is_labelled_and_the_stream_announces_calls_before_it_ends() {
    let mut titled =
        Transcript::with_system("You name conversations. Answer with a title of at most 8 words.");
    titled.push(talaria_record::EntryBody::User {
        input: Vec::new(),
        model_view: vec![UserPart::text("Fix the failing login test please")],
    });
    let reply = reply_to(&request_with(&titled, &[]));
    assert_eq!(reply.text, "Talaria demo: Fix the failing login test");
    let mut asked = Transcript::with_system("You are Talaria.");
    asked.push(talaria_record::EntryBody::User {
        input: Vec::new(),
        model_view: vec![UserPart::text("hello")],
    });
    let tools: Vec<ToolSpec> = TOOLS
        .iter()
        .map(|name| ToolSpec {
            name: name.to_string(),
            description: String::new(),
            parameters: serde_json::json!({}),
        })
        .collect();
    let provider = DemoProvider::with_pace(Duration::ZERO);
    let events: Vec<StreamEvent> = provider
        .stream(&request_with(&asked, &tools))
        .await
        .expect("stream")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.starts_with(LABEL), "{text}");
    let deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
        .count();
    assert!(deltas > 10, "streamed in pieces: {deltas}");
    let started = events
        .iter()
        .position(|e| matches!(e, StreamEvent::ToolCallStarted { .. }))
        .expect("calls announced");
    let Some(StreamEvent::Finished { reason, tool_calls }) = events.last() else {
        panic!("ends finished: {events:?}");
    };
    assert!(started < events.len() - 1);
    assert_eq!(*reason, FinishReason::ToolCalls);
    assert_eq!(tool_calls.len(), 2);
}
