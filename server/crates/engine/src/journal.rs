//! Writes sessions to the store without blocking the runtime: one writer thread for every
//! session of the process, in order per session. A write that fails is logged and reported
//! once per session (the session goes on unsaved); nothing blocks on the disk.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use talaria_record::{Entry, EntryId, Transcript};
use talaria_store::{MetaUpdate, SessionMeta, SessionStore};
use tokio::sync::oneshot;

enum Write {
    Create(SessionMeta),
    Append(String, Vec<Entry>),
    Update(String, MetaUpdate),
    Claim(String),
    Release(String),
    /// Answers once every earlier write is done.
    Flush(oneshot::Sender<()>),
}

/// The process's writer.
#[derive(Clone)]
pub struct Journal {
    writes: mpsc::Sender<Write>,
    store: Arc<dyn SessionStore>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

impl Journal {
    /// Starts the writer thread for `store`.
    pub fn start(store: Arc<dyn SessionStore>) -> Self {
        let (writes, queue) = mpsc::channel::<Write>();
        let writer = store.clone();
        let spawned = std::thread::Builder::new()
            .name("talaria-journal".into())
            .spawn(move || {
                while let Ok(write) = queue.recv() {
                    let (session, result) = match write {
                        Write::Create(meta) => {
                            let id = meta.id.clone();
                            (id, writer.create(&meta))
                        }
                        Write::Append(id, entries) => {
                            let result = writer.append(&id, &entries);
                            (id, result)
                        }
                        Write::Update(id, update) => {
                            let result = writer.update(&id, &update);
                            (id, result)
                        }
                        Write::Claim(id) => {
                            let result = writer.claim(&id);
                            (id, result)
                        }
                        Write::Release(id) => {
                            let result = writer.release(&id);
                            (id, result)
                        }
                        Write::Flush(done) => {
                            let _ = done.send(());
                            continue;
                        }
                    };
                    if let Err(error) = result {
                        tracing::error!(session = %session, "saving the session failed: {error}");
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::error!("the session writer could not start: {error}");
        }
        Self { writes, store }
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

    /// Marks a session as open in this process (after what is queued).
    pub fn claim(&self, session_id: &str) {
        let _ = self.writes.send(Write::Claim(session_id.to_string()));
    }

    /// Releases this process's claim on a session.
    pub fn release(&self, session_id: &str) {
        let _ = self.writes.send(Write::Release(session_id.to_string()));
    }

    fn append(&self, session_id: &str, entries: Vec<Entry>) -> bool {
        self.writes
            .send(Write::Append(session_id.to_string(), entries))
            .is_ok()
    }

    /// Waits until every write queued so far is done.
    pub async fn flush(&self) {
        let (done, finished) = oneshot::channel();
        if self.writes.send(Write::Flush(done)).is_ok() {
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
    warned: Arc<AtomicBool>,
}

impl SessionJournal {
    /// For a session whose record up to `saved` is already stored.
    pub fn new(journal: Journal, session_id: &str, saved: EntryId) -> Self {
        Self {
            journal,
            session_id: session_id.to_string(),
            saved,
            warned: Arc::default(),
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
        } else if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::error!(session = %self.session_id, "the session writer has stopped; this session is no longer saved");
        }
    }

    pub fn update(&self, update: MetaUpdate) {
        self.journal.update(&self.session_id, update);
    }
}
