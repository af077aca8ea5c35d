//! The journal's writer thread: opens the store (again and again, with backoff, until it
//! opens), commits queued writes in batches, keeps what the store refused in per-session
//! backlogs, in order, and writes them when it accepts writes again.
//!
//! Nothing here is awaited by an answer for longer than the journal's deadlines: callers
//! wait on replies with a timeout (`mod.rs`), so a store that blocks (a lock held by another
//! program, a frozen database server) delays writes, never answers. A store that stalled is
//! asked again on a probe thread (`SessionStore::accepts_writes`), so the writer goes on
//! taking writes (into the backlogs and the spool) while the question waits.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use talaria_store::{
    EncodedEntry, MetaUpdate, Refusal, SessionAppend, SessionMeta, SessionStore, StoreError,
};
use tokio::sync::oneshot;

use super::spool::{Spool, Spooled};
use super::{SaveReport, Shared, StoreStatus};

/// How often unsaved writes are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(2);
/// How often the writer looks for the answer of a stuck store it asked (see
/// [`Writer::ask_stuck_store`]), taking writes in between.
const PROBE_POLL: Duration = Duration::from_millis(50);
/// Bytes of waiting bodies kept in memory while the store is stuck; past it, bodies the spool
/// holds leave memory and are read back from it (for the store, a load or a fork).
pub(super) const HELD_IN_MEMORY: usize = 8 << 20;
/// The most writes committed in one batch.
const MAX_BATCH: usize = 1024;
/// The first wait before opening the store again, doubled up to [`LONGEST_OPEN_WAIT`].
const FIRST_OPEN_WAIT: Duration = Duration::from_millis(250);
const LONGEST_OPEN_WAIT: Duration = Duration::from_secs(15);

/// Opens the store; called on the writer thread until it succeeds.
pub type Opener = Box<dyn FnMut() -> Result<Arc<dyn SessionStore>, StoreError> + Send>;

pub(super) enum Write {
    Create(SessionMeta),
    /// A session and its first entries, committed together (a fork's copy).
    CreateWith(SessionMeta, Vec<EncodedEntry>),
    /// Adopts the spools of processes that ended (before a load, a claim or a fork).
    Adopt(oneshot::Sender<()>),
    /// Holds the session for this process (after its create).
    Claim(String),
    /// The store deleted the session (asked by this process): what of it waits is dropped.
    Deleted(String),
    /// Lets other processes have it (after everything it wrote), unless it was opened here
    /// again since (its hold changed).
    Release(String, u64),
    Append(String, Vec<EncodedEntry>),
    Update(String, MetaUpdate),
    /// Answers once every earlier write of the session is committed, or why it is not.
    Barrier(String, oneshot::Sender<SaveReport>),
    /// Answers `true` once the session has nothing unsaved (at once when that is already
    /// so), `false` when it never will (the store can never open).
    WhenSaved(String, oneshot::Sender<bool>),
    /// Answers once every earlier write of every session is done.
    Flush(oneshot::Sender<()>),
    /// A clean exit: tries what is unsaved once more, checkpoints the store and says which
    /// sessions still have unsaved entries.
    Shutdown(oneshot::Sender<Vec<(String, SaveReport)>>),
}

/// What of one session the store has not accepted yet, in order.
#[derive(Default)]
struct Backlog {
    create: Option<SessionMeta>,
    claim: bool,
    entries: Vec<EncodedEntry>,
    update: Option<MetaUpdate>,
    /// A release waiting, made under this hold.
    release: Option<u64>,
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

/// Why a write waits in a backlog (the store's error, as the session is told it).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Unsaved(String);

/// The store, or how it is being opened.
enum Store {
    Open(Arc<dyn SessionStore>),
    Opening {
        open: Opener,
        next_try: Instant,
        wait: Duration,
    },
    /// It can never open as configured; sessions run unsaved.
    Closed,
}

/// The writer thread's state.
pub(super) struct Writer {
    store: Store,
    shared: Arc<Shared>,
    unsaved: BTreeMap<String, Backlog>,
    /// Who waits for a session to have nothing unsaved.
    waiting_saved: BTreeMap<String, Vec<oneshot::Sender<bool>>>,
    /// After a failure of the whole store (a lock held by another program, a frozen server):
    /// until when writes go straight to the backlogs without calling it, and why. A stuck
    /// store is asked again every [`RETRY_EVERY`], not once per batch: each call may block
    /// for the store's whole patience, and the queue behind it (and the turns waiting for
    /// room in it) would wait that long for every batch.
    stalled: Option<(Instant, String)>,
    /// A stuck store being asked, on a thread of its own, whether it takes writes again:
    /// its answer. Writes go to the backlogs meanwhile (the writer never waits for it).
    probe: Option<mpsc::Receiver<Result<(), StoreError>>>,
    /// Bytes of backlogged bodies kept in memory since the backlogs were last empty (see
    /// [`HELD_IN_MEMORY`]).
    held: usize,
    /// Opens the store again: kept once it opened, for a store that opened read-only (its
    /// home could not be written), tried again every [`RETRY_EVERY`] while writes wait, so a
    /// home that becomes writable is written again without a restart.
    reopen: Option<(Opener, Instant)>,
    /// The store refused a write as read-only (whatever it said when it opened).
    refused_read_only: bool,
    /// When orphaned spools were last looked for.
    adopted_at: Instant,
    /// Sessions whose writes were adopted before the store opened: claimed once it does.
    adopted_unclaimed: Vec<String>,
    /// A clean exit was made (`Write::Shutdown`): the thread ends after this batch, and
    /// nothing is written after the exit's last try (the process is ending).
    stopped: bool,
}

/// Why an adopted spool's writes wait.
const ADOPTED: &str = "written by a Talaria process that ended before the store took them";

impl Writer {
    pub(super) fn open(store: Arc<dyn SessionStore>, shared: Arc<Shared>) -> Self {
        Self::with_store(Store::Open(store), shared)
    }

    pub(super) fn opening(open: Opener, shared: Arc<Shared>) -> Self {
        let store = Store::Opening {
            open,
            next_try: Instant::now(),
            wait: FIRST_OPEN_WAIT,
        };
        Self::with_store(store, shared)
    }

    fn with_store(store: Store, shared: Arc<Shared>) -> Self {
        Self {
            store,
            shared,
            unsaved: BTreeMap::new(),
            waiting_saved: BTreeMap::new(),
            stalled: None,
            probe: None,
            held: 0,
            reopen: None,
            refused_read_only: false,
            adopted_at: Instant::now(),
            adopted_unclaimed: Vec::new(),
            stopped: false,
        }
    }

    /// Spools what waits for the store in `dir` (and adopts the spools left there).
    pub(super) fn spooled_in(self, dir: std::path::PathBuf) -> Self {
        let spool = Spool::in_dir(dir, self.shared.token.clone());
        *talaria_util::lock(&self.shared.spool) = Some(spool);
        self
    }

    /// Runs `with` on the spool, if there is one.
    fn with_spool<T>(&self, with: impl FnOnce(&mut Spool) -> T) -> Option<T> {
        talaria_util::lock(&self.shared.spool).as_mut().map(with)
    }

    pub(super) fn run(mut self, queue: &mpsc::Receiver<Write>) {
        self.with_spool(Spool::prepare);
        self.adopt();
        self.heal();
        self.settle_spool();
        loop {
            self.try_open();
            let first = match self.wake_after() {
                None => queue
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                Some(after) => queue.recv_timeout(after),
            };
            let mut batch = match first {
                Ok(write) => vec![write],
                Err(mpsc::RecvTimeoutError::Timeout) => Vec::new(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.shut_down();
                    return;
                }
            };
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(write) => batch.push(write),
                    Err(_) => break,
                }
            }
            self.reopen_if_replaced();
            if self.adopted_at.elapsed() >= RETRY_EVERY {
                self.adopt();
            }
            self.heal();
            self.apply(batch);
            self.answer_waiting_saved();
            self.settle_spool();
            if self.stopped {
                return;
            }
        }
    }

    /// The spools of processes that ended with writes waiting: into the backlogs (and this
    /// process's view of those sessions), to be written like this process's own.
    fn adopt(&mut self) {
        self.adopted_at = Instant::now();
        let Some(adopted) = self.with_spool(Spool::adopt) else {
            return;
        };
        let mut sessions: Vec<String> = Vec::new();
        for write in adopted {
            let session = match &write {
                Spooled::Create(meta) => &meta.id,
                Spooled::Append(session, ..) | Spooled::Update(session, _) => session,
            };
            if !sessions.contains(session) {
                sessions.push(session.clone());
            }
            match write {
                Spooled::Create(meta) => {
                    self.shared.waiting.created(&meta);
                    let session = meta.id.clone();
                    self.shared
                        .builds_on(&session, std::iter::once(meta.writer.clone()));
                    self.backlog(&session, ADOPTED).create = Some(meta);
                }
                Spooled::Append(session, entry, on) => {
                    self.shared
                        .waiting
                        .sent(&session, std::slice::from_ref(&entry));
                    self.shared.builds_on(&session, on);
                    self.backlog(&session, ADOPTED).entries.push(entry);
                }
                Spooled::Update(session, update) => {
                    merge(&mut self.backlog(&session, ADOPTED).update, update);
                }
            }
        }
        self.claim_adopted(sessions);
    }

    /// Holds the sessions whose writes were adopted until those writes are in the store (the
    /// claim is released by their backlog, after them): another process loading one meanwhile
    /// is told it is in use, as it is told of a live process's session, instead of reading it
    /// without the adopted turns and answering over their ids. A session open here keeps its
    /// own claim; one open in another process is left to it, and the adopted writes go the
    /// checked way (a recovered fork where the two part). Before the store opens, the claims
    /// are taken once it does. (The kernel drops them if this process ends first.)
    fn claim_adopted(&mut self, sessions: Vec<String>) {
        let Store::Open(store) = &self.store else {
            self.adopted_unclaimed.extend(sessions);
            return;
        };
        let store = store.clone();
        for session in sessions {
            if store.holds(&session) || !self.unsaved.contains_key(&session) {
                continue;
            }
            match store.claim(&session) {
                Ok(()) => {
                    let hold = self.shared.waiting.hold(&session);
                    if let Some(backlog) = self.unsaved.get_mut(&session) {
                        backlog.release = Some(hold);
                    }
                }
                Err(StoreError::InUse { holder, .. }) => tracing::info!(
                    session = %session,
                    "adopted writes of a session open in another process ({holder}): written \
                     only where they follow it, else saved as a recovered fork"
                ),
                Err(error) => {
                    tracing::warn!(session = %session, "claiming a session whose writes were adopted: {error}");
                }
            }
        }
    }

    /// A session deleted while writes of it waited (here, or in a spool adopted since): they
    /// are dropped and said, and a claim held for them is let go.
    fn drop_deleted(&mut self, session: &str, backlog: Option<Backlog>) {
        let backlog = backlog.or_else(|| self.unsaved.remove(session));
        if let Some(backlog) = &backlog {
            tracing::warn!(
                session = %session,
                entries = backlog.entries.len(),
                created = backlog.create.is_some(),
                "the session was deleted: the writes of it that waited are dropped"
            );
        }
        self.shared.waiting.forget(session);
        let release = backlog.and_then(|b| b.release);
        if let (Some(hold), Store::Open(store)) = (release, &self.store)
            && self.shared.waiting.hold(session) == hold
        {
            let _ = store.release(session);
        }
    }

    /// After a batch: an empty spool once nothing waits, else what it got made durable.
    fn settle_spool(&mut self) {
        let nothing_waits = self.unsaved.is_empty();
        if nothing_waits {
            self.held = 0;
        }
        let shared = self.shared.clone();
        self.with_spool(|spool| {
            // Lines a late answer added are for writes that may still be queued: the file is
            // emptied once nothing waits anywhere.
            if nothing_waits && (!spool.late || shared.waiting.is_empty()) {
                spool.written();
            } else {
                spool.sync_soon();
            }
        });
    }

    /// Entries that wait for the store: kept in the session's backlog and spooled; past
    /// [`HELD_IN_MEMORY`] their bodies are kept by the spool alone.
    fn wait_entries(&mut self, session: &str, why: Option<&str>, entries: Vec<EncodedEntry>) {
        let on = self.shared.basis(session).builds_on;
        let mut held = self.held;
        let shared = self.shared.clone();
        self.with_spool(|spool| {
            let places = spool.entries(session, &entries, &on);
            let mut written = Vec::new();
            for (entry, place) in entries.iter().zip(places) {
                if place.is_some() {
                    written.push(entry.clone());
                }
                match place {
                    Some(place) if held + entry.body.len() > HELD_IN_MEMORY => {
                        place.spill(&entry.body, spool);
                    }
                    _ => held += entry.body.len(),
                }
            }
            shared.waiting.spooled(session, &written, false);
        });
        self.held = held;
        let backlog = match why {
            Some(why) => self.backlog(session, why),
            None => self.unsaved.entry(session.to_string()).or_default(),
        };
        backlog.entries.extend(entries);
    }

    fn wait_create(&mut self, meta: SessionMeta, why: &str) {
        let shared = self.shared.clone();
        self.with_spool(|spool| {
            if spool.create(&meta) {
                shared.waiting.spooled(&meta.id, &[], true);
            }
        });
        let session = meta.id.clone();
        self.backlog(&session, why).create = Some(meta);
    }

    fn wait_update(&mut self, session: &str, why: Option<&str>, update: MetaUpdate) {
        self.with_spool(|spool| spool.update(session, &update));
        let backlog = match why {
            Some(why) => self.backlog(session, why),
            None => self.unsaved.entry(session.to_string()).or_default(),
        };
        merge(&mut backlog.update, update);
    }

    /// How long to wait for writes before there is something to try again (or spooled lines
    /// to sync).
    fn wake_after(&self) -> Option<Duration> {
        let retry = self.retry_after();
        // An orphan kept for a later try (a full disk) is tried again every few seconds.
        let adopt = self
            .with_spool(|spool| spool.orphans_to_retry())
            .unwrap_or(false)
            .then(|| RETRY_EVERY.saturating_sub(self.adopted_at.elapsed()));
        let retry = match (retry, adopt) {
            (Some(retry), Some(adopt)) => Some(retry.min(adopt)),
            (retry, adopt) => retry.or(adopt),
        };
        match self.with_spool(|spool| spool.sync_due()).flatten() {
            Some(sync) => Some(retry.map_or(sync, |retry| retry.min(sync))),
            None => retry,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match &self.store {
            Store::Opening { next_try, .. } => {
                Some(next_try.saturating_duration_since(Instant::now()))
            }
            Store::Open(_) if self.probe.is_some() => Some(PROBE_POLL),
            Store::Open(_) if !self.unsaved.is_empty() => {
                Some(self.stalled.as_ref().map_or(RETRY_EVERY, |(until, _)| {
                    until.saturating_duration_since(Instant::now())
                }))
            }
            _ => None,
        }
    }

    /// Opens the store when it is time to try again; its backlogs are written once it opens.
    fn try_open(&mut self) {
        let Store::Opening {
            open,
            next_try,
            wait,
        } = &mut self.store
        else {
            return;
        };
        if Instant::now() < *next_try {
            return;
        }
        match open() {
            Ok(store) => {
                tracing::info!("the session store is open");
                self.shared.opened(store.clone());
                let opened = std::mem::replace(&mut self.store, Store::Open(store));
                if let Store::Opening { open, .. } = opened {
                    self.reopen = Some((open, Instant::now()));
                }
                let adopted = std::mem::take(&mut self.adopted_unclaimed);
                self.claim_adopted(adopted);
                self.heal();
                self.answer_waiting_saved();
            }
            Err(error) if error.is_permanent() => {
                tracing::error!("sessions will not be saved: {error}");
                self.shared
                    .set_status(StoreStatus::Closed(error.to_string()));
                self.store = Store::Closed;
                let dropped: usize = self.unsaved.values().map(|b| b.entries.len()).sum();
                if dropped > 0 {
                    tracing::error!(
                        entries = dropped,
                        "entries waiting for the store are dropped"
                    );
                }
                self.unsaved.clear();
                self.shared.waiting.clear();
                self.with_spool(Spool::keep);
                for reply in std::mem::take(&mut self.waiting_saved)
                    .into_values()
                    .flatten()
                {
                    let _ = reply.send(false);
                }
            }
            Err(error) => {
                if *wait == FIRST_OPEN_WAIT {
                    tracing::warn!("the session store cannot be opened yet: {error}");
                } else {
                    tracing::debug!("the session store still cannot be opened: {error}");
                }
                self.shared
                    .set_status(StoreStatus::Opening(error.to_string()));
                *next_try = Instant::now() + *wait;
                *wait = (*wait * 2).min(LONGEST_OPEN_WAIT);
            }
        }
        self.shared.tried_once();
    }

    /// The store, when it is open and not stalled (see [`Writer::stalled`]).
    fn open_store(&self) -> Option<Arc<dyn SessionStore>> {
        match &self.store {
            Store::Open(_) if self.is_stalled() => None,
            Store::Open(store) => Some(store.clone()),
            _ => None,
        }
    }

    fn is_stalled(&self) -> bool {
        self.probe.is_some()
            || self
                .stalled
                .as_ref()
                .is_some_and(|(until, _)| Instant::now() < *until)
    }

    /// A stalled store is asked again on a thread of its own (`accepts_writes`: the write
    /// lock, or an answer from the server), never on the writer's: a lock still held would
    /// hold the writer for the store's whole patience each time, and the turns waiting for
    /// room in its queue with it. Writes go to the backlogs (and the spool) until it answers
    /// yes; `true` when the store may be written now.
    fn ask_stuck_store(&mut self) -> bool {
        if let Some(answer) = &self.probe {
            let answer = match answer.try_recv() {
                Err(mpsc::TryRecvError::Empty) => return false,
                Ok(answer) => answer,
                Err(mpsc::TryRecvError::Disconnected) => Err(StoreError::Other(
                    "the store's probe ended without an answer".into(),
                )),
            };
            self.probe = None;
            match answer {
                Ok(()) => self.stalled = None,
                Err(error) => {
                    let why = error.to_string();
                    self.failed(&error);
                    self.stalled = Some((Instant::now() + RETRY_EVERY, why));
                    return false;
                }
            }
        }
        let Some((until, _)) = &self.stalled else {
            return true;
        };
        if Instant::now() < *until {
            return false;
        }
        // Each probe also looks for spools of processes that ended meanwhile.
        self.adopt();
        let Store::Open(store) = &self.store else {
            return true;
        };
        // One answer, from the probe's thread (a std channel for its timed wait).
        let (answer, answered) = mpsc::channel();
        let store = store.clone();
        let asked = std::thread::Builder::new()
            .name("talaria-store-probe".into())
            .spawn(move || {
                let _ = answer.send(store.accepts_writes());
            });
        match asked {
            Ok(_) => {
                self.probe = Some(answered);
                false
            }
            // No thread to ask on: asked by the writing itself, as before a stall.
            Err(_) => {
                self.stalled = None;
                true
            }
        }
    }

    /// Notes a failure: one of the whole store stalls writes until the next retry.
    fn failed(&mut self, error: &StoreError) {
        if matches!(error, StoreError::ReadOnly(_)) {
            self.refused_read_only = true;
        }
        if error.is_store_wide() {
            self.stalled = Some((Instant::now() + RETRY_EVERY, error.to_string()));
        }
    }

    /// Why writes cannot go to the store now.
    fn not_open(&self) -> String {
        match (&self.store, &self.stalled) {
            (Store::Open(_), Some((_, why))) => why.clone(),
            _ => self.shared.status_text(),
        }
    }

    fn backlog(&mut self, session: &str, error: &str) -> &mut Backlog {
        let backlog = self.unsaved.entry(session.to_string()).or_default();
        backlog.error = error.to_string();
        backlog
    }

    /// Writes the batch in order; consecutive appends are committed together.
    fn apply(&mut self, batch: Vec<Write>) {
        if matches!(self.store, Store::Closed) {
            self.apply_closed(batch);
            return;
        }
        let mut appends: Vec<(String, Vec<EncodedEntry>)> = Vec::new();
        let mut handled = 0;
        for write in batch {
            match write {
                Write::Append(session, entries) => {
                    handled += entries.len();
                    if self.unsaved.contains_key(&session) {
                        self.wait_entries(&session, None, entries);
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

    /// With a store that can never open, nothing is kept (sessions run unsaved, and say so).
    fn apply_closed(&mut self, batch: Vec<Write>) {
        for write in batch {
            match write {
                Write::Append(session, entries) => {
                    self.shared.waiting.committed(&session, &entries);
                    self.handled(entries.len());
                }
                Write::Barrier(_, reply) => {
                    let _ = reply.send(SaveReport {
                        unsaved: 1,
                        error: Some(self.not_open()),
                        ..SaveReport::default()
                    });
                }
                Write::WhenSaved(_, reply) => {
                    let _ = reply.send(false);
                }
                Write::Flush(reply) => {
                    let _ = reply.send(());
                }
                Write::Shutdown(reply) => {
                    let _ = reply.send(Vec::new());
                }
                Write::Create(meta) => self.shared.waiting.create_committed(&meta.id),
                Write::CreateWith(meta, entries) => {
                    self.shared.waiting.create_committed(&meta.id);
                    self.shared.waiting.committed(&meta.id, &entries);
                    self.handled(entries.len());
                }
                Write::Adopt(reply) => {
                    let _ = reply.send(());
                }
                Write::Claim(_) | Write::Release(..) | Write::Update(..) | Write::Deleted(_) => {}
            }
        }
    }

    /// `count` queued entries were written (or kept in a backlog): turns may go on.
    fn handled(&self, count: usize) {
        if count > 0 {
            self.shared.queued.fetch_sub(count, Ordering::AcqRel);
            self.shared.drained.notify_waiters();
        }
    }

    /// Commits queued appends in one transaction, each session's checked against what it
    /// builds on; on failure, each session on its own, and what still fails waits in its
    /// backlog. A session the store refused is handled by [`Writer::refused`].
    fn commit(&mut self, appends: &mut Vec<(String, Vec<EncodedEntry>)>) {
        if appends.is_empty() {
            return;
        }
        let Some(store) = self.open_store() else {
            let why = self.not_open();
            for (session, entries) in std::mem::take(appends) {
                self.wait_entries(&session, Some(&why), entries);
            }
            return;
        };
        let checked: Vec<SessionAppend> = std::mem::take(appends)
            .into_iter()
            .map(|(session, entries)| SessionAppend {
                basis: self.shared.basis(&session),
                session,
                entries,
            })
            .collect();
        let committed =
            refused_at("journal::commit::before").and_then(|()| store.append_checked(&checked));
        let whole = match committed {
            Ok(refusals) => {
                talaria_util::failpoint::step("journal::commit::after");
                for append in checked {
                    let refusal = refusals.iter().find(|r| r.session() == append.session);
                    self.settle(store.as_ref(), append, refusal.cloned());
                }
                return;
            }
            Err(error) => error,
        };
        self.failed(&whole);
        let mut store_wide = whole.is_store_wide().then(|| whole.to_string());
        for append in checked {
            let outcome = match &store_wide {
                Some(why) => Err(why.clone()),
                None => store
                    .append_checked(std::slice::from_ref(&append))
                    .map_err(|error| {
                        if error.is_store_wide() {
                            store_wide = Some(error.to_string());
                        }
                        error.to_string()
                    }),
            };
            match outcome {
                Ok(mut refusals) => self.settle(store.as_ref(), append, refusals.pop()),
                Err(error) => {
                    tracing::error!(session = %append.session, "saving the session failed: {error}");
                    self.wait_entries(&append.session, Some(&error), append.entries);
                }
            }
        }
    }

    /// A session's append the store answered: committed, or refused (then handled; what
    /// cannot be handled yet waits in its backlog).
    fn settle(
        &mut self,
        store: &dyn SessionStore,
        append: SessionAppend,
        refusal: Option<Refusal>,
    ) {
        let Some(refusal) = refusal else {
            self.shared.committed(&append.session, &append.entries);
            return;
        };
        if let Err((error, entries)) = self.refused(store, &append.session, append.entries, refusal)
        {
            self.failed(&error);
            self.wait_entries(&append.session, Some(&error.to_string()), entries);
        }
    }

    /// Entries the store would not write: of a session deleted since they are dropped (and
    /// said); of a session another writer went on with they are saved as a new session, a
    /// fork of it where the two part, and this process's next writes of it go there
    /// (`recover.rs`). When that cannot be written yet, the entries are given back.
    fn refused(
        &mut self,
        store: &dyn SessionStore,
        session: &str,
        entries: Vec<EncodedEntry>,
        refusal: Refusal,
    ) -> Result<(), (StoreError, Vec<EncodedEntry>)> {
        match refusal {
            Refusal::Missing { .. } => {
                tracing::warn!(
                    session = %session,
                    entries = entries.len(),
                    "the session is no longer in the store (it was deleted): the entries that \
                     waited for it are dropped"
                );
                self.shared.waiting.committed(session, &entries);
                Ok(())
            }
            Refusal::Diverged { writer, .. } => {
                match super::recover::recover(store, &self.shared, session, &entries) {
                    Ok(moved) => {
                        tracing::error!(
                            session = %session,
                            recovered = %moved,
                            "another Talaria process (writer {writer}) went on with this session \
                             after these entries were written here: nothing it wrote is \
                             replaced; they are saved as session {moved}, a fork of it"
                        );
                        talaria_util::lock(&self.shared.moved).insert(session.to_string(), moved);
                        self.shared.committed(session, &entries);
                        Ok(())
                    }
                    Err(error) => Err((error, entries)),
                }
            }
        }
    }

    fn apply_one(&mut self, write: Write) {
        match write {
            Write::CreateWith(meta, entries) => self.create_with(meta, entries),
            Write::Adopt(reply) => {
                self.adopt();
                // What was adopted is written now when the store takes it.
                self.heal();
                let _ = reply.send(());
            }
            Write::Create(meta) => self.create(meta),
            Write::Claim(session) => {
                if let Err(error) = self.try_store(&session, |store| holding(store.claim(&session)))
                {
                    self.backlog(&session, &error.0).claim = true;
                }
            }
            Write::Deleted(session) => self.drop_deleted(&session, None),
            Write::Release(session, hold) => {
                if self.shared.waiting.hold(&session) != hold {
                    tracing::debug!(session = %session, "opened here again: the release is dropped");
                } else if let Err(error) =
                    self.try_store(&session, |store| holding(store.release(&session)))
                {
                    self.backlog(&session, &error.0).release = Some(hold);
                }
            }
            Write::Update(session, update) => {
                if self.unsaved.contains_key(&session) {
                    self.wait_update(&session, None, update);
                } else {
                    let updated = self.try_store(&session, |store| {
                        refused_at("journal::update::before")?;
                        store.update(&session, &update)
                    });
                    match updated {
                        Ok(()) => {
                            talaria_util::failpoint::step("journal::update::after");
                            self.with_spool(|spool| spool.written_in_store(&session, &[], true));
                        }
                        Err(error) => self.wait_update(&session, Some(&error.0), update),
                    }
                }
            }
            Write::Barrier(session, reply) => {
                let _ = reply.send(self.report(&session));
            }
            Write::WhenSaved(session, reply) => {
                if matches!(self.store, Store::Closed) {
                    let _ = reply.send(false);
                } else if self.unsaved.contains_key(&session) {
                    self.waiting_saved.entry(session).or_default().push(reply);
                } else {
                    let _ = reply.send(true);
                }
            }
            Write::Flush(reply) => {
                let _ = reply.send(());
            }
            Write::Shutdown(reply) => {
                let _ = reply.send(self.shut_down());
                self.stopped = true;
            }
            Write::Append(..) => {}
        }
    }

    /// A new session: recorded, or waiting (and spooled); one deleted meanwhile is dropped.
    fn create(&mut self, meta: SessionMeta) {
        let session = meta.id.clone();
        self.shared
            .builds_on(&session, std::iter::once(meta.writer.clone()));
        let created = self.try_store(&session, |store| {
            refused_at("journal::create::before")?;
            match store.create(&meta) {
                Err(StoreError::Deleted(_)) => Ok(false),
                other => other.map(|()| true),
            }
        });
        match created {
            Ok(true) => {
                talaria_util::failpoint::step("journal::create::after");
                self.shared.waiting.create_committed(&session);
                self.with_spool(|spool| spool.created_in_store(&session));
            }
            Ok(false) => self.drop_deleted(&session, None),
            Err(error) => {
                tracing::warn!(session = %session, "saving the new session: {error}");
                self.wait_create(meta, &error.0);
            }
        }
    }

    /// A session with its first entries (a fork's copy), committed together, or waiting
    /// (and spooled) together.
    fn create_with(&mut self, meta: SessionMeta, entries: Vec<EncodedEntry>) {
        let session = meta.id.clone();
        self.handled(entries.len());
        self.shared
            .builds_on(&session, std::iter::once(meta.writer.clone()));
        let basis = self.shared.basis(&session);
        let created = self.try_store(&session, |store| {
            refused_at("journal::create::before")?;
            store.create_with_entries(&meta, &entries, &basis)
        });
        let refusal = match created {
            Ok(refusal) => refusal,
            Err(error) => {
                tracing::warn!(session = %session, "saving the new session: {error}");
                self.wait_create(meta, &error.0);
                self.wait_entries(&session, Some(&error.0), entries);
                return;
            }
        };
        talaria_util::failpoint::step("journal::create::after");
        self.shared.waiting.create_committed(&session);
        self.with_spool(|spool| spool.created_in_store(&session));
        let Some(store) = self.open_store() else {
            return;
        };
        let append = SessionAppend {
            session,
            entries,
            basis,
        };
        self.settle(store.as_ref(), append, refusal);
    }

    /// Runs `call` unless the session already waits in a backlog (its writes stay in order)
    /// or the store is not open; the error's text when it did not run or failed.
    fn try_store<T>(
        &mut self,
        session: &str,
        call: impl FnOnce(&dyn SessionStore) -> Result<T, StoreError>,
    ) -> Result<T, Unsaved> {
        if let Some(backlog) = self.unsaved.get(session) {
            return Err(Unsaved(backlog.error.clone()));
        }
        let Some(store) = self.open_store() else {
            return Err(Unsaved(self.not_open()));
        };
        call(store.as_ref()).map_err(|error| {
            self.failed(&error);
            Unsaved(error.to_string())
        })
    }

    fn report(&self, session: &str) -> SaveReport {
        self.unsaved
            .get(session)
            .map(|backlog| SaveReport {
                unsaved: backlog.entries.len().max(1),
                error: Some(backlog.error.clone()),
                ..SaveReport::default()
            })
            .unwrap_or_default()
            .with_moved(self.shared.moved_to(session))
    }

    /// Tells those waiting for a session that has nothing unsaved any more.
    fn answer_waiting_saved(&mut self) {
        let unsaved = &self.unsaved;
        self.waiting_saved.retain(|session, waiting| {
            if unsaved.contains_key(session) {
                return true;
            }
            for reply in waiting.drain(..) {
                let _ = reply.send(true);
            }
            false
        });
    }

    /// The last try before the process exits; what stays unsaved is logged per session.
    fn shut_down(&mut self) -> Vec<(String, SaveReport)> {
        // The last try is made even while stalled (the stop's budget bounds it) — unless
        // the spool keeps what waits: a store stuck a moment ago would only hold the exit up.
        let spooled = self.with_spool(|spool| spool.is_usable()).unwrap_or(false);
        if !(spooled && self.is_stalled()) {
            self.stalled = None;
            self.probe = None;
            self.heal();
        }
        if let Some(store) = self.open_store()
            && let Err(error) = store.checkpoint()
        {
            tracing::warn!("checkpointing the session store failed: {error}");
        }
        let left: Vec<(String, SaveReport)> = self
            .unsaved
            .keys()
            .map(|session| (session.clone(), self.report(session)))
            .collect();
        self.settle_spool();
        let spooled = self.with_spool(Spool::close).flatten();
        if let Some(path) = &spooled {
            tracing::warn!(
                path = %path.display(),
                sessions = left.len(),
                "the unsaved entries are kept in the spool: the next start writes them"
            );
        }
        for (session, report) in &left {
            tracing::error!(
                session = %session,
                entries = report.unsaved,
                "exiting with this session's last entries unsaved: {}",
                report.error.as_deref().unwrap_or("")
            );
        }
        left
    }

    /// A store another process replaced at its place (it salvaged a damaged file): opened
    /// again before the next writes, so they go where every process looks. The old one is
    /// never closed (see `SessionStore::is_replaced`): its handles end with the process.
    fn reopen_if_replaced(&mut self) {
        let Store::Open(current) = &self.store else {
            return;
        };
        if !current.is_replaced() {
            return;
        }
        let Some((open, _)) = &mut self.reopen else {
            return;
        };
        match open() {
            Ok(store) => {
                tracing::warn!(
                    "the session store was replaced by another process (a damaged file \
                     recovered there): opened again"
                );
                self.shared.opened(store.clone());
                if let Store::Open(old) = std::mem::replace(&mut self.store, Store::Open(store)) {
                    std::mem::forget(old);
                }
                self.stalled = None;
                self.probe = None;
            }
            Err(error) => tracing::warn!("opening the replaced session store: {error}"),
        }
    }

    /// A store opened read-only, while writes wait: opened again, and put in its place once
    /// it opens for writing.
    fn reopen_if_writable(&mut self) {
        let Store::Open(current) = &self.store else {
            return;
        };
        if !(current.is_read_only() || self.refused_read_only) || self.unsaved.is_empty() {
            return;
        }
        let Some((open, last)) = &mut self.reopen else {
            return;
        };
        if last.elapsed() < RETRY_EVERY {
            return;
        }
        *last = Instant::now();
        match open() {
            Ok(store) if !store.is_read_only() => {
                tracing::info!("the session store can be written again: reopened for writing");
                self.shared.opened(store.clone());
                self.store = Store::Open(store);
                self.stalled = None;
                self.refused_read_only = false;
            }
            Ok(_) => tracing::debug!("the session store is still read-only"),
            Err(error) => tracing::debug!("reopening the read-only session store: {error}"),
        }
    }

    /// Tries every unsaved write again, session by session, in order; stops at the first
    /// failure of the whole store (the others would fail the same way).
    fn heal(&mut self) {
        self.reopen_if_writable();
        if !self.ask_stuck_store() {
            return;
        }
        let Some(store) = self.open_store() else {
            return;
        };
        let sessions: Vec<String> = self.unsaved.keys().cloned().collect();
        for session in sessions {
            let Some(mut backlog) = self.unsaved.remove(&session) else {
                continue;
            };
            match self.write_backlog(store.as_ref(), &session, &mut backlog) {
                Ok(()) => tracing::info!(session = %session, "the session is saved again"),
                Err(error) => {
                    backlog.error = error.to_string();
                    self.unsaved.insert(session, backlog);
                    self.failed(&error);
                    if error.is_store_wide() {
                        return;
                    }
                }
            }
        }
    }

    /// Writes a backlog in the order its writes were made; what is written leaves it.
    fn write_backlog(
        &mut self,
        store: &dyn SessionStore,
        session: &str,
        backlog: &mut Backlog,
    ) -> Result<(), StoreError> {
        refused_at("journal::backlog::before")?;
        if let Some(meta) = &backlog.create {
            match store.create(meta) {
                Err(StoreError::Deleted(_)) => {
                    self.drop_deleted(session, Some(std::mem::take(backlog)));
                    return Ok(());
                }
                other => other?,
            }
            backlog.create = None;
            self.shared.waiting.create_committed(session);
            self.with_spool(|spool| spool.created_in_store(session));
        }
        if backlog.claim {
            holding(store.claim(session))?;
            backlog.claim = false;
        }
        if !backlog.entries.is_empty() {
            let append = SessionAppend {
                session: session.to_string(),
                entries: std::mem::take(&mut backlog.entries),
                basis: self.shared.basis(session),
            };
            let refusal = match store.append_checked(std::slice::from_ref(&append)) {
                Ok(mut refusals) => refusals.pop(),
                Err(error) => {
                    backlog.entries = append.entries;
                    return Err(error);
                }
            };
            match refusal {
                None => self.shared.committed(session, &append.entries),
                Some(refusal) => {
                    if let Err((error, entries)) =
                        self.refused(store, session, append.entries, refusal)
                    {
                        backlog.entries = entries;
                        return Err(error);
                    }
                }
            }
        }
        if let Some(update) = &backlog.update {
            store.update(session, update)?;
            backlog.update = None;
            self.with_spool(|spool| spool.written_in_store(session, &[], true));
        }
        if let Some(hold) = backlog.release {
            // Opened here again since: the claim stays.
            if self.shared.waiting.hold(session) == hold {
                holding(store.release(session))?;
            }
            backlog.release = None;
        }
        talaria_util::failpoint::step("journal::backlog::after");
        Ok(())
    }
}

/// A claim or release that failed for the session alone (not the store) is logged and
/// dropped: it must not hold the session's writes back.
fn holding(result: Result<(), StoreError>) -> Result<(), StoreError> {
    match result {
        Err(error) if error.is_store_wide() => Err(error),
        Err(error) => {
            tracing::warn!("claiming or releasing a session failed: {error}");
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// A failpoint at a step the store may refuse: set to `return`, the step fails as it would
/// on a full disk.
fn refused_at(point: &'static str) -> Result<(), StoreError> {
    if talaria_util::failpoint::injected(point) {
        return Err(StoreError::Full(format!("injected at {point}")));
    }
    Ok(())
}
