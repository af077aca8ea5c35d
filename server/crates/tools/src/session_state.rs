//! The session's background processes: the `ProcessTable` the session's tools use (its
//! processes killed when the session ends), and how one is started.

use crate::error::ToolError;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use talaria_util::lock;

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use crate::interfaces::{BackgroundProcess, ExitInfo, ProcessTable, SessionToolState};
use crate::shell::{Launch, kill_group};

/// The most output kept per background process (older output is dropped, with a count).
pub const MAX_LOG_BYTES: usize = 1024 * 1024;

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
    pub started: Instant,
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    log: Mutex<Log>,
    exit: watch::Receiver<Option<ExitInfo>>,
}

impl ManagedProcess {
    /// `None` while running.
    fn exit_info(&self) -> Option<ExitInfo> {
        self.exit.borrow().clone()
    }

    /// Output since the last poll (and advances the poll mark).
    fn take_new_output(&self) -> String {
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
    fn full_log(&self) -> (String, usize) {
        let log = lock(&self.log);
        (log.text.clone(), log.dropped)
    }

    /// Waits for exit, up to `timeout`.
    async fn wait(&self, timeout: Duration) -> Option<ExitInfo> {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(timeout, exit.wait_for(Option::is_some)).await;
        self.exit_info()
    }

    /// Writes to the process's stdin.
    async fn write_stdin(&self, data: &str) -> Result<(), ToolError> {
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
    fn kill(&self) {
        kill_group(self.pid);
    }
}

impl BackgroundProcess for ManagedProcess {
    fn id(&self) -> &str {
        &self.id
    }

    fn command(&self) -> &str {
        &self.command
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn started(&self) -> Instant {
        self.started
    }

    fn exit_info(&self) -> Option<ExitInfo> {
        ManagedProcess::exit_info(self)
    }

    fn take_new_output(&self) -> String {
        ManagedProcess::take_new_output(self)
    }

    fn full_log(&self) -> (String, usize) {
        ManagedProcess::full_log(self)
    }

    fn wait(&self, timeout: Duration) -> BoxFuture<'_, Option<ExitInfo>> {
        Box::pin(ManagedProcess::wait(self, timeout))
    }

    fn write_stdin<'a>(&'a self, data: &'a str) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(ManagedProcess::write_stdin(self, data))
    }

    fn kill(&self) {
        ManagedProcess::kill(self);
    }
}

/// The background processes of a session, started on this machine.
#[derive(Debug, Default)]
pub struct LocalProcesses {
    next: AtomicU64,
    entries: Mutex<BTreeMap<String, Arc<dyn BackgroundProcess>>>,
}

impl Drop for LocalProcesses {
    fn drop(&mut self) {
        for process in lock(&self.entries).values() {
            if process.exit_info().is_none() {
                process.kill();
            }
        }
    }
}

/// Starts `command` (shown as `command`, started as `launch` says) in the background in its
/// own process group, as process `id`.
pub fn spawn_background(
    id: String,
    command: &str,
    launch: &Launch,
    cwd: &Path,
) -> Result<Arc<dyn BackgroundProcess>, ToolError> {
    {
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
        let (exit_tx, exit_rx) = watch::channel(None);
        let process = Arc::new(ManagedProcess {
            id,
            command: command.to_string(),
            pid,
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
        Ok(process)
    }
}

impl ProcessTable for LocalProcesses {
    fn start(
        &self,
        start: &mut dyn FnMut(String) -> Result<Arc<dyn BackgroundProcess>, ToolError>,
    ) -> Result<Arc<dyn BackgroundProcess>, ToolError> {
        let id = format!("proc_{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let process = start(id.clone())?;
        lock(&self.entries).insert(id, process.clone());
        Ok(process)
    }

    fn get(&self, id: &str) -> Option<Arc<dyn BackgroundProcess>> {
        lock(&self.entries).get(id).cloned()
    }

    fn list(&self) -> Vec<Arc<dyn BackgroundProcess>> {
        lock(&self.entries).values().cloned().collect()
    }
}

impl Default for SessionToolState {
    /// A session's tool state with its processes started on this machine.
    fn default() -> Self {
        Self::new(Arc::new(LocalProcesses::default()))
    }
}
