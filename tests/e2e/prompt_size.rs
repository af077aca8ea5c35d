//! The first request a session sends (system prompt, built-in tool descriptions, a short
//! prompt) stays small enough for a small local model to read quickly: measured with a
//! real tokenizer, under 2,500 tokens.

use serde_json::Value;
use talaria_harness::MockReply;

use crate::support::*;

/// Tokens of a Chat Completions request as a model reads it: each message's text plus a few
/// tokens of framing, and the tool definitions as JSON.
fn request_tokens(body: &Value) -> usize {
    let bpe = tiktoken_rs::cl100k_base().expect("tokenizer");
    let count = |text: &str| bpe.encode_with_special_tokens(text).len();
    let messages: usize = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| count(m["content"].as_str().unwrap_or_default()) + 4)
        .sum();
    let tools = count(&body["tools"].to_string());
    messages + tools
}

#[tokio::test]
async fn the_first_request_with_every_built_in_tool_is_under_2500_tokens() {
    let env = TestEnv::new(vec![MockReply::text(&["It prints a greeting."])]).await;
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "What does main.py do?").await;
    let requests = env.mock.requests();
    let body = &requests[0].body;
    let tools = offered_tools(body);
    for core in CORE_TOOLS {
        assert!(tools.iter().any(|t| t == core), "{core} offered: {tools:?}");
    }
    let tokens = request_tokens(body);
    eprintln!("first request: {tokens} tokens, {} tools", tools.len());
    assert!(tokens < 2500, "first request is {tokens} tokens");
    // What small models most need said plainly.
    let system = body["messages"][0]["content"].as_str().expect("system");
    for plainly in [
        "read files before you describe or change them",
        "run commands (tests, builds) with the terminal tool rather than guessing their output",
    ] {
        assert!(system.contains(plainly), "{plainly}: {system}");
    }
}
