//! What the journal and a reload rely on of the record, pinned exactly (the mutation runs of
//! `tests/mutants.sh record` found these unpinned): which entries follow an id, on the path
//! and off it; a cut-off turn found and closed; the lineage of a rewind; the system prompt's
//! environment; ids after an inserted system prompt; entries stamped with the time.

use crate::testing::{assistant, result, user};
use crate::{EntryBody, EntryId, Transcript};

fn ids<'a>(entries: impl IntoIterator<Item = &'a crate::Entry>) -> Vec<EntryId> {
    entries.into_iter().map(|e| e.id).collect()
}

/// sys(1) u(2) a(3) u(4) a(5), rewound to 3 (marker 6), then u(7) a(8): 4 and 5 are off the
/// path.
fn rewound() -> Transcript {
    let mut t = Transcript::with_system("sys");
    t.push(user("one"));
    t.push(assistant("first", &[]));
    t.push(user("two"));
    t.push(assistant("second", &[]));
    t.rewind_to(3);
    t.push(user("two again"));
    t.push(assistant("second again", &[]));
    t
}

#[test]
fn what_follows_an_id_is_exact_on_the_path_and_off_it() {
    let t = rewound();
    assert_eq!(ids(t.entries()), [1, 2, 3, 7, 8]);
    assert_eq!(ids(t.off_path()), [4, 5, 6]);
    assert_eq!(ids(t.entries_after(0)), [1, 2, 3, 7, 8]);
    assert_eq!(ids(t.entries_after(3)), [7, 8]);
    assert_eq!(ids(t.entries_after(8)), Vec::<EntryId>::new());
    // What a journal that saved up to an id has not saved: off the path too, in id order.
    assert_eq!(ids(t.all_after(0)), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(ids(t.all_after(3)), [4, 5, 6, 7, 8]);
    assert_eq!(ids(t.all_after(5)), [6, 7, 8]);
    assert_eq!(ids(t.all_after(6)), [7, 8]);
    assert_eq!(ids(t.all_after(8)), Vec::<EntryId>::new());
}

#[test]
fn the_lineage_starts_after_the_system_prompt_and_chains_exactly() {
    let t = rewound();
    assert_eq!(t.parent_of(1), None, "the system prompt follows nothing");
    assert_eq!(t.parent_of(2), Some(0), "the first entry follows the start");
    assert_eq!(t.parent_of(7), Some(3), "after the rewind");
    assert_eq!(t.parent_of(6), None, "a marker");
    assert_eq!(t.ancestors_of(8), Some(vec![7, 3, 2]));
    assert_eq!(t.ancestors_of(5), Some(vec![4, 3, 2]));
    assert_eq!(t.ancestors_of(2), Some(vec![]));
    assert_eq!(t.ancestors_of(99), None);
    // Back to the start: the system prompt stays, and the record is valid.
    let mut back = t.clone();
    back.rewind_to(0);
    back.push(user("afresh"));
    back.push(assistant("fresh", &[]));
    assert_eq!(back.entries()[0].id, 1);
    back.validate().expect("valid");
}

#[test]
fn a_cut_off_turn_is_found_and_closed_once() {
    // Ends with the user's message: cut off.
    let mut asked = Transcript::with_system("sys");
    asked.push(user("question"));
    assert!(asked.close_cut_off_turn());
    assert!(matches!(
        asked.entries().last().map(|e| &e.body),
        Some(EntryBody::Interrupted { .. })
    ));
    assert!(!asked.close_cut_off_turn(), "idempotent");
    // Open calls: cut off, each gets a failed result.
    let mut calling = Transcript::with_system("sys");
    calling.push(user("question"));
    calling.push(assistant(
        "",
        &[("c1", "read_file", "{}"), ("c2", "read_file", "{}")],
    ));
    calling.push(result("c1", "read_file", "done"));
    assert!(calling.close_cut_off_turn());
    assert!(calling.open_tool_calls().is_empty());
    calling.validate().expect("valid after closing");
    // Results in, no answer after them: cut off.
    let mut answered_calls = Transcript::with_system("sys");
    answered_calls.push(user("question"));
    answered_calls.push(assistant("", &[("c1", "read_file", "{}")]));
    answered_calls.push(result("c1", "read_file", "done"));
    assert!(answered_calls.close_cut_off_turn());
    // A nudge the model never answered: cut off.
    let mut nudged = Transcript::with_system("sys");
    nudged.push(user("question"));
    nudged.push(assistant("maybe", &[]));
    nudged.push(EntryBody::Nudge {
        text: "go on".into(),
    });
    assert!(nudged.close_cut_off_turn());
    // A finished turn is left as it is.
    let mut finished = Transcript::with_system("sys");
    finished.push(user("question"));
    finished.push(assistant("answer", &[]));
    let before = finished.clone();
    assert!(!finished.close_cut_off_turn());
    assert_eq!(finished, before);
    // An empty record is no turn.
    let mut empty = Transcript::with_system("sys");
    assert!(!empty.close_cut_off_turn());
}

fn waiting_steer(text: &str) -> EntryBody {
    match user(text) {
        EntryBody::User { input, model_view } => EntryBody::SteerWaiting {
            input,
            model_view,
            entered: None,
        },
        _ => unreachable!("user() makes a user message"),
    }
}

fn user_texts(t: &Transcript) -> Vec<String> {
    t.model_messages()
        .iter()
        .map(|m| format!("{m:?}"))
        .filter(|m| m.starts_with("User(") && m.contains("steer"))
        .collect()
}

#[test]
fn a_steer_that_waited_when_the_process_stopped_is_entered_once_after_the_cut_turn() {
    let mut t = Transcript::with_system("sys");
    t.push(user("question"));
    t.push(assistant("", &[("c1", "terminal", "{}")]));
    let first = t.push(waiting_steer("first steer"));
    let second = t.push(waiting_steer("second steer"));
    assert!(
        user_texts(&t).is_empty(),
        "the model does not read a waiting steer"
    );
    assert!(t.close_cut_off_turn());
    t.validate().expect("valid after closing");
    let steers = user_texts(&t);
    assert_eq!(steers.len(), 2, "{steers:?}");
    assert!(steers[0].contains("first steer") && steers[1].contains("second steer"));
    // Each marker names the message it became, and is saved again so.
    let rewritten: Vec<EntryId> = t.take_rewritten().iter().map(|e| e.id).collect();
    assert_eq!(rewritten, [first, second]);
    for marker in [first, second] {
        let entered = t.entries().iter().find(|e| e.id == marker).map(|e| &e.body);
        assert!(
            matches!(
                entered,
                Some(EntryBody::SteerWaiting {
                    entered: Some(_),
                    ..
                })
            ),
            "{entered:?}"
        );
    }
    // The record ends interrupted: a second load changes nothing.
    let before = t.clone();
    assert!(!t.close_cut_off_turn(), "idempotent");
    assert_eq!(t, before);
}

#[test]
fn a_marker_saved_without_the_message_it_names_is_entered_by_a_load() {
    // A kill between the marker's change and its user message's write: the marker names an
    // entry the record does not have (or another entry took that id at a load since).
    let mut t = Transcript::with_system("sys");
    t.push(user("question"));
    t.push(assistant("", &[("c1", "terminal", "{}")]));
    let marker = t.push(waiting_steer("a steer"));
    t.push(result("c1", "terminal", "done"));
    t.steer_entered(marker, 99);
    assert!(t.close_cut_off_turn());
    assert_eq!(user_texts(&t).len(), 1, "{:?}", user_texts(&t));
    t.validate().expect("valid");
    assert!(!t.close_cut_off_turn(), "idempotent");
    // Another entry at the id it names: still not entered.
    let mut other = Transcript::with_system("sys");
    other.push(user("question"));
    other.push(assistant("", &[("c1", "terminal", "{}")]));
    let marker = other.push(waiting_steer("a steer"));
    other.push(result("c1", "terminal", "done"));
    let interrupted = other.push(EntryBody::Interrupted {
        reason: "stopped".into(),
    });
    other.steer_entered(marker, interrupted);
    assert!(other.close_cut_off_turn());
    assert_eq!(user_texts(&other).len(), 1, "{:?}", user_texts(&other));
}

#[test]
fn a_steer_that_entered_is_not_entered_again_by_a_load() {
    let mut t = Transcript::with_system("sys");
    t.push(user("question"));
    t.push(assistant("", &[("c1", "terminal", "{}")]));
    let marker = t.push(waiting_steer("a steer"));
    t.push(result("c1", "terminal", "done"));
    let entered = t.push(user("a steer"));
    t.steer_entered(marker, entered);
    t.push(assistant("took it", &[]));
    let before = t.clone();
    assert!(!t.close_cut_off_turn());
    assert_eq!(t, before);
    t.validate().expect("valid");
}

#[test]
fn the_environment_is_kept_set_and_saved_again() {
    let plain = Transcript::with_system_and_environment("sys", "");
    assert_eq!(plain.environment(), None, "an empty environment is none");
    assert_eq!(plain.len(), 1);
    assert!(!plain.is_empty());
    assert!(Transcript::new().is_empty());
    let mut t = Transcript::with_system_and_environment("sys", "linux, /work");
    assert_eq!(t.environment(), Some("linux, /work"));
    t.take_rewritten();
    t.set_environment("macOS, /home");
    assert_eq!(t.environment(), Some("macOS, /home"));
    assert_eq!(ids(&t.take_rewritten()), [1], "saved again by the journal");
}

#[test]
fn a_system_prompt_added_later_takes_the_next_id_and_the_ids_go_on_after_it() {
    let mut t = Transcript::new();
    t.push(user("hello"));
    t.set_system_prompt("sys");
    assert_eq!(ids(t.entries()), [2, 1], "inserted first, with the next id");
    assert_eq!(t.push(user("again")), 3);
    assert_eq!(t.last_id(), 3);
}

#[test]
fn open_calls_of_an_answer_that_opens_the_record_are_found() {
    let mut t = Transcript::new();
    t.push(assistant("", &[("c1", "read_file", "{}")]));
    assert_eq!(t.open_tool_calls().len(), 1);
    t.push(result("c1", "read_file", "done"));
    assert!(t.open_tool_calls().is_empty());
}

#[test]
fn entries_are_stamped_with_the_time_they_are_recorded() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut t = Transcript::with_system("sys");
    t.push(user("now"));
    t.rewind_to(0);
    for entry in t.all_entries() {
        assert!(
            (entry.at_ms - now).abs() < 60_000,
            "{} stamped {}",
            entry.id,
            entry.at_ms
        );
    }
}

#[test]
fn a_record_the_model_could_not_read_does_not_validate() {
    // The answer comes before any user message.
    let mut t = Transcript::with_system("sys");
    t.push(assistant("unasked", &[]));
    assert!(t.validate().is_err());
}

/// Tool results as a store holds them from before the tools and the record shared one
/// vocabulary (`ToolKind`, `Effects`): each loads, and is written back byte for byte.
#[test]
fn results_stored_before_the_shared_vocabulary_load_and_write_back_the_same() {
    let declared = r#"{"id":7,"at_ms":1700000000000,"kind":"tool_result","call_id":"c1","client_id":"c1","tool":"patch","status":"completed","display":{"title":"Edit a.rs","kind":"edit","locations":[{"path":"/w/a.rs","line":3}]},"raw_input":{"path":"a.rs"},"model_text":"ok","effects":{"writes":true,"path_args":["path","to"],"declared":true}}"#;
    let command = r#"{"id":8,"at_ms":1700000000001,"kind":"tool_result","call_id":"c2","client_id":"c2","tool":"terminal","status":"failed","display":{"title":"ls","kind":"execute"},"raw_input":{"command":"ls"},"model_text":"exit 2","effects":{"runs_commands":true,"command_arg":"command","declared":true}}"#;
    let undeclared = r#"{"id":9,"at_ms":1700000000002,"kind":"tool_result","call_id":"c3","client_id":"c3","tool":"mcp_x","status":"completed","display":{"title":"x","kind":"other"},"model_text":"","effects":{}}"#;
    // A version-3 record: no effects; they are read from the display kind.
    let older = r#"{"id":10,"at_ms":1700000000003,"kind":"tool_result","call_id":"c4","client_id":"c4","tool":"read_file","status":"completed","display":{"title":"Read","kind":"read"},"raw_input":{"path":"b.rs"},"model_text":"text"}"#;
    for stored in [declared, command, undeclared, older] {
        let entry: crate::Entry = serde_json::from_str(stored).expect(stored);
        assert_eq!(serde_json::to_string(&entry).expect("writes"), stored);
    }
    let effects_of = |stored: &str| {
        let entry: crate::Entry = serde_json::from_str(stored).expect(stored);
        let EntryBody::ToolResult(result) = entry.body else {
            panic!("a tool result: {stored}");
        };
        (result.effects(), result.raw_input)
    };
    let (effects, input) = effects_of(declared);
    assert!(effects.writes && effects.declared && !effects.reads);
    assert_eq!(effects.path(&input), Some("a.rs"));
    let (effects, input) = effects_of(command);
    assert_eq!(effects.command(&input), Some("ls"));
    assert_eq!(effects_of(undeclared).0, crate::Effects::UNKNOWN);
    let (effects, input) = effects_of(older);
    assert_eq!(effects, crate::Effects::reads(&["path"]));
    assert_eq!(effects.path(&input), Some("b.rs"));
}
