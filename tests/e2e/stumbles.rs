//! What Talaria does when a small local model or its server stumbles: a call that arrived
//! whole before the server's parser failed is run, near-JSON calls are repaired or the model
//! is told why they could not be read.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

fn parser_error() -> String {
    json!({"error": {"code": 500, "type": "server_error", "message":
        "The model produced output that does not match the expected peg-native format"}})
    .to_string()
}

/// One streamed tool-call delta (`name` only on a call's first delta).
fn call_delta(index: usize, name: Option<&str>, arguments: &str) -> String {
    let mut function = json!({"arguments": arguments});
    let mut call = json!({"index": index, "type": "function"});
    if let Some(name) = name {
        function["name"] = json!(name);
        call["id"] = json!(format!("call_{index}"));
    }
    call["function"] = function;
    json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]})
        .to_string()
}

/// A call's arguments streamed in pieces of `size` characters.
fn call_in_pieces(index: usize, name: &str, arguments: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = arguments.chars().collect();
    let mut deltas = vec![call_delta(index, Some(name), "")];
    deltas.extend(
        chars
            .chunks(size)
            .map(|piece| call_delta(index, None, &piece.iter().collect::<String>())),
    );
    deltas
}

fn finish(reason: &str) -> String {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}).to_string()
}

/// Notices the client saw (as ACP notices, or thought chunks to a client without them).
fn notice_texts(updates: &[Value]) -> Vec<String> {
    updates.iter().filter_map(notice_text).collect()
}

fn has_tools(body: &Value) -> bool {
    body.get("tools").is_some()
}

#[tokio::test]
async fn a_call_that_arrived_whole_before_a_parser_error_runs_and_the_turn_goes_on() {
    let read = r#"{"path": "main.py"}"#;
    let search = r#"{"pattern": "hello", "target": "content"}"#;
    // (the stream, the tools that must have run)
    let variants: Vec<(Vec<String>, Vec<&str>)> = vec![
        // One whole call, then the server's parser fails on the closing fence.
        (
            [
                call_in_pieces(0, "read_file", read, 100),
                vec![parser_error()],
            ]
            .concat(),
            vec!["read_file"],
        ),
        // The same call streamed three characters at a time.
        (
            [
                call_in_pieces(0, "read_file", read, 3),
                vec![parser_error()],
            ]
            .concat(),
            vec!["read_file"],
        ),
        // Two whole calls, then the failure.
        (
            [
                call_in_pieces(0, "read_file", read, 5),
                call_in_pieces(1, "search_files", search, 7),
                vec![parser_error()],
            ]
            .concat(),
            vec!["read_file", "search_files"],
        ),
        // A whole call after some text.
        (
            [
                vec![
                    json!({"choices": [{"index": 0, "delta": {"content": "Reading it."}}]})
                        .to_string(),
                ],
                call_in_pieces(0, "search_files", search, 4),
                vec![parser_error()],
            ]
            .concat(),
            vec!["search_files"],
        ),
        // A whole call, then a second one cut off: the whole one runs.
        (
            [
                call_in_pieces(0, "read_file", read, 6),
                call_in_pieces(1, "search_files", r#"{"pattern": "hel"#, 6),
                vec![parser_error()],
            ]
            .concat(),
            vec!["read_file"],
        ),
    ];
    for (stream, ran) in variants {
        let env = TestEnv::new(vec![
            MockReply::RawSse { data: stream },
            MockReply::text(&["It prints hello."]),
        ])
        .await;
        std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("file");
        let (mut agent, session) = env.session().await;
        let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
        let requests = env.mock.requests();
        assert_eq!(
            stop_reason(&response),
            "end_turn",
            "{ran:?} {response} {:?}",
            requests
                .iter()
                .map(|r| last_user(&r.body))
                .collect::<Vec<_>>()
        );
        assert_eq!(requests.len(), 2, "no re-ask: {ran:?}");
        assert!(has_tools(&requests[1].body), "native tools stay on");
        let results = tool_results(&env.mock, 1);
        assert_eq!(results.len(), ran.len(), "{ran:?}: {results:?}");
        if ran.contains(&"read_file") {
            assert!(
                results.iter().any(|r| r.contains("print('hello')")),
                "{results:?}"
            );
        }
        let cards: Vec<&Value> = updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
            .collect();
        assert_eq!(cards.len(), ran.len(), "{updates:?}");
        assert!(
            notice_texts(&updates)
                .iter()
                .any(|t| t.contains("arrived whole")),
            "the user is told: {updates:?}"
        );
    }
}

#[tokio::test]
async fn nothing_usable_before_a_parser_error_is_asked_again_with_tools_in_the_prompt() {
    let variants: Vec<Vec<String>> = vec![
        // Arguments cut inside a string.
        [
            call_in_pieces(0, "read_file", r#"{"path": "ma"#, 4),
            vec![parser_error()],
        ]
        .concat(),
        // A tool that does not exist.
        [
            call_in_pieces(0, "open_file", r#"{"path": "main.py"}"#, 4),
            vec![parser_error()],
        ]
        .concat(),
        // Whole JSON that does not fit the schema.
        [
            call_in_pieces(0, "read_file", r#"{"file": 3}"#, 4),
            vec![parser_error()],
        ]
        .concat(),
        // Text only.
        vec![
            json!({"choices": [{"index": 0, "delta": {"content": "Let me"}}]}).to_string(),
            parser_error(),
        ],
        // A named call with no arguments at all.
        [
            vec![call_delta(0, Some("read_file"), "")],
            vec![parser_error()],
        ]
        .concat(),
    ];
    for stream in variants {
        let env = TestEnv::new(vec![
            MockReply::RawSse {
                data: stream.clone(),
            },
            MockReply::text(&["main.py prints hello."]),
        ])
        .await;
        let (mut agent, session) = env.session().await;
        let (response, _) = prompt(&mut agent, &session, "What does main.py do?").await;
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
        let requests = env.mock.requests();
        assert_eq!(requests.len(), 2, "{stream:?}");
        assert!(
            !has_tools(&requests[1].body),
            "asked again with the tools in the prompt: {stream:?}"
        );
        assert!(tool_results(&env.mock, 1).is_empty());
    }
}

#[tokio::test]
async fn an_answer_cut_by_the_output_limit_runs_its_whole_calls() {
    let read = r#"{"path": "main.py"}"#;
    let env = TestEnv::new(vec![
        MockReply::RawSse {
            data: [
                call_in_pieces(0, "read_file", read, 5),
                call_in_pieces(1, "search_files", r#"{"pattern": "x", "tar"#, 5),
                vec![finish("length")],
            ]
            .concat(),
        },
        MockReply::text(&["main.py prints hello."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("file");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = tool_results(&env.mock, 1);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("print('hello')"));
    assert!(
        notice_texts(&updates)
            .iter()
            .any(|t| t.contains("output limit cut")),
        "{updates:?}"
    );
}

#[tokio::test]
async fn near_json_calls_in_the_text_are_repaired_and_run() {
    let blocks = [
        "```json\n{'name': 'read_file', 'arguments': {'path': 'main.py'}}\n```",
        "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\",},}\n```",
        "```json\n{{\"name\": \"read_file\", \"arguments\": {{\"path\": \"main.py\"}}}}\n```",
        "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"\"\"main.py\"\"\", \"offset\": None}}\n```",
        "<tool_call>\n{name: 'read_file', arguments: {path: 'main.py'}} # read it first\n</tool_call>",
        "```python\n{\"name\": \"search_files\", \"arguments\": {\"pattern\": \"print\", \"target\": \"content\", \"file_glob\": None}}\n```",
    ];
    for block in blocks {
        let env = TestEnv::new(vec![
            MockReply::text(&["I'll look.\n", block]),
            MockReply::text(&["It prints hello."]),
        ])
        .await;
        std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("file");
        let (mut agent, session) = env.session().await;
        let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
        assert_eq!(stop_reason(&response), "end_turn", "{block}: {response}");
        let results = tool_results(&env.mock, 1);
        assert_eq!(results.len(), 1, "{block}: {results:?}");
        assert!(results[0].contains("print"), "{block}: {results:?}");
        let shown: String = updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str())
            .collect();
        assert!(
            !shown.contains("arguments"),
            "the raw block is not the answer: {shown}"
        );
    }
}

#[tokio::test]
async fn a_call_that_cannot_be_read_is_sent_back_once_with_the_reason() {
    let blocks = [
        "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}\n```",
        "```json\n{\"name\": \"read_file\" \"arguments\": {\"path\": \"main.py\"}}\n```",
        "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": main.py}}\n```",
        "```read_file\n[\"main.py\"\n```",
        "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}}\n```",
    ];
    for block in blocks {
        let env = TestEnv::new(vec![
            MockReply::text(&[block]),
            MockReply::text(&[
                "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n```",
            ]),
            MockReply::text(&["It prints hello."]),
        ])
        .await;
        std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("file");
        let (mut agent, session) = env.session().await;
        let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
        assert_eq!(stop_reason(&response), "end_turn", "{block}: {response}");
        let requests = env.mock.requests();
        assert_eq!(requests.len(), 3, "{block}");
        let told = last_user(&requests[1].body);
        assert!(
            told.contains("could not be read") && told.contains("read_file"),
            "{block}: {told}"
        );
        assert!(
            tool_results(&env.mock, 2)
                .iter()
                .any(|r| r.contains("print('hello')"))
        );
        assert!(
            notice_texts(&updates)
                .iter()
                .any(|t| t.contains("cannot read")),
            "{block}: {updates:?}"
        );
    }
}

/// Plays `reply` for one prompt and measures the client's view: when each update came after
/// the prompt was sent (seconds), and the updates themselves.
async fn timed_updates(env: &TestEnv, text: &str) -> (Vec<(f64, Value)>, Value) {
    let (mut agent, session) = env.session().await;
    let started = std::time::Instant::now();
    let id = agent
        .start_request("session/prompt", text_prompt(&session, text))
        .await
        .expect("prompt");
    let mut seen = Vec::new();
    loop {
        let message =
            tokio::time::timeout(std::time::Duration::from_secs(120), agent.next_message())
                .await
                .expect("the agent answers")
                .expect("a message");
        if message["id"] == id {
            return (seen, message);
        }
        if message["method"] == "session/update" {
            seen.push((
                started.elapsed().as_secs_f64(),
                message["params"]["update"].clone(),
            ));
        }
    }
}

/// A call's text cut into `pieces` chunks (spaces pad it where JSON allows them).
fn slow_chunks(before: &str, call_head: &str, call_tail: &str, pieces: usize) -> Vec<String> {
    let mut chunks = vec![format!("{before}{call_head}")];
    chunks.extend((0..pieces.saturating_sub(2)).map(|_| " ".to_string()));
    chunks.push(call_tail.to_string());
    chunks
}

fn assert_progress_every_two_seconds(seen: &[(f64, Value)], until: f64, label: &str) {
    let times: Vec<f64> = seen
        .iter()
        .filter(|(_, u)| u["sessionUpdate"] != "available_commands_update")
        .map(|(t, _)| *t)
        .take_while(|t| *t <= until)
        .collect();
    let mut gaps = vec![times.first().copied().unwrap_or(until)];
    gaps.extend(times.windows(2).map(|w| w[1] - w[0]));
    gaps.push(until - times.last().copied().unwrap_or(0.0));
    let late = gaps.iter().filter(|g| **g > 2.0).count();
    // Two cores shared with other tests: a tick may come late now and then, never much.
    assert!(
        gaps.iter().all(|g| *g <= 2.6) && late * 10 <= gaps.len(),
        "{label}: progress gaps {gaps:?}"
    );
}

/// Streams `chunks` a second apart as the answer to "What does main.py do?" (then answers
/// once the call ran); the client's timed updates, and where the call's card came.
async fn held_back(chunks: Vec<String>, label: &str) -> (Vec<(f64, Value)>, usize) {
    let env = TestEnv::new(vec![
        MockReply::Text {
            chunks,
            reasoning: Vec::new(),
            delay_ms: 1000,
            usage: None,
            finish_reason: None,
        },
        MockReply::text(&["It prints hello."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("file");
    let (seen, response) = timed_updates(&env, "What does main.py do?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{label}: {response}");
    let ran = seen
        .iter()
        .position(|(_, u)| u["sessionUpdate"] == "tool_call")
        .unwrap_or_else(|| panic!("{label}: the call ran"));
    (seen, ran)
}

#[tokio::test]
async fn a_call_held_back_for_a_minute_shows_progress_every_two_seconds() {
    let chunks = slow_chunks(
        "",
        "{\"name\": \"read_file\",",
        " \"arguments\": {\"path\": \"main.py\"}}",
        60,
    );
    let (seen, ran) = held_back(chunks, "a minute").await;
    let until = seen[ran].0;
    assert!(until >= 55.0, "the stream took its minute: {until}");
    assert_progress_every_two_seconds(&seen, until, "a minute");
    let progress: String = seen[..ran]
        .iter()
        .filter(|(_, u)| u["sessionUpdate"] == "agent_thought_chunk")
        .filter_map(|(_, u)| u["content"]["text"].as_str())
        .collect();
    assert!(
        progress.contains("`read_file`"),
        "the tool is named: {progress}"
    );
    assert!(
        !seen[..ran]
            .iter()
            .any(|(_, u)| u["sessionUpdate"] == "agent_message_chunk"),
        "the call itself is never shown as the answer"
    );
}

#[tokio::test]
async fn every_shape_of_held_back_call_shows_progress_while_it_streams() {
    let calls: String = (0..30)
        .map(|n| format!("{{\"name\": \"read_file\", \"arguments\": {{\"path\": \"f{n}.py\"}}}}\n"))
        .collect();
    let shapes: Vec<(&str, Vec<String>)> = vec![
        (
            "a fenced call",
            slow_chunks(
                "I'll read it.\n",
                "```json\n{\"name\": \"read_file\",",
                " \"arguments\": {\"path\": \"main.py\"}}\n```",
                8,
            ),
        ),
        (
            "a call tag",
            slow_chunks(
                "",
                "<tool_call>\n{\"name\": \"read_file\",",
                " \"arguments\": {\"path\": \"main.py\"}}\n</tool_call>",
                8,
            ),
        ),
        (
            "a fence labelled with the tool",
            slow_chunks("", "```read_file\n{\"path\":", " \"main.py\"}\n```", 8),
        ),
        (
            "thirty bare calls",
            calls
                .lines()
                .map(|l| format!("{l}\n"))
                .collect::<Vec<_>>()
                .chunks(4)
                .map(|c| c.concat())
                .collect(),
        ),
    ];
    // The shapes stream side by side (each in its own session, against its own mock).
    let runs = shapes.into_iter().map(|(label, chunks)| async move {
        let pieces = chunks.len();
        (label, pieces, held_back(chunks, label).await)
    });
    for (label, pieces, (seen, ran)) in futures_util::future::join_all(runs).await {
        let until = seen[ran].0;
        assert!(until >= (pieces - 1) as f64 - 0.5, "{label}: {until}");
        assert_progress_every_two_seconds(&seen, until, label);
    }
}

#[tokio::test]
async fn a_model_repeating_itself_is_stopped_early_and_its_call_runs_once() {
    let call = "{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n";
    let block = format!("```json\n{}```\n", call);
    let tagged = format!("<tool_call>\n{call}</tool_call>\n");
    let variants: Vec<(&str, String, bool)> = vec![
        ("the same call line", call.repeat(200), true),
        (
            "after some prose",
            format!("Reading it.\n{}", call.repeat(200)),
            true,
        ),
        ("the same fenced block", block.repeat(100), true),
        ("the same tagged block", tagged.repeat(100), true),
        (
            "the same sentence",
            "The answer is forty-two, as computed.\n".repeat(200),
            false,
        ),
    ];
    for (label, text, is_call) in variants {
        let chunks: Vec<String> = text
            .as_bytes()
            .chunks(11)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        let mut script = vec![MockReply::Text {
            chunks,
            reasoning: Vec::new(),
            delay_ms: 2,
            usage: None,
            finish_reason: Some("length".into()),
        }];
        if is_call {
            script.push(MockReply::text(&["It prints hello."]));
        }
        let env = TestEnv::new(script).await;
        std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("file");
        let (mut agent, session) = env.session().await;
        let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
        assert_eq!(
            stop_reason(&response),
            "end_turn",
            "{label}: stopped before the output limit: {response}"
        );
        assert!(
            notice_texts(&updates)
                .iter()
                .any(|t| t.contains("same thing")),
            "{label}: {updates:?}"
        );
        let shown: String = updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str())
            .collect();
        if is_call {
            let results = tool_results(&env.mock, 1);
            assert_eq!(results.len(), 1, "{label}: {results:?}");
            let body = &env.mock.requests()[1].body;
            let said: String = body["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .filter(|m| m["role"] == "assistant")
                .map(|m| m.to_string())
                .collect();
            assert_eq!(
                said.matches("\"name\":\"read_file\"").count(),
                1,
                "{label}: one copy went back: {said}"
            );
        } else {
            assert_eq!(env.mock.requests().len(), 1);
            // What streamed before the loop was seen stays seen; the rest never comes.
            let copies = shown.matches("forty-two").count();
            assert!((1..=9).contains(&copies), "{label}: {copies} copies shown");
        }
    }
}

#[tokio::test]
async fn a_local_servers_output_cap_follows_its_measured_speed_unless_set() {
    let slow_answer = || MockReply::Text {
        // 40 tokens over about 4 s: 10 tokens/s, so 180 s hold about 1,800.
        chunks: (0..20).map(|n| format!("word{n} ")).collect(),
        reasoning: Vec::new(),
        delay_ms: 200,
        usage: Some(talaria_harness::MockUsage {
            prompt_tokens: 50,
            completion_tokens: 40,
            cached_tokens: 0,
        }),
        finish_reason: None,
    };
    for (config, capped) in [("", true), ("max_output_tokens = 700\n", false)] {
        let env = TestEnv::new(vec![slow_answer(), MockReply::text(&["Second."])]).await;
        env.write_config(config);
        let (mut agent, session) = env.session().await;
        for text in ["First?", "Second?"] {
            let (response, _) = prompt(&mut agent, &session, text).await;
            assert_eq!(stop_reason(&response), "end_turn", "{response}");
        }
        let requests = env.mock.requests();
        let caps: Vec<u64> = requests
            .iter()
            .map(|r| r.body["max_tokens"].as_u64().unwrap_or(0))
            .collect();
        if capped {
            assert_eq!(caps[0], 4096, "before any measure");
            // About 1,800 at the measured pace; the machine's load moves it a little.
            assert!((900..=2600).contains(&caps[1]), "{caps:?}");
        } else {
            assert_eq!(caps, [700, 700], "a configured cap stays");
        }
    }
}
