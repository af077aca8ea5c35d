//! The watcher's record of refusals: what a sandboxed command tried that the sandbox
//! refuses, judged from the system call itself (never from what the command prints), written
//! once each to the command's refusal log.
//!
//! Calls that write by path are let through unchanged (the kernel's layers decide); the
//! recorder only reads the path from the caller's memory, resolves it as the caller sees it,
//! and logs it when no write grant covers it. A caller that races its own memory can only
//! make a refusal be logged for a write it did try, or not be logged: never let anything
//! through.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use talaria_unotify::{Notice, PathArgument};

use crate::refusals::{MOST_REFUSALS, Refusal};

/// Writes the refusals of one command to its log.
pub(crate) struct Recorder {
    log: Option<Mutex<std::fs::File>>,
    seen: Mutex<HashSet<Refusal>>,
    /// The hierarchies the command may write (as Landlock grants them).
    writable: Vec<PathBuf>,
}

impl Recorder {
    /// A recorder for a command that may write in `writable` (the hierarchies Landlock
    /// grants it), logging to `log` (none: refusals are only answered).
    pub(crate) fn new(writable: Vec<PathBuf>, log: Option<std::fs::File>) -> Self {
        Self {
            writable: if log.is_some() { writable } else { Vec::new() },
            log: log.map(Mutex::new),
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// Whether calls that write by path are worth watching (there is a log to write to).
    pub(crate) fn logs(&self) -> bool {
        self.log.is_some()
    }

    /// Logs `refusal`, once, up to [`MOST_REFUSALS`].
    pub(crate) fn record(&self, refusal: Refusal) {
        let Some(log) = &self.log else { return };
        {
            let Ok(mut seen) = self.seen.lock() else {
                return;
            };
            if seen.len() >= MOST_REFUSALS || !seen.insert(refusal.clone()) {
                return;
            }
        }
        let Ok(mut line) = serde_json::to_vec(&refusal) else {
            return;
        };
        line.push(b'\n');
        if let Ok(mut file) = log.lock() {
            let _ = file.write_all(&line);
        }
    }

    /// Looks at a stopped call that writes by path: logs each path it writes that no write
    /// grant covers. `open_how` is the argument of `openat2`'s flags structure.
    pub(crate) fn look_at_write(
        &self,
        notice: &Notice,
        paths: [Option<PathArgument>; 2],
        open_how: Option<usize>,
    ) {
        if let Some(how) = open_how {
            let flags = crate::memory::read(notice.pid, notice.args[how], 8)
                .ok()
                .and_then(|bytes| bytes.try_into().ok())
                .map_or(0, u64::from_ne_bytes);
            if !talaria_unotify::opens_to_write(flags) {
                return;
            }
        }
        for at in paths.into_iter().flatten() {
            let Some(path) = written_path(notice, at) else {
                continue;
            };
            // Most writes land plainly in a writable place: judged by name alone, without
            // resolving links (a link out of it only goes unlogged: no run is offered).
            let plain = !path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir));
            if plain && self.may_write(&path) {
                continue;
            }
            let real = real(&path);
            if !self.may_write(&real) {
                self.record(Refusal::Write { path: real });
            }
        }
    }

    fn may_write(&self, path: &Path) -> bool {
        self.writable.iter().any(|root| path.starts_with(root))
    }
}

/// The path a call writes, as its caller sees it: relative to its working folder or to the
/// folder descriptor the call names (links not resolved).
fn written_path(notice: &Notice, at: PathArgument) -> Option<PathBuf> {
    let raw = crate::memory::read_path(notice.pid, notice.args[at.path]).ok()?;
    let path = PathBuf::from(OsString::from_vec(raw));
    let full = if path.is_absolute() {
        path
    } else {
        let pid = notice.pid;
        let base = match at.dirfd.map(|i| notice.args[i] as u32 as i32) {
            None | Some(libc::AT_FDCWD) => format!("/proc/{pid}/cwd"),
            Some(fd) if fd >= 0 => format!("/proc/{pid}/fd/{fd}"),
            Some(_) => return None,
        };
        std::fs::read_link(base).ok()?.join(path)
    };
    Some(full)
}

/// `path` with its links resolved as far as it exists (the last one too, when it exists).
fn real(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent().map(Path::canonicalize), path.file_name()) {
        (Some(Ok(parent)), Some(name)) => parent.join(name),
        _ => path.to_path_buf(),
    }
}
