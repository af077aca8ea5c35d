//! The content store beside the session store: file contents kept once by hash, each held by
//! a hard link per session that needs it.
//!
//! Layout under `$TALARIA_HOME/checkpoints/`:
//! - `sessions/<session>/<hex>`: the contents a session's checkpoints name. These links are
//!   what keeps a content: deleting a session's directory drops its references, and a
//!   restore reads only from here.
//! - `blobs/<hex>`: one link per content, so a second session (or process) that keeps the
//!   same bytes links instead of writing them again. A blob whose only link is this one
//!   belongs to no session and is removed when a session is pruned or a store opens.
//! - `pending/<process>/<hex>`: what a process read before a command ran (the workspace's
//!   baseline), not yet named by any checkpoint. It goes with its process; a process that
//!   died leaves a directory whose lock nobody holds, and the next store to open removes it.
//!
//! Every name is a link to the same inode, so no race between a session being pruned and
//! another one keeping the same content can lose bytes: a link that exists keeps them.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The prefix of a content hash as the record names it.
pub const HASH_PREFIX: &str = "sha256:";

/// The hash a content is kept under (`sha256:<hex>`).
pub fn hash_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(HASH_PREFIX.len() + 64);
    hex.push_str(HASH_PREFIX);
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// The file name of a hash (its hex digits), or `None` for anything that is not one (a
/// hash read from a record never names a path outside the store).
fn file_name(hash: &str) -> Option<&str> {
    let hex = hash.strip_prefix(HASH_PREFIX)?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

/// A session id as a directory name: anything but a plain name is refused.
fn session_dir_name(session: &str) -> io::Result<&str> {
    let plain = !session.is_empty()
        && session.len() <= 200
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && session != "."
        && session != "..";
    if plain {
        Ok(session)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{session:?} is not a session id the checkpoint store can keep"),
        ))
    }
}

/// The content store of one Talaria home, as one process uses it.
#[derive(Debug)]
pub struct BlobStore {
    root: PathBuf,
    /// The store's folder, held: the room left on its disk is measured through it.
    held: Option<talaria_files::Root>,
    pending: PathBuf,
    /// Held for the life of the process: a pending directory whose lock is free is a dead
    /// process's.
    _pending_lock: File,
}

impl BlobStore {
    /// Opens (creating) the store under `home/checkpoints`, with a pending directory of this
    /// process's own; removes what dead processes left pending and blobs no session holds.
    pub fn open(home: &Path) -> io::Result<Self> {
        let root = home.join("checkpoints");
        for dir in ["blobs", "sessions", "pending"] {
            fs::create_dir_all(root.join(dir))?;
        }
        talaria_util::private::private_dir(&root)?;
        sweep_dead_pending(&root.join("pending"));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let pending = root
            .join("pending")
            .join(format!("{}-{nanos}", std::process::id()));
        fs::create_dir_all(&pending)?;
        let lock = File::create(pending.join(".lock"))?;
        lock.try_lock()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let held =
            talaria_files::Root::open(&root, std::sync::Arc::new(talaria_files::Unguarded)).ok();
        let store = Self {
            root,
            held,
            pending,
            _pending_lock: lock,
        };
        store.sweep_unheld_blobs();
        Ok(store)
    }

    fn session_dir(&self, session: &str) -> io::Result<PathBuf> {
        Ok(self.root.join("sessions").join(session_dir_name(session)?))
    }

    fn blob_path(&self, name: &str) -> PathBuf {
        self.root.join("blobs").join(name)
    }

    /// The free room on the store's disk and its size, in bytes (`None`: not measurable).
    pub fn room(&self) -> Option<(u64, u64)> {
        self.held.as_ref()?.as_dir().room().ok()
    }

    /// Keeps `bytes` for this process until a checkpoint names them ([`BlobStore::hold`]);
    /// returns their hash. Bytes already kept are linked, not written again.
    pub fn keep_pending(&self, bytes: &[u8]) -> io::Result<String> {
        let hash = hash_of(bytes);
        let name = file_name(&hash).unwrap_or_default().to_string();
        let pending = self.pending.join(&name);
        if pending.exists() {
            return Ok(hash);
        }
        if talaria_util::failpoint::injected("checkpoint::keep::before") {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "No space left on device (failpoint)",
            ));
        }
        if fs::hard_link(self.blob_path(&name), &pending).is_err() {
            write_new(&self.pending, &name, bytes)?;
        }
        talaria_util::failpoint::step("checkpoint::keep::after");
        Ok(hash)
    }

    /// Makes `session` hold the content `hash` (kept pending by this process, or held by
    /// another session already).
    pub fn hold(&self, session: &str, hash: &str) -> io::Result<()> {
        let name = file_name(hash).ok_or_else(|| bad_hash(hash))?;
        let dir = self.session_dir(session)?;
        let held = dir.join(name);
        if held.exists() {
            return Ok(());
        }
        fs::create_dir_all(&dir)?;
        if talaria_util::failpoint::injected("checkpoint::hold::before") {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "No space left on device (failpoint)",
            ));
        }
        let source = [self.pending.join(name), self.blob_path(name)]
            .into_iter()
            .find(|p| p.exists())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{hash} was not kept"))
            })?;
        link_allowing_existing(&source, &held)?;
        // The shared name comes after the session's own, so a blob never appears unheld.
        link_allowing_existing(&held, &self.blob_path(name))?;
        talaria_util::failpoint::step("checkpoint::hold::after");
        Ok(())
    }

    /// The content `hash` as `session` holds it.
    pub fn content(&self, session: &str, hash: &str) -> io::Result<Vec<u8>> {
        let name = file_name(hash).ok_or_else(|| bad_hash(hash))?;
        fs::read(self.session_dir(session)?.join(name))
    }

    /// Makes `to` hold everything `from` holds (a fork's copy of the record names the same
    /// contents).
    pub fn copy_holdings(&self, from: &str, to: &str) -> io::Result<()> {
        let source = self.session_dir(from)?;
        let Ok(entries) = fs::read_dir(&source) else {
            return Ok(());
        };
        let target = self.session_dir(to)?;
        fs::create_dir_all(&target)?;
        for entry in entries.flatten() {
            link_allowing_existing(&entry.path(), &target.join(entry.file_name()))?;
        }
        Ok(())
    }

    /// Drops everything `session` holds, and the blobs no other session holds.
    pub fn prune_session(&self, session: &str) -> io::Result<()> {
        prune_in(&self.root, session)
    }

    /// Removes blobs no session holds (left by a session pruned while a process still had
    /// the content pending).
    fn sweep_unheld_blobs(&self) {
        if let Ok(entries) = fs::read_dir(self.root.join("blobs")) {
            for entry in entries.flatten() {
                remove_if_unheld(&entry.path());
            }
        }
    }
}

impl Drop for BlobStore {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.pending);
    }
}

/// Drops everything `session` holds in the store of `home` (a deleted session's), and the
/// blobs no other session holds; a home with no store has nothing to drop.
pub fn prune_session(home: &Path, session: &str) -> io::Result<()> {
    prune_in(&home.join("checkpoints"), session)
}

fn prune_in(root: &Path, session: &str) -> io::Result<()> {
    let dir = root.join("sessions").join(session_dir_name(session)?);
    let names: Vec<std::ffi::OsString> = match fs::read_dir(&dir) {
        Ok(entries) => entries.flatten().map(|e| e.file_name()).collect(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    fs::remove_dir_all(&dir)?;
    for name in names {
        remove_if_unheld(&root.join("blobs").join(name));
    }
    Ok(())
}

fn bad_hash(hash: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{hash:?} is not a content hash"),
    )
}

/// A blob with no other link is no session's: removed.
fn remove_if_unheld(path: &Path) {
    if fs::symlink_metadata(path).is_ok_and(|m| m.nlink() == 1) {
        let _ = fs::remove_file(path);
    }
}

fn link_allowing_existing(source: &Path, target: &Path) -> io::Result<()> {
    match fs::hard_link(source, target) {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => Err(error),
        _ => Ok(()),
    }
}

/// Writes `bytes` as `dir/name` whole or not at all (a temporary name of this write's own,
/// then a rename): two threads keeping the same content at once each write their own
/// temporary, and the second rename replaces the first's identical file.
fn write_new(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temporary = dir.join(format!(".{name}.{n}.part"));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)?;
    file.write_all(bytes)
        .and_then(|()| fs::rename(&temporary, dir.join(name)))
        .inspect_err(|_| {
            let _ = fs::remove_file(&temporary);
        })
}

/// Removes the pending directories of processes that are gone (their lock is free).
fn sweep_dead_pending(pending: &Path) {
    let Ok(entries) = fs::read_dir(pending) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let free = File::open(dir.join(".lock")).is_ok_and(|lock| lock.try_lock().is_ok());
        if free {
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_are_kept_once_held_per_session_and_pruned_with_the_last_holder() {
        let home = tempfile::tempdir().expect("home");
        let store = BlobStore::open(home.path()).expect("opens");
        let hash = store.keep_pending(b"before").expect("kept");
        store.hold("s1", &hash).expect("held");
        store.hold("s2", &hash).expect("held");
        let blob = home
            .path()
            .join("checkpoints/blobs")
            .join(file_name(&hash).expect("name"));
        assert_eq!(fs::read(&blob).expect("one blob"), b"before");
        store.prune_session("s1").expect("pruned");
        assert_eq!(
            store.content("s2", &hash).expect("s2 still has it"),
            b"before"
        );
        drop(store);
        let store = BlobStore::open(home.path()).expect("reopens");
        assert!(blob.exists(), "s2 holds it");
        store.prune_session("s2").expect("pruned");
        assert!(!blob.exists(), "nobody holds it");
    }

    #[test]
    fn threads_keeping_the_same_content_at_once_all_keep_it() {
        let home = tempfile::tempdir().expect("home");
        let store = std::sync::Arc::new(BlobStore::open(home.path()).expect("opens"));
        for round in 0..20 {
            let bytes = format!("the same content {round}").into_bytes();
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let (store, bytes, barrier) = (store.clone(), bytes.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        store.keep_pending(&bytes)
                    })
                })
                .collect();
            let kept: Vec<_> = threads
                .into_iter()
                .map(|thread| thread.join().expect("joined"))
                .collect();
            for result in &kept {
                assert_eq!(result.as_ref().expect("kept"), &hash_of(&bytes));
            }
            store.hold("s1", &hash_of(&bytes)).expect("held");
            assert_eq!(store.content("s1", &hash_of(&bytes)).expect("read"), bytes);
        }
        let pending = fs::read_dir(&store.pending).expect("pending");
        assert!(
            pending
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().ends_with(".part")),
            "no temporary left"
        );
    }

    #[test]
    fn a_dead_process_pending_contents_are_swept_and_a_live_one_is_not() {
        let home = tempfile::tempdir().expect("home");
        let live = BlobStore::open(home.path()).expect("opens");
        live.keep_pending(b"live").expect("kept");
        let dead = home.path().join("checkpoints/pending/1-1");
        fs::create_dir_all(&dead).expect("dir");
        File::create(dead.join(".lock")).expect("lock file");
        let _second = BlobStore::open(home.path()).expect("opens");
        assert!(!dead.exists());
        assert!(live.pending.exists());
    }

    #[test]
    fn only_a_whole_hash_and_a_plain_session_name_make_a_file_name() {
        let hex = "ab".repeat(32);
        assert_eq!(file_name(&format!("sha256:{hex}")), Some(hex.as_str()));
        assert_eq!(file_name(&format!("sha256:{}", "g".repeat(64))), None);
        assert_eq!(file_name("sha256:abcd"), None);
        assert_eq!(file_name(&hex), None);
        for good in ["s1", "a-b", "a_b", "a.b", &"x".repeat(200)] {
            assert!(session_dir_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "a\\b", &"x".repeat(201)] {
            assert!(session_dir_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_fork_holds_what_its_parent_held_after_the_parent_is_pruned() {
        let home = tempfile::tempdir().expect("home");
        let store = BlobStore::open(home.path()).expect("opens");
        let hash = store.keep_pending(b"kept").expect("kept");
        store.hold("parent", &hash).expect("held");
        store.copy_holdings("parent", "fork").expect("copied");
        prune_session(home.path(), "parent").expect("pruned");
        assert!(!home.path().join("checkpoints/sessions/parent").exists());
        assert_eq!(store.content("fork", &hash).expect("fork's"), b"kept");
        // A session with nothing held copies nothing, and pruning it is no error.
        store.copy_holdings("nobody", "fork2").expect("nothing");
        store.prune_session("never-held").expect("nothing to prune");
    }

    #[test]
    fn a_prune_that_cannot_read_the_sessions_folder_says_so() {
        let home = tempfile::tempdir().expect("home");
        let store = BlobStore::open(home.path()).expect("opens");
        fs::write(home.path().join("checkpoints/sessions/odd"), "a file").expect("file");
        assert!(store.prune_session("odd").is_err());
    }

    #[test]
    fn a_link_that_cannot_be_made_fails_the_hold() {
        let home = tempfile::tempdir().expect("home");
        let store = BlobStore::open(home.path()).expect("opens");
        let hash = store.keep_pending(b"x").expect("kept");
        fs::remove_dir_all(home.path().join("checkpoints/blobs")).expect("rm");
        assert!(store.hold("s", &hash).is_err());
    }

    #[test]
    fn blobs_nobody_holds_go_when_a_store_opens_and_pending_goes_with_its_store() {
        let home = tempfile::tempdir().expect("home");
        let first = BlobStore::open(home.path()).expect("opens");
        let pending = first.pending.clone();
        drop(first);
        assert!(!pending.exists(), "a store's pending folder goes with it");
        let orphan = home.path().join("checkpoints/blobs").join("cd".repeat(32));
        fs::write(&orphan, "nobody's").expect("orphan");
        let store = BlobStore::open(home.path()).expect("opens");
        assert!(!orphan.exists(), "a blob no session holds is swept");
        let (free, size) = store.room().expect("room");
        assert!(
            size > 1 << 20 && free > 0 && free <= size,
            "{free} of {size}"
        );
    }

    #[test]
    fn a_hash_or_session_that_could_name_another_path_is_refused() {
        let home = tempfile::tempdir().expect("home");
        let store = BlobStore::open(home.path()).expect("opens");
        assert!(store.content("s", "sha256:../../etc/passwd").is_err());
        assert!(store.hold("../x", &hash_of(b"x")).is_err());
    }
}
