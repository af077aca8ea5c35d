//! Snapshot tests of the request bodies each API adapter renders from one record: a system
//! prompt, a user message with an image, reasoning with its signature, parallel tool calls
//! answered out of order, an interrupted turn, a compaction summary and a final question.

use talaria_provider::{ChatRequest, ToolSpec, Transcript, anthropic, openai, responses};
use talaria_record::testing::{assistant, result, user};
use talaria_record::{AssistantEntry, EntryBody, Reasoning, ToolCallRequest, UserPart};

fn record() -> Transcript {
    let mut t = Transcript::with_system("You are Talaria.");
    t.push(EntryBody::User {
        input: Vec::new(),
        model_view: vec![
            UserPart::text("What is in this screenshot?"),
            UserPart::Image {
                mime_type: "image/png".into(),
                data: "iVBORw0KGgo=".into(),
            },
        ],
    });
    t.push(EntryBody::Assistant(AssistantEntry {
        text: "Let me look.".into(),
        reasoning: Some(Reasoning {
            text: "Read both files.".into(),
            signature: Some("sig-1".into()),
        }),
        tool_calls: vec![
            ToolCallRequest {
                id: "call_a".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a.rs"}"#.into(),
            },
            ToolCallRequest {
                id: "call_b".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"b.rs"}"#.into(),
            },
        ],
        model: Some("m".into()),
        message_id: None,
    }));
    t.push(result("call_b", "read_file", "1|fn b() {}"));
    t.push(result("call_a", "read_file", "1|fn a() {}"));
    t.push(assistant("Both files define one function.", &[]));
    t.push(user("Now run the tests."));
    t.interrupt("the provider failed: HTTP 500");
    let old_user = t.push(user("An old question."));
    let old_answer = t.push(assistant("An old answer.", &[]));
    for entry in t.entries_mut() {
        if entry.id == old_user || entry.id == old_answer {
            entry.compacted = true;
        }
    }
    t.push(EntryBody::Summary {
        text: "[Summary of earlier turns] The user asked an old question.".into(),
        first: old_user,
        last: old_answer,
    });
    t.push(user("Try the tests again."));
    talaria_record::testing::assert_valid(&t);
    t
}

fn request<'a>(transcript: &'a Transcript, tools: &'a [ToolSpec]) -> ChatRequest<'a> {
    ChatRequest {
        model: "test-model",
        transcript,
        tools,
        max_tokens: Some(1000),
        credential: None,
        effort: None,
    }
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read_file".into(),
        description: "Read a file.".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }]
}

/// Keys sorted: serde_json keeps insertion order when another crate of the build enables it.
fn snapshot(assert: impl FnOnce()) {
    insta::with_settings!({sort_maps => true}, { assert() });
}

#[test]
fn openai_chat_completions_body() {
    let (t, tools) = (record(), tools());
    snapshot(|| insta::assert_json_snapshot!(openai::request_body(&request(&t, &tools))));
}

#[test]
fn anthropic_messages_body() {
    let (t, tools) = (record(), tools());
    snapshot(|| {
        insta::assert_json_snapshot!(anthropic::request_body(&request(&t, &tools), 4096, None))
    });
}

#[test]
fn openai_responses_body() {
    let (t, tools) = (record(), tools());
    snapshot(|| insta::assert_json_snapshot!(responses::request_body(&request(&t, &tools), true)));
}

/// The bytes sent, not only the tree: the keys' order is what servers' prompt caches match.
/// (The schema's keys are in sorted order, as its map keeps them with or without serde_json's
/// `preserve_order`; every other key's order is the body's own.)
#[test]
fn openai_chat_completions_text() {
    let t = record();
    let tools = vec![ToolSpec {
        name: "read_file".into(),
        description: "Read a file.".into(),
        parameters: serde_json::json!({"properties": {"path": {"type": "string"}}, "required": ["path"], "type": "object"}),
    }];
    let mut request = request(&t, &tools);
    request.effort = Some(talaria_provider::Effort::High);
    insta::assert_snapshot!(openai::request_text(&request));
}
