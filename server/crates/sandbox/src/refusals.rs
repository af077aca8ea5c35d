//! The sandbox's own log of what it refused a command: written by the watcher (inside the
//! sandbox, from the system calls themselves), read by Talaria when the command ends. Only a
//! refusal in this log can offer a run outside the sandbox; what a command prints never can.
//!
//! Talaria makes an empty file for each command ([`RefusalLog::create`]) in a folder commands
//! cannot reach (`TALARIA_HOME`), the helper opens it before it enters the sandbox and hands
//! the descriptor to the watcher alone (never to the command), and Talaria reads it back
//! without following links.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::denial::Denial;
use crate::policy::SandboxPolicy;

/// The most refusals one command's log keeps (a command refused in a loop writes no more).
pub const MOST_REFUSALS: usize = 32;

/// The most bytes of a log Talaria reads back.
const MOST_BYTES: u64 = 64 * 1024;

/// One thing the sandbox refused a command.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// Creating, changing or removing this file (the real path) outside the writable places.
    Write { path: PathBuf },
    /// Opening a network socket while the network is off.
    Network,
    /// Creating a UNIX socket (without namespaces commands have none).
    UnixSocket,
    /// A UNIX datagram socket (a datagram can be sent to any socket's name).
    UnixDatagram,
    /// Connecting to this socket, which is neither listed nor the command's own.
    Connect { path: PathBuf },
    /// Connecting to one of the agent's own listeners (a `talaria serve`).
    Endpoint { address: std::net::SocketAddr },
    /// Reaching a System V IPC object another program made (without namespaces).
    SharedObject,
}

impl Refusal {
    /// The refusal in words, and whether a run let out of the walls
    /// ([`SandboxPolicy::lifted`]) could do it.
    pub fn denial(&self, policy: &SandboxPolicy) -> Denial {
        let (what, liftable) = match self {
            Refusal::Write { path } if policy.access(path) == crate::PathAccess::Hidden => (
                format!("writing {}: it is hidden from commands", path.display()),
                false,
            ),
            Refusal::Write { path } => (
                format!(
                    "writing {} (commands may write only in {})",
                    path.display(),
                    crate::denial::writable_list(policy)
                ),
                // A file the user may not write either is no reason to leave the walls.
                crate::denial::rights_allow(path, crate::denial::Verb::Write),
            ),
            Refusal::Network => (
                "opening a network connection: the network is off for commands \
                 ([sandbox] network = false)"
                    .to_string(),
                true,
            ),
            Refusal::UnixSocket => (
                "creating a UNIX socket: without the namespaces layer commands have none"
                    .to_string(),
                false,
            ),
            Refusal::UnixDatagram => (
                "creating a UNIX datagram socket: commands may use stream sockets only".to_string(),
                false,
            ),
            Refusal::Endpoint { address } => (
                format!(
                    "connecting to {address}: it is Talaria's own server (talaria serve), which \
                     commands may never reach"
                ),
                false,
            ),
            Refusal::SharedObject => (
                "reaching another program's System V shared memory, message queue or \
                 semaphores: without the namespaces layer a command reaches only those it made"
                    .to_string(),
                false,
            ),
            Refusal::Connect { path } => (
                format!(
                    "connecting to the socket {}: it is neither listed in [sandbox] \
                     unix_sockets nor the command's own",
                    path.display()
                ),
                false,
            ),
        };
        Denial { what, liftable }
    }
}

/// One command's log, made by Talaria before the command starts and removed when dropped.
#[derive(Debug)]
pub struct RefusalLog {
    path: PathBuf,
}

impl RefusalLog {
    /// An empty log in `folder` (made private first if missing), under a name of its own.
    pub fn create(folder: &Path) -> std::io::Result<RefusalLog> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(folder)?;
        let path = folder.join(format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc_no_follow())
            .open(&path)?;
        Ok(RefusalLog { path })
    }

    /// Where the helper opens it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the sandbox refused, as logged (unreadable lines are skipped).
    pub fn read(&self) -> Vec<Refusal> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut text = String::new();
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_no_follow())
            .open(&self.path);
        if let Ok(file) = opened {
            let _ = file.take(MOST_BYTES).read_to_string(&mut text);
        }
        let mut seen = HashSet::new();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Refusal>(line).ok())
            .filter(|refusal| seen.insert(refusal.clone()))
            .take(MOST_REFUSALS)
            .collect()
    }
}

impl Drop for RefusalLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes the logs of Talaria processes that are gone. Blocking.
pub fn sweep_logs(folder: &Path) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|name| name.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(unix)]
fn libc_no_follow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_reads_back_what_was_written_once_each_and_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join("refusals");
        let log = RefusalLog::create(&folder).expect("log");
        let line = |refusal: &Refusal| serde_json::to_string(refusal).expect("json");
        let write = Refusal::Write {
            path: PathBuf::from("/srv/x"),
        };
        let text = format!(
            "{}\n{}\nnot json\n{}\n",
            line(&write),
            line(&Refusal::Network),
            line(&write)
        );
        std::fs::write(log.path(), text).expect("write");
        assert_eq!(log.read(), vec![write.clone(), Refusal::Network]);
        let policy = SandboxPolicy {
            writable: vec![PathBuf::from("/work")],
            ..SandboxPolicy::default()
        };
        let denial = write.denial(&policy);
        assert!(denial.liftable);
        assert_eq!(
            denial.what,
            "writing /srv/x (commands may write only in /work)"
        );
        assert!(!Refusal::UnixDatagram.denial(&policy).liftable);
        let path = log.path().to_path_buf();
        drop(log);
        assert!(!path.exists());
    }

    #[test]
    fn a_log_replaced_by_a_link_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = RefusalLog::create(dir.path()).expect("log");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "{\"kind\":\"network\"}\n").expect("write");
        std::fs::remove_file(log.path()).expect("remove");
        std::os::unix::fs::symlink(&elsewhere, log.path()).expect("link");
        assert!(log.read().is_empty());
    }
}
