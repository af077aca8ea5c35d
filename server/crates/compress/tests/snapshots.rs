//! Snapshots of what the model reads after compaction of fixture sessions: a review of any
//! change to the compressor's output.

// A test crate: a failed set-up step is a failed test (`expect_used` is for production code).
#![allow(clippy::expect_used)]

mod common;

use common::{Scripted, block_on, coding_session, tool_result, view};
use serde_json::json;
use talaria_compress::{
    Budget, Encoding, Request, Settings, SummaryFailure, TokenAccounting, compress,
};
use talaria_record::testing::{assistant, user};
use talaria_record::{EntryBody, Transcript, UserPart};

fn run(t: &Transcript, window: u64, summariser: &mut Scripted, force: bool) -> String {
    let mut accounting = TokenAccounting::new(Encoding::Cl100k);
    accounting.use_exact();
    let request = Request {
        transcript: t,
        budget: Budget::new(window, &Settings::default()),
        settings: Settings::default(),
        tools_tokens: 500,
        focus: None,
        force,
    };
    let outcome = block_on(compress(&request, &mut accounting, summariser)).expect("compacted");
    let r = &outcome.report;
    format!(
        "before {} → after {} tokens; deduplicated {}, accounted {}, arguments {}, images {}; summary of {} messages{}\n---\n{}\n---\n{}",
        r.before,
        r.after,
        r.pruned.deduplicated,
        r.pruned.accounted,
        r.pruned.arguments,
        r.pruned.images,
        r.summary.as_ref().map_or(0, |s| s.messages),
        if r.summary.as_ref().is_some_and(|s| s.fallback.is_some()) {
            " (fallback)"
        } else {
            ""
        },
        view(&outcome.transcript),
        r.summary.as_ref().map_or("", |s| s.text.as_str())
    )
}

#[test]
fn cheap_pass_of_a_coding_session() {
    let t = coding_session(3);
    insta::assert_snapshot!(run(&t, 14_000, &mut Scripted::answering("unused"), false));
}

#[test]
fn summary_of_a_long_coding_session() {
    let t = coding_session(8);
    let mut summariser = Scripted::answering(
        "## Goal\nFix the build in src/lib.rs.\n## Completed actions\n1. FIXED `total` type — tests still fail [patch]",
    );
    insta::assert_snapshot!(run(&t, 6_000, &mut summariser, false));
}

#[test]
fn fallback_summary_when_the_summariser_times_out() {
    let t = coding_session(8);
    let mut summariser = Scripted::failing(SummaryFailure::Failed(
        "the compression task took longer than 120 s".into(),
    ));
    insta::assert_snapshot!(run(&t, 6_000, &mut summariser, false));
}

#[test]
fn one_long_turn_pins_the_users_request() {
    // A single request followed by many tool rounds: the request stays verbatim and first.
    let mut t = Transcript::with_system("You are Talaria.");
    t.push(user("Rename `compute` to `evaluate` everywhere in src/."));
    t.push(EntryBody::User {
        input: Vec::new(),
        model_view: vec![UserPart::Image {
            mime_type: "image/png".into(),
            data: "iVBOR".repeat(100),
        }],
    });
    t.push(assistant("I will look at the screenshot.", &[]));
    t.push(user("Go on."));
    for n in 0..30 {
        let id = format!("s{n}");
        t.push(assistant(
            &format!(
                "Editing file {n}. {}",
                "Checking the call sites carefully. ".repeat(10)
            ),
            &[(
                &id,
                "search_files",
                &format!(r#"{{"pattern":"compute","path":"src/m{n}"}}"#),
            )],
        ));
        let found: String = (0..30)
            .map(|l| format!("src/m{n}/f.rs:{l}: compute({l})\n"))
            .collect();
        t.push(tool_result(
            &id,
            "search_files",
            json!({"pattern": "compute", "path": format!("src/m{n}")}),
            None,
            &format!("{found}\n(30 matches)"),
            false,
        ));
    }
    insta::assert_snapshot!(run(
        &t,
        4_000,
        &mut Scripted::answering("## Goal\nRename compute."),
        false
    ));
}
