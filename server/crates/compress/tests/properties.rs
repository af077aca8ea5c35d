//! Property tests: random sessions come out of compaction satisfying every invariant and under
//! budget.

// A test crate: a failed set-up step is a failed test (`expect_used` is for production code).
#![allow(clippy::expect_used)]

mod common;

use common::{Scripted, block_on, tool_result};
use proptest::prelude::*;
use serde_json::json;
use talaria_compress::{
    Budget, CompressError, Encoding, Request, Settings, SummaryFailure, TokenAccounting, compress,
};
use talaria_record::testing::{assistant, user};
use talaria_record::{EntryBody, ModelMessage, Transcript, UserPart};

/// One turn: a request, rounds of tool calls (with result sizes), a final answer or not, and
/// an optional nudge or interruption.
#[derive(Debug, Clone)]
struct TurnShape {
    ask: usize,
    rounds: Vec<Vec<usize>>,
    answer: Option<usize>,
    interrupted: bool,
    image: bool,
}

fn turn() -> impl Strategy<Value = TurnShape> {
    (
        1usize..200,
        prop::collection::vec(prop::collection::vec(1usize..900, 1..4), 0..5),
        prop::option::of(1usize..300),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(ask, rounds, answer, interrupted, image)| TurnShape {
            ask,
            rounds,
            answer,
            interrupted,
            image,
        })
}

fn words(n: usize, seed: usize) -> String {
    (0..n)
        .map(|i| format!("w{}", (i * 7 + seed) % 97))
        .collect::<Vec<_>>()
        .join(" ")
}

fn build(turns: &[TurnShape]) -> Transcript {
    let mut t = Transcript::with_system("You are Talaria, a coding agent.");
    let mut call = 0;
    for (n, shape) in turns.iter().enumerate() {
        t.push(user(&format!("ask {n}: {}", words(shape.ask, n))));
        if shape.image {
            t.push(EntryBody::User {
                input: Vec::new(),
                model_view: vec![UserPart::Image {
                    mime_type: "image/png".into(),
                    data: "AAAA".into(),
                }],
            });
        }
        for round in &shape.rounds {
            let calls: Vec<(String, String)> = round
                .iter()
                .map(|_| {
                    call += 1;
                    (
                        format!("c{call}"),
                        format!(r#"{{"command":"step {call}"}}"#),
                    )
                })
                .collect();
            let refs: Vec<(&str, &str, &str)> = calls
                .iter()
                .map(|(id, args)| (id.as_str(), "terminal", args.as_str()))
                .collect();
            t.push(assistant("", &refs));
            if shape.interrupted && round.len() > 2 {
                t.interrupt("cancelled by the user");
                break;
            }
            for ((id, _), size) in calls.iter().zip(round) {
                t.push(tool_result(
                    id,
                    "terminal",
                    json!({"command": id}),
                    Some(json!({"exit_code": 0})),
                    &words(*size, *size),
                    false,
                ));
            }
        }
        if let Some(answer) = shape.answer {
            t.push(assistant(&words(answer, n), &[]));
        }
    }
    t
}

fn latest_user(t: &Transcript) -> Option<String> {
    t.entries().iter().rev().find_map(|e| match &e.body {
        EntryBody::User { model_view, .. } => match model_view.first() {
            Some(UserPart::Text { text }) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    })
}

/// Compacts the session `turns` describe in a window of `window` tokens with a summariser
/// that fails (the fallback summary is used).
fn compact_with_a_failing_summariser(
    turns: &[TurnShape],
    window: u64,
) -> (talaria_compress::Outcome, Budget) {
    let tr = build(turns);
    let mut accounting = TokenAccounting::new(Encoding::Cl100k);
    accounting.use_exact();
    let budget = Budget::new(window, &Settings::default());
    let request = Request {
        transcript: &tr,
        budget,
        settings: Settings::default(),
        tools_tokens: 300,
        focus: None,
        force: false,
    };
    let mut summariser = Scripted::failing(SummaryFailure::Failed("bad output".into()));
    let outcome =
        block_on(compress(&request, &mut accounting, &mut summariser)).expect("compacted");
    (outcome, budget)
}

/// Found by the property below: a pinned request must leave room for the head.
#[test]
fn a_long_last_turn_with_a_failed_summary_stays_under_budget() {
    let t = |ask, rounds: Vec<Vec<usize>>, answer| TurnShape {
        ask,
        rounds,
        answer,
        interrupted: false,
        image: false,
    };
    let turns = vec![
        t(18, vec![vec![7, 7]], None),
        t(59, vec![vec![1, 1, 1], vec![1], vec![1], vec![1]], None),
        t(114, vec![], None),
        t(38, vec![], None),
        t(124, vec![], Some(33)),
        t(
            1,
            vec![vec![293, 571], vec![857, 153, 594], vec![753, 446]],
            Some(127),
        ),
    ];
    let (outcome, budget) = compact_with_a_failing_summariser(&turns, 11524);
    assert!(
        outcome.report.after <= budget.threshold,
        "{:?}",
        outcome.report
    );
    assert!(outcome.transcript.validate().is_ok());
}

/// Found by the property below: an interrupted call group compacted away leaves the
/// interruption's note right before the answer that followed it.
#[test]
fn an_answer_after_a_compacted_interruption_stays_valid() {
    let t = |ask, rounds: Vec<Vec<usize>>, answer, interrupted| TurnShape {
        ask,
        rounds,
        answer,
        interrupted,
        image: false,
    };
    let turns = vec![
        t(8, vec![vec![7], vec![7, 7], vec![7]], Some(136), false),
        t(175, vec![], None, false),
        t(
            160,
            vec![vec![7, 7, 7], vec![7], vec![7, 7, 7], vec![7, 7, 7]],
            Some(172),
            false,
        ),
        t(73, vec![vec![1, 1, 1]], Some(286), true),
        t(101, vec![vec![1, 1, 1]], Some(169), true),
        t(168, vec![vec![1, 1, 1]], None, true),
    ];
    let (outcome, _) = compact_with_a_failing_summariser(&turns, 5534);
    assert!(outcome.transcript.validate().is_ok());
}

/// Found by the property below: a summary of the middle cannot make room when the latest
/// turn holds a large output the model has already answered; that output is accounted.
#[test]
fn a_large_answered_output_in_the_latest_turn_is_accounted_when_nothing_else_fits() {
    let t = |rounds: Vec<Vec<usize>>, answer, image| TurnShape {
        ask: 1,
        rounds,
        answer,
        interrupted: false,
        image,
    };
    let turns = vec![
        t(vec![vec![1]], None, false),
        t(vec![vec![1], vec![758, 101]], Some(113), true),
    ];
    let (outcome, budget) = compact_with_a_failing_summariser(&turns, 5000);
    assert!(
        outcome.report.after <= budget.threshold,
        "{:?}",
        outcome.report
    );
    assert!(outcome.report.pruned.accounted >= 1);
    assert!(outcome.transcript.validate().is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn compaction_keeps_every_invariant(turns in prop::collection::vec(turn(), 1..14), window in 3_000u64..40_000, fail in any::<bool>()) {
        let t = build(&turns);
        let mut accounting = TokenAccounting::new(Encoding::Cl100k);
        accounting.use_exact();
        let budget = Budget::new(window, &Settings::default());
        let request = Request {
            transcript: &t,
            budget,
            settings: Settings::default(),
            tools_tokens: 300,
            focus: None,
            force: false,
        };
        let mut summariser = if fail {
            Scripted::failing(SummaryFailure::Failed("bad output".into()))
        } else {
            Scripted::answering("## Goal\nKeep going.")
        };
        let before = accounting.transcript(&t) + 300;
        let outcome = match block_on(compress(&request, &mut accounting, &mut summariser)) {
            Ok(outcome) => outcome,
            Err(CompressError::NothingToCompact) => return Ok(()),
            Err(other) => return Err(TestCaseError::fail(format!("{other}"))),
        };
        let after = &outcome.transcript;
        // 6. Valid for every provider.
        prop_assert!(after.validate().is_ok(), "{:?}", after.validate());
        let messages = after.model_messages();
        // 2. The system prompt first.
        prop_assert!(matches!(messages[0], ModelMessage::System(_)));
        // 3. The latest user message verbatim, the last user entry the model reads.
        let asked = latest_user(&t);
        let live_last = after.entries().iter().rev().find(|e| matches!(e.body, EntryBody::User { .. }));
        prop_assert!(live_last.is_some_and(|e| !e.compacted));
        prop_assert_eq!(latest_user(after), asked);
        // 3. The latest assistant message is never compacted.
        let last_assistant = after.entries().iter().rev().find(|e| matches!(e.body, EntryBody::Assistant(_)));
        prop_assert!(last_assistant.is_none_or(|e| !e.compacted));
        // 10. Nothing deleted: every entry is still there, in order.
        let ids: Vec<u64> = after.entries().iter().map(|e| e.id).collect();
        prop_assert!(t.entries().iter().all(|e| ids.contains(&e.id)));
        // 7. A failed summary is marked.
        if let Some(summary) = &outcome.report.summary {
            prop_assert_eq!(summary.fallback.is_some(), fail);
            if fail {
                prop_assert!(summary.text.contains(talaria_compress::summary::FALLBACK_MARKER));
            }
        }
        // Under budget whenever the protected parts fit (the rare case where they do not
        // is reported honestly).
        prop_assert!(outcome.report.before == before);
        let protected = protected_tokens(&t, &mut accounting) + 300 + budget.summary_max;
        if protected + budget.tail <= budget.threshold && outcome.report.summary.is_some() {
            prop_assert!(outcome.report.after <= budget.threshold,
                "after {} > threshold {} (protected {})", outcome.report.after, budget.threshold, protected);
        }
    }
}

/// System prompt, the first three messages and the latest turn's last call group: what the
/// compressor may not touch.
fn protected_tokens(t: &Transcript, accounting: &mut TokenAccounting) -> u64 {
    let entries = t.entries();
    let last_user = entries
        .iter()
        .rposition(|e| matches!(e.body, EntryBody::User { .. }))
        .unwrap_or(0);
    let last_assistant = entries
        .iter()
        .rposition(|e| matches!(e.body, EntryBody::Assistant(_)))
        .unwrap_or(0);
    let head: u64 = entries
        .iter()
        .take(4)
        .map(|e| u64::from(accounting.entry(e)))
        .sum();
    let pinned = u64::from(accounting.entry(&entries[last_user]));
    let group: u64 = entries[last_assistant.min(entries.len() - 1)..]
        .iter()
        .map(|e| u64::from(accounting.entry(e)))
        .sum();
    head + pinned + group
}
