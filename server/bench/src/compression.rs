//! In-process figures of the context compressor: one compaction pass over a 200,000-token
//! transcript with the summariser mocked, and the token accounting of a new turn on that
//! history (counts cached per entry, as in a live session).

use std::time::{Duration, Instant};

use serde_json::json;
use talaria_compress::{
    Budget, Encoding, Request, Settings, Summariser, SummaryFailure, SummaryRequest,
    TokenAccounting, compress,
};
use talaria_record::testing::{assistant, user};
use talaria_record::{
    Effects, EntryBody, ResultStatus, ToolDisplay, ToolKind, ToolResultEntry, Transcript,
};

/// A summariser that answers at once: only local work is measured.
struct Instant_;

impl Summariser for Instant_ {
    async fn summarise(&mut self, _: &SummaryRequest) -> Result<String, SummaryFailure> {
        Ok("## Goal\nKeep the benchmark honest.".into())
    }
}

fn result(id: &str, tool: &str, input: serde_json::Value, text: String) -> EntryBody {
    EntryBody::ToolResult(Box::new(ToolResultEntry {
        call_id: id.into(),
        client_id: id.into(),
        tool: tool.into(),
        status: ResultStatus::Completed,
        display: ToolDisplay::default(),
        raw_input: input.clone(),
        raw_output: Some(json!({"exit_code": 0})),
        model_text: text,
        images: Vec::new(),
        // As the real tools declare them: the reads read `path`, the test run runs `command`.
        effects: Some(Effects::of_display_kind(
            if input.get("command").is_some() {
                ToolKind::Execute
            } else {
                ToolKind::Read
            },
        )),
        changes: Vec::new(),
    }))
}

/// One coding turn of about 2,500 tokens: an ask, a file read, a test run, an answer.
fn push_turn(transcript: &mut Transcript, n: usize) {
    transcript.push(user(&format!(
        "Turn {n}: look at module_{n}.rs and fix the failing test."
    )));
    let read = format!("read{n}");
    transcript.push(assistant(
        "",
        &[(
            &read,
            "read_file",
            &format!(r#"{{"path":"src/module_{n}.rs"}}"#),
        )],
    ));
    let listing: String = (1..=90)
        .map(|l| format!("{l:>6}|    let value_{l} = compute_{n}(input, {l}); // step {l}\n"))
        .collect();
    transcript.push(result(
        &read,
        "read_file",
        json!({"path": format!("src/module_{n}.rs")}),
        listing,
    ));
    let run = format!("test{n}");
    transcript.push(assistant(
        "Running the tests.",
        &[(&run, "terminal", r#"{"command":"cargo test"}"#)],
    ));
    let output: String = (1..=40)
        .map(|l| format!("test module_{n}::case_{l} ... ok\n"))
        .collect();
    transcript.push(result(
        &run,
        "terminal",
        json!({"command": "cargo test"}),
        output,
    ));
    transcript.push(assistant(
        &format!(
            "Module {n} is fixed: the accumulator now uses u64. {}",
            "The remaining modules follow the same pattern and keep their public API. ".repeat(6)
        ),
        &[],
    ));
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

pub struct Figures {
    pub history_tokens: u64,
    /// The automatic pass (the cheap pass is enough for this record).
    pub pass: Duration,
    pub saved_share: f64,
    /// A pass that also summarises the middle (as `/compact` does).
    pub summarising_pass: Duration,
    pub new_turn: Duration,
}

async fn time_passes(
    request: &Request<'_>,
    accounting: &TokenAccounting,
    iterations: usize,
) -> (Duration, f64) {
    let mut passes = Vec::new();
    let mut saved_share = 0.0;
    for _ in 0..iterations {
        let mut warm = accounting.clone();
        let started = Instant::now();
        let outcome = compress(request, &mut warm, &mut Instant_).await;
        passes.push(started.elapsed());
        if let Ok(outcome) = outcome {
            saved_share = outcome.report.saved_share();
        }
    }
    (median(passes), saved_share)
}

/// Measures both figures over `iterations` runs (medians).
pub async fn measure(iterations: usize) -> Figures {
    let mut transcript = Transcript::with_system("You are Talaria, a coding agent.");
    let mut accounting = TokenAccounting::new(Encoding::Cl100k);
    accounting.use_exact();
    let mut n = 0;
    while accounting.transcript(&transcript) < 200_000 {
        push_turn(&mut transcript, n);
        n += 1;
    }
    let history_tokens = accounting.transcript(&transcript);
    // Token accounting of a new turn: the cache holds the history's counts.
    let mut turns = Vec::new();
    for i in 0..iterations {
        let mut grown = transcript.clone();
        push_turn(&mut grown, n + i);
        let mut warm = accounting.clone();
        let started = Instant::now();
        let counted = warm.counted(&grown, "tools");
        turns.push(started.elapsed());
        assert!(counted > history_tokens);
    }
    // One compaction pass with the summariser mocked.
    let settings = Settings::default();
    let request = Request {
        transcript: &transcript,
        budget: Budget::new(256_000, &settings),
        settings,
        tools_tokens: 2_000,
        focus: None,
        force: false,
    };
    let (pass, saved_share) = time_passes(&request, &accounting, iterations).await;
    let forced = Request {
        force: true,
        ..request.clone()
    };
    let (summarising_pass, _) = time_passes(&forced, &accounting, iterations).await;
    Figures {
        history_tokens,
        pass,
        saved_share,
        summarising_pass,
        new_turn: median(turns),
    }
}
