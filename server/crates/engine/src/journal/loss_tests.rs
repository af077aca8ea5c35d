//! The journal's loss paths, on a real SQLite file: an ended process's spool adopted while
//! or after another process went on with its session (never replacing what that process
//! wrote), stale spool lines, a fork committed with its row or spooled before it is
//! answered, and a session row without a record.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Condvar, Mutex};

use talaria_record::testing::{assistant, user};
use talaria_record::{Entry, EntryBody, EntryId, Transcript};
use talaria_store::{
    Basis, EncodedEntry, ListPage, MetaUpdate, Refusal, SearchHit, SessionAppend, SessionMeta,
    SessionStore, SqliteStore, StoreError,
};

use super::*;

/// A real SQLite store whose writes can be refused (as a full disk) or held (as a lock held
/// by another program), for all sessions or some.
struct Gate {
    inner: SqliteStore,
    /// Sessions whose writes are refused (`"*"`: all).
    refused: Mutex<HashSet<String>>,
    held: Mutex<bool>,
    released: Condvar,
}

impl Gate {
    fn open(path: &Path) -> Arc<Self> {
        Arc::new(Self {
            inner: SqliteStore::open(path).expect("open"),
            refused: Mutex::default(),
            held: Mutex::new(false),
            released: Condvar::new(),
        })
    }

    fn refuse(&self, session: &str) {
        self.refused.lock().expect("lock").insert(session.into());
    }

    fn admit(&self, session: &str) {
        self.refused.lock().expect("lock").remove(session);
    }

    fn hold(&self, held: bool) {
        *self.held.lock().expect("lock") = held;
        self.released.notify_all();
    }

    /// Waits while held; refuses a write of `session` while it (or everything) is refused.
    fn pass(&self, session: &str) -> Result<(), StoreError> {
        let mut held = self.held.lock().expect("lock");
        while *held {
            held = self.released.wait(held).expect("lock");
        }
        drop(held);
        let refused = self.refused.lock().expect("lock");
        if refused.contains("*") {
            return Err(StoreError::Full("no space left".into()));
        }
        // One session's refusal is not the store's as a whole (the others go on).
        if refused.contains(session) {
            return Err(StoreError::Other(format!("{session} is refused")));
        }
        Ok(())
    }
}

impl SessionStore for Gate {
    fn create(&self, meta: &SessionMeta) -> Result<(), StoreError> {
        self.pass(&meta.id)?;
        self.inner.create(meta)
    }
    fn append_encoded(&self, session: &str, entries: &[EncodedEntry]) -> Result<(), StoreError> {
        self.pass(session)?;
        self.inner.append_encoded(session, entries)
    }
    fn append_checked(&self, batch: &[SessionAppend]) -> Result<Vec<Refusal>, StoreError> {
        for append in batch {
            self.pass(&append.session)?;
        }
        self.inner.append_checked(batch)
    }
    fn create_with_entries(
        &self,
        meta: &SessionMeta,
        entries: &[EncodedEntry],
        basis: &Basis,
    ) -> Result<Option<Refusal>, StoreError> {
        self.pass(&meta.id)?;
        self.inner.create_with_entries(meta, entries, basis)
    }
    fn update(&self, session: &str, update: &MetaUpdate) -> Result<(), StoreError> {
        self.pass(session)?;
        self.inner.update(session, update)
    }
    fn accepts_writes(&self) -> Result<(), StoreError> {
        self.pass("")?;
        self.inner.accepts_writes()
    }
    fn load(&self, session: &str) -> Result<(SessionMeta, Transcript), StoreError> {
        self.inner.load(session)
    }
    fn list(
        &self,
        cwd: Option<&str>,
        cursor: Option<&str>,
        n: usize,
    ) -> Result<ListPage, StoreError> {
        self.inner.list(cwd, cursor, n)
    }
    fn delete(&self, session: &str, waiting_here: bool) -> Result<bool, StoreError> {
        self.inner.delete(session, waiting_here)
    }
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        self.inner.search(query, limit)
    }
    fn was_deleted(&self, session: &str) -> Result<bool, StoreError> {
        self.inner.was_deleted(session)
    }
    fn entries_around(
        &self,
        session: &str,
        id: EntryId,
        before: usize,
        after: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        self.inner.entries_around(session, id, before, after)
    }
    fn claim(&self, session: &str) -> Result<(), StoreError> {
        self.inner.claim(session)
    }
    fn release(&self, session: &str) -> Result<(), StoreError> {
        self.inner.release(session)
    }
    fn holds(&self, session: &str) -> bool {
        self.inner.holds(session)
    }
}

/// A home: the store's file and the spool folder every "process" (journal) shares.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("home"),
        }
    }

    fn db(&self) -> std::path::PathBuf {
        self.dir.path().join("state.db")
    }

    fn spool(&self) -> std::path::PathBuf {
        self.dir.path().join("spool")
    }

    /// A process on this home: a spooled journal on `store`.
    fn process(&self, store: &Arc<Gate>) -> Journal {
        let store = store.clone();
        Journal::opening_spooled(
            Box::new(move || Ok(store.clone() as Arc<dyn SessionStore>)),
            self.spool(),
        )
    }

    /// A process that never looks at the spools (an older build, or another host's).
    fn unspooled(&self, store: &Arc<Gate>) -> Journal {
        Journal::start(store.clone())
    }

    /// What the store holds of `session`, read by a fresh handle.
    fn stored(&self, session: &str) -> Transcript {
        SqliteStore::open(&self.db())
            .expect("open")
            .load(session)
            .expect("load")
            .1
    }

    fn spooled_lines(&self) -> usize {
        std::fs::read_dir(self.spool())
            .map(|listing| {
                listing
                    .filter_map(|e| e.ok())
                    .map(|e| std::fs::read(e.path()).unwrap_or_default())
                    .map(|bytes| bytes.iter().filter(|b| **b == b'\n').count())
                    .sum()
            })
            .unwrap_or(0)
    }
}

fn meta(id: &str) -> SessionMeta {
    SessionMeta {
        id: id.into(),
        cwd: "/w".into(),
        model: "m".into(),
        mode: "ask".into(),
        ..SessionMeta::default()
    }
}

/// The texts of a record's user and assistant entries, in order.
fn texts(transcript: &Transcript) -> Vec<String> {
    transcript
        .entries()
        .iter()
        .filter_map(|e| match &e.body {
            EntryBody::User { input, .. } => input.iter().find_map(|block| match block {
                talaria_record::InputBlock::Text { text } => Some(text.clone()),
                _ => None,
            }),
            EntryBody::Assistant(a) => Some(a.text.clone()),
            _ => None,
        })
        .collect()
}

fn turn(transcript: &mut Transcript, question: &str, answer: &str) {
    transcript.push(user(question));
    transcript.push(assistant(answer, &[]));
}

/// A session created and committed with one turn by a first process, which then ends
/// (input closed) while the store refuses its second turn: turn 2 is only in its spool.
async fn ended_with_turn_two_spooled(home: &Home, store: &Arc<Gate>) -> Transcript {
    let journal = home.process(store);
    journal.create(meta("s"));
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut record = Transcript::with_system("sys");
    turn(&mut record, "one?", "answer one");
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    store.refuse("*");
    turn(&mut record, "two?", "answer two, only in A's spool");
    session.save(&mut record);
    assert!(session.committed().await.error.is_some());
    let left = journal.shutdown(Duration::from_secs(10)).await;
    assert_eq!(left.map(|l| l.len()), Some(1));
    store.admit("*");
    assert!(home.spooled_lines() > 0, "turn 2 is in the spool");
    assert_eq!(
        texts(&home.stored("s")).len(),
        2,
        "the store has turn 1 only"
    );
    record
}

/// Waits until `journal`'s session `id` has nothing unsaved.
async fn saved(journal: &Journal, id: &str) {
    assert!(
        tokio::time::timeout(Duration::from_secs(30), journal.when_saved(id))
            .await
            .expect("saved in time")
    );
}

#[tokio::test]
async fn a_load_adopts_an_ended_processs_spool_first_and_goes_on_after_its_turn() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let a = ended_with_turn_two_spooled(&home, &store).await;
    // Process B, running on the same home, loads the session: its view has turn 2.
    let b = home.process(&store);
    let (read, mut record) = b.view("s").await.expect("view");
    assert_eq!(record.entries(), a.entries(), "turn 2 is in B's view");
    b.loaded("s", &read.writer);
    let mut session = SessionJournal::new(b.clone(), "s", record.last_id());
    turn(&mut record, "three?", "B's answer three");
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    saved(&b, "s").await;
    // Process C finds nothing left to adopt; the store has every turn, in order, once.
    let c = home.process(&store);
    assert!(c.adopt_orphans(Duration::from_secs(10)).await);
    assert_eq!(
        texts(&home.stored("s")),
        [
            "one?",
            "answer one",
            "two?",
            "answer two, only in A's spool",
            "three?",
            "B's answer three"
        ]
    );
    home.stored("s").validate().expect("valid");
}

#[tokio::test]
async fn an_adopted_spool_never_replaces_a_turn_another_process_committed() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let a = ended_with_turn_two_spooled(&home, &store).await;
    // B never looks at the spool (another host's process, or an older build): it answers
    // turn 3 under the ids A's turn 2 has.
    let b = home.unspooled(&store);
    let (read, mut record) = b.view("s").await.expect("view");
    assert_eq!(texts(&record).len(), 2);
    b.loaded("s", &read.writer);
    let mut session = SessionJournal::new(b.clone(), "s", record.last_id());
    turn(&mut record, "three?", "B's answer three");
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    // A copy of A's spool, as a kill of C before it emptied its own would leave one.
    let again = home.dir.path().join("again");
    std::fs::create_dir_all(&again).expect("mkdir");
    for file in std::fs::read_dir(home.spool()).expect("spool") {
        let path = file.expect("file").path();
        std::fs::copy(&path, again.join(path.file_name().expect("name"))).expect("copy");
    }
    // C adopts A's spool: the store refuses it for "s", and it is saved as a fork.
    let c = home.process(&store);
    assert!(c.adopt_orphans(Duration::from_secs(10)).await);
    saved(&c, "s").await;
    assert_eq!(
        home.stored("s").entries(),
        record.entries(),
        "B's answered turn is intact"
    );
    let recovered = home.stored("s-recovered-4");
    assert_eq!(
        recovered.entries(),
        a.entries(),
        "A's answered turn is kept"
    );
    let (fork, _) = SqliteStore::open(&home.db())
        .expect("open")
        .load("s-recovered-4")
        .expect("load");
    assert_eq!(fork.parent_id.as_deref(), Some("s"));
    // Adopted again (C killed before it emptied its spool): nothing more is made.
    for file in std::fs::read_dir(&again).expect("copy") {
        let path = file.expect("file").path();
        std::fs::rename(&path, home.spool().join(path.file_name().expect("name"))).expect("back");
    }
    let d = home.process(&store);
    assert!(d.adopt_orphans(Duration::from_secs(10)).await);
    saved(&d, "s").await;
    let listed = SqliteStore::open(&home.db())
        .expect("open")
        .list(None, None, 10)
        .expect("list");
    let ids: Vec<&str> = listed.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
}

#[tokio::test]
async fn a_live_writer_whose_session_was_written_by_another_goes_on_in_a_recovered_fork() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let first = home.process(&store);
    first.create(meta("s"));
    let mut record = Transcript::with_system("sys");
    let mut session = SessionJournal::new(first.clone(), "s", 0);
    turn(&mut record, "one?", "one");
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    // Another writer commits the same ids meanwhile (nothing of it is in this one's view).
    let mut theirs = record.clone();
    turn(&mut theirs, "their two?", "their two");
    let other = Basis {
        writer: "another process".into(),
        builds_on: vec![],
    };
    let refused = store
        .inner
        .append_checked(&[SessionAppend {
            session: "s".into(),
            entries: EncodedEntry::all(&theirs.entries()[3..]).expect("encodes"),
            basis: Basis {
                builds_on: vec![first.shared.token.clone()],
                ..other
            },
        }])
        .expect("theirs");
    assert!(refused.is_empty());
    turn(&mut record, "my two?", "my two");
    session.save(&mut record);
    let report = session.committed().await;
    assert_eq!(
        report.moved_to.as_deref(),
        Some("s-recovered-4"),
        "{report:?}"
    );
    // Its next turn goes on there too.
    turn(&mut record, "my three?", "my three");
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    assert_eq!(home.stored("s").entries(), theirs.entries());
    assert_eq!(home.stored("s-recovered-4").entries(), record.entries());
}

#[tokio::test]
async fn an_adoption_never_takes_an_entry_back_to_a_version_its_spool_had() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let journal = home.process(&store);
    for id in ["s", "t"] {
        journal.create(meta(id));
    }
    let mut s = Transcript::with_system("sys");
    let mut s_journal = SessionJournal::new(journal.clone(), "s", 0);
    s.push(user("question"));
    let answer = s.push(EntryBody::Assistant(talaria_record::AssistantEntry {
        text: "version one".into(),
        ..Default::default()
    }));
    // "s" waits (version one is spooled), then is written; "t" keeps the spool in use.
    store.refuse("s");
    store.refuse("t");
    s_journal.save(&mut s);
    let mut t_journal = SessionJournal::new(journal.clone(), "t", 0);
    let mut t = Transcript::with_system("sys");
    t.push(user("t waits"));
    t_journal.save(&mut t);
    assert!(s_journal.committed().await.error.is_some());
    store.admit("s");
    saved(&journal, "s").await;
    // Rewritten in place (as compaction does) and committed directly.
    if let EntryBody::Assistant(a) = &mut s.entries_mut()[2].body {
        a.text = "version two".into();
    }
    s.mark_rewritten(answer);
    s_journal.save(&mut s);
    assert_eq!(s_journal.committed().await.error, None);
    let _ = journal.shutdown(Duration::from_secs(10)).await;
    store.admit("t");
    // The next process adopts the spool (t's turn, and s's old lines): s stays at version two.
    let next = home.process(&store);
    assert!(next.adopt_orphans(Duration::from_secs(10)).await);
    saved(&next, "t").await;
    saved(&next, "s").await;
    assert_eq!(texts(&home.stored("s")), ["question", "version two"]);
    assert_eq!(texts(&home.stored("t")), ["t waits"]);
}

#[tokio::test]
async fn the_entries_of_a_session_deleted_while_they_waited_are_dropped_not_written() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let journal = home.process(&store);
    journal.create(meta("s"));
    let mut record = Transcript::with_system("sys");
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    store.refuse("s");
    turn(&mut record, "two?", "two");
    session.save(&mut record);
    assert!(session.committed().await.error.is_some());
    assert!(store.inner.delete("s", false).expect("deleted"));
    store.admit("s");
    saved(&journal, "s").await;
    let sqlite = SqliteStore::open(&home.db()).expect("open");
    assert!(matches!(sqlite.load("s"), Err(StoreError::NotFound(_))));
    assert!(journal.waiting("s").is_empty());
}

#[tokio::test]
async fn a_fork_is_committed_with_its_row_in_one_transaction() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let journal = home.process(&store);
    let mut copy = Transcript::with_system("sys");
    turn(&mut copy, "copied?", "copied");
    journal.create_with(
        meta("fork"),
        EncodedEntry::all(copy.entries()).expect("encodes"),
    );
    let report = journal.committed_within("fork", ANSWER_DEADLINE).await;
    assert_eq!(report.error, None);
    assert_eq!(home.stored("fork").entries(), copy.entries());
    assert_eq!(
        home.spooled_lines(),
        0,
        "nothing spooled for a healthy store"
    );
}

#[tokio::test]
async fn a_fork_the_store_refuses_is_spooled_whole_and_written_by_the_next_process() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let journal = home.process(&store);
    store.refuse("fork");
    let mut copy = Transcript::with_system("sys");
    turn(&mut copy, "copied?", "copied");
    journal.create_with(
        meta("fork"),
        EncodedEntry::all(copy.entries()).expect("encodes"),
    );
    let report = journal.committed_within("fork", ANSWER_DEADLINE).await;
    assert!(report.error.is_some(), "{report:?}");
    assert!(home.spooled_lines() >= 4, "the row and its 3 entries");
    // Ended (its writer stopped), then the next process writes the fork whole.
    let _ = journal.shutdown(Duration::from_secs(10)).await;
    store.admit("fork");
    let next = home.process(&store);
    assert!(next.adopt_orphans(Duration::from_secs(10)).await);
    saved(&next, "fork").await;
    assert_eq!(home.stored("fork").entries(), copy.entries());
}

#[tokio::test]
async fn a_fork_answered_while_the_writer_is_held_in_a_store_call_is_spooled_first() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let journal = home.process(&store);
    // The writer is inside a store call that does not return (a lock held elsewhere).
    journal.create(meta("busy"));
    journal.committed_within("busy", ANSWER_DEADLINE).await;
    store.hold(true);
    journal.update("busy", MetaUpdate::default());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut copy = Transcript::with_system("sys");
    turn(&mut copy, "copied?", "copied while held");
    journal.create_with(
        meta("fork"),
        EncodedEntry::all(copy.entries()).expect("encodes"),
    );
    let report = journal.committed_within("fork", ANSWER_DEADLINE).await;
    assert!(report.error.is_some(), "answered unsaved: {report:?}");
    // Answered: the copy is in the spool already (a kill now loses nothing).
    let text: String = std::fs::read_dir(home.spool())
        .expect("spool")
        .filter_map(|e| e.ok())
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(text.contains("copied while held"), "{text}");
    assert!(text.contains("\"t\":\"create\""), "{text}");
    store.hold(false);
    saved(&journal, "fork").await;
    assert_eq!(home.stored("fork").entries(), copy.entries());
}

#[tokio::test]
async fn a_session_row_without_a_record_is_not_a_session_to_continue() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    store.inner.create(&meta("empty")).expect("create");
    let journal = home.process(&store);
    match journal.view("empty").await {
        Err(StoreError::NoRecord(id)) => assert_eq!(id, "empty"),
        other => panic!("{other:?}"),
    }
    // Its first entry, once written, makes it one.
    let mut record = Transcript::with_system("sys");
    let mut session = SessionJournal::new(journal.clone(), "empty", 0);
    journal.loaded("empty", "");
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    assert!(journal.view("empty").await.is_ok());
}

/// A copy of every spool file on the home, as a kill before a `written` line would leave
/// them; put back with [`put_back`].
fn copy_spools(home: &Home, name: &str) -> std::path::PathBuf {
    let copy = home.dir.path().join(name);
    std::fs::create_dir_all(&copy).expect("mkdir");
    for file in std::fs::read_dir(home.spool()).expect("spool") {
        let path = file.expect("file").path();
        std::fs::copy(&path, copy.join(path.file_name().expect("name"))).expect("copy");
    }
    copy
}

fn put_back(home: &Home, copy: &Path) {
    for file in std::fs::read_dir(copy).expect("copy") {
        let path = file.expect("file").path();
        std::fs::rename(&path, home.spool().join(path.file_name().expect("name"))).expect("back");
    }
}

/// A session created and answered while the store refused everything, by a process that
/// then ended: its creation and turn are only in its spool.
async fn ended_with_the_session_only_spooled(home: &Home, store: &Arc<Gate>) {
    store.refuse("*");
    let journal = home.process(store);
    journal.create(meta("s"));
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut record = Transcript::with_system("sys");
    turn(&mut record, "one?", "answer one");
    session.save(&mut record);
    assert!(session.committed().await.error.is_some());
    let _ = journal.shutdown(Duration::from_secs(10)).await;
    store.admit("*");
}

fn listed(home: &Home) -> Vec<String> {
    SqliteStore::open(&home.db())
        .expect("open")
        .list(None, None, 100)
        .expect("list")
        .sessions
        .into_iter()
        .map(|m| m.id)
        .collect()
}

#[tokio::test]
async fn a_spool_adopted_again_after_its_session_was_deleted_never_brings_it_back() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    ended_with_the_session_only_spooled(&home, &store).await;
    // What a process killed after writing the spool, before its `written` lines, leaves.
    let copy = copy_spools(&home, "copy");
    let b = home.process(&store);
    assert!(b.adopt_orphans(Duration::from_secs(10)).await);
    saved(&b, "s").await;
    assert_eq!(texts(&home.stored("s")), ["one?", "answer one"]);
    assert!(b.delete("s").await.expect("deleted"));
    let _ = b.shutdown(Duration::from_secs(10)).await;
    // The old lines are adopted again: the creation and the turn are refused, not written.
    put_back(&home, &copy);
    let c = home.process(&store);
    assert!(c.adopt_orphans(Duration::from_secs(10)).await);
    saved(&c, "s").await;
    assert!(listed(&home).is_empty(), "{:?}", listed(&home));
    assert!(matches!(
        store.inner.load("s"),
        Err(StoreError::NotFound(_))
    ));
    assert!(c.waiting("s").is_empty());
    let _ = c.shutdown(Duration::from_secs(10)).await;
    assert_eq!(home.spooled_lines(), 0, "nothing of it waits any more");
}

#[tokio::test]
async fn a_delete_while_an_adopted_creation_waits_is_answered_and_the_creation_dropped() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    ended_with_the_session_only_spooled(&home, &store).await;
    // B adopts while the store still refuses writes: the creation waits in B.
    store.refuse("*");
    let b = home.process(&store);
    assert!(b.adopt_orphans(Duration::from_secs(10)).await);
    assert!(b.waiting("s").create.is_some());
    assert!(b.delete("s").await.expect("deleted"), "B sees it");
    assert!(b.waiting("s").is_empty(), "what waited is dropped");
    store.admit("*");
    saved(&b, "s").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(listed(&home).is_empty(), "{:?}", listed(&home));
    // B is killed before its spool is emptied: the next process adopts it and writes nothing.
    let copy = copy_spools(&home, "copy");
    let _ = b.shutdown(Duration::from_secs(10)).await;
    put_back(&home, &copy);
    let c = home.process(&store);
    assert!(c.adopt_orphans(Duration::from_secs(10)).await);
    saved(&c, "s").await;
    assert!(listed(&home).is_empty(), "{:?}", listed(&home));
}

#[tokio::test]
async fn a_delete_of_a_session_whose_creation_waits_here_deletes_it_and_what_waits() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    store.refuse("*");
    let journal = home.process(&store);
    journal.create(meta("s"));
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut record = Transcript::with_system("sys");
    turn(&mut record, "one?", "answer one");
    session.save(&mut record);
    assert!(session.committed().await.error.is_some());
    // The store takes writes again, and the delete comes before the writer's next try.
    store.admit("*");
    assert!(journal.delete("s").await.expect("deleted"));
    assert!(journal.waiting("s").is_empty());
    saved(&journal, "s").await;
    assert!(listed(&home).is_empty(), "{:?}", listed(&home));
    // An unknown session is still not found, and nothing is tombstoned for it.
    assert!(!journal.delete("never").await.expect("asked"));
    store.inner.create(&meta("never")).expect("created later");
}

#[tokio::test]
async fn a_delete_that_cannot_reach_the_store_says_so_and_keeps_what_waits() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let journal = home.process(&store);
    journal.create(meta("s"));
    saved(&journal, "s").await;
    // The writer is held inside a store call: the spools cannot be adopted first.
    store.hold(true);
    journal.update("s", MetaUpdate::default());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = journal.delete("s").await;
    assert!(
        matches!(refused, Err(StoreError::TimedOut(_))),
        "{refused:?}"
    );
    store.hold(false);
    saved(&journal, "s").await;
    assert_eq!(listed(&home), ["s"], "nothing was deleted");
}

#[tokio::test]
async fn a_creation_the_store_took_is_not_adopted_again() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    store.refuse("*");
    let journal = home.process(&store);
    journal.create(meta("s"));
    journal.create(meta("t"));
    assert!(
        journal
            .committed_within("s", Duration::from_millis(300))
            .await
            .error
            .is_some()
    );
    // "s" is written; "t" keeps the spool in use.
    store.admit("*");
    store.refuse("t");
    saved(&journal, "s").await;
    let _ = journal.shutdown(Duration::from_secs(10)).await;
    // "t" still refused: its adopted creation waits where it can be seen.
    let next = home.process(&store);
    assert!(next.adopt_orphans(Duration::from_secs(10)).await);
    assert!(
        next.waiting("s").is_empty(),
        "the written creation is left out"
    );
    assert!(
        next.waiting("t").create.is_some(),
        "the waiting one is adopted"
    );
    store.admit("t");
    saved(&next, "t").await;
    assert_eq!(listed(&home).len(), 2);
}

#[tokio::test]
async fn a_process_that_adopted_a_turn_holds_its_session_until_the_turn_is_written() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let a = ended_with_turn_two_spooled(&home, &store).await;
    // B adopts A's spool while the store is stuck (as at a probe).
    store.refuse("*");
    let b = home.process(&store);
    assert!(b.adopt_orphans(Duration::from_secs(10)).await);
    assert!(
        store.inner.holds("s"),
        "B holds the session it adopted writes of"
    );
    // A third process cannot open it meanwhile: it would read it without turn 2.
    let third = SqliteStore::open(&home.db()).expect("open");
    assert!(matches!(third.claim("s"), Err(StoreError::InUse { .. })));
    store.admit("*");
    saved(&b, "s").await;
    assert!(
        !store.inner.holds("s"),
        "released once the adopted turn is written"
    );
    third.claim("s").expect("free now");
    assert_eq!(third.load("s").expect("load").1.entries(), a.entries());
}

#[tokio::test]
async fn a_session_the_adopter_opens_itself_keeps_its_claim_after_the_adopted_turn() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    ended_with_turn_two_spooled(&home, &store).await;
    store.refuse("*");
    let b = home.process(&store);
    assert!(b.adopt_orphans(Duration::from_secs(10)).await);
    // B's client loads the session meanwhile (as `session/load` does).
    b.hold_again("s");
    store.claim("s").expect("B's own");
    store.admit("*");
    saved(&b, "s").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(store.inner.holds("s"), "the load's claim stays");
    let third = SqliteStore::open(&home.db()).expect("open");
    assert!(matches!(third.claim("s"), Err(StoreError::InUse { .. })));
}

#[tokio::test]
async fn a_turn_adopted_for_a_session_open_elsewhere_is_checked_and_kept_as_a_recovered_fork() {
    let home = Home::new();
    let store = Gate::open(&home.db());
    let a = ended_with_turn_two_spooled(&home, &store).await;
    // Another live process (its own handle on the store) opened the session without A's
    // turn and answers turn 3 under the same ids.
    let elsewhere = Gate::open(&home.db());
    let b = home.unspooled(&elsewhere);
    elsewhere.claim("s").expect("B's");
    let (read, mut record) = b.view("s").await.expect("view");
    b.loaded("s", &read.writer);
    let mut session = SessionJournal::new(b.clone(), "s", record.last_id());
    turn(&mut record, "three?", "B's answer three");
    session.save(&mut record);
    assert_eq!(session.committed().await.error, None);
    // C adopts A's spool: it cannot claim the session, and the store refuses the turn.
    let c = home.process(&store);
    assert!(c.adopt_orphans(Duration::from_secs(10)).await);
    assert!(!store.inner.holds("s"));
    saved(&c, "s").await;
    assert_eq!(
        home.stored("s").entries(),
        record.entries(),
        "B's turn intact"
    );
    assert_eq!(home.stored("s-recovered-4").entries(), a.entries());
}
