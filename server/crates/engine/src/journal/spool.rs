//! The journal's spool: what waits for a stuck store is also written to an append-only file
//! beside it, so that an exit (or a kill) while the store is stuck loses nothing. The next
//! process to start with the same home adopts the spool and writes it to the store.
//!
//! - One file per process, `$TALARIA_HOME/spool/<pid>-<nanos>.spool`, created 0600 in a 0700
//!   folder, held under an exclusive `flock` for the life of the process: the kernel drops
//!   the lock when the process ends however it ends, so a file nobody holds belongs to a
//!   process that is gone, and only such files are adopted.
//! - One JSON record per line (a creation, an entry, a metadata change), appended in the
//!   order the writes were made and synced within `SYNC_EVERY` (500 ms) of being written;
//!   a line cut short by a crash is ignored. Adopting copies the records into this
//!   process's own spool (synced) before the old file is removed, so a crash during
//!   adoption loses nothing either.
//! - Each entry's line names the writer that spooled it and the session writers it builds
//!   on (`by`, `on`: the store's check, `SessionStore::append_checked`), so a spool adopted
//!   after another process went on with the session never replaces what that process wrote.
//! - Once a session's spooled writes are in the store, a `written` line says which: an
//!   adoption leaves out every earlier line of those entries (a version the store has, or a
//!   newer one replaced since), so a spool that was not emptied yet never takes an entry back
//!   to an older version. Writing a record again is otherwise harmless (a session is created
//!   only if it is not there; an entry already stored as it is changes nothing), so the
//!   spool is emptied only once nothing waits, and a partly written spool is written again.
//! - Adopting is exclusive: the orphan stays locked until it is removed, and a file already
//!   removed (adopted by another process a moment before) is left alone.
//! - An entry's body is written as it is, so its place in the file is known ([`Place`]):
//!   past a bound the writer lets waiting bodies leave memory and be read back from there
//!   (`Body::spill`). A file bodies were spilled into is never rewritten: once everything
//!   is written it is removed and the next write starts a new one, while holders of its
//!   bodies still read them through their handle.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use talaria_record::{Entry, EntryId};
use talaria_store::{EncodedEntry, MetaUpdate, SessionMeta};

/// Room kept allocated past the spool's end (`fallocate`, the size unchanged), so what
/// waits still fits when the disk fills; tried smaller on a disk with less free.
const RESERVE: [u64; 4] = [4 << 20, 1 << 20, 256 << 10, 64 << 10];

/// The most a spooled line waits to be synced (see [`Spool::sync_soon`]).
const SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// A write found in a spool, as it is written again.
#[derive(Debug)]
pub(super) enum Spooled {
    Create(SessionMeta),
    /// An entry, and the session writers it builds on (its spooler included).
    Append(String, EncodedEntry, Vec<String>),
    Update(String, MetaUpdate),
}

/// A metadata change as the spool writes it.
#[derive(Debug, Serialize, Deserialize)]
struct UpdateRecord {
    title: Option<String>,
    model: Option<String>,
    mode: Option<String>,
    tokens: Option<(u64, u64)>,
    cost: Option<f64>,
    updated_at: Option<i64>,
}

impl UpdateRecord {
    fn of(update: &MetaUpdate) -> Self {
        Self {
            title: update.title.clone(),
            model: update.model.clone(),
            mode: update.mode.clone(),
            tokens: update.tokens,
            cost: update.cost,
            updated_at: update.updated_at,
        }
    }

    fn into_update(self) -> MetaUpdate {
        MetaUpdate {
            title: self.title,
            model: self.model,
            mode: self.mode,
            tokens: self.tokens,
            cost: self.cost,
            updated_at: self.updated_at,
        }
    }
}

/// One line of a spool as it is read back (an entry's body decoded as the entry itself).
#[derive(Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum RecordIn {
    Create {
        meta: SessionMeta,
    },
    Entry {
        session: String,
        body: Box<Entry>,
        /// The writer that spooled it (lines of older builds have none).
        #[serde(default)]
        by: String,
        /// The session writers it builds on.
        #[serde(default)]
        on: Vec<String>,
    },
    Update {
        session: String,
        update: UpdateRecord,
    },
    /// The session's earlier lines of these entries (and of its metadata, with `meta`) are
    /// in the store.
    Written {
        session: String,
        ids: Vec<EntryId>,
        #[serde(default)]
        meta: bool,
        /// Its earlier `create` lines too.
        #[serde(default)]
        create: bool,
    },
}

/// The header of an entry's line; its body follows as the entry's own JSON, not re-encoded.
#[derive(Serialize)]
struct EntryHeader<'a> {
    t: &'static str,
    session: &'a str,
    id: EntryId,
    by: &'a str,
    on: &'a [String],
}

/// This process's spool file, under its lock.
struct OwnFile {
    path: PathBuf,
    file: File,
    /// The same file opened again for reading spilled bodies: a description of its own, so
    /// holders of those bodies never hold the lock (it ends with the process's spool).
    reader: Arc<File>,
    /// Bytes of whole lines in the file (0: nothing spooled).
    len: u64,
    /// Bodies were spilled into it: it is never emptied in place, only replaced.
    spilled_into: bool,
    /// Bytes allocated for it ahead of need, from its start ([`RESERVE`]).
    reserved_to: u64,
    /// Reserving failed (said once until it works again).
    reserve_failing: bool,
}

impl OwnFile {
    /// Keeps room allocated past the end once less than half a reserve is left (at once
    /// after the file was cut back, which frees what lay past its end): writes land in
    /// allocated room even once the disk is full.
    fn reserve(&mut self) {
        if self.reserved_to > self.len + RESERVE[0] / 2 {
            return;
        }
        let free = rustix::fs::fstatvfs(&self.file)
            .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
            .unwrap_or(u64::MAX);
        let mut last_error = None;
        // Never more than an eighth of what is free: the store needs the disk more.
        for room in RESERVE.into_iter().filter(|room| *room <= free / 8) {
            match rustix::fs::fallocate(
                &self.file,
                rustix::fs::FallocateFlags::KEEP_SIZE,
                self.len,
                room,
            ) {
                Ok(()) => {
                    self.reserved_to = self.len + room;
                    self.reserve_failing = false;
                    return;
                }
                Err(error) => last_error = Some(error),
            }
        }
        if !std::mem::replace(&mut self.reserve_failing, true) {
            let why =
                last_error.map_or_else(|| format!("{free} bytes free"), |error| error.to_string());
            tracing::warn!(
                path = %self.path.display(),
                "no room could be kept for the spool ahead of need ({why}): on a full disk \
                 what waits for the store may be kept in memory only"
            );
        }
    }

    /// Cuts the file back to `len` bytes (which frees its reserve), then reserves again.
    fn cut_to(&mut self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)?;
        self.file.seek(SeekFrom::Start(len))?;
        self.len = len;
        self.reserved_to = len;
        self.reserve();
        Ok(())
    }
}

/// Where an entry's body was written whole: it can leave memory for there.
pub(super) struct Place {
    file: Arc<File>,
    offset: u64,
}

impl Place {
    /// Lets `body` (the text written here) leave memory; the file is then kept whole.
    pub(super) fn spill(self, body: &talaria_store::Body, spool: &mut Spool) {
        if let Some(own) = &mut spool.own
            && Arc::ptr_eq(&own.reader, &self.file)
        {
            own.spilled_into = true;
        }
        body.spill(self.file, self.offset);
    }
}

/// The spool of one process: its own file (opened on first use) and the adoption of others'.
pub(super) struct Spool {
    dir: PathBuf,
    /// This writer's token (`by` in its lines).
    by: String,
    own: Option<OwnFile>,
    /// Sessions with lines in the file (a `written` line is added when theirs are stored).
    sessions: std::collections::HashSet<String>,
    /// Lines were added for a turn answered before the writer took them (see
    /// `Journal::committed_within`): emptied only once nothing waits anywhere.
    pub(super) late: bool,
    /// Opening the file failed (a read-only home): waiting writes stay in memory only.
    unavailable: bool,
    /// Records written since the last sync.
    dirty: bool,
    /// When it was last synced.
    synced_at: std::time::Instant,
    /// The store can never open: the file is left for a process that can write it.
    keep: bool,
    /// The last write failed (a full disk): said once until one succeeds again.
    failing: bool,
    /// Orphans kept for a later try, and why (each reason is logged once).
    kept: std::collections::HashMap<PathBuf, String>,
    /// An orphan was kept by the last adoption for a reason that may pass (a full disk).
    retry_orphans: bool,
}

/// Why an orphan was not adopted.
enum Kept {
    /// A live process holds it, or another adopted it first.
    NotOrphan,
    /// It stays for a later try (or a newer build), for this reason; whether a later try in
    /// this process may succeed.
    Because(String, bool),
}

impl Spool {
    pub(super) fn in_dir(dir: PathBuf, by: String) -> Self {
        Self {
            dir,
            by,
            own: None,
            sessions: std::collections::HashSet::new(),
            late: false,
            unavailable: false,
            dirty: false,
            synced_at: std::time::Instant::now(),
            keep: false,
            failing: false,
            kept: std::collections::HashMap::new(),
            retry_orphans: false,
        }
    }

    /// Spools a creation; whether it was written.
    pub(super) fn create(&mut self, meta: &SessionMeta) -> bool {
        let line = serde_json::json!({"t": "create", "meta": meta});
        let written = self.write_json(&line);
        if written {
            self.sessions.insert(meta.id.clone());
        }
        written
    }

    /// `session`'s creation is in the store: its earlier `create` lines are never written
    /// again (a session deleted since is not brought back by a spool adopted later).
    pub(super) fn created_in_store(&mut self, session: &str) {
        if !self.holds(session) {
            return;
        }
        let line =
            serde_json::json!({"t": "written", "session": session, "ids": [], "create": true});
        self.write_json(&line);
    }

    /// Spools entries that build on the session writers `on`; where each body was written
    /// (none where it could not be).
    pub(super) fn entries(
        &mut self,
        session: &str,
        entries: &[EncodedEntry],
        on: &[String],
    ) -> Vec<Option<Place>> {
        entries
            .iter()
            .map(|entry| self.entry(session, entry, on))
            .collect()
    }

    /// Whether `session` has lines in the file.
    pub(super) fn holds(&self, session: &str) -> bool {
        self.sessions.contains(session)
    }

    /// `session`'s entries `ids` (and its metadata, with `meta`) are in the store: their
    /// earlier lines are never written again.
    pub(super) fn written_in_store(&mut self, session: &str, ids: &[EntryId], meta: bool) {
        if !self.holds(session) {
            return;
        }
        let line =
            serde_json::json!({"t": "written", "session": session, "ids": ids, "meta": meta});
        self.write_json(&line);
    }

    fn entry(&mut self, session: &str, entry: &EncodedEntry, on: &[String]) -> Option<Place> {
        let by = self.by.clone();
        let header = EntryHeader {
            t: "entry",
            session,
            id: entry.id,
            by: &by,
            on,
        };
        let head = serde_json::to_vec(&header).ok()?;
        let body = entry.body.text().ok()?;
        // `{"t":"entry","session":…,"id":…` then `,"body":<the entry's JSON>}`: the body as
        // it is, not encoded again.
        const BODY_KEY: &[u8] = b",\"body\":";
        let mut line = Vec::with_capacity(head.len() + body.len() + 10);
        line.extend_from_slice(&head[..head.len() - 1]);
        line.extend_from_slice(BODY_KEY);
        let body_at = line.len() as u64;
        line.extend_from_slice(body.as_bytes());
        line.extend_from_slice(b"}\n");
        let line_at = self.write_line(&line)?;
        self.sessions.insert(session.to_string());
        let own = self.own.as_ref()?;
        Some(Place {
            file: own.reader.clone(),
            offset: line_at + body_at,
        })
    }

    /// Spools a metadata change; whether it was written.
    pub(super) fn update(&mut self, session: &str, update: &MetaUpdate) -> bool {
        let line = serde_json::json!({
            "t": "update",
            "session": session,
            "update": UpdateRecord::of(update),
        });
        let written = self.write_json(&line);
        if written {
            self.sessions.insert(session.to_string());
        }
        written
    }

    /// Opens this process's spool now, with its room kept ([`RESERVE`]), so that a disk that
    /// fills later still takes what waits (quietly: a home that cannot be written is said
    /// when something has to wait). After a drain that removed the file, a new one is
    /// opened the same way.
    pub(super) fn prepare(&mut self) {
        if self.own.is_some() || self.unavailable {
            return;
        }
        if let Ok(own) = open_own(&self.dir) {
            self.own = Some(own);
        }
    }

    /// Whether an orphan waits to be tried again (it was kept for a reason that may pass).
    pub(super) fn orphans_to_retry(&self) -> bool {
        self.retry_orphans
    }

    /// Whether writes reach the file (it is open, or not tried yet).
    pub(super) fn is_usable(&self) -> bool {
        !self.unavailable
    }

    /// Makes what was spooled since the last sync durable against a power cut, once
    /// [`SYNC_EVERY`] has passed since the last sync: what a process's crash or kill leaves
    /// is in the file as soon as it is written (the kernel keeps it); only the machine's
    /// loss could take the last moment's lines, as it could the store's last commits
    /// (`synchronous = NORMAL`). Syncing every batch made a long outage's writes crawl.
    pub(super) fn sync_soon(&mut self) {
        if self.dirty && self.synced_at.elapsed() >= SYNC_EVERY {
            self.sync();
        }
    }

    /// Whether lines wait for a sync, and when it is due.
    pub(super) fn sync_due(&self) -> Option<std::time::Duration> {
        self.dirty
            .then(|| SYNC_EVERY.saturating_sub(self.synced_at.elapsed()))
    }

    /// Makes what was spooled since the last sync durable now.
    pub(super) fn sync(&mut self) {
        if let Err(error) = self.sync_now()
            && let Some(own) = &self.own
        {
            tracing::error!(path = %own.path.display(), "syncing the spool failed: {error}");
        }
    }

    /// Makes what was spooled since the last sync durable now; whether it is.
    pub(super) fn sync_now(&mut self) -> std::io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let Some(own) = &mut self.own else {
            self.dirty = false;
            return Ok(());
        };
        // Set to `return`, the sync fails as a failing disk's would (EIO).
        let synced = if talaria_util::failpoint::injected("spool::sync::before") {
            Err(std::io::Error::from_raw_os_error(nix::libc::EIO))
        } else {
            own.file.sync_data()
        };
        talaria_util::failpoint::step("spool::sync::after");
        // Tried again at the next due time, not at once.
        self.synced_at = std::time::Instant::now();
        self.dirty = synced.is_err();
        synced
    }

    /// Everything spooled is in the store: the file starts again empty.
    pub(super) fn written(&mut self) {
        let Some(own) = &mut self.own else {
            return;
        };
        if own.len == 0 || self.keep {
            return;
        }
        talaria_util::failpoint::step("spool::drain::before");
        if own.spilled_into {
            // Spilled bodies may still be read from it: a new file takes the next writes.
            if let Err(error) = std::fs::remove_file(&own.path) {
                tracing::warn!(path = %own.path.display(), "removing a written spool: {error}");
            }
            self.own = None;
            self.dirty = false;
            self.sessions.clear();
            self.late = false;
            self.prepare();
            talaria_util::failpoint::step("spool::drain::after");
            return;
        }
        match own.cut_to(0) {
            Ok(()) => {
                self.sessions.clear();
                self.late = false;
            }
            Err(error) => tracing::warn!(path = %own.path.display(), "emptying the spool: {error}"),
        }
        self.dirty = false;
        talaria_util::failpoint::step("spool::drain::after");
    }

    /// The store can never open as configured: what is spooled stays for a process that can
    /// write it.
    pub(super) fn keep(&mut self) {
        self.keep = true;
    }

    /// At exit: an empty spool is removed; one with records stays to be adopted (its path).
    pub(super) fn close(&mut self) -> Option<PathBuf> {
        self.sync();
        // Nothing is spooled after the exit's last try.
        self.unavailable = true;
        let own = self.own.take()?;
        if own.len > 0 {
            return Some(own.path);
        }
        drop(own.file);
        let _ = std::fs::remove_file(&own.path);
        None
    }

    /// The writes of every spool whose process is gone, in order, now in this process's own
    /// spool (synced); their files are removed. An orphan is removed only once every one of
    /// its lines is copied and synced: one that cannot be (a full disk, a line this build
    /// cannot read) stays where it is, unlocked, for a later try or a newer build, and none
    /// of its writes is taken (see [`Spool::adopt_one`]).
    pub(super) fn adopt(&mut self) -> Vec<Spooled> {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut orphans: Vec<PathBuf> = listing
            .filter_map(|item| item.ok().map(|item| item.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "spool"))
            .filter(|path| self.own.as_ref().is_none_or(|own| own.path != *path))
            .collect();
        // Older processes first (the names start with the pid, then the start time).
        orphans.sort_by_key(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok());
        let mut adopted = Vec::new();
        self.retry_orphans = false;
        for path in orphans {
            match self.adopt_one(&path) {
                Ok(records) => {
                    self.kept.remove(&path);
                    adopted.extend(records);
                }
                Err(Kept::NotOrphan) => {}
                Err(Kept::Because(why, retry)) => {
                    self.retry_orphans |= retry;
                    // Said once per reason, not at every try.
                    if self.kept.get(&path) != Some(&why) {
                        tracing::warn!(
                            path = %path.display(),
                            "a spool of a process that ended is kept for a later try, not \
                             adopted: {why}"
                        );
                        self.kept.insert(path, why);
                    }
                }
            }
        }
        adopted
    }

    /// Adopts one orphan: its writes, once they are all in this process's own spool and
    /// synced and the orphan is removed. On any failure what was copied of it is cut off
    /// again, and the orphan stays (its lock released when this returns).
    fn adopt_one(&mut self, path: &Path) -> Result<Vec<Spooled>, Kept> {
        // Held (locked) until it is removed: nobody adopts it twice.
        let (read, _held) = orphan_records(path).ok_or(Kept::NotOrphan)?;
        if read.unreadable > 0 {
            return Err(Kept::Because(
                format!(
                    "{} of its lines cannot be read by this build (a newer Talaria's, or \
                     damaged)",
                    read.unreadable
                ),
                false,
            ));
        }
        let records = read.writes;
        talaria_util::failpoint::step("spool::adopt::before");
        if !records.is_empty() {
            self.copy_in(&records)?;
        }
        talaria_util::failpoint::step("spool::adopt::after");
        tracing::info!(
            path = %path.display(),
            writes = records.len(),
            "adopted the spool of a process that ended with writes waiting for the store"
        );
        talaria_util::failpoint::step("spool::unlink::before");
        if let Err(error) = std::fs::remove_file(path) {
            tracing::warn!(path = %path.display(), "removing an adopted spool: {error}");
        }
        talaria_util::failpoint::step("spool::unlink::after");
        Ok(records)
    }

    /// Copies an orphan's records into this process's spool and syncs them, or cuts off
    /// again whatever of them was written and says why not.
    fn copy_in(&mut self, records: &[Spooled]) -> Result<(), Kept> {
        let Some(start) = self.own_file().map(|own| own.len) else {
            return Err(Kept::Because(
                "this process has no spool to copy it into (the home cannot be written)".into(),
                false,
            ));
        };
        let mut copied = true;
        for record in records {
            copied = match record {
                Spooled::Create(meta) => self.create(meta),
                Spooled::Append(session, entry, on) => {
                    // Adopted bodies are read back from this process's spool when written.
                    match self.entry(session, entry, on) {
                        Some(place) => {
                            place.spill(&entry.body, self);
                            true
                        }
                        None => false,
                    }
                }
                Spooled::Update(session, update) => self.update(session, update),
            };
            if !copied {
                break;
            }
        }
        let why = if !copied {
            "writing its lines into this process's spool failed (a full disk?)"
        } else if let Err(error) = self.sync_now() {
            tracing::warn!("syncing the adopted lines: {error}");
            "syncing the copy of its lines failed"
        } else {
            return Ok(());
        };
        self.cut_back(start);
        Err(Kept::Because(why.into(), true))
    }

    /// Cuts this process's spool back to `len` bytes (the lines after it are not kept).
    fn cut_back(&mut self, len: u64) {
        let Some(own) = &mut self.own else {
            return;
        };
        match own.cut_to(len) {
            Ok(()) => {}
            Err(error) => {
                // The lines stay in it: adopted again later, they change nothing.
                tracing::warn!(path = %own.path.display(), "cutting the spool back: {error}");
            }
        }
    }

    fn write_json(&mut self, line: &serde_json::Value) -> bool {
        let Ok(mut bytes) = serde_json::to_vec(line) else {
            return false;
        };
        bytes.push(b'\n');
        self.write_line(&bytes).is_some()
    }

    /// Appends one whole line (where it starts, once written); a line that cannot be written
    /// whole is cut off again, so the file only ever holds whole lines.
    fn write_line(&mut self, line: &[u8]) -> Option<u64> {
        // Set to `return`, the write fails as on a full disk (ENOSPC).
        let refused = talaria_util::failpoint::injected("spool::write::before");
        let own = self.own_file()?;
        let at = own.len;
        let written = if refused {
            Err(std::io::Error::from_raw_os_error(nix::libc::ENOSPC))
        } else {
            own.file.write_all(line)
        };
        let failed = match written {
            Ok(()) => {
                own.len += line.len() as u64;
                own.reserve();
                None
            }
            Err(error) => {
                let _ = own.cut_to(own.len);
                Some((own.path.clone(), error))
            }
        };
        match failed {
            None => {
                talaria_util::failpoint::step("spool::write::after");
                self.dirty = true;
                self.failing = false;
                Some(at)
            }
            Some((path, error)) => {
                if !self.failing {
                    tracing::error!(
                        path = %path.display(),
                        "writing the spool failed (the writes still wait in memory): {error}"
                    );
                }
                self.failing = true;
                None
            }
        }
    }

    fn own_file(&mut self) -> Option<&mut OwnFile> {
        if self.own.is_none() && !self.unavailable {
            match open_own(&self.dir) {
                Ok(own) => self.own = Some(own),
                Err(error) => {
                    self.unavailable = true;
                    tracing::warn!(
                        dir = %self.dir.display(),
                        "no spool for writes waiting for the store (they stay in memory): {error}"
                    );
                }
            }
        }
        self.own.as_mut()
    }
}

fn open_own(dir: &Path) -> std::io::Result<OwnFile> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path = dir.join(format!("{}-{nanos}.spool", std::process::id()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    file.try_lock()
        .map_err(|error| std::io::Error::other(format!("locking {}: {error}", path.display())))?;
    let reader = Arc::new(File::open(&path)?);
    let mut own = OwnFile {
        path,
        file,
        reader,
        len: 0,
        spilled_into: false,
        reserved_to: 0,
        reserve_failing: false,
    };
    own.reserve();
    Ok(own)
}

/// What an orphan spool holds.
struct OrphanRead {
    /// Its writes, in order (lines a later `written` line covers left out).
    writes: Vec<Spooled>,
    /// Whole lines this build cannot read or write again (a newer build's, or damaged).
    unreadable: usize,
}

/// The records of a spool nobody holds (its process is gone), and the file, locked until
/// the caller removes it; `None` while a live process holds it, once another process adopted
/// it (removed), or when it cannot be read. Lines a later `written` line covers are left out.
fn orphan_records(path: &Path) -> Option<(OrphanRead, File)> {
    use std::os::unix::fs::MetadataExt;
    let file = OpenOptions::new().read(true).write(true).open(path).ok()?;
    if file.try_lock().is_err() {
        return None;
    }
    // Opened just before another adopter removed it: its records are that adopter's now.
    if file.metadata().ok()?.nlink() == 0 {
        return None;
    }
    let mut reader = BufReader::new(&file);
    let mut records = Records::default();
    let mut unreadable = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.last() != Some(&b'\n') => {
                tracing::warn!(path = %path.display(), "the spool's last line was cut short");
                break;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(path = %path.display(), "reading a spool: {error}");
                return None;
            }
        }
        let read = match serde_json::from_slice::<RecordIn>(&line) {
            Ok(record) => records.add(record),
            Err(error) => {
                tracing::warn!(path = %path.display(), "a spool line that does not decode: {error}");
                false
            }
        };
        unreadable += usize::from(!read);
    }
    drop(reader);
    let read = OrphanRead {
        writes: records.into_writes(),
        unreadable,
    };
    Some((read, file))
}

/// A spool's records as they are read, each line's place kept so a `written` line can leave
/// out the earlier lines it covers.
#[derive(Default)]
struct Records {
    lines: Vec<Option<Spooled>>,
    /// Where each session's entry lines and update lines are, by entry id (`None`: updates).
    at: std::collections::HashMap<(String, Option<EntryId>), Vec<usize>>,
    /// Where each session's `create` lines are.
    creates: std::collections::HashMap<String, Vec<usize>>,
}

impl Records {
    /// Takes one line's record; `false` when it cannot be written again (see [`spooled`]).
    fn add(&mut self, record: RecordIn) -> bool {
        if let RecordIn::Written {
            session,
            ids,
            meta,
            create,
        } = record
        {
            if create {
                for line in self.creates.remove(&session).unwrap_or_default() {
                    self.lines[line] = None;
                }
            }
            let covered = ids.into_iter().map(Some).chain(meta.then_some(None));
            for id in covered {
                for line in self.at.remove(&(session.clone(), id)).unwrap_or_default() {
                    self.lines[line] = None;
                }
            }
            return true;
        }
        let Some(write) = spooled(record) else {
            return false;
        };
        let key = match &write {
            Spooled::Append(session, entry, _) => Some((session.clone(), Some(entry.id))),
            Spooled::Update(session, _) => Some((session.clone(), None)),
            Spooled::Create(meta) => {
                let at = self.creates.entry(meta.id.clone()).or_default();
                at.push(self.lines.len());
                None
            }
        };
        if let Some(key) = key {
            self.at.entry(key).or_default().push(self.lines.len());
        }
        self.lines.push(Some(write));
        true
    }

    fn into_writes(self) -> Vec<Spooled> {
        self.lines.into_iter().flatten().collect()
    }
}

fn spooled(record: RecordIn) -> Option<Spooled> {
    Some(match record {
        RecordIn::Create { meta } => Spooled::Create(meta),
        RecordIn::Entry {
            session,
            body,
            by,
            mut on,
        } => match EncodedEntry::of(&body) {
            Ok(entry) => {
                // What its spooler committed before it ended, it builds on too.
                if !on.contains(&by) {
                    on.push(by);
                }
                Spooled::Append(session, entry, on)
            }
            Err(error) => {
                tracing::warn!(session = %session, "a spooled entry that does not encode: {error}");
                return None;
            }
        },
        RecordIn::Update { session, update } => Spooled::Update(session, update.into_update()),
        RecordIn::Written { .. } => return None,
    })
}

#[cfg(test)]
#[path = "spool_tests.rs"]
mod tests;
