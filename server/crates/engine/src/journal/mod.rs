//! Writes sessions to the store without blocking the runtime or the answers, and says when
//! they are committed: one writer thread for every session of the process, in order per
//! session (`writer.rs`).
//!
//! - Writes queued together are committed together (one transaction per batch, not per
//!   entry); a turn is answered once a barrier confirms its entries are committed
//!   ([`SessionJournal::committed`]) — or once [`ANSWER_DEADLINE`] has passed, whichever is
//!   first: a store that blocks (a lock held by another program, a frozen database server)
//!   never holds an answer longer. The session then tells its client it is not saved yet,
//!   and again when it is ([`Journal::when_saved`]).
//! - The queue is bounded in entries: a turn that runs ahead of the disk waits
//!   ([`SessionJournal::room`]), so a slow disk slows turns instead of growing memory.
//! - A write that fails (a full disk, a read-only or damaged store, a lost database) keeps
//!   the session's unsaved writes in memory, in order, and retries them (every couple of
//!   seconds and before any newer write of that session), so the record never has holes.
//! - A store that cannot be opened (locked by another process's migration, a database that
//!   is down) is opened again, with backoff, for the life of the process; writes made
//!   meanwhile wait in the backlogs and are written once it opens.
//! - What waits in a backlog is also appended to the process's spool (`spool.rs`, with
//!   [`Journal::opening_spooled`]): an exit or a kill while the store is stuck loses
//!   nothing, and the next process on the same home adopts the spool (its writes join that
//!   process's backlogs and its sessions' views) and writes it.
//! - Every write of entries is checked by the store against what it builds on
//!   (`SessionStore::append_checked`, with a [`talaria_store::Basis`] per session: this
//!   journal's token, and the session's last writer as it was loaded or created here): a
//!   stored entry another writer wrote is never replaced. Entries the store refuses so (a
//!   spool adopted after another process went on with its session) are saved as a new
//!   session, a fork of theirs where the two part (`recover.rs`).
//! - Before a session is loaded or claimed here, the spools of ended processes are adopted
//!   ([`Journal::adopt_orphans`]), so its view has their entries and its next ids follow
//!   them; the writer also adopts at each probe of a stuck store and every few seconds.
//! - A turn answered before its entries were handled (the deadline passed while the writer
//!   was inside a store call) has them appended to the spool first: what is answered is
//!   committed or spooled.
//! - Reads ([`Journal::call`]) are bounded by [`READ_DEADLINE`].

mod recover;
mod spool;
mod view;
mod waiting;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use talaria_record::{Entry, EntryId, Transcript};
use talaria_store::{Basis, EncodedEntry, MetaUpdate, SessionMeta, SessionStore, StoreError};
use tokio::sync::{Notify, oneshot};

pub use waiting::WaitingWrites;
#[cfg(test)]
use writer::HELD_IN_MEMORY;
pub use writer::Opener;
use writer::{Write, Writer};

/// Entries that may wait in the queue before turns wait for the disk.
pub const MAX_QUEUED_ENTRIES: usize = 4096;
/// The longest a turn's answer waits for its entries to be committed.
pub const ANSWER_DEADLINE: Duration = Duration::from_millis(1500);
/// The longest a request waits for the store to read (list, load, search…).
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
/// The longest an answer past [`ANSWER_DEADLINE`] waits for its entries to be spooled.
const LATE_SPOOL_DEADLINE: Duration = Duration::from_secs(1);
/// Store calls that may be stuck at once before new ones fail at once (they hold threads of
/// the blocking pool, which the tools need too).
const MAX_STUCK_CALLS: usize = 4;

/// How a session's saving stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaveReport {
    /// Entries kept in memory because the store refused them or has not answered yet
    /// (written later, in order).
    pub unsaved: usize,
    /// Why, while anything is unsaved.
    pub error: Option<String>,
    /// Another writer went on with the session meanwhile (a spool adopted over it): what
    /// this process wrote since is saved as this session instead (a fork of it).
    pub moved_to: Option<String>,
    /// Writes of the session wait that the spool does not hold (it could not be written: a
    /// full disk, a read-only home): they exist only in this process's memory, and ending
    /// it now loses them.
    pub in_memory_only: bool,
}

impl SaveReport {
    /// Whether what the session recorded so far survives a kill (committed, or spooled).
    pub fn survives_a_kill(&self) -> bool {
        self.error.is_none() || !self.in_memory_only
    }
}

impl SaveReport {
    fn late(deadline: Duration) -> Self {
        Self {
            unsaved: 1,
            moved_to: None,
            in_memory_only: false,
            error: Some(format!(
                "the session store has not answered for {:.1} s (it may be locked by another \
                 program, or its server stopped)",
                deadline.as_secs_f64()
            )),
        }
    }

    fn with_moved(mut self, moved_to: Option<String>) -> Self {
        self.moved_to = moved_to;
        self
    }

    fn stopped() -> Self {
        Self {
            unsaved: 1,
            error: Some("the session writer has stopped".into()),
            moved_to: None,
            in_memory_only: true,
        }
    }
}

/// Whether the store is open.
#[derive(Debug, Clone)]
enum StoreStatus {
    Open,
    /// Being opened again and again; the last reason it did not open.
    Opening(String),
    /// It can never open as configured.
    Closed(String),
}

/// What the writer and every handle share.
struct Shared {
    /// The store once it is open (replaced when a read-only one could be opened for writing).
    store: std::sync::RwLock<Option<Arc<dyn SessionStore>>>,
    status: Mutex<StoreStatus>,
    /// Entries queued and not yet handled by the writer.
    queued: AtomicUsize,
    /// Signalled whenever the writer handled a batch.
    drained: Notify,
    /// Store calls running on the blocking pool for requests.
    calls: AtomicUsize,
    /// What users are told once about how the store opened (`SessionStore::notes`).
    notes: Mutex<Vec<String>>,
    /// Opening was tried at least once (it may have failed).
    tried: std::sync::atomic::AtomicBool,
    /// Signalled when it was.
    first_try: Notify,
    /// What each session sent that the store has not committed (the view's second half).
    waiting: waiting::Waiting,
    /// This journal's token: the `writer` the store records for what it commits.
    token: String,
    /// Per session, the session writers its next entries build on (`Basis::builds_on`).
    bases: Mutex<HashMap<String, Vec<String>>>,
    /// The spool, when there is one: the writer's, and a late answer's (see
    /// [`Journal::committed_within`]).
    spool: Mutex<Option<spool::Spool>>,
    /// Sessions whose writes a refusal moved to a recovered session, and where.
    moved: Mutex<HashMap<String, String>>,
}

impl Shared {
    fn new(status: StoreStatus) -> Self {
        Self {
            store: std::sync::RwLock::new(None),
            status: Mutex::new(status),
            queued: AtomicUsize::new(0),
            drained: Notify::new(),
            calls: AtomicUsize::new(0),
            notes: Mutex::new(Vec::new()),
            tried: std::sync::atomic::AtomicBool::new(false),
            first_try: Notify::new(),
            waiting: waiting::Waiting::default(),
            token: uuid::Uuid::new_v4().to_string(),
            bases: Mutex::new(HashMap::new()),
            spool: Mutex::new(None),
            moved: Mutex::new(HashMap::new()),
        }
    }

    /// What `session`'s next entries build on.
    fn basis(&self, session: &str) -> Basis {
        Basis {
            writer: self.token.clone(),
            builds_on: talaria_util::lock(&self.bases)
                .get(session)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// `session`'s next entries also build on these session writers.
    fn builds_on(&self, session: &str, writers: impl IntoIterator<Item = String>) {
        let mut bases = talaria_util::lock(&self.bases);
        let known = bases.entry(session.to_string()).or_default();
        for writer in writers {
            if !known.contains(&writer) {
                known.push(writer);
            }
        }
    }

    /// The store committed `entries` of `session` (this journal is its writer now): they
    /// leave the view, and the spool says so, under its lock (a late answer's spooling never
    /// falls between the two).
    fn committed(&self, session: &str, entries: &[EncodedEntry]) {
        let mut spool = talaria_util::lock(&self.spool);
        self.waiting.committed(session, entries);
        talaria_util::lock(&self.bases).insert(session.to_string(), Vec::new());
        if let Some(spool) = spool.as_mut() {
            let ids: Vec<EntryId> = entries.iter().map(|e| e.id).collect();
            spool.written_in_store(session, &ids, false);
        }
    }

    /// A turn was answered before the writer handled its writes: what `session` has waiting
    /// is appended to the spool (and synced) now, so a kill loses none of it. What could not
    /// be (a full disk) stays unspooled in the view, so the answer says it is in memory only
    /// ([`SaveReport::in_memory_only`]), and is logged.
    fn spool_waiting(&self, session: &str) {
        let mut spool = talaria_util::lock(&self.spool);
        let Some(spool) = spool.as_mut() else {
            return;
        };
        // Only what the writer has not spooled itself (it spools what waits as it handles it).
        let waiting = self.waiting.unspooled(session);
        if waiting.is_empty() {
            return;
        }
        let created = waiting
            .create
            .as_ref()
            .is_some_and(|meta| spool.create(meta));
        let on = self.basis(session).builds_on;
        let places = spool.entries(session, &waiting.entries, &on);
        let written: Vec<EncodedEntry> = waiting
            .entries
            .iter()
            .cloned()
            .zip(places)
            .filter_map(|(entry, place)| place.map(|_| entry))
            .collect();
        let all = written.len() == waiting.entries.len() && (created || waiting.create.is_none());
        if created || !written.is_empty() {
            self.waiting.spooled(session, &written, created);
            spool.late = true;
            spool.sync();
        }
        if !all {
            tracing::error!(
                session,
                "writes the store has not taken could not be spooled either: they are in this \
                 process's memory only until the store takes them"
            );
        }
    }

    /// Whether `session` has writes waiting that the spool does not hold.
    fn in_memory_only(&self, session: &str) -> bool {
        !self.waiting.unspooled(session).is_empty()
    }

    /// Where a refusal moved `session`'s writes, if it did.
    fn moved_to(&self, session: &str) -> Option<String> {
        talaria_util::lock(&self.moved).get(session).cloned()
    }

    fn tried_once(&self) {
        if !self.tried.swap(true, Ordering::AcqRel) {
            self.first_try.notify_waiters();
        }
    }

    fn opened(&self, store: Arc<dyn SessionStore>) {
        talaria_util::lock(&self.notes).extend(store.notes());
        *self
            .store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(store);
        self.set_status(StoreStatus::Open);
    }

    fn current_store(&self) -> Option<Arc<dyn SessionStore>> {
        self.store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_status(&self, status: StoreStatus) {
        *talaria_util::lock(&self.status) = status;
    }

    fn status(&self) -> StoreStatus {
        talaria_util::lock(&self.status).clone()
    }

    /// Why the store cannot be used now, as a store error.
    fn not_open(&self) -> StoreError {
        match self.status() {
            StoreStatus::Closed(why) => StoreError::Unsupported(why),
            StoreStatus::Opening(why) => StoreError::NotOpenYet(why),
            StoreStatus::Open => StoreError::NotOpenYet("opening".into()),
        }
    }

    fn status_text(&self) -> String {
        self.not_open().to_string()
    }
}

/// The process's writer.
#[derive(Clone)]
pub struct Journal {
    writes: mpsc::Sender<Write>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

impl Journal {
    /// Starts the writer thread for an open `store`.
    pub fn start(store: Arc<dyn SessionStore>) -> Self {
        let shared = Arc::new(Shared::new(StoreStatus::Open));
        shared.opened(store.clone());
        shared.tried_once();
        let writer = Writer::open(store, shared.clone());
        Self::spawn(writer, shared)
    }

    /// Starts the writer thread, which opens the store with `open` — again, with backoff,
    /// until it opens (or fails for good: a store too new, a build without its driver).
    pub fn opening(open: Opener) -> Self {
        let shared = Arc::new(Shared::new(StoreStatus::Opening("opening".into())));
        let writer = Writer::opening(open, shared.clone());
        Self::spawn(writer, shared)
    }

    /// As [`Journal::opening`], with what waits for the store also spooled in `spool_dir`
    /// (an append-only file per process, `spool.rs`), where the spools of processes that
    /// ended with writes waiting are adopted and written too.
    pub fn opening_spooled(open: Opener, spool_dir: std::path::PathBuf) -> Self {
        let shared = Arc::new(Shared::new(StoreStatus::Opening("opening".into())));
        let writer = Writer::opening(open, shared.clone()).spooled_in(spool_dir);
        Self::spawn(writer, shared)
    }

    fn spawn(writer: Writer, shared: Arc<Shared>) -> Self {
        // Unbounded (a save never blocks a turn's thread), but paced: past
        // `MAX_QUEUED_ENTRIES` queued, turns wait in `room()` (`a_flood_of_entries_*`).
        let (writes, queue) = mpsc::channel::<Write>();
        let spawned = std::thread::Builder::new()
            .name("talaria-journal".into())
            .spawn(move || writer.run(&queue));
        if let Err(error) = spawned {
            tracing::error!("the session writer could not start: {error}");
        }
        Self { writes, shared }
    }

    /// The store, once it is open; else why not.
    pub fn store(&self) -> Result<Arc<dyn SessionStore>, StoreError> {
        self.shared
            .current_store()
            .ok_or_else(|| self.shared.not_open())
    }

    /// Waits until opening the store was tried once (the usual case: it opened), for at most
    /// `deadline`: a session that starts meanwhile then knows whether it is saved.
    pub async fn first_open_tried(&self, deadline: Duration) {
        let waiting = async {
            loop {
                let tried = self.shared.first_try.notified();
                if self.shared.tried.load(Ordering::Acquire) {
                    return;
                }
                tried.await;
            }
        };
        let _ = tokio::time::timeout(deadline, waiting).await;
    }

    /// What users should be told once about how the store opened (taken: told once).
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *talaria_util::lock(&self.shared.notes))
    }

    /// Whether the store is open.
    pub fn is_open(&self) -> bool {
        self.shared.current_store().is_some()
    }

    /// Why the store is not open, when it is not ("not open yet…", or why it never will be).
    pub fn not_open(&self) -> Option<String> {
        (!self.is_open()).then(|| self.shared.status_text())
    }

    /// Runs a store call for a request on the blocking pool, for at most [`READ_DEADLINE`]
    /// (the call itself goes on in the background when the store is stuck).
    pub async fn call<T: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn SessionStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.store()?;
        let calls = &self.shared.calls;
        // Nothing waited here: the store is busy with calls that have not returned, and
        // says so (a time-out is only reported when this call waited that long).
        if calls.fetch_add(1, Ordering::AcqRel) >= MAX_STUCK_CALLS {
            calls.fetch_sub(1, Ordering::AcqRel);
            return Err(StoreError::Overloaded(format!(
                "{MAX_STUCK_CALLS} of them are still running"
            )));
        }
        let shared = self.shared.clone();
        let running = tokio::task::spawn_blocking(move || {
            let result = call(store.as_ref());
            shared.calls.fetch_sub(1, Ordering::AcqRel);
            result
        });
        match tokio::time::timeout(READ_DEADLINE, running).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(StoreError::Other(format!("the store call failed: {join}"))),
            Err(_) => Err(StoreError::TimedOut(READ_DEADLINE)),
        }
    }

    fn send(&self, write: Write) -> bool {
        self.writes.send(write).is_ok()
    }

    pub fn create(&self, meta: SessionMeta) {
        self.shared.waiting.created(&meta);
        self.send(Write::Create(meta));
    }

    /// Creates a session with its first entries, committed together (a fork's copy): the
    /// store never has the session without them. While the store does not take them they
    /// wait (and are spooled) like any write.
    pub fn create_with(&self, meta: SessionMeta, entries: Vec<EncodedEntry>) {
        self.shared.waiting.created(&meta);
        self.shared.waiting.sent(&meta.id, &entries);
        let count = entries.len();
        self.shared.queued.fetch_add(count, Ordering::AcqRel);
        if !self.send(Write::CreateWith(meta, entries)) {
            self.shared.queued.fetch_sub(count, Ordering::AcqRel);
        }
    }

    /// A session was loaded (and claimed) here, last written by `writer`: its next entries
    /// build on that.
    pub fn loaded(&self, session_id: &str, writer: &str) {
        self.shared
            .builds_on(session_id, std::iter::once(writer.to_string()));
    }

    /// Adopts the spools of processes that ended with writes waiting (their entries join
    /// this process's view and backlogs), for at most `deadline`; whether it was done. Asked
    /// before a session is loaded, claimed or forked: its view then has them.
    pub async fn adopt_orphans(&self, deadline: Duration) -> bool {
        let (done, finished) = oneshot::channel();
        if !self.send(Write::Adopt(done)) {
            return false;
        }
        matches!(tokio::time::timeout(deadline, finished).await, Ok(Ok(())))
    }

    /// Deletes a session as this process sees it (`session/delete`): the spools of ended
    /// processes are adopted first (failing with `TimedOut` when that cannot be done in
    /// time: nothing is deleted then), so the delete covers what they held; a session whose
    /// creation still waits here (the store was stuck when it was made) is deleted too —
    /// the store keeps its tombstone, so nothing waiting for it, here or in a spool, brings
    /// it back. What of it waits here is dropped once the store deleted it. Whether there
    /// was such a session.
    pub async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        if !self.adopt_orphans(READ_DEADLINE).await {
            return Err(StoreError::TimedOut(READ_DEADLINE));
        }
        let waiting_here = self.shared.waiting.has(session_id);
        let id = session_id.to_string();
        let deleted = self
            .call(move |store| store.delete(&id, waiting_here))
            .await?;
        if deleted {
            self.shared.waiting.forget(session_id);
            self.send(Write::Deleted(session_id.to_string()));
        }
        Ok(deleted)
    }

    /// Holds a new session for this process (after its create, in order).
    pub fn claim(&self, session_id: &str) {
        self.send(Write::Claim(session_id.to_string()));
    }

    /// Lets other processes have the session once everything it wrote is written (unless
    /// it is opened here again meanwhile: [`Journal::hold_again`]).
    pub fn release(&self, session_id: &str) {
        let hold = self.shared.waiting.hold(session_id);
        self.send(Write::Release(session_id.to_string(), hold));
    }

    /// The session is opened here again: a release still waiting behind its writes is
    /// dropped, so the claim passes to the new opening with the waiting entries.
    pub fn hold_again(&self, session_id: &str) {
        self.shared.waiting.hold_again(session_id);
    }

    pub fn update(&self, session_id: &str, update: MetaUpdate) {
        let moved = self.shared.moved_to(session_id);
        let session_id = moved.as_deref().unwrap_or(session_id);
        self.send(Write::Update(session_id.to_string(), update));
    }

    /// Queues entries of a session that has no actor yet (a fork's copy), in order after its
    /// create and claim.
    pub fn append_entries(&self, session_id: &str, entries: Vec<EncodedEntry>) {
        if !entries.is_empty() && !self.append(session_id, entries) {
            tracing::error!(session = %session_id, "the session writer has stopped; this session is not saved");
        }
    }

    fn append(&self, session_id: &str, entries: Vec<EncodedEntry>) -> bool {
        // A session whose writes a refusal moved goes on there.
        let moved = self.shared.moved_to(session_id);
        let session_id = moved.as_deref().unwrap_or(session_id);
        let count = entries.len();
        talaria_util::failpoint::step("journal::append::before");
        self.shared.waiting.sent(session_id, &entries);
        self.shared.queued.fetch_add(count, Ordering::AcqRel);
        let sent = self.send(Write::Append(session_id.to_string(), entries));
        if !sent {
            self.shared.queued.fetch_sub(count, Ordering::AcqRel);
        }
        talaria_util::failpoint::step("journal::append::after");
        sent
    }

    /// How a session's saving stands once everything queued for it was tried, or once
    /// `deadline` has passed (then it is reported unsaved: the writes go on in order, and
    /// what it has waiting is spooled before this returns, so an answer given now is never
    /// lost to a kill).
    pub async fn committed_within(&self, session_id: &str, deadline: Duration) -> SaveReport {
        let moved = self.shared.moved_to(session_id);
        let session_id = moved.as_deref().unwrap_or(session_id).to_string();
        let (reply, answer) = oneshot::channel();
        if !self.send(Write::Barrier(session_id.clone(), reply)) {
            return SaveReport::stopped();
        }
        let mut report = match tokio::time::timeout(deadline, answer).await {
            Ok(Ok(report)) => report,
            Ok(Err(_)) => SaveReport::stopped(),
            Err(_) => {
                let shared = self.shared.clone();
                let session = session_id.clone();
                let spooling = tokio::task::spawn_blocking(move || {
                    shared.spool_waiting(&session);
                });
                if tokio::time::timeout(LATE_SPOOL_DEADLINE, spooling)
                    .await
                    .is_err()
                {
                    tracing::error!(
                        "the spool took longer than {:.1} s: an answered turn is kept in \
                         memory only until the store takes it",
                        LATE_SPOOL_DEADLINE.as_secs_f64()
                    );
                }
                SaveReport::late(deadline)
            }
        };
        report.moved_to = report.moved_to.or(moved);
        if report.error.is_some() {
            report.in_memory_only |= self.shared.in_memory_only(&session_id);
        }
        report
    }

    /// What every session has waiting that the writer has not spooled yet is spooled now
    /// (a stop begins: a second signal may end the process at once, and the writer may be
    /// inside a store call, opening a store another process migrates), for a moment at most.
    pub async fn spool_everything(&self) {
        let shared = self.shared.clone();
        let spooling = tokio::task::spawn_blocking(move || {
            for session in shared.waiting.sessions() {
                shared.spool_waiting(&session);
            }
        });
        if tokio::time::timeout(LATE_SPOOL_DEADLINE, spooling)
            .await
            .is_err()
        {
            tracing::error!(
                "the spool took longer than {:.1} s: what waits is kept in memory only until \
                 the store takes it",
                LATE_SPOOL_DEADLINE.as_secs_f64()
            );
        }
    }

    /// Resolves `true` once the session has nothing unsaved; `false` when it never will
    /// (the store can never open, or the writer stopped).
    pub fn when_saved(
        &self,
        session_id: &str,
    ) -> impl std::future::Future<Output = bool> + Send + use<> {
        let (reply, answer) = oneshot::channel();
        self.send(Write::WhenSaved(session_id.to_string(), reply));
        async move { answer.await.unwrap_or(false) }
    }

    /// Waits while the writer is more than [`MAX_QUEUED_ENTRIES`] behind.
    pub async fn room(&self) {
        loop {
            let drained = self.shared.drained.notified();
            if self.shared.queued.load(Ordering::Acquire) <= MAX_QUEUED_ENTRIES {
                return;
            }
            drained.await;
        }
    }

    /// Entries queued and not yet handled.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }

    /// Waits until every write queued so far is done, for at most `deadline`; whether it was.
    pub async fn flush(&self, deadline: Duration) -> bool {
        let (done, finished) = oneshot::channel();
        if !self.send(Write::Flush(done)) {
            return false;
        }
        matches!(tokio::time::timeout(deadline, finished).await, Ok(Ok(())))
    }

    /// A clean exit: everything queued is written (what still fails is tried once more and
    /// then logged with its session) and the store is checkpointed, so its main file alone
    /// holds every committed turn — for at most `deadline`. The sessions left unsaved.
    pub async fn shutdown(&self, deadline: Duration) -> Option<Vec<(String, SaveReport)>> {
        let (done, finished) = oneshot::channel();
        if !self.send(Write::Shutdown(done)) {
            return None;
        }
        match tokio::time::timeout(deadline, finished).await {
            Ok(Ok(left)) => Some(left),
            _ => {
                tracing::error!(
                    queued = self.queued(),
                    "the session store did not finish writing within {:.1} s; what is still \
                     queued is not saved",
                    deadline.as_secs_f64()
                );
                None
            }
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

    /// Sends every entry added, or changed in place, since the last save (encoded here, so
    /// the record's entries are never copied for the store), as one write: the store commits
    /// a change in place and the entries it names together (a waiting steer's marker and
    /// the user message it entered as; a compaction's rewrites and its summary).
    pub fn save(&mut self, transcript: &mut Transcript) {
        let rewritten = transcript.take_rewritten();
        let mut entries: Vec<EncodedEntry> = rewritten
            .iter()
            .filter(|e| e.id <= self.saved)
            .filter_map(|e| self.encoded(e))
            .collect();
        let added = transcript.all_after(self.saved);
        let adds = !added.is_empty();
        entries.extend(added.into_iter().filter_map(|e| self.encoded(e)));
        if entries.is_empty() {
            return;
        }
        let last = transcript.last_id();
        if !self.journal.append(&self.session_id, entries) {
            tracing::error!(session = %self.session_id, "the session writer has stopped; this session is not saved");
        } else if adds {
            self.saved = last;
        }
    }

    /// `entry` as the store writes it; an entry that cannot be encoded (never seen: every
    /// record type serialises) is logged rather than sent.
    fn encoded(&self, entry: &Entry) -> Option<EncodedEntry> {
        EncodedEntry::of(entry)
            .inspect_err(|error| {
                tracing::error!(session = %self.session_id, entry = entry.id, "an entry is not saved: {error}");
            })
            .ok()
    }

    pub fn update(&self, update: MetaUpdate) {
        self.journal.update(&self.session_id, update);
    }

    /// How this session's saving stands once everything sent so far was tried, or after
    /// [`ANSWER_DEADLINE`].
    pub async fn committed(&self) -> SaveReport {
        self.journal
            .committed_within(&self.session_id, ANSWER_DEADLINE)
            .await
    }

    /// As [`SessionJournal::committed`], for what was sent until now, owned (for a task of
    /// its own).
    pub fn committed_later(&self) -> impl std::future::Future<Output = SaveReport> + Send + use<> {
        let journal = self.journal.clone();
        let session = self.session_id.clone();
        async move { journal.committed_within(&session, ANSWER_DEADLINE).await }
    }

    /// Resolves `true` once this session has nothing unsaved (`false`: it never will be).
    pub fn when_saved(&self) -> impl std::future::Future<Output = bool> + Send + use<> {
        self.journal.when_saved(&self.session_id)
    }

    /// Waits while the writer is far behind (a slow disk slows the turn).
    pub async fn room(&self) {
        self.journal.room().await;
    }
}

#[cfg(test)]
mod loss_tests;
#[cfg(test)]
mod tests;
