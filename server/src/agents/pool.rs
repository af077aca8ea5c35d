//! A session's running agents: one process per configured agent, started by its first
//! delegation and kept for the next ones (each on a new ACP session in it, or on the one it
//! has when it opens no other), stopped after `idle_timeout_secs` without a delegation, when
//! it fails, or with the session (the pool is dropped with the session's settings).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use talaria_conductor::{ChildAgent, ChildError};
use talaria_engine::AgentEntry;
use talaria_protocol::acp;

use super::routes::Routes;

/// One running agent.
pub(super) struct Kept {
    pub(super) child: ChildAgent,
    pub(super) routes: Arc<Routes>,
    /// The session it keeps for a delegation when it opens no other.
    shared: std::sync::Mutex<Option<String>>,
    /// Delegations running on it.
    busy: AtomicUsize,
    /// Counts delegations' ends: an idle stop is for the end it was armed at only.
    ended: AtomicU64,
}

/// Why an agent did not start.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    #[error(transparent)]
    Launch(#[from] super::launch::LaunchError),
    #[error(transparent)]
    Child(#[from] ChildError),
}

type Children = tokio::sync::Mutex<HashMap<String, Arc<Kept>>>;

/// The session's running agents, by name.
#[derive(Default)]
pub(super) struct Pool {
    children: Arc<Children>,
}

impl Pool {
    /// `entry`'s running agent (started now when it runs no more), marked busy; why it could
    /// not start (a registry id not installed, its program missing or failing).
    pub(super) async fn take(
        &self,
        entry: &AgentEntry,
        cwd: &std::path::Path,
    ) -> Result<Arc<Kept>, StartError> {
        let mut children = self.children.lock().await;
        if let Some(kept) = children.get(&entry.name)
            && kept.child.running()
        {
            kept.busy.fetch_add(1, Ordering::SeqCst);
            return Ok(kept.clone());
        }
        let routes = Arc::new(Routes::default());
        let (command, _) = super::command_of(entry, Some(cwd)).await?;
        let timings = super::timings_of(entry);
        let child = ChildAgent::start(&command, cwd, routes.clone(), timings).await?;
        let kept = Arc::new(Kept {
            child,
            routes,
            shared: std::sync::Mutex::default(),
            busy: AtomicUsize::new(1),
            ended: AtomicU64::new(0),
        });
        children.insert(entry.name.clone(), kept.clone());
        Ok(kept)
    }

    /// A delegation on `kept` ended: a failed agent is stopped at once, a healthy one after
    /// `idle` with no delegation.
    pub(super) async fn give_back(
        &self,
        name: &str,
        kept: Arc<Kept>,
        healthy: bool,
        idle: Duration,
    ) {
        kept.busy.fetch_sub(1, Ordering::SeqCst);
        let end = kept.ended.fetch_add(1, Ordering::SeqCst) + 1;
        if !healthy || !kept.child.running() {
            self.remove(name, &kept).await;
            return;
        }
        let children = Arc::downgrade(&self.children);
        let kept = Arc::downgrade(&kept);
        let name = name.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            stop_if_idle(&children, &kept, &name, end).await;
        });
    }

    async fn remove(&self, name: &str, kept: &Arc<Kept>) {
        let mut children = self.children.lock().await;
        if children.get(name).is_some_and(|k| Arc::ptr_eq(k, kept)) {
            children.remove(name);
        }
    }
}

/// Stops `kept` when nothing used it since its `end`-th delegation ended.
async fn stop_if_idle(children: &Weak<Children>, kept: &Weak<Kept>, name: &str, end: u64) {
    let (Some(children), Some(kept)) = (children.upgrade(), kept.upgrade()) else {
        return;
    };
    let mut children = children.lock().await;
    let idle = kept.busy.load(Ordering::SeqCst) == 0 && kept.ended.load(Ordering::SeqCst) == end;
    if !idle || !children.get(name).is_some_and(|k| Arc::ptr_eq(k, &kept)) {
        return;
    }
    children.remove(name);
    drop(children);
    tracing::info!(agent = name, "an idle agent stopped");
    if let Ok(kept) = Arc::try_unwrap(kept) {
        kept.child.stop().await;
    }
}

impl Kept {
    /// A session for one delegation: a new one, or the one it keeps when it opens no other
    /// and no delegation is on it.
    pub(super) async fn session(
        &self,
        cwd: &std::path::Path,
        mcp_servers: &[acp::McpServer],
    ) -> Result<String, ChildError> {
        match self.child.new_session(cwd, mcp_servers.to_vec()).await {
            Ok(session) => {
                talaria_util::lock(&self.shared).get_or_insert_with(|| session.clone());
                Ok(session)
            }
            Err(ChildError::Refused {
                name,
                method,
                message,
            }) => {
                let shared = talaria_util::lock(&self.shared).clone();
                match shared {
                    Some(session) if self.busy.load(Ordering::SeqCst) == 1 => Ok(session),
                    // Its one session is another delegation's now.
                    Some(_) => Err(ChildError::Refused {
                        message: format!(
                            "{message} (it keeps one session, and another task is on it now: \
                             hand this task over once that one is done)"
                        ),
                        name,
                        method,
                    }),
                    None => Err(ChildError::Refused {
                        name,
                        method,
                        message,
                    }),
                }
            }
            Err(other) => Err(other),
        }
    }
}
