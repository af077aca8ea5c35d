//! Shared fixtures for the compressor's tests: a coding session and a scripted summariser.

#![allow(dead_code)]

use serde_json::json;
use talaria_compress::{Summariser, SummaryFailure, SummaryRequest};
use talaria_record::testing::{assistant, user};
use talaria_record::{
    EntryBody, ModelMessage, ResultStatus, ToolDisplay, ToolKind, ToolResultEntry, Transcript,
    UserPart,
};

/// A tool result with arguments and output as the engine records them.
pub fn tool_result(
    call_id: &str,
    tool: &str,
    input: serde_json::Value,
    output: Option<serde_json::Value>,
    text: &str,
    failed: bool,
) -> EntryBody {
    EntryBody::ToolResult(Box::new(ToolResultEntry {
        call_id: call_id.into(),
        client_id: call_id.into(),
        tool: tool.into(),
        status: if failed {
            ResultStatus::Failed
        } else {
            ResultStatus::Completed
        },
        display: ToolDisplay {
            title: title_of(tool, &input),
            kind: kind_of(tool),
            ..ToolDisplay::default()
        },
        raw_input: input,
        raw_output: output,
        model_text: text.into(),
        images: Vec::new(),
        effects: Some(talaria_record::Effects::of_display_kind(kind_of(tool))),
        changes: Vec::new(),
    }))
}

fn listing(lines: usize, round: usize) -> String {
    (1..=lines)
        .map(|n| format!("{n:>6}|    let value_{n} = compute({n}, {round}); // line {n}\n"))
        .collect()
}

fn test_output(lines: usize, round: usize) -> String {
    let mut out: String = (1..lines)
        .map(|n| format!("test module::case_{n}_{round} ... ok\n"))
        .collect();
    if round == 1 {
        out.push_str("loaded .env: OPENAI_API_KEY=sk-live9876543210fedcba9876\n");
    }
    out.push_str("error[E0425]: cannot find value `total` in this scope\n");
    out
}

/// A coding session of `rounds` fix-and-test rounds, times fixed for stable snapshots.
// A fixture written out as the session it stands for, entry by entry.
#[allow(clippy::too_many_lines)]
pub fn coding_session(rounds: usize) -> Transcript {
    let mut t = Transcript::new();
    let mut at = 1_000;
    let mut push = |t: &mut Transcript, body: EntryBody| {
        at += 1_000;
        t.push_at(body, at);
    };
    push(
        &mut t,
        EntryBody::System {
            text: "You are Talaria, a coding agent. Work in /work/app.".into(),
            environment: None,
        },
    );
    push(
        &mut t,
        user(
            "The build fails in src/lib.rs. My API key is OPENAI_API_KEY=sk-test1234567890abcdef1234; fix the build and keep the public API unchanged.",
        ),
    );
    for round in 0..rounds {
        let read = format!("r{round}");
        let run = format!("t{round}");
        let edit = format!("p{round}");
        push(
            &mut t,
            assistant("", &[(&read, "read_file", r#"{"path":"src/lib.rs"}"#)]),
        );
        push(
            &mut t,
            tool_result(
                &read,
                "read_file",
                json!({"path": "src/lib.rs"}),
                None,
                &listing(120, round),
                false,
            ),
        );
        push(
            &mut t,
            assistant(
                "Running the tests.",
                &[(&run, "terminal", r#"{"command":"cargo test"}"#)],
            ),
        );
        push(
            &mut t,
            tool_result(
                &run,
                "terminal",
                json!({"command": "cargo test"}),
                Some(json!({"exit_code": 101})),
                &test_output(80, round),
                true,
            ),
        );
        let patch_args = format!(
            r#"{{"path":"src/lib.rs","old_string":"{}","new_string":"{}"}}"#,
            "let total = 0;".repeat(40),
            "let total: u64 = 0;".repeat(40)
        );
        push(&mut t, assistant("", &[(&edit, "patch", &patch_args)]));
        push(
            &mut t,
            tool_result(
                &edit,
                "patch",
                json!({"path": "src/lib.rs"}),
                None,
                "Edited src/lib.rs (1 replacement).",
                false,
            ),
        );
        let analysis = format!(
            "Round {round}: fixed one error in `compute_{round}`; the type of `total` was wrong \
             because the accumulator overflowed for inputs above 2^32 in case {round}. {}",
            "The remaining failures are in the parser module and need a closer look. ".repeat(12)
        );
        push(&mut t, assistant(&analysis, &[]));
        push(&mut t, user(&format!("Continue with round {}.", round + 1)));
    }
    push(
        &mut t,
        assistant("", &[("last", "terminal", r#"{"command":"cargo build"}"#)]),
    );
    push(
        &mut t,
        tool_result(
            "last",
            "terminal",
            json!({"command": "cargo build"}),
            Some(json!({"exit_code": 0})),
            "Finished dev profile",
            false,
        ),
    );
    t
}

/// Arguments with their keys sorted: JSON maps keep insertion order or sort depending on the
/// features the whole build enables, and snapshots must not depend on that.
fn canonical(arguments: &str) -> String {
    match serde_json::from_str::<std::collections::BTreeMap<String, serde_json::Value>>(arguments) {
        Ok(map) => serde_json::to_string(&map).unwrap_or_else(|_| arguments.to_string()),
        Err(_) => arguments.to_string(),
    }
}

/// The model's view as short lines, for snapshots.
pub fn view(t: &Transcript) -> String {
    let clip = |s: &str| {
        let line = s.replace('\n', " ⏎ ");
        let short: String = line.chars().take(110).collect();
        if line.chars().count() > 110 {
            format!("{short}…")
        } else {
            short
        }
    };
    t.model_messages()
        .iter()
        .map(|m| match m {
            ModelMessage::System(text) => format!("system: {}", clip(text)),
            ModelMessage::User(parts) => format!(
                "user: {}",
                clip(
                    &parts
                        .iter()
                        .map(|p| match p {
                            UserPart::Text { text } => text.clone(),
                            UserPart::Image { .. } => "[image]".into(),
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            ),
            ModelMessage::Assistant {
                text, tool_calls, ..
            } => format!(
                "assistant: {}{}",
                clip(text),
                tool_calls
                    .iter()
                    .map(|c| format!(" <{} {} {}>", c.id, c.name, clip(&canonical(&c.arguments))))
                    .collect::<String>()
            ),
            ModelMessage::Tool { call_id, content } => format!("tool {call_id}: {}", clip(content)),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A summariser that answers from a script and records what it was asked.
#[derive(Default)]
pub struct Scripted {
    pub answers: Vec<Result<String, SummaryFailure>>,
    pub asked: Vec<SummaryRequest>,
}

impl Scripted {
    pub fn answering(answer: &str) -> Self {
        Self {
            answers: vec![Ok(answer.into())],
            asked: Vec::new(),
        }
    }

    pub fn failing(failure: SummaryFailure) -> Self {
        Self {
            answers: vec![Err(failure)],
            asked: Vec::new(),
        }
    }
}

impl Summariser for Scripted {
    async fn summarise(&mut self, request: &SummaryRequest) -> Result<String, SummaryFailure> {
        self.asked.push(request.clone());
        if self.answers.is_empty() {
            return Err(SummaryFailure::Failed("no scripted answer".into()));
        }
        self.answers.remove(0)
    }
}

/// Runs a future to completion (the compressor's futures never wait on I/O).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// The display kind the built-in tools these tests use declare (the tests' stand-in for the
/// registry: the compressor reads effects, never names).
fn kind_of(tool: &str) -> ToolKind {
    match tool {
        "terminal" => ToolKind::Execute,
        "read_file" => ToolKind::Read,
        "search_files" => ToolKind::Search,
        "write_file" | "patch" => ToolKind::Edit,
        _ => ToolKind::Other,
    }
}

/// The title the tool's own description gives a call (as `search_files` words it).
fn title_of(tool: &str, input: &serde_json::Value) -> String {
    match (tool, input["pattern"].as_str()) {
        ("search_files", Some(pattern)) => format!(
            "Search files for `{pattern}` in {}",
            input["path"].as_str().unwrap_or(".")
        ),
        _ => tool.into(),
    }
}
