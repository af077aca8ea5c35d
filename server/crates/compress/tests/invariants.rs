//! One test per compaction invariant, over the fixture coding session.

mod common;

use common::{Scripted, block_on, coding_session, view};
use talaria_compress::summary::{FALLBACK_MARKER, SUMMARY_PREFIX};
use talaria_compress::{
    Budget, CompressError, Encoding, Request, Settings, SummaryFailure, TokenAccounting, compress,
};
use talaria_record::testing::{assert_valid, user};
use talaria_record::{EntryBody, ModelMessage, Transcript, UserPart};

fn exact() -> TokenAccounting {
    let mut accounting = TokenAccounting::new(Encoding::Cl100k);
    accounting.use_exact();
    accounting
}

fn request(t: &Transcript, window: u64) -> Request<'_> {
    Request {
        transcript: t,
        budget: Budget::new(window, &Settings::default()),
        settings: Settings::default(),
        tools_tokens: 500,
        focus: None,
        force: false,
    }
}

fn summaries(t: &Transcript) -> Vec<String> {
    t.entries()
        .iter()
        .filter(|e| !e.compacted)
        .filter_map(|e| match &e.body {
            EntryBody::Summary { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn last_user_text(t: &Transcript) -> String {
    t.entries()
        .iter()
        .rev()
        .find_map(|e| match &e.body {
            EntryBody::User { model_view, .. } => match &model_view[0] {
                UserPart::Text { text } => Some(text.clone()),
                UserPart::Image { .. } => None,
            },
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn the_cheap_pass_alone_is_used_when_it_is_enough() {
    let t = coding_session(3);
    let mut accounting = exact();
    let before = accounting.transcript(&t) + 500;
    // A window whose threshold the cheap pass can meet.
    let window = before * 100 / 75 * 2 / 3;
    let mut summariser = Scripted::answering("unused");
    let outcome = block_on(compress(
        &request(&t, window),
        &mut accounting,
        &mut summariser,
    ))
    .expect("compacted");
    assert!(summariser.asked.is_empty(), "no model call");
    assert!(outcome.report.summary.is_none());
    assert!(outcome.report.pruned.accounted > 0 && outcome.report.pruned.arguments > 0);
    assert!(outcome.report.after <= Budget::new(window, &Settings::default()).threshold);
    assert_valid(&outcome.transcript);
    assert!(view(&outcome.transcript).contains("[terminal] ran cargo test → exit 101, 80 lines"));
}

#[test]
fn head_keeps_three_messages_then_none_after_the_first_compaction() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nFix the build.");
    let first = block_on(compress(
        &request(&t, 6_000),
        &mut accounting,
        &mut summariser,
    ))
    .expect("first");
    let messages = first.transcript.model_messages();
    assert!(matches!(messages[0], ModelMessage::System(_)));
    assert!(
        matches!(&messages[1], ModelMessage::User(p) if matches!(&p[0], UserPart::Text{text} if text.starts_with("The build fails")))
    );
    assert!(matches!(messages[2], ModelMessage::Assistant { .. }));
    assert!(matches!(messages[3], ModelMessage::Tool { .. }));
    assert!(
        matches!(&messages[4], ModelMessage::User(p) if matches!(&p[0], UserPart::Text{text} if text.starts_with(SUMMARY_PREFIX)))
    );
    // Second compaction: the head is the system prompt only.
    let mut grown = first.transcript.clone();
    for round in 0..12 {
        grown.push(user(&format!(
            "more work {round}: {}",
            "details ".repeat(200)
        )));
        grown.push(talaria_record::testing::assistant(
            &"done ".repeat(200),
            &[],
        ));
    }
    let mut again = Scripted::answering("## Goal\nFix the build, updated.");
    let second = block_on(compress(
        &request(&grown, 6_000),
        &mut accounting,
        &mut again,
    ))
    .expect("second");
    let messages = second.transcript.model_messages();
    assert!(
        matches!(&messages[1], ModelMessage::User(p) if matches!(&p[0], UserPart::Text{text} if text.starts_with(SUMMARY_PREFIX)))
    );
    assert_eq!(summaries(&second.transcript).len(), 1, "one live summary");
}

#[test]
fn the_tail_keeps_the_latest_user_and_assistant_messages_and_whole_pairs() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nFix the build.");
    let outcome = block_on(compress(
        &request(&t, 6_000),
        &mut accounting,
        &mut summariser,
    ))
    .expect("compacted");
    assert_valid(&outcome.transcript);
    let rendered = view(&outcome.transcript);
    assert!(
        rendered.ends_with("tool last: Finished dev profile"),
        "{rendered}"
    );
    assert!(
        rendered.contains("user: Continue with round 8."),
        "{rendered}"
    );
    assert_eq!(
        last_user_text(&outcome.transcript),
        "Continue with round 8."
    );
}

#[test]
fn the_middle_is_summarised_with_the_template_and_the_latest_ask_as_reference() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nFix the build.");
    let outcome = block_on(compress(
        &request(&t, 6_000),
        &mut accounting,
        &mut summariser,
    ))
    .expect("compacted");
    let asked = &summariser.asked[0];
    for section in [
        "## Goal",
        "## Constraints and preferences",
        "## Completed actions",
        "## Active state",
        "## Blocked",
        "## Key decisions",
        "## Relevant files",
        "## Remaining work",
        "## Critical context",
    ] {
        assert!(asked.prompt.contains(section), "{section} missing");
    }
    assert!(
        asked.prompt.contains("For reference only"),
        "{}",
        asked.prompt
    );
    assert!(asked.prompt.contains("«Continue with round 8.»"));
    let summary = outcome.report.summary.expect("summary");
    assert_eq!(summary.text, "## Goal\nFix the build.");
    assert!(summary.fallback.is_none());
}

#[test]
fn a_second_compaction_updates_the_summary_instead_of_summarising_it() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nFix the build (first summary).");
    let first = block_on(compress(
        &request(&t, 6_000),
        &mut accounting,
        &mut summariser,
    ))
    .expect("first");
    let mut grown = first.transcript.clone();
    for round in 0..12 {
        grown.push(user(&format!(
            "next step {round}: {}",
            "words ".repeat(200)
        )));
        grown.push(talaria_record::testing::assistant(&"ok ".repeat(300), &[]));
    }
    let mut again = Scripted::answering("## Goal\nFix the build (second summary).");
    let second = block_on(compress(
        &request(&grown, 6_000),
        &mut accounting,
        &mut again,
    ))
    .expect("second");
    let prompt = &again.asked[0].prompt;
    assert!(
        prompt.contains("PREVIOUS SUMMARY:\n## Goal\nFix the build (first summary)."),
        "{prompt}"
    );
    assert!(
        !prompt.contains(SUMMARY_PREFIX),
        "the frame is not summarised"
    );
    assert!(
        !prompt.contains("Round 0: fixed"),
        "old turns are not sent again"
    );
    assert_eq!(summaries(&second.transcript).len(), 1);
    assert!(summaries(&second.transcript)[0].contains("(second summary)"));
}

#[test]
fn the_summary_is_framed_as_reference_and_roles_stay_valid() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nFix the build.");
    let outcome = block_on(compress(
        &request(&t, 6_000),
        &mut accounting,
        &mut summariser,
    ))
    .expect("compacted");
    let text = &summaries(&outcome.transcript)[0];
    assert!(text.starts_with(SUMMARY_PREFIX) && text.contains("not a new"));
    assert!(text.trim_end().ends_with("not to the summary above ---"));
    assert_valid(&outcome.transcript);
}

#[test]
fn a_failed_summary_becomes_a_marked_fallback_and_an_auth_failure_changes_nothing() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut failing = Scripted::failing(SummaryFailure::Failed("timed out after 120 s".into()));
    let outcome =
        block_on(compress(&request(&t, 6_000), &mut accounting, &mut failing)).expect("fallback");
    let summary = outcome.report.summary.expect("summary");
    assert_eq!(summary.fallback.as_deref(), Some("timed out after 120 s"));
    assert!(summary.text.contains(FALLBACK_MARKER));
    assert!(
        summary
            .text
            .contains(&format!("{} compacted message(s)", summary.messages))
    );
    assert!(
        summary
            .text
            .contains("[terminal] error[E0425]: cannot find value `total`"),
        "{}",
        summary.text
    );
    assert!(summary.text.contains("- src/lib.rs"));
    assert_valid(&outcome.transcript);
    let mut empty = Scripted::answering("   ");
    let outcome =
        block_on(compress(&request(&t, 6_000), &mut accounting, &mut empty)).expect("fallback");
    assert!(outcome.report.summary.expect("summary").fallback.is_some());
    let mut auth = Scripted::failing(SummaryFailure::Abort("401 invalid API key".into()));
    let aborted = block_on(compress(&request(&t, 6_000), &mut accounting, &mut auth));
    assert_eq!(
        aborted.err(),
        Some(CompressError::Aborted("401 invalid API key".into()))
    );
}

#[test]
fn secrets_never_reach_the_summariser() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nx");
    block_on(compress(
        &request(&t, 6_000),
        &mut accounting,
        &mut summariser,
    ))
    .expect("done");
    let prompt = &summariser.asked[0].prompt;
    assert!(!prompt.contains("sk-live9876543210fedcba9876"), "{prompt}");
    assert!(prompt.contains("OPENAI_API_KEY=[REDACTED]"));
}

#[test]
fn compacted_entries_are_marked_not_deleted() {
    let t = coding_session(8);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nx");
    let outcome = block_on(compress(
        &request(&t, 6_000),
        &mut accounting,
        &mut summariser,
    ))
    .expect("done");
    let after = &outcome.transcript;
    assert_eq!(after.len(), t.len() + 1, "only the summary is added");
    for (old, new) in t.entries().iter().zip(after.entries()) {
        assert_eq!(old.id, new.id);
    }
    let compacted = after.entries().iter().filter(|e| e.compacted).count();
    assert_eq!(compacted, outcome.report.summary.expect("summary").messages);
    // Every compacted entry is still whole for a replay (the client's copy of results too).
    assert!(after.entries().iter().any(|e| e.compacted
        && matches!(&e.body, EntryBody::ToolResult(r) if r.display.title == "read_file")));
    assert!(outcome.report.rewritten.len() >= compacted);
}

#[test]
fn a_manual_compaction_summarises_even_when_the_request_fits() {
    let t = coding_session(2);
    let mut accounting = exact();
    let mut summariser = Scripted::answering("## Goal\nx");
    let mut manual = request(&t, 200_000);
    manual.force = true;
    manual.focus = Some("the public API".into());
    let outcome = block_on(compress(&manual, &mut accounting, &mut summariser)).expect("done");
    assert!(outcome.report.summary.is_some());
    assert!(
        summariser.asked[0]
            .prompt
            .contains("FOCUS TOPIC: the public API.")
    );
    let untouched = request(&t, 200_000);
    let nothing = block_on(compress(&untouched, &mut accounting, &mut summariser));
    assert!(matches!(
        nothing,
        Ok(_) | Err(CompressError::NothingToCompact)
    ));
}
