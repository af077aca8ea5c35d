//! The store conformance suite: what every [`SessionStore`] does, whatever holds the data.
//! Each check takes a fresh, empty store (or two handles on one, standing for two
//! processes). The SQLite store's tests run it; another backend's tests call the same
//! checks (the `test-support` feature exports them).

// Test support: a failed step is a failed check.
#![allow(clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use talaria_record::testing::{assert_valid, assistant, result, user};
use talaria_record::{EntryBody, Transcript};

use crate::{Basis, MetaUpdate, Refusal, SessionAppend, SessionMeta, SessionStore, StoreError};

/// A session's metadata for the checks.
pub fn meta(id: &str, cwd: &str, updated_at: i64) -> SessionMeta {
    SessionMeta {
        id: id.into(),
        cwd: cwd.into(),
        model: "m".into(),
        mode: "ask".into(),
        created_at: updated_at,
        updated_at,
        ..SessionMeta::default()
    }
}

/// A short conversation with one tool call.
pub fn conversation() -> Transcript {
    let mut t = Transcript::with_system("sys");
    t.push(user("why does the parser overflow its stack?"));
    t.push(assistant(
        "",
        &[("c1", "read_file", "{\"path\":\"parse.rs\"}")],
    ));
    t.push(result("c1", "read_file", "fn parse() { parse() }"));
    t.push(assistant("It recurses without a depth limit.", &[]));
    t
}

/// A session round-trips with its record; a rewritten entry replaces its namesake; delete says whether there was one.
pub fn round_trip(store: &dyn SessionStore) {
    store
        .accepts_writes()
        .expect("a healthy store says it takes writes");
    store.create(&meta("s1", "/p", 1)).expect("create");
    let t = conversation();
    store.append("s1", &t.entries()[..2]).expect("append");
    store.append("s1", &t.entries()[2..]).expect("append");
    store
        .update(
            "s1",
            &MetaUpdate {
                title: Some("Parser overflow".into()),
                tokens: Some((100, 20)),
                cost: Some(0.5),
                ..MetaUpdate::default()
            },
        )
        .expect("update");
    let (meta, loaded) = store.load("s1").expect("load");
    assert_eq!(loaded, Transcript::from_entries(t.entries().to_vec()));
    assert_valid(&loaded);
    assert_eq!(meta.title.as_deref(), Some("Parser overflow"));
    assert_eq!((meta.input_tokens, meta.output_tokens), (100, 20));
    assert!(matches!(store.load("nope"), Err(StoreError::NotFound(_))));
    // A creation written again (a spool adopted after a crash) changes nothing, and the
    // same entries written again stay one copy each.
    let mut again = crate::conformance::meta("s1", "/elsewhere", 2);
    again.title = Some("from the spool".into());
    store.create(&again).expect("created again");
    store.append("s1", t.entries()).expect("appended again");
    let (meta_again, reloaded) = store.load("s1").expect("load");
    assert_eq!(meta_again.cwd, "/p");
    assert_eq!(meta_again.title.as_deref(), Some("Parser overflow"));
    assert_eq!(reloaded, Transcript::from_entries(t.entries().to_vec()));
    // Rewriting an entry (compaction) replaces it in place.
    let mut rewritten = t.entries()[3].clone();
    if let EntryBody::ToolResult(result) = &mut rewritten.body {
        result.model_text = "[cleared]".into();
    }
    store.append("s1", &[rewritten.clone()]).expect("rewrite");
    assert_eq!(store.load("s1").expect("load").1.entries()[3], rewritten);
    assert!(store.delete("s1", false).expect("delete"));
    assert!(!store.delete("s1", false).expect("again"));
}

/// Lists page newest first with a cursor and filter by cwd.
pub fn list_pages(store: &dyn SessionStore) {
    for i in 0..25 {
        let cwd = if i % 2 == 0 { "/even" } else { "/odd" };
        store
            .create(&meta(&format!("s{i:02}"), cwd, i))
            .expect("create");
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(None, cursor.as_deref(), 10).expect("list");
        seen.extend(page.sessions.iter().map(|s| s.id.clone()));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).rev().map(|i| format!("s{i:02}")).collect();
    assert_eq!(seen, expected);
    let even = store.list(Some("/even"), None, 100).expect("list");
    assert_eq!(even.sessions.len(), 13);
    assert!(even.sessions.iter().all(|s| s.cwd == "/even"));
    assert!(even.next_cursor.is_none());
}

/// Search ranks the best match first, marks it in the snippet, survives operators, and scrolls around a hit.
pub fn search_ranks(store: &dyn SessionStore) {
    let corpus = [
        (
            "a",
            "the stack overflow came from unbounded recursion in the parser",
        ),
        ("b", "we talked about the weather"),
        (
            "c",
            "parser speed is fine; recursion depth is bounded by a limit",
        ),
        (
            "d",
            "stack overflow: unbounded recursion in the parser again, stack overflow",
        ),
    ];
    for (i, (id, text)) in corpus.iter().enumerate() {
        store
            .create(&meta(id, "/p", i64::try_from(i).unwrap_or(0)))
            .expect("create");
        let mut t = Transcript::with_system("sys");
        t.push(user(text));
        t.push(assistant("noted", &[]));
        store.append(id, t.entries()).expect("append");
    }
    let hits = store
        .search("stack overflow recursion", 10)
        .expect("search");
    let order: Vec<&str> = hits.iter().map(|h| h.session_id.as_str()).collect();
    assert_eq!(&order[..2], ["d", "a"], "{hits:?}");
    assert!(!order.contains(&"b"));
    assert!(
        hits[0].snippet.contains("[overflow]"),
        "{}",
        hits[0].snippet
    );
    // Words are stemmed alike on every store: "parsers" finds "parser".
    assert!(
        !store.search("parsers", 5).expect("search").is_empty(),
        "stemmed search"
    );
    // Operators typed by the model cannot break the query.
    assert!(store.search("\"unbalanced AND (", 5).is_ok());
    let around = store
        .entries_around("a", hits[1].entry_id, 1, 1)
        .expect("around");
    assert_eq!(around.len(), 3);
}

/// Eight threads write their sessions at once; nothing is lost.
pub fn many_writers(store: Arc<dyn SessionStore>) {
    let writers: Vec<_> = (0..8_i64)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                let id = format!("w{w}");
                store.create(&meta(&id, "/p", w)).expect("create");
                let mut t = Transcript::with_system("sys");
                store.append(&id, t.entries()).expect("append");
                for n in 0..50 {
                    t.push(user(&format!("message {n} of writer {w}")));
                    let last = t.entries().len() - 1;
                    store.append(&id, &t.entries()[last..]).expect("append");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("joined");
    }
    for w in 0..8 {
        let (_, t) = store.load(&format!("w{w}")).expect("load");
        assert_eq!(t.len(), 51);
    }
}

/// A session claimed by one holder cannot be claimed or deleted by another until released; reading is never refused.
pub fn claims_are_exclusive(mine: &dyn SessionStore, theirs: &dyn SessionStore) {
    mine.create(&meta("s", "/p", 1)).expect("create");
    mine.claim("s").expect("first claim");
    mine.claim("s").expect("the same holder may claim again");
    assert!(
        mine.holds("s") && !theirs.holds("s"),
        "the holder knows it holds it"
    );
    match theirs.claim("s") {
        Err(StoreError::InUse { session, holder }) => {
            assert_eq!(session, "s");
            assert!(holder.contains("pid"), "{holder}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        theirs.delete("s", false),
        Err(StoreError::InUse { .. })
    ));
    assert!(theirs.load("s").is_ok(), "reading is never refused");
    mine.release("s").expect("release");
    assert!(!mine.holds("s"));
    theirs.claim("s").expect("free once released");
    assert!(theirs.holds("s"));
    assert!(theirs.delete("s", false).expect("delete"));
    assert!(matches!(mine.load("s"), Err(StoreError::NotFound(_))));
}

/// A batch commits every session at once, and an entry rewritten in place is re-indexed, not indexed twice.
pub fn batch_and_reindex(store: &dyn SessionStore) {
    for id in ["a", "b"] {
        store.create(&meta(id, "/p", 1)).expect("create");
    }
    let mut first = Transcript::with_system("sys");
    first.push(user("the first draft mentions walruses"));
    let second = conversation();
    store
        .append_batch(&[
            (
                "a".into(),
                crate::EncodedEntry::all(first.entries()).expect("encodes"),
            ),
            (
                "b".into(),
                crate::EncodedEntry::all(second.entries()).expect("encodes"),
            ),
        ])
        .expect("batch");
    assert_eq!(store.load("b").expect("b").1.len(), second.len());
    assert_eq!(store.search("walruses", 5).expect("search").len(), 1);
    // An entry rewritten in place (compaction) is re-indexed, not indexed twice.
    let mut rewritten = first.entries()[1].clone();
    if let EntryBody::User { model_view, .. } = &mut rewritten.body {
        *model_view = vec![talaria_record::UserPart::text("now about narwhals")];
    }
    store.append("a", &[rewritten]).expect("rewrite");
    assert!(store.search("walruses", 5).expect("search").is_empty());
    assert_eq!(store.search("narwhals", 5).expect("search").len(), 1);
    store.checkpoint().expect("checkpoint");
}

/// A very large answer (many distinct words, megabytes) is saved whole and found by its
/// opening: the index holds a bounded part of it (a PostgreSQL `tsvector` holds at most 1 MB).
pub fn large_entries(store: &dyn SessionStore) {
    store.create(&meta("big", "/p", 1)).expect("create");
    let mut transcript = Transcript::with_system("sys");
    let words: String = (0..400_000).map(|n| format!("w{n:x}q ")).collect();
    transcript.push(EntryBody::Assistant(talaria_record::AssistantEntry {
        text: format!("aardvarks open this {words} and zebras close it"),
        ..talaria_record::AssistantEntry::default()
    }));
    // A second one in the same write, with what a store must escape on the way.
    transcript.push(EntryBody::Assistant(talaria_record::AssistantEntry {
        text: format!("a \"quoted\" line\n\ttabbed\r\\ {words}"),
        ..talaria_record::AssistantEntry::default()
    }));
    store
        .append("big", transcript.entries())
        .expect("a large answer is saved");
    let (_, loaded) = store.load("big").expect("load");
    assert_eq!(loaded.entries(), transcript.entries());
    assert_eq!(store.search("aardvarks", 5).expect("search").len(), 1);
    assert!(store.search("zebras", 5).expect("search").is_empty());
}

fn checked(session: &str, entries: &[talaria_record::Entry], basis: &Basis) -> SessionAppend {
    SessionAppend {
        session: session.into(),
        entries: crate::EncodedEntry::all(entries).expect("encodes"),
        basis: basis.clone(),
    }
}

fn basis(writer: &str, builds_on: &[&str]) -> Basis {
    Basis {
        writer: writer.into(),
        builds_on: builds_on.iter().map(|w| (*w).to_string()).collect(),
    }
}

/// Checked appends never replace what another writer wrote: a writer whose basis the session
/// follows writes (and becomes its writer); one that does not is refused with nothing written
/// (its entries the same as the stored ones pass, changing nothing); a missing session is
/// refused; one refused session leaves the others of its batch written.
pub fn checked_appends(store: &dyn SessionStore) {
    store.create(&meta("s", "/p", 1)).expect("create");
    assert_eq!(store.load("s").expect("load").0.writer, "");
    let mut a = Transcript::with_system("sys");
    a.push(user("turn one"));
    let refused = store
        .append_checked(&[checked("s", a.entries(), &basis("A", &[""]))])
        .expect("first writer");
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(store.load("s").expect("load").0.writer, "A");
    // B loaded it after A: B follows A.
    let mut b = a.clone();
    b.push(assistant("B's answer", &[]));
    let b_new = &b.entries()[2..];
    store
        .append_checked(&[checked("s", b_new, &basis("B", &["A"]))])
        .expect("B");
    // A's stale writes (a spool adopted after B went on): the same id, another body.
    let mut stale = a.clone();
    stale.push(assistant("A's answer, never seen by B", &[]));
    let refused = store
        .append_checked(&[checked("s", &stale.entries()[2..], &basis("C", &["A"]))])
        .expect("checked");
    assert_eq!(
        refused,
        vec![Refusal::Diverged {
            session: "s".into(),
            writer: "B".into(),
        }]
    );
    assert_eq!(refused[0].session(), "s");
    let (meta_now, stored) = store.load("s").expect("load");
    assert_eq!(stored, Transcript::from_entries(b.entries().to_vec()));
    assert_eq!(meta_now.writer, "B", "a refused write changes nothing");
    // Written again as they are (a spool of B's own writes): harmless, nothing changes.
    let refused = store
        .append_checked(&[checked("s", b_new, &basis("D", &["X"]))])
        .expect("again");
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(store.load("s").expect("load").0.writer, "B");
    // Some of them there, one new: refused whole.
    let mut more = b.clone();
    more.push(user("a turn on top"));
    let refused = store
        .append_checked(&[checked("s", &more.entries()[2..], &basis("D", &["X"]))])
        .expect("checked");
    assert_eq!(refused.len(), 1);
    assert_eq!(store.load("s").expect("load").1.len(), b.len());
    // A batch: the refused session is left out, the other one is written.
    store.create(&meta("t", "/p", 1)).expect("create");
    let refused = store
        .append_checked(&[
            checked("s", &stale.entries()[2..], &basis("C", &["A"])),
            checked("t", a.entries(), &basis("C", &[""])),
            checked("gone", a.entries(), &basis("C", &[""])),
        ])
        .expect("batch");
    assert_eq!(
        refused,
        vec![
            Refusal::Diverged {
                session: "s".into(),
                writer: "B".into(),
            },
            Refusal::Missing {
                session: "gone".into(),
            },
        ]
    );
    assert_eq!(refused[1].session(), "gone");
    assert_eq!(store.load("t").expect("t").1.len(), a.len());
    assert!(matches!(store.load("gone"), Err(StoreError::NotFound(_))));
}

/// A session created with its entries is there whole or not at all; created again with the
/// same entries nothing changes; with other entries it is refused.
pub fn created_with_entries(store: &dyn SessionStore) {
    let copy = conversation();
    let entries = crate::EncodedEntry::all(copy.entries()).expect("encodes");
    let fork = meta("fork", "/p", 1);
    let refused = store
        .create_with_entries(&fork, &entries, &basis("F", &[""]))
        .expect("fork");
    assert_eq!(refused, None);
    let (read, loaded) = store.load("fork").expect("load");
    assert_eq!(loaded, Transcript::from_entries(copy.entries().to_vec()));
    assert_eq!(read.writer, "F");
    let refused = store
        .create_with_entries(&fork, &entries, &basis("G", &[""]))
        .expect("again");
    assert_eq!(refused, None, "the same copy again is harmless");
    let other =
        crate::EncodedEntry::all(Transcript::with_system("another").entries()).expect("encodes");
    let refused = store
        .create_with_entries(&fork, &other, &basis("G", &[""]))
        .expect("checked");
    assert!(
        matches!(refused, Some(Refusal::Diverged { .. })),
        "{refused:?}"
    );
    assert_eq!(store.load("fork").expect("load").1.len(), copy.len());
}

/// A deleted session stays deleted: its tombstone refuses a creation written again (a spool
/// adopted after the delete), a checked append (`Missing`), a fork's copy under its id
/// (`Missing`) and an unchecked append (`Deleted`), each changing nothing and leaving the
/// other sessions of a batch written. A session whose creation still waits in the deleting
/// process (`waiting_here`) is tombstoned though the store never had it; an unknown one is
/// not (another process may be about to create it), and says so. The tombstone is the
/// session's alone (a similar id is untouched) and is there for a second handle on the store
/// (another process) too, which `was_deleted` tells.
pub fn deleted_sessions_stay_deleted(store: &dyn SessionStore, other: &dyn SessionStore) {
    let t = conversation();
    let entries = crate::EncodedEntry::all(t.entries()).expect("encodes");
    store.create(&meta("gone", "/p", 1)).expect("create");
    store.append("gone", t.entries()).expect("append");
    store.create(&meta("gone-2", "/p", 1)).expect("create");
    assert!(!other.was_deleted("gone").expect("was deleted"), "not yet");
    assert!(store.delete("gone", false).expect("delete"));
    // Another process following it learns it is gone; a similar id and one never known are
    // not deleted.
    assert!(other.was_deleted("gone").expect("was deleted"));
    assert!(!other.was_deleted("gone-2").expect("was deleted"));
    assert!(!other.was_deleted("never").expect("was deleted"));
    assert!(!store.holds("gone"), "the delete's claim is let go");
    let refused = other.create(&meta("gone", "/p", 2));
    assert!(
        matches!(&refused, Err(StoreError::Deleted(id)) if id == "gone"),
        "{refused:?}"
    );
    assert!(!refused.expect_err("refused").is_store_wide());
    assert!(matches!(store.load("gone"), Err(StoreError::NotFound(_))));
    store.create(&meta("kept", "/p", 1)).expect("create");
    let refused = other
        .append_checked(&[
            checked("gone", t.entries(), &basis("W", &[""])),
            checked("kept", t.entries(), &basis("W", &[""])),
        ])
        .expect("checked");
    assert_eq!(
        refused,
        vec![Refusal::Missing {
            session: "gone".into()
        }]
    );
    assert_eq!(store.load("kept").expect("kept").1.len(), t.len());
    let refused = other
        .create_with_entries(&meta("gone", "/p", 3), &entries, &basis("F", &[""]))
        .expect("fork");
    assert_eq!(
        refused,
        Some(Refusal::Missing {
            session: "gone".into()
        })
    );
    assert!(matches!(
        other.append("gone", t.entries()),
        Err(StoreError::Deleted(_))
    ));
    assert!(matches!(store.load("gone"), Err(StoreError::NotFound(_))));
    let listed = store.list(None, None, 100).expect("list");
    assert!(listed.sessions.iter().all(|m| m.id != "gone"), "{listed:?}");
    assert!(
        store.load("gone-2").is_ok(),
        "another session with a similar id is untouched"
    );
    // Deleted again: nothing there, and said so.
    assert!(!store.delete("gone", false).expect("again"));
    // A session never stored, unknown here: not deleted, and it may be created later; the
    // claim the delete took is let go (another process may open it).
    assert!(!store.delete("unknown", false).expect("unknown"));
    assert!(!store.holds("unknown"));
    other
        .claim("unknown")
        .expect("free after a delete that found nothing");
    other.release("unknown").expect("release");
    store
        .create(&meta("unknown", "/p", 1))
        .expect("created after all");
    assert!(store.load("unknown").is_ok());
    // A session whose creation still waits in the deleting process: tombstoned all the same.
    assert!(store.delete("waiting", true).expect("waiting"));
    assert!(matches!(
        other.create(&meta("waiting", "/p", 1)),
        Err(StoreError::Deleted(_))
    ));
    let refused = other
        .append_checked(&[checked("waiting", t.entries(), &basis("W", &[""]))])
        .expect("checked");
    assert_eq!(refused.len(), 1);
    assert!(matches!(
        store.load("waiting"),
        Err(StoreError::NotFound(_))
    ));
}

/// A session asked for by another holder is seen asked, by whom, until the ask is withdrawn;
/// one ask stands at a time (a second asker is told who asks), renewed by its asker, and
/// withdrawn only by it.
pub fn asks_pass_between_holders(mine: &dyn SessionStore, theirs: &dyn SessionStore) {
    mine.create(&meta("asked", "/p", 1)).expect("create");
    mine.claim("asked").expect("claim");
    let ids = vec!["asked".to_string(), "other".to_string()];
    assert!(
        mine.asked_for(&ids, crate::ASK_FRESH_MS)
            .expect("none yet")
            .is_empty()
    );
    assert_eq!(theirs.ask_for("asked", "phone").expect("ask"), None);
    assert_eq!(theirs.ask_for("asked", "phone").expect("renewed"), None);
    assert_eq!(
        theirs.ask_for("asked", "laptop").expect("a second asker"),
        Some("phone".to_string()),
        "one ask stands at a time"
    );
    assert_eq!(
        mine.asked_for(&ids, crate::ASK_FRESH_MS).expect("asked"),
        [("asked".to_string(), "phone".to_string())]
    );
    assert!(
        mine.asked_for(&[], crate::ASK_FRESH_MS)
            .expect("nothing to ask about")
            .is_empty()
    );
    theirs.withdraw_ask("asked", "laptop").expect("not its ask");
    assert_eq!(
        mine.asked_for(&ids, crate::ASK_FRESH_MS)
            .expect("still asked")
            .len(),
        1
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        mine.asked_for(&ids, 100)
            .expect("not renewed lately")
            .is_empty(),
        "an ask not renewed within the time asked about counts for nothing"
    );
    theirs.withdraw_ask("asked", "phone").expect("withdraw");
    assert!(
        mine.asked_for(&ids, crate::ASK_FRESH_MS)
            .expect("withdrawn")
            .is_empty()
    );
    assert_eq!(theirs.ask_for("asked", "laptop").expect("free again"), None);
    // An ask its asker stopped renewing counts for nothing: another asker takes its place.
    let lapse = u64::try_from(crate::ASK_FRESH_MS).unwrap_or(2_000) + 300;
    std::thread::sleep(std::time::Duration::from_millis(lapse));
    assert_eq!(
        theirs.ask_for("asked", "phone").expect("after a lapse"),
        None
    );
    assert_eq!(
        mine.asked_for(&ids, crate::ASK_FRESH_MS)
            .expect("the new ask"),
        [("asked".to_string(), "phone".to_string())]
    );
    theirs.withdraw_ask("asked", "phone").expect("withdraw");
    mine.release("asked").expect("release");
}
