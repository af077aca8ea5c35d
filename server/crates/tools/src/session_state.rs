//! Per-session tool state: background processes (killed when the session ends) and the todo list.

use crate::ToolError;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};
use talaria_util::lock;

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use crate::shell::{Launch, kill_group};

/// A todo item (Hermes `todo` shape).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TodoItem {
    pub id: String,
    pub content: String,
    /// `pending`, `in_progress`, `completed` or `cancelled`.
    pub status: String,
}

/// The most output kept per background process (older output is dropped, with a count).
pub const MAX_LOG_BYTES: usize = 1024 * 1024;

/// Everything a session's tools keep between calls.
#[derive(Debug, Default)]
pub struct SessionToolState {
    pub processes: ProcessTable,
    pub todos: Mutex<Vec<TodoItem>>,
}

/// How a background process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

#[derive(Debug, Default)]
struct Log {
    text: String,
    /// Bytes dropped from the start to respect [`MAX_LOG_BYTES`].
    dropped: usize,
    /// Absolute offset up to which `poll` has returned output.
    polled: usize,
}

/// A process started with `terminal {background: true}`.
#[derive(Debug)]
pub struct ManagedProcess {
    pub id: String,
    pub command: String,
    pub pid: u32,
    /// The directory it started in.
    pub cwd: std::path::PathBuf,
    /// It runs in the OS sandbox.
    pub sandboxed: bool,
    pub started: Instant,
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    log: Mutex<Log>,
    exit: watch::Receiver<Option<ExitInfo>>,
}

impl ManagedProcess {
    /// `None` while running.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.exit.borrow().clone()
    }

    /// Output since the last poll (and advances the poll mark).
    pub fn take_new_output(&self) -> String {
        let mut log = lock(&self.log);
        let start = log.polled.saturating_sub(log.dropped).min(log.text.len());
        let mut start = start;
        while !log.text.is_char_boundary(start) {
            start += 1;
        }
        let new = log.text[start..].to_string();
        log.polled = log.dropped + log.text.len();
        new
    }

    /// All retained output, and how many bytes were dropped before it.
    pub fn full_log(&self) -> (String, usize) {
        let log = lock(&self.log);
        (log.text.clone(), log.dropped)
    }

    /// Waits for exit, up to `timeout`.
    pub async fn wait(&self, timeout: Duration) -> Option<ExitInfo> {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(timeout, exit.wait_for(Option::is_some)).await;
        self.exit_info()
    }

    /// Writes to the process's stdin.
    pub async fn write_stdin(&self, data: &str) -> Result<(), ToolError> {
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err(ToolError::Rejected("the process's stdin is closed".into()));
        };
        pipe.write_all(data.as_bytes())
            .await
            .map_err(|source| ToolError::Process {
                what: "writing to stdin failed".into(),
                source,
            })?;
        pipe.flush().await.map_err(|source| ToolError::Process {
            what: "writing to stdin failed".into(),
            source,
        })
    }

    /// Kills the process and its group.
    pub fn kill(&self) {
        kill_group(self.pid);
    }
}

/// The background processes of a session.
#[derive(Debug, Default)]
pub struct ProcessTable {
    next: AtomicU64,
    entries: Mutex<BTreeMap<String, Arc<ManagedProcess>>>,
}

impl Drop for ProcessTable {
    fn drop(&mut self) {
        for process in lock(&self.entries).values() {
            if process.exit_info().is_none() {
                process.kill();
            }
        }
    }
}

impl ProcessTable {
    /// Starts `command` (shown as `command`, started as `launch` says) in the background in
    /// its own process group.
    pub fn spawn(
        &self,
        command: &str,
        launch: &Launch,
        cwd: &Path,
    ) -> Result<Arc<ManagedProcess>, ToolError> {
        let mut child = crate::shell::local::command(launch)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ToolError::Process {
                what: format!("cannot start the shell in {}", cwd.display()),
                source,
            })?;
        let pid = child
            .id()
            .ok_or_else(|| ToolError::Rejected("the process exited at once".into()))?;
        let id = format!("proc_{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (exit_tx, exit_rx) = watch::channel(None);
        let process = Arc::new(ManagedProcess {
            id: id.clone(),
            command: command.to_string(),
            pid,
            cwd: cwd.to_path_buf(),
            sandboxed: launch.sandboxed,
            started: Instant::now(),
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            log: Mutex::new(Log::default()),
            exit: exit_rx,
        });
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        if let Some(stdout) = child.stdout.take() {
            crate::shell::local::pump(stdout, tx.clone());
        }
        if let Some(stderr) = child.stderr.take() {
            crate::shell::local::pump(stderr, tx);
        }
        let writer = process.clone();
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                let mut log = lock(&writer.log);
                log.text.push_str(&String::from_utf8_lossy(&chunk));
                if log.text.len() > MAX_LOG_BYTES {
                    let mut cut = log.text.len() - MAX_LOG_BYTES;
                    while !log.text.is_char_boundary(cut) {
                        cut += 1;
                    }
                    log.text.drain(..cut);
                    log.dropped += cut;
                }
            }
        });
        tokio::spawn(async move {
            use std::os::unix::process::ExitStatusExt;
            let info = match child.wait().await {
                Ok(status) => ExitInfo {
                    code: status.code(),
                    signal: status.signal(),
                },
                Err(_) => ExitInfo {
                    code: None,
                    signal: None,
                },
            };
            // Whatever it left running in its group goes with it.
            kill_group(pid);
            let _ = exit_tx.send(Some(info));
        });
        lock(&self.entries).insert(id, process.clone());
        Ok(process)
    }

    /// A process by id.
    pub fn get(&self, id: &str) -> Option<Arc<ManagedProcess>> {
        lock(&self.entries).get(id).cloned()
    }

    /// Every process, oldest first.
    pub fn list(&self) -> Vec<Arc<ManagedProcess>> {
        lock(&self.entries).values().cloned().collect()
    }
}
