//! What a turn waiting for a stuck store costs in memory: a 100 MB answer streamed and saved
//! while another program holds SQLite's write lock, against the same answer with the store
//! free. The session's history holds the answer either way; the difference is what waits
//! (past 8 MB the journal keeps waiting bodies in its spool, not in memory).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::{Env, PrivateMemory, RawSession, private_memory};

/// The answer's size, in 1 MB deltas.
pub const ANSWER_MB: usize = 100;

pub struct WaitingFigures {
    pub free: PrivateMemory,
    pub locked: PrivateMemory,
}

pub async fn measure(agent: &Path, env: &Env) -> anyhow::Result<WaitingFigures> {
    Ok(WaitingFigures {
        free: answered(agent, env, false).await?,
        locked: answered(agent, env, true).await?,
    })
}

/// The agent's private memory once a 100 MB answer was answered, the store free or locked.
async fn answered(agent: &Path, env: &Env, locked: bool) -> anyhow::Result<PrivateMemory> {
    use tokio::io::AsyncWriteExt;
    let home = tempfile::tempdir()?;
    let cwd = tempfile::tempdir()?;
    let vars = env.vars_with_home(home.path());
    env.push_answer(1 << 20, ANSWER_MB);
    let mut session = RawSession::start(agent, &vars, cwd.path()).await?;
    let lock = if locked {
        Some(LockHolder::take(&home.path().join("state.db"))?)
    } else {
        None
    };
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session.session, "prompt": [{"type": "text", "text": "a lot"}]}});
    session
        .stdin
        .write_all(format!("{prompt}\n").as_bytes())
        .await?;
    loop {
        let line = session
            .lines
            .next_line()
            .await?
            .context("the agent closed mid-answer")?;
        if line.contains("\"stopReason\"") {
            break;
        }
    }
    let memory = private_memory(session.pid).context("no /proc figures")?;
    drop(lock);
    drop(session.stdin);
    session.child.wait().await?;
    Ok(memory)
}

/// Another program holding SQLite's write lock until dropped.
pub(crate) struct LockHolder {
    release: Option<std::sync::mpsc::Sender<()>>,
    holder: Option<std::thread::JoinHandle<()>>,
}

impl LockHolder {
    /// Waits for the agent to have made its store, then takes the lock.
    pub(crate) fn take(path: &Path) -> anyhow::Result<Self> {
        let until = Instant::now() + Duration::from_secs(10);
        while !path.exists() {
            anyhow::ensure!(Instant::now() < until, "the agent made no store");
            std::thread::sleep(Duration::from_millis(10));
        }
        let connection = rusqlite::Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(10))?;
        connection.execute_batch("BEGIN IMMEDIATE")?;
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _ = released.recv();
            let _ = connection.execute_batch("COMMIT");
        });
        Ok(Self {
            release: Some(release),
            holder: Some(holder),
        })
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(holder) = self.holder.take() {
            let _ = holder.join();
        }
    }
}
