//! Tests of the record: rendering rules, validation, serde round trips, and property tests
//! over random transcripts.

use proptest::prelude::*;

use crate::testing::{assert_valid, assistant, result, user};
use crate::{EntryBody, ModelMessage, Transcript, Violation, validate};

#[test]
fn a_plain_conversation_renders_in_order_and_is_valid() {
    let mut t = Transcript::with_system("sys");
    t.push(user("q"));
    t.push(assistant(
        "",
        &[("c1", "read_file", "{}"), ("c2", "search_files", "{}")],
    ));
    t.push(result("c2", "search_files", "found"));
    t.push(result("c1", "read_file", "text"));
    t.push(assistant("done", &[]));
    assert_valid(&t);
    let messages = t.model_messages();
    assert_eq!(messages.len(), 6);
    assert!(matches!(messages[0], ModelMessage::System("sys")));
    assert!(matches!(
        &messages[3],
        ModelMessage::Tool { call_id: "c2", .. }
    ));
}

#[test]
fn images_of_tool_results_follow_the_results_of_their_response_as_one_user_message() {
    let mut t = Transcript::with_system("sys");
    t.push(user("q"));
    t.push(assistant(
        "",
        &[("c1", "mcp__s__shot", "{}"), ("c2", "read_file", "{}")],
    ));
    let mut shot = result("c1", "mcp__s__shot", "a screenshot");
    if let EntryBody::ToolResult(r) = &mut shot {
        r.images = vec![crate::UserPart::Image {
            mime_type: "image/png".into(),
            data: "AAAA".into(),
        }];
    }
    t.push(shot);
    t.push(result("c2", "read_file", "text"));
    t.push(assistant("seen", &[]));
    assert_valid(&t);
    let messages = t.model_messages();
    assert!(matches!(
        messages[3],
        ModelMessage::Tool { call_id: "c1", .. }
    ));
    assert!(matches!(
        messages[4],
        ModelMessage::Tool { call_id: "c2", .. }
    ));
    let ModelMessage::User(parts) = &messages[5] else {
        panic!("the images follow the results: {messages:#?}");
    };
    assert_eq!(parts[0], crate::UserPart::text(crate::TOOL_IMAGES_NOTE));
    assert!(matches!(&parts[1], crate::UserPart::Image { data, .. } if data == "AAAA"));
    assert!(matches!(messages[6], ModelMessage::Assistant { .. }));
    assert_eq!(messages.len(), 7);
}

#[test]
fn an_interrupted_turn_renders_validly_with_a_note_and_closed_calls() {
    let mut t = Transcript::with_system("sys");
    t.push(user("first"));
    t.interrupt("the provider failed: 500");
    t.push(user("second"));
    assert_valid(&t);
    let messages = t.model_messages();
    assert!(
        matches!(&messages[2], ModelMessage::Assistant { text, .. } if text.contains("did not complete")),
        "{messages:?}"
    );

    let mut t = Transcript::with_system("sys");
    t.push(user("q"));
    t.push(assistant(
        "",
        &[("a", "terminal", "{}"), ("b", "terminal", "{}")],
    ));
    t.push(result("a", "terminal", "ok"));
    assert_eq!(t.open_tool_calls().len(), 1);
    t.interrupt("process stopped");
    assert!(t.open_tool_calls().is_empty());
    t.push(user("again"));
    assert_valid(&t);
}

#[test]
fn validation_names_each_broken_invariant() {
    let call = |id: &str| crate::ToolCallRequest {
        id: id.into(),
        name: "t".into(),
        arguments: "{}".into(),
    };
    let calls = [call("x"), call("x")];
    let messages = vec![
        ModelMessage::System("s"),
        ModelMessage::Assistant {
            text: "a".into(),
            reasoning: None,
            tool_calls: &calls,
        },
        ModelMessage::Tool {
            call_id: "zzz",
            content: "r".into(),
        },
        ModelMessage::System("late"),
    ];
    let violations = validate(&messages).expect_err("invalid");
    assert!(violations.contains(&Violation::DoesNotStartWithUser { index: 1 }));
    assert!(violations.contains(&Violation::DuplicateCallId {
        call_id: "x".into()
    }));
    assert!(violations.contains(&Violation::OrphanResult {
        index: 2,
        call_id: "zzz".into()
    }));
    assert!(violations.contains(&Violation::SystemNotFirst { index: 3 }));
    assert!(
        violations
            .iter()
            .any(|v| matches!(v, Violation::CallWithoutResult { .. }))
    );
}

#[test]
fn compacted_entries_and_markers_are_not_model_messages_but_stay_in_the_record() {
    let mut t = Transcript::with_system("sys");
    t.push(user("old"));
    t.push(assistant("old answer", &[]));
    t.push(EntryBody::ModeChanged {
        mode: "yolo".into(),
    });
    for entry in &mut t.entries_mut()[1..3] {
        entry.compacted = true;
    }
    t.push(EntryBody::Summary {
        text: "summary of 2".into(),
        first: 2,
        last: 3,
    });
    t.push(user("new"));
    assert_valid(&t);
    assert_eq!(t.len(), 6);
    let messages = t.model_messages();
    assert_eq!(messages.len(), 3, "{messages:?}");
}

#[test]
fn the_record_round_trips_through_json_and_refuses_newer_versions() {
    let mut t = Transcript::with_system("sys");
    t.push(user("q"));
    t.push(assistant("a", &[("c", "read_file", "{\"path\":\"x\"}")]));
    t.push(result("c", "read_file", "1|x"));
    let json = t.to_json().expect("json");
    assert_eq!(Transcript::from_json(&json).expect("back"), t);
    let newer = json.replacen("\"version\":1", "\"version\":99", 1);
    assert!(Transcript::from_json(&newer).is_err());
}

#[test]
fn the_system_prompt_is_replaced_in_place() {
    let mut t = Transcript::with_system("old");
    t.push(user("q"));
    t.set_system_prompt("new");
    assert!(matches!(t.model_messages()[0], ModelMessage::System("new")));
    assert_valid(&t);
}

/// One step of a random session.
#[derive(Debug, Clone)]
enum Step {
    User,
    Answer {
        calls: usize,
        answered: Vec<bool>,
        reversed: bool,
    },
    Orphan,
    Interrupt,
    Marker,
    Compact(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::User),
        4 => (0usize..4, proptest::collection::vec(any::<bool>(), 4), any::<bool>())
            .prop_map(|(calls, answered, reversed)| Step::Answer { calls, answered, reversed }),
        1 => Just(Step::Orphan),
        1 => Just(Step::Interrupt),
        1 => Just(Step::Marker),
        1 => (0usize..8).prop_map(Step::Compact),
    ]
}

proptest! {
    /// Whatever happens in a session (calls answered or not, in any order, interrupts,
    /// orphans, markers, compaction), the model view is valid once each turn ends with the
    /// engine's own rule: an unfinished turn is interrupted.
    #[test]
    fn random_sessions_render_valid_messages(steps in proptest::collection::vec(step(), 0..40)) {
        let mut t = Transcript::with_system("sys");
        t.push(user("start"));
        let mut n = 0;
        for step in steps {
            n += 1;
            match step {
                Step::User => {
                    if !t.open_tool_calls().is_empty() {
                        t.interrupt("left open");
                    }
                    t.push(user(&format!("u{n}")));
                }
                Step::Answer { calls, answered, reversed } => {
                    let ids: Vec<String> = (0..calls).map(|i| format!("c{n}-{i}")).collect();
                    let specs: Vec<(&str, &str, &str)> = ids.iter().map(|id| (id.as_str(), "t", "{}")).collect();
                    if !t.open_tool_calls().is_empty() {
                        t.interrupt("left open");
                    }
                    // A turn that ended with an answer is followed by the user's next message.
                    if matches!(t.model_messages().last(), Some(ModelMessage::Assistant { .. })) {
                        t.push(user(&format!("next{n}")));
                    }
                    t.push(assistant(&format!("a{n}"), &specs));
                    let mut order: Vec<usize> = (0..calls).collect();
                    if reversed { order.reverse(); }
                    for i in order {
                        if answered[i] {
                            t.push(result(&ids[i], "t", "r"));
                        }
                    }
                }
                Step::Orphan => { t.push(result(&format!("ghost{n}"), "t", "r")); }
                Step::Interrupt => t.interrupt("stopped"),
                Step::Marker => { t.push(EntryBody::ModelChanged { model: "m".into() }); }
                Step::Compact(k) => {
                    // Compaction marks a prefix (after the system prompt) and adds a summary.
                    // It never splits a call from its results: the kept tail starts at a
                    // user message.
                    let end = (2..=(1 + k).min(t.len().saturating_sub(1)))
                        .rev()
                        .find(|&i| matches!(t.entries()[i].body, EntryBody::User { .. }))
                        .unwrap_or(1);
                    if end > 1 {
                        let first = t.entries()[1].id;
                        let last = t.entries()[end - 1].id;
                        for entry in &mut t.entries_mut()[1..end] { entry.compacted = true; }
                        t.push(EntryBody::Summary { text: "s".into(), first, last });
                    }
                }
            }
        }
        if !t.open_tool_calls().is_empty() {
            t.interrupt("end");
        }
        let messages = t.model_messages();
        let checked = validate(&messages);
        prop_assert!(checked.is_ok(), "{:?}\n{:#?}", checked, messages);
        let back = Transcript::from_json(&t.to_json().expect("json")).expect("parse");
        prop_assert_eq!(back, t);
    }
}
