//! Which process has a session open: one lock file per session, locked with the kernel's
//! advisory file lock (`flock`) for as long as the session is open. The kernel drops the lock
//! when the process ends, however it ends, so a killed process never blocks anyone and a
//! reused pid cannot lie. The file names its holder (host and pid) for the in-use error.
//!
//! Lock files are never removed while a session exists: removing one another process has
//! opened would let two processes lock two different files of the same name.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::StoreError;

/// The claims of one store, kept in one folder.
#[derive(Debug)]
pub struct Claims {
    dir: PathBuf,
    /// The lock files this process holds, by session.
    held: Mutex<HashMap<String, File>>,
}

/// This machine's name, for the in-use error.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this machine".into())
}

/// A session id as a file name (ids are UUIDs; anything else is spelled out in hex).
fn file_name(session: &str) -> String {
    if !session.is_empty()
        && session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        format!("{session}.lock")
    } else {
        let hex: String = session.bytes().map(|b| format!("{b:02x}")).collect();
        format!("x{hex}.lock")
    }
}

fn io_error(path: &Path, error: &std::io::Error) -> StoreError {
    match error.kind() {
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            StoreError::ReadOnly(format!("cannot write {}: {error}", path.display()))
        }
        _ => StoreError::Other(format!("{}: {error}", path.display())),
    }
}

impl Claims {
    /// The claims kept in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            held: Mutex::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, File>> {
        talaria_util::lock(&self.held)
    }

    /// Opens (creating) a session's lock file.
    fn open(&self, session: &str) -> Result<(PathBuf, File), StoreError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io_error(&self.dir, &e))?;
        let path = self.dir.join(file_name(session));
        // It names the holder's host and process: this user's alone, like the store.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(talaria_util::private::PRIVATE_FILE_MODE)
            .open(&path)
            .map_err(|e| io_error(&path, &e))?;
        Ok((path, file))
    }

    /// Who holds a locked file, as it says. The holder writes its name just after taking the
    /// lock, so a loser of a close race waits a moment for it (and for a stale name from an
    /// earlier holder to be replaced).
    fn holder(mut file: &File) -> String {
        let mut text = String::new();
        for _ in 0..40 {
            text.clear();
            let _ = file.rewind();
            let _ = file.read_to_string(&mut text);
            let written = text.trim();
            let alive = written
                .rsplit(' ')
                .next()
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
            if alive {
                return written.to_string();
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        "another Talaria process".into()
    }

    /// Takes the session for this process; refused while another process holds it.
    pub fn claim(&self, session: &str) -> Result<(), StoreError> {
        if self.held().contains_key(session) {
            return Ok(());
        }
        talaria_util::failpoint::step("claim::take::before");
        let (path, mut file) = self.open(session)?;
        match file.try_lock() {
            Ok(()) => {
                talaria_util::failpoint::step("claim::take::after");
                // Written in place, then cut to length: the file never reads as empty.
                let holder = format!("{} pid {}\n", host(), std::process::id());
                let _ = file.rewind();
                let _ = file.write_all(holder.as_bytes());
                let _ = file.set_len(holder.len() as u64);
                self.held().insert(session.to_string(), file);
                Ok(())
            }
            Err(TryLockError::WouldBlock) => Err(StoreError::InUse {
                session: session.to_string(),
                holder: Self::holder(&file),
            }),
            Err(TryLockError::Error(e)) => Err(io_error(&path, &e)),
        }
    }

    /// Gives the session up (the lock file stays).
    pub fn release(&self, session: &str) {
        talaria_util::failpoint::step("claim::release::before");
        self.held().remove(session);
        talaria_util::failpoint::step("claim::release::after");
    }

    /// Whether this process holds the session.
    pub fn holds(&self, session: &str) -> bool {
        self.held().contains_key(session)
    }

    /// The holder of a session another process has open, if any.
    pub fn holder_elsewhere(&self, session: &str) -> Option<String> {
        if self.holds(session) {
            return None;
        }
        let (_, file) = self.open(session).ok()?;
        match file.try_lock() {
            Ok(()) => None,
            Err(TryLockError::WouldBlock) => Some(Self::holder(&file)),
            Err(TryLockError::Error(_)) => None,
        }
    }

    /// Forgets a deleted session's lock file (this process holds it).
    pub fn remove(&self, session: &str) {
        if self.held().remove(session).is_some() {
            let _ = std::fs::remove_file(self.dir.join(file_name(session)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_loser_is_told_who() {
        let dir = tempfile::tempdir().expect("dir");
        let first = Claims::new(dir.path().join("claims"));
        let second = Claims::new(dir.path().join("claims"));
        first.claim("s-1").expect("first");
        first.claim("s-1").expect("again, same holder");
        match second.claim("s-1") {
            Err(StoreError::InUse { session, holder }) => {
                assert_eq!(session, "s-1");
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(second.holder_elsewhere("s-1").is_some());
        first.release("s-1");
        second.claim("s-1").expect("free after release");
        assert_eq!(file_name("a/b"), "x612f62.lock");
    }
}
