//! The journal against stores that refuse, block and open late.

use super::*;
use std::sync::Condvar;
use std::sync::atomic::AtomicBool;
use std::time::Instant;
use talaria_record::testing::user;
use talaria_store::{ListPage, SearchHit};

/// A store that refuses writes while `failing` is set, blocks them while `blocked` is set,
/// and records what it accepted.
#[derive(Default)]
struct Flaky {
    failing: AtomicBool,
    blocked: Mutex<bool>,
    unblocked: Condvar,
    accepted: Mutex<Vec<(String, EntryId)>>,
    batches: AtomicUsize,
    /// Writes refused while `failing`.
    refused: AtomicUsize,
    /// How long a refusal takes (a lock's patience), and how many calls are in one now.
    patience: Mutex<Duration>,
    refusing: AtomicUsize,
    /// Refusals finished.
    refusals: AtomicUsize,
    /// Bytes of the bodies accepted, each read and decoded as the store read it.
    accepted_bytes: AtomicUsize,
}

impl Flaky {
    fn block(&self, blocked: bool) {
        *self.blocked.lock().expect("lock") = blocked;
        self.unblocked.notify_all();
    }

    fn wait_while_blocked(&self) {
        let mut blocked = self.blocked.lock().expect("lock");
        while *blocked {
            blocked = self.unblocked.wait(blocked).expect("lock");
        }
    }

    /// A refusal, after the store's patience.
    fn refuse(&self) -> Result<(), StoreError> {
        self.refused.fetch_add(1, Ordering::AcqRel);
        self.refusing.fetch_add(1, Ordering::AcqRel);
        let patience = *self.patience.lock().expect("lock");
        std::thread::sleep(patience);
        self.refusing.fetch_sub(1, Ordering::AcqRel);
        self.refusals.fetch_add(1, Ordering::AcqRel);
        Err(StoreError::Full("no space left".into()))
    }

    fn accepted_ids(&self) -> Vec<EntryId> {
        self.accepted
            .lock()
            .expect("lock")
            .iter()
            .map(|(_, id)| *id)
            .collect()
    }
}

impl SessionStore for Flaky {
    fn create(&self, _: &SessionMeta) -> Result<(), StoreError> {
        Ok(())
    }
    fn append_encoded(&self, session: &str, entries: &[EncodedEntry]) -> Result<(), StoreError> {
        self.wait_while_blocked();
        if self.failing.load(Ordering::Acquire) {
            return self.refuse();
        }
        for entry in entries {
            let body = entry.body.text()?;
            entry.decoded()?;
            self.accepted_bytes.fetch_add(body.len(), Ordering::AcqRel);
        }
        let mut accepted = self.accepted.lock().expect("lock");
        accepted.extend(entries.iter().map(|e| (session.to_string(), e.id)));
        Ok(())
    }
    fn append_batch(&self, batch: &[(String, Vec<EncodedEntry>)]) -> Result<(), StoreError> {
        self.batches.fetch_add(1, Ordering::AcqRel);
        self.wait_while_blocked();
        if self.failing.load(Ordering::Acquire) {
            return self.refuse();
        }
        for (session, entries) in batch {
            self.append_encoded(session, entries)?;
        }
        Ok(())
    }
    fn update(&self, _: &str, _: &MetaUpdate) -> Result<(), StoreError> {
        Ok(())
    }
    fn accepts_writes(&self) -> Result<(), StoreError> {
        self.wait_while_blocked();
        if self.failing.load(Ordering::Acquire) {
            return self.refuse();
        }
        Ok(())
    }
    fn load(&self, id: &str) -> Result<(SessionMeta, Transcript), StoreError> {
        self.wait_while_blocked();
        Err(StoreError::NotFound(id.into()))
    }
    fn list(&self, _: Option<&str>, _: Option<&str>, _: usize) -> Result<ListPage, StoreError> {
        Ok(ListPage::default())
    }
    fn delete(&self, _: &str, _: bool) -> Result<bool, StoreError> {
        Ok(false)
    }
    fn search(&self, _: &str, _: usize) -> Result<Vec<SearchHit>, StoreError> {
        Ok(Vec::new())
    }
    fn was_deleted(&self, _: &str) -> Result<bool, StoreError> {
        Ok(false)
    }
    fn entries_around(
        &self,
        _: &str,
        _: EntryId,
        _: usize,
        _: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        Ok(Vec::new())
    }
    fn claim(&self, _: &str) -> Result<(), StoreError> {
        Ok(())
    }
    fn release(&self, _: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A journal on a [`Flaky`] store with session `s` whose system prompt is committed.
async fn a_saved_session() -> (Arc<Flaky>, Journal, SessionJournal, Transcript) {
    let store = Arc::new(Flaky::default());
    let journal = Journal::start(store.clone());
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut transcript = Transcript::with_system("sys");
    session.save(&mut transcript);
    assert_eq!(session.committed().await, SaveReport::default());
    (store, journal, session, transcript)
}

#[tokio::test]
async fn failed_writes_wait_in_order_and_heal_without_holes() {
    let (store, journal, mut session, mut transcript) = a_saved_session().await;
    store.failing.store(true, Ordering::Release);
    transcript.push(user("one"));
    session.save(&mut transcript);
    transcript.push(user("two"));
    session.save(&mut transcript);
    let report = session.committed().await;
    assert_eq!(report.unsaved, 2);
    assert!(report.error.is_some_and(|e| e.contains("full")));
    let saved = session.when_saved();
    store.failing.store(false, Ordering::Release);
    assert!(
        tokio::time::timeout(Duration::from_secs(10), saved)
            .await
            .expect("healed by the writer's own retry, without a new write"),
        "saved"
    );
    transcript.push(user("three"));
    session.save(&mut transcript);
    assert_eq!(session.committed().await, SaveReport::default());
    assert_eq!(
        store.accepted_ids(),
        [1, 2, 3, 4],
        "every entry, once, in order"
    );
    assert_eq!(journal.queued(), 0);
}

#[tokio::test]
async fn a_store_refusing_every_write_is_asked_again_only_every_couple_of_seconds() {
    let (store, journal, _, _) = a_saved_session().await;
    store.failing.store(true, Ordering::Release);
    let mut sessions = Vec::new();
    for n in 0..10 {
        let mut session = SessionJournal::new(journal.clone(), &format!("s{n}"), 0);
        let mut transcript = Transcript::with_system("sys");
        session.save(&mut transcript);
        // Each in a batch of its own.
        assert_eq!(session.committed().await.unsaved, 1);
        sessions.push(session);
    }
    let refused = store.refused.load(Ordering::Acquire);
    assert!(
        refused <= 2,
        "a store that refused as a whole is not called for every batch ({refused} calls)"
    );
    store.failing.store(false, Ordering::Release);
    for session in &sessions {
        assert!(
            tokio::time::timeout(Duration::from_secs(10), session.when_saved())
                .await
                .expect("healed by the writer's retry"),
            "saved"
        );
    }
    assert_eq!(
        store.accepted_ids().len(),
        11,
        "every session's entry, once"
    );
}

#[tokio::test]
async fn a_stuck_store_is_asked_again_off_the_writer_so_writes_keep_moving() {
    let (store, journal, _, _) = a_saved_session().await;
    store.failing.store(true, Ordering::Release);
    let mut first = SessionJournal::new(journal.clone(), "first", 0);
    first.save(&mut Transcript::with_system("sys"));
    assert_eq!(
        first.committed().await.unsaved,
        1,
        "refused: the store stalls"
    );
    // From now on each refusal takes the whole of a lock's patience.
    *store.patience.lock().expect("lock") = Duration::from_secs(3);
    let asked_again = Instant::now();
    while store.refusing.load(Ordering::Acquire) == 0 {
        assert!(
            asked_again.elapsed() < Duration::from_secs(10),
            "asked again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // While the store is being asked, writes still move (into the backlog and the spool):
    // nothing waits for room in the queue behind the question.
    let finished_before = store.refusals.load(Ordering::Acquire);
    let mut second = SessionJournal::new(journal.clone(), "second", 0);
    let mut transcript = Transcript::with_system("sys");
    for n in 0..100 {
        transcript.push(user(&format!("message {n}")));
    }
    second.save(&mut transcript);
    while journal.queued() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        store.refusals.load(Ordering::Acquire),
        finished_before,
        "the writer took the writes while the stuck store was still being asked"
    );
    *store.patience.lock().expect("lock") = Duration::ZERO;
    store.failing.store(false, Ordering::Release);
    for session in [&first, &second] {
        assert!(
            tokio::time::timeout(Duration::from_secs(15), session.when_saved())
                .await
                .expect("healed"),
            "saved once the store takes writes"
        );
    }
}

#[tokio::test]
async fn writes_queued_together_are_committed_together() {
    let store = Arc::new(Flaky::default());
    let journal = Journal::start(store.clone());
    let mut sessions: Vec<(SessionJournal, Transcript)> = (0..20)
        .map(|n| {
            (
                SessionJournal::new(journal.clone(), &format!("s{n}"), 0),
                Transcript::with_system("sys"),
            )
        })
        .collect();
    // Held while everything is queued, so how fast the writer thread starts does not decide
    // how much it finds together.
    store.block(true);
    for (session, transcript) in &mut sessions {
        for n in 0..5 {
            transcript.push(user(&format!("message {n}")));
        }
        session.save(transcript);
    }
    store.block(false);
    assert!(journal.flush(Duration::from_secs(10)).await);
    assert_eq!(store.accepted.lock().expect("lock").len(), 20 * 6);
    assert!(
        store.batches.load(Ordering::Acquire) < 20,
        "batched, not one commit per session"
    );
}

#[tokio::test]
async fn a_blocked_store_never_holds_an_answer_past_the_deadline() {
    let store = Arc::new(Flaky::default());
    let journal = Journal::start(store.clone());
    let mut sessions: Vec<(SessionJournal, Transcript)> = (0..4)
        .map(|n| {
            (
                SessionJournal::new(journal.clone(), &format!("s{n}"), 0),
                Transcript::with_system("sys"),
            )
        })
        .collect();
    store.block(true);
    for (session, transcript) in &mut sessions {
        transcript.push(user("while the store is stuck"));
        session.save(transcript);
    }
    let started = Instant::now();
    let reports =
        futures_util::future::join_all(sessions.iter().map(|(session, _)| session.committed()))
            .await;
    assert!(started.elapsed() < ANSWER_DEADLINE + Duration::from_millis(500));
    for report in &reports {
        assert!(
            report
                .error
                .as_deref()
                .is_some_and(|e| e.contains("not answered"))
        );
    }
    // Reads are bounded too.
    let started = Instant::now();
    let read = journal.call(|store| store.load("s0")).await;
    assert!(matches!(read, Err(StoreError::TimedOut(_))), "{read:?}");
    assert!(started.elapsed() < READ_DEADLINE + Duration::from_millis(500));
    // Past the calls still stuck, another is refused at once as busy: nothing waited, so
    // nothing says it timed out.
    let stuck: Vec<_> = (0..3)
        .map(|_| {
            let journal = journal.clone();
            tokio::spawn(async move { journal.call(|store| store.load("s0")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let refused = journal.call(|store| store.load("s0")).await;
    assert!(
        matches!(refused, Err(StoreError::Overloaded(_))),
        "{refused:?}"
    );
    let said = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        !said.contains("another process"),
        "nothing else holds it: {said}"
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    drop(stuck);
    let saved: Vec<_> = sessions.iter().map(|(s, _)| s.when_saved()).collect();
    store.block(false);
    for saved in saved {
        assert!(
            tokio::time::timeout(Duration::from_secs(10), saved)
                .await
                .expect("told when saved")
        );
    }
    assert_eq!(store.accepted.lock().expect("lock").len(), 4 * 2);
}

#[tokio::test]
async fn a_store_that_opens_late_gets_everything_written_before_in_order() {
    let store = Arc::new(Flaky::default());
    let tries = Arc::new(AtomicUsize::new(0));
    let (opened, counted) = (store.clone(), tries.clone());
    let journal = Journal::opening(Box::new(move || {
        if counted.fetch_add(1, Ordering::AcqRel) < 3 {
            Err(StoreError::Unreachable("connection refused".into()))
        } else {
            Ok(opened.clone() as Arc<dyn SessionStore>)
        }
    }));
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut transcript = Transcript::with_system("sys");
    transcript.push(user("before the store opened"));
    session.save(&mut transcript);
    let report = session.committed().await;
    assert!(
        report
            .error
            .as_deref()
            .is_some_and(|e| e.contains("not open yet")),
        "{report:?}"
    );
    assert!(matches!(journal.store(), Err(StoreError::NotOpenYet(_))));
    assert!(
        tokio::time::timeout(Duration::from_secs(20), session.when_saved())
            .await
            .expect("saved once the store opens")
    );
    assert!(journal.is_open());
    assert!(
        tries.load(Ordering::Acquire) >= 4,
        "tried again until it opened"
    );
    transcript.push(user("after"));
    session.save(&mut transcript);
    assert_eq!(session.committed().await, SaveReport::default());
    assert_eq!(store.accepted_ids(), [1, 2, 3]);
}

#[tokio::test]
async fn a_store_that_can_never_open_is_said_so_and_not_waited_for() {
    let journal = Journal::opening(Box::new(|| Err(StoreError::TooNew { found: 9, known: 3 })));
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut transcript = Transcript::with_system("sys");
    session.save(&mut transcript);
    let report = session.committed().await;
    assert!(report.error.is_some(), "{report:?}");
    assert!(
        !tokio::time::timeout(Duration::from_secs(5), session.when_saved())
            .await
            .expect("answered: never")
    );
    assert!(matches!(journal.store(), Err(StoreError::Unsupported(_))));
}

#[tokio::test]
async fn refused_entries_stay_in_the_view_until_the_store_commits_them() {
    let (store, journal, mut session, mut transcript) = a_saved_session().await;
    assert!(journal.waiting("s").is_empty(), "committed entries leave");

    store.failing.store(true, Ordering::Release);
    transcript.push(user("one"));
    transcript.push(user("two"));
    session.save(&mut transcript);
    assert!(session.committed().await.unsaved > 0);
    let waiting: Vec<EntryId> = journal.waiting("s").entries.iter().map(|e| e.id).collect();
    assert_eq!(
        waiting,
        [2, 3],
        "what the store refused is in the view, in order"
    );
    store.failing.store(false, Ordering::Release);
    assert!(
        tokio::time::timeout(Duration::from_secs(10), session.when_saved())
            .await
            .expect("healed in time")
    );
    assert!(
        journal.waiting("s").is_empty(),
        "written entries leave the view"
    );
}

/// A journal spooling in `dir`, on `store` (already open).
fn spooled_journal(store: &Arc<Flaky>, dir: &std::path::Path) -> Journal {
    let store = store.clone();
    Journal::opening_spooled(
        Box::new(move || Ok(store.clone() as Arc<dyn SessionStore>)),
        dir.to_path_buf(),
    )
}

fn spool_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|listing| listing.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Waits until `store` accepted `ids`.
async fn accepted_within(store: &Flaky, ids: &[EntryId], within: Duration) {
    let started = Instant::now();
    while store.accepted_ids() != ids {
        assert!(
            started.elapsed() < within,
            "accepted {:?}, not {ids:?}",
            store.accepted_ids()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A process that exits while its store refuses writes: what waited is in its spool.
async fn exit_with_writes_waiting(dir: &std::path::Path, texts: &[&str]) {
    let refusing = Arc::new(Flaky::default());
    refusing.failing.store(true, Ordering::Release);
    let journal = spooled_journal(&refusing, dir);
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut transcript = Transcript::with_system("sys");
    for text in texts {
        transcript.push(user(text));
    }
    session.save(&mut transcript);
    assert!(session.committed().await.unsaved > 0);
    let left = journal
        .shutdown(Duration::from_secs(10))
        .await
        .expect("stopped");
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(refusing.accepted_ids().is_empty());
}

#[tokio::test]
async fn writes_waiting_at_exit_are_written_by_the_next_process_from_the_spool() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    exit_with_writes_waiting(&dir, &["one", "two"]).await;
    let files = spool_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = |path: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&files[0]), 0o600, "readable only by its owner");
    assert_eq!(mode(&dir), 0o700);

    let healthy = Arc::new(Flaky::default());
    let journal = spooled_journal(&healthy, &dir);
    accepted_within(&healthy, &[1, 2, 3], Duration::from_secs(10)).await;
    assert!(
        !files[0].exists(),
        "the adopted spool is removed once copied"
    );
    journal
        .shutdown(Duration::from_secs(10))
        .await
        .expect("stopped");
    assert!(spool_files(&dir).is_empty(), "{:?}", spool_files(&dir));
}

#[tokio::test]
async fn a_spool_held_by_a_live_process_is_left_to_it() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    exit_with_writes_waiting(&dir, &["one"]).await;
    let files = spool_files(&dir);
    // Another process still running holds its spool's lock.
    let held = std::fs::File::open(&files[0]).expect("open");
    held.try_lock().expect("lock");
    let healthy = Arc::new(Flaky::default());
    let journal = spooled_journal(&healthy, &dir);
    journal.flush(Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        healthy.accepted_ids().is_empty(),
        "a live spool is not adopted"
    );
    assert!(files[0].exists());
    drop(held);
    journal
        .shutdown(Duration::from_secs(10))
        .await
        .expect("stopped");
    // Its owner gone, the next start adopts it.
    let next = Arc::new(Flaky::default());
    let _journal = spooled_journal(&next, &dir);
    accepted_within(&next, &[1, 2], Duration::from_secs(10)).await;
}

#[tokio::test]
async fn a_spool_line_cut_short_by_a_crash_is_left_out_and_the_rest_written() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    exit_with_writes_waiting(&dir, &["kept", "cut short"]).await;
    let files = spool_files(&dir);
    let written = std::fs::read(&files[0]).expect("read");
    std::fs::write(&files[0], &written[..written.len() - 7]).expect("cut");
    let healthy = Arc::new(Flaky::default());
    let _journal = spooled_journal(&healthy, &dir);
    accepted_within(&healthy, &[1, 2], Duration::from_secs(10)).await;
}

#[tokio::test]
async fn adopted_writes_are_in_the_sessions_view_while_the_store_still_refuses() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    exit_with_writes_waiting(&dir, &["one", "two"]).await;
    let refusing = Arc::new(Flaky::default());
    refusing.failing.store(true, Ordering::Release);
    let journal = spooled_journal(&refusing, &dir);
    journal.flush(Duration::from_secs(5)).await;
    let waiting: Vec<EntryId> = journal.waiting("s").entries.iter().map(|e| e.id).collect();
    assert_eq!(waiting, [1, 2, 3], "a load or fork sees them");
    // Exiting again while the store still refuses keeps them spooled, once.
    journal
        .shutdown(Duration::from_secs(10))
        .await
        .expect("stopped");
    let healthy = Arc::new(Flaky::default());
    let _journal = spooled_journal(&healthy, &dir);
    accepted_within(&healthy, &[1, 2, 3], Duration::from_secs(10)).await;
}

/// A long outage: session `s` of a spooling journal (in `dir`) on a store that refuses every
/// write has `turns` turns of `answer` waiting.
struct Outage {
    store: Arc<Flaky>,
    journal: Journal,
    session: SessionJournal,
    transcript: Transcript,
}

async fn outage(dir: &std::path::Path, turns: usize, answer: &str) -> Outage {
    let store = Arc::new(Flaky::default());
    store.failing.store(true, Ordering::Release);
    let journal = spooled_journal(&store, dir);
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut transcript = Transcript::with_system("sys");
    for turn in 0..turns {
        transcript.push(user(&format!("turn {turn}\n{answer}")));
        session.save(&mut transcript);
    }
    assert!(session.committed().await.unsaved > 0);
    Outage {
        store,
        journal,
        session,
        transcript,
    }
}

#[tokio::test]
async fn a_long_outage_keeps_waiting_bodies_in_the_spool_not_in_memory() {
    let dir = tempfile::tempdir().expect("dir");
    // 48 MB of answers while the store refuses every write.
    let answer = "a long answer line\n".repeat(50_000);
    let Outage {
        store,
        journal,
        session,
        transcript,
    } = outage(dir.path(), 48, &answer).await;
    let waiting = journal.waiting("s");
    assert_eq!(waiting.entries.len(), 49, "every entry waits, in the view");
    let total: usize = waiting.entries.iter().map(|e| e.body.len()).sum();
    let held: usize = waiting
        .entries
        .iter()
        .filter(|e| e.body.is_held())
        .map(|e| e.body.len())
        .sum();
    assert!(total > 40 << 20, "{total} bytes wait");
    assert!(
        held <= HELD_IN_MEMORY + answer.len() * 2,
        "{held} of {total} waiting bytes are held in memory"
    );
    // The view reads the spilled bodies back whole: a load sees every turn.
    let viewed: Vec<Entry> = waiting
        .entries
        .iter()
        .map(|e| e.decoded().expect("read back"))
        .collect();
    assert_eq!(viewed, transcript.entries());
    let hits = journal.search_waiting("turn 47", 5);
    assert_eq!(hits.first().map(|hit| hit.entry_id), Some(49), "{hits:?}");
    // Healed, the store gets every body read back from the spool, and the spool goes.
    store.failing.store(false, Ordering::Release);
    assert!(
        tokio::time::timeout(Duration::from_secs(15), session.when_saved())
            .await
            .expect("healed in time"),
        "saved"
    );
    assert_eq!(store.accepted_bytes.load(Ordering::Acquire), total);
    // The spool is emptied at the end of the writer's batch (just after it says so).
    let emptied = || {
        spool_files(dir.path())
            .iter()
            .all(|path| std::fs::metadata(path).map_or(true, |m| m.len() == 0))
    };
    let started = Instant::now();
    while !emptied() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(emptied(), "{:?}", spool_files(dir.path()));
}

#[tokio::test]
async fn bodies_kept_by_the_spool_alone_are_written_by_the_next_process_after_an_exit() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    let answer = "spilled across an exit\n".repeat(40_000);
    let texts: Vec<String> = (0..24).map(|n| format!("turn {n}\n{answer}")).collect();
    let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    exit_with_writes_waiting(&dir, &text_refs).await;
    let healthy = Arc::new(Flaky::default());
    let _journal = spooled_journal(&healthy, &dir);
    let ids: Vec<EntryId> = (1..=25).collect();
    // A bound on progress, not a speed: the machine may be busy.
    accepted_within(&healthy, &ids, Duration::from_secs(60)).await;
    let expected: usize = {
        let mut transcript = Transcript::with_system("sys");
        for text in &texts {
            transcript.push(user(text));
        }
        transcript
            .entries()
            .iter()
            .map(|e| EncodedEntry::of(e).expect("encodes").body.len())
            .sum()
    };
    assert_eq!(healthy.accepted_bytes.load(Ordering::Acquire), expected);
}

#[tokio::test]
async fn a_view_read_before_the_heal_still_reads_its_spilled_bodies_after_it() {
    let dir = tempfile::tempdir().expect("dir");
    let answer = "read after the heal\n".repeat(60_000);
    let Outage {
        store,
        journal,
        session,
        transcript,
    } = outage(dir.path(), 12, &answer).await;
    let before = journal.waiting("s");
    assert!(before.entries.iter().any(|e| !e.body.is_held()), "spilled");
    store.failing.store(false, Ordering::Release);
    assert!(
        tokio::time::timeout(Duration::from_secs(15), session.when_saved())
            .await
            .expect("healed"),
    );
    // The spool was written and removed; what was read before still reads whole.
    let read: Vec<Entry> = before
        .entries
        .iter()
        .map(|e| e.decoded().expect("still readable"))
        .collect();
    assert_eq!(read, transcript.entries());
}

/// The journal's queue is unbounded so a save never blocks a turn, but it paces them: past
/// `MAX_QUEUED_ENTRIES` entries not yet handled, a turn waits in `room()` for the writer.
#[tokio::test]
async fn a_flood_of_entries_while_the_writer_is_stuck_paces_the_turns() {
    use futures_util::FutureExt;
    let store = Arc::new(Flaky::default());
    let journal = Journal::start(store.clone());
    let mut session = SessionJournal::new(journal.clone(), "s", 0);
    let mut transcript = Transcript::with_system("sys");
    store.block(true);
    let flood = MAX_QUEUED_ENTRIES + 100;
    for n in 0..flood {
        transcript.push(user(&format!("message {n}")));
    }
    session.save(&mut transcript);
    assert!(
        journal.queued() > MAX_QUEUED_ENTRIES,
        "{}",
        journal.queued()
    );
    assert!(
        session.room().now_or_never().is_none(),
        "a turn may not add more while the writer is this far behind"
    );
    store.block(false);
    tokio::time::timeout(Duration::from_secs(20), session.room())
        .await
        .expect("room again once the writer caught up");
    assert!(journal.flush(Duration::from_secs(20)).await);
    assert_eq!(journal.queued(), 0);
    assert_eq!(store.accepted.lock().expect("lock").len(), flood + 1);
}
