//! Writes sessions to the store without blocking the runtime, and says when they are
//! committed: one writer thread for every session of the process, in order per session.
//!
//! - Writes queued together are committed together (one transaction per batch, not per
//!   entry); a session's turn is answered only after a barrier confirms its entries are
//!   committed ([`SessionJournal::committed`]).
//! - The queue is bounded in entries: a turn that runs ahead of the disk waits
//!   ([`SessionJournal::room`]), so a slow disk slows turns instead of growing memory.
//! - A write that fails (a full disk, a read-only or damaged store) keeps the session's
//!   unsaved writes in memory, in order, and retries them (every couple of seconds and before
//!   any newer write of that session), so the record never has holes; the barrier reports the
//!   failure, and the session tells its client once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use talaria_record::{Entry, EntryId, Transcript};
use talaria_store::{MetaUpdate, SessionMeta, SessionStore};
use tokio::sync::{Notify, oneshot};

/// Entries that may wait in the queue before turns wait for the disk.
pub const MAX_QUEUED_ENTRIES: usize = 4096;
/// How often unsaved writes are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(2);
/// The most writes committed in one batch.
const MAX_BATCH: usize = 1024;

enum Write {
    Create(SessionMeta),
    Append(String, Vec<Entry>),
    Update(String, MetaUpdate),
    /// Answers once every earlier write of the session is committed, or why it is not.
    Barrier(String, oneshot::Sender<SaveReport>),
    /// Answers once every earlier write of every session is done.
    Flush(oneshot::Sender<()>),
    /// A clean exit: tries what is unsaved once more and checkpoints the store.
    Shutdown(oneshot::Sender<()>),
}

/// How a session's saving stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaveReport {
    /// Entries kept in memory because the store refused them (written later, in order).
    pub unsaved: usize,
    /// Why, while anything is unsaved.
    pub error: Option<String>,
}

/// The process's writer.
#[derive(Clone)]
pub struct Journal {
    writes: mpsc::Sender<Write>,
    store: Arc<dyn SessionStore>,
    /// Entries queued and not yet handled by the writer.
    queued: Arc<AtomicUsize>,
    /// Signalled whenever the writer handled a batch.
    drained: Arc<Notify>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

/// What of one session the store has not accepted yet, in order.
#[derive(Default)]
struct Backlog {
    create: Option<SessionMeta>,
    entries: Vec<Entry>,
    update: Option<MetaUpdate>,
    error: String,
}

fn merge(into: &mut Option<MetaUpdate>, update: MetaUpdate) {
    let Some(current) = into else {
        *into = Some(update);
        return;
    };
    current.title = update.title.or(current.title.take());
    current.model = update.model.or(current.model.take());
    current.mode = update.mode.or(current.mode.take());
    current.tokens = update.tokens.or(current.tokens);
    current.cost = update.cost.or(current.cost);
    current.updated_at = update.updated_at.or(current.updated_at);
}

/// The writer thread's state.
struct Writer {
    store: Arc<dyn SessionStore>,
    unsaved: BTreeMap<String, Backlog>,
    queued: Arc<AtomicUsize>,
    drained: Arc<Notify>,
}

impl Writer {
    fn run(mut self, queue: &mpsc::Receiver<Write>) {
        loop {
            let first = if self.unsaved.is_empty() {
                queue
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            } else {
                queue.recv_timeout(RETRY_EVERY)
            };
            let mut batch = match first {
                Ok(write) => vec![write],
                Err(mpsc::RecvTimeoutError::Timeout) => Vec::new(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.heal();
                    let _ = self.store.checkpoint();
                    return;
                }
            };
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(write) => batch.push(write),
                    Err(_) => break,
                }
            }
            self.heal();
            self.apply(batch);
        }
    }

    fn backlog(&mut self, session: &str, error: &str) -> &mut Backlog {
        let backlog = self.unsaved.entry(session.to_string()).or_default();
        backlog.error = error.to_string();
        backlog
    }

    /// Writes the batch in order; consecutive appends are committed together.
    fn apply(&mut self, batch: Vec<Write>) {
        let mut appends: Vec<(String, Vec<Entry>)> = Vec::new();
        let mut handled = 0;
        for write in batch {
            match write {
                Write::Append(session, entries) => {
                    handled += entries.len();
                    if let Some(backlog) = self.unsaved.get_mut(&session) {
                        backlog.entries.extend(entries);
                    } else if let Some((last, pending)) = appends.last_mut()
                        && *last == session
                    {
                        pending.extend(entries);
                    } else {
                        appends.push((session, entries));
                    }
                }
                other => {
                    self.commit(&mut appends);
                    self.handled(std::mem::take(&mut handled));
                    self.apply_one(other);
                }
            }
        }
        self.commit(&mut appends);
        self.handled(handled);
    }

    /// `count` queued entries were written (or kept in a backlog): turns may go on.
    fn handled(&self, count: usize) {
        if count > 0 {
            self.queued.fetch_sub(count, Ordering::AcqRel);
            self.drained.notify_waiters();
        }
    }

    /// Commits queued appends in one transaction; on failure, each session on its own, and
    /// what still fails waits in its backlog.
    fn commit(&mut self, appends: &mut Vec<(String, Vec<Entry>)>) {
        if appends.is_empty() || self.store.append_batch(appends).is_ok() {
            appends.clear();
            return;
        }
        for (session, entries) in appends.drain(..) {
            if let Err(error) = self.store.append(&session, &entries) {
                tracing::error!(session = %session, "saving the session failed: {error}");
                self.backlog(&session, &error.to_string())
                    .entries
                    .extend(entries);
            }
        }
    }

    fn apply_one(&mut self, write: Write) {
        match write {
            Write::Create(meta) => {
                if let Err(error) = self.store.create(&meta) {
                    tracing::error!(session = %meta.id, "saving the new session failed: {error}");
                    let session = meta.id.clone();
                    self.backlog(&session, &error.to_string()).create = Some(meta);
                }
            }
            Write::Update(session, update) => {
                if let Some(backlog) = self.unsaved.get_mut(&session) {
                    merge(&mut backlog.update, update);
                } else if let Err(error) = self.store.update(&session, &update) {
                    merge(
                        &mut self.backlog(&session, &error.to_string()).update,
                        update,
                    );
                }
            }
            Write::Barrier(session, reply) => {
                let report = self
                    .unsaved
                    .get(&session)
                    .map(|backlog| SaveReport {
                        unsaved: backlog.entries.len().max(1),
                        error: Some(backlog.error.clone()),
                    })
                    .unwrap_or_default();
                let _ = reply.send(report);
            }
            Write::Flush(reply) => {
                let _ = reply.send(());
            }
            Write::Shutdown(reply) => {
                self.heal();
                if let Err(error) = self.store.checkpoint() {
                    tracing::warn!("checkpointing the session store failed: {error}");
                }
                let _ = reply.send(());
            }
            Write::Append(..) => {}
        }
    }

    /// Tries every unsaved write again, session by session, in order.
    fn heal(&mut self) {
        let sessions: Vec<String> = self.unsaved.keys().cloned().collect();
        for session in sessions {
            let Some(mut backlog) = self.unsaved.remove(&session) else {
                continue;
            };
            let result = (|| {
                if let Some(meta) = &backlog.create {
                    self.store.create(meta)?;
                    backlog.create = None;
                }
                if !backlog.entries.is_empty() {
                    self.store.append(&session, &backlog.entries)?;
                    backlog.entries.clear();
                }
                if let Some(update) = &backlog.update {
                    self.store.update(&session, update)?;
                    backlog.update = None;
                }
                Ok::<(), talaria_store::StoreError>(())
            })();
            match result {
                Ok(()) => tracing::info!(session = %session, "the session is saved again"),
                Err(error) => {
                    backlog.error = error.to_string();
                    self.unsaved.insert(session, backlog);
                }
            }
        }
    }
}

impl Journal {
    /// Starts the writer thread for `store`.
    pub fn start(store: Arc<dyn SessionStore>) -> Self {
        let (writes, queue) = mpsc::channel::<Write>();
        let queued = Arc::new(AtomicUsize::new(0));
        let drained = Arc::new(Notify::new());
        let writer = Writer {
            store: store.clone(),
            unsaved: BTreeMap::new(),
            queued: queued.clone(),
            drained: drained.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("talaria-journal".into())
            .spawn(move || writer.run(&queue));
        if let Err(error) = spawned {
            tracing::error!("the session writer could not start: {error}");
        }
        Self {
            writes,
            store,
            queued,
            drained,
        }
    }

    /// The store, for reads.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    pub fn create(&self, meta: SessionMeta) {
        let _ = self.writes.send(Write::Create(meta));
    }

    pub fn update(&self, session_id: &str, update: MetaUpdate) {
        let _ = self
            .writes
            .send(Write::Update(session_id.to_string(), update));
    }

    fn append(&self, session_id: &str, entries: Vec<Entry>) -> bool {
        let count = entries.len();
        self.queued.fetch_add(count, Ordering::AcqRel);
        let sent = self
            .writes
            .send(Write::Append(session_id.to_string(), entries))
            .is_ok();
        if !sent {
            self.queued.fetch_sub(count, Ordering::AcqRel);
        }
        sent
    }

    /// How a session's saving stands once everything queued for it was tried.
    pub async fn committed(&self, session_id: &str) -> SaveReport {
        let (reply, answer) = oneshot::channel();
        if self
            .writes
            .send(Write::Barrier(session_id.to_string(), reply))
            .is_err()
        {
            return SaveReport {
                unsaved: 1,
                error: Some("the session writer has stopped".into()),
            };
        }
        answer.await.unwrap_or(SaveReport {
            unsaved: 1,
            error: Some("the session writer has stopped".into()),
        })
    }

    /// Waits while the writer is more than [`MAX_QUEUED_ENTRIES`] behind.
    pub async fn room(&self) {
        loop {
            let drained = self.drained.notified();
            if self.queued.load(Ordering::Acquire) <= MAX_QUEUED_ENTRIES {
                return;
            }
            drained.await;
        }
    }

    /// Entries queued and not yet handled.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Waits until every write queued so far is done.
    pub async fn flush(&self) {
        let (done, finished) = oneshot::channel();
        if self.writes.send(Write::Flush(done)).is_ok() {
            let _ = finished.await;
        }
    }

    /// A clean exit: everything queued is written (what still fails is tried once more) and
    /// the store is checkpointed, so its main file alone holds every committed turn.
    pub async fn shutdown(&self) {
        let (done, finished) = oneshot::channel();
        if self.writes.send(Write::Shutdown(done)).is_ok() {
            let _ = finished.await;
        }
    }
}

/// One session's view of the journal: what of its record has been sent.
#[derive(Debug, Clone)]
pub struct SessionJournal {
    pub journal: Journal,
    pub session_id: String,
    /// Entries up to this id have been sent.
    pub saved: EntryId,
}

impl SessionJournal {
    /// For a session whose record up to `saved` is already stored.
    pub fn new(journal: Journal, session_id: &str, saved: EntryId) -> Self {
        Self {
            journal,
            session_id: session_id.to_string(),
            saved,
        }
    }

    /// Sends every entry added, or changed in place, since the last save.
    pub fn save(&mut self, transcript: &mut Transcript) {
        let rewritten = transcript.take_rewritten();
        let stored: Vec<Entry> = rewritten
            .into_iter()
            .filter(|e| e.id <= self.saved)
            .collect();
        if !stored.is_empty() {
            self.journal.append(&self.session_id, stored);
        }
        let new = transcript.entries_after(self.saved);
        if new.is_empty() {
            return;
        }
        let last = transcript.last_id();
        if self.journal.append(&self.session_id, new.to_vec()) {
            self.saved = last;
        } else {
            tracing::error!(session = %self.session_id, "the session writer has stopped; this session is not saved");
        }
    }

    pub fn update(&self, update: MetaUpdate) {
        self.journal.update(&self.session_id, update);
    }

    /// How this session's saving stands once everything sent so far was tried.
    pub async fn committed(&self) -> SaveReport {
        self.journal.committed(&self.session_id).await
    }

    /// Waits while the writer is far behind (a slow disk slows the turn).
    pub async fn room(&self) {
        self.journal.room().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use talaria_record::testing::user;
    use talaria_store::{ListPage, SearchHit, StoreError};

    /// A store that refuses writes while `failing` is set, and records what it accepted.
    #[derive(Default)]
    struct Flaky {
        failing: std::sync::atomic::AtomicBool,
        accepted: Mutex<Vec<(String, EntryId)>>,
        batches: AtomicUsize,
    }

    impl SessionStore for Flaky {
        fn create(&self, _: &SessionMeta) -> Result<(), StoreError> {
            Ok(())
        }
        fn append(&self, session: &str, entries: &[Entry]) -> Result<(), StoreError> {
            if self.failing.load(Ordering::Acquire) {
                return Err(StoreError::Full("no space left".into()));
            }
            let mut accepted = self.accepted.lock().expect("lock");
            accepted.extend(entries.iter().map(|e| (session.to_string(), e.id)));
            Ok(())
        }
        fn append_batch(&self, batch: &[(String, Vec<Entry>)]) -> Result<(), StoreError> {
            self.batches.fetch_add(1, Ordering::AcqRel);
            if self.failing.load(Ordering::Acquire) {
                return Err(StoreError::Full("no space left".into()));
            }
            for (session, entries) in batch {
                self.append(session, entries)?;
            }
            Ok(())
        }
        fn update(&self, _: &str, _: &MetaUpdate) -> Result<(), StoreError> {
            Ok(())
        }
        fn load(&self, id: &str) -> Result<(SessionMeta, Transcript), StoreError> {
            Err(StoreError::NotFound(id.into()))
        }
        fn list(&self, _: Option<&str>, _: Option<&str>, _: usize) -> Result<ListPage, StoreError> {
            Ok(ListPage::default())
        }
        fn delete(&self, _: &str) -> Result<bool, StoreError> {
            Ok(false)
        }
        fn search(&self, _: &str, _: usize) -> Result<Vec<SearchHit>, StoreError> {
            Ok(Vec::new())
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

    #[tokio::test]
    async fn failed_writes_wait_in_order_and_heal_without_holes() {
        let store = Arc::new(Flaky::default());
        let journal = Journal::start(store.clone());
        let mut session = SessionJournal::new(journal.clone(), "s", 0);
        let mut transcript = Transcript::with_system("sys");
        session.save(&mut transcript);
        assert_eq!(session.committed().await, SaveReport::default());
        store.failing.store(true, Ordering::Release);
        transcript.push(user("one"));
        session.save(&mut transcript);
        transcript.push(user("two"));
        session.save(&mut transcript);
        let report = session.committed().await;
        assert_eq!(report.unsaved, 2);
        assert!(report.error.is_some_and(|e| e.contains("full")));
        store.failing.store(false, Ordering::Release);
        transcript.push(user("three"));
        session.save(&mut transcript);
        assert_eq!(session.committed().await, SaveReport::default());
        let ids: Vec<EntryId> = store
            .accepted
            .lock()
            .expect("lock")
            .iter()
            .map(|(_, id)| *id)
            .collect();
        assert_eq!(ids, [1, 2, 3, 4], "every entry, once, in order");
        assert_eq!(journal.queued(), 0);
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
        for (session, transcript) in &mut sessions {
            for n in 0..5 {
                transcript.push(user(&format!("message {n}")));
            }
            session.save(transcript);
        }
        journal.flush().await;
        assert_eq!(store.accepted.lock().expect("lock").len(), 20 * 6);
        assert!(
            store.batches.load(Ordering::Acquire) < 20,
            "batched, not one commit per session"
        );
    }
}
