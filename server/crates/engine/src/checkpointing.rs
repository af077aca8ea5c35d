//! Checkpoints as sessions use them: one content store per Talaria home and one index per
//! set of workspace roots in this process, and the capture around a call that may change
//! the workspace (its files read before and after, or a stat walk before and after a
//! command).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use talaria_checkpoints::{BlobStore, Bounds, Capture, FilesBefore, Workspace};

/// What a session's calls are checkpointed with.
#[derive(Debug)]
pub struct Checkpoints {
    blobs: Arc<BlobStore>,
    workspace: Arc<Workspace>,
}

type Shared = HashMap<PathBuf, (Weak<BlobStore>, HashMap<Vec<PathBuf>, Weak<Workspace>>)>;

fn shared() -> &'static Mutex<Shared> {
    static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
    SHARED.get_or_init(Mutex::default)
}

/// The checkpoints of a session in `roots` whose home is `home` (blocking: the store's
/// folders are made and swept on first use, the roots resolved and held). What the sandbox
/// hides (`places`, the session's shell's) is never read or written. The index of a workspace
/// is first read in the background, so the first command does not wait for it. `None` when
/// the store cannot be opened (logged; the session goes on without checkpoints).
pub fn checkpoints_for(
    home: &Path,
    roots: &[PathBuf],
    places: Arc<dyn talaria_files::Places>,
) -> Option<Arc<Checkpoints>> {
    let bounds = Bounds::default();
    let mut shared = talaria_util::lock(shared());
    let (blobs, workspaces) = shared.entry(home.to_path_buf()).or_default();
    let store = match blobs.upgrade() {
        Some(store) => store,
        None => match BlobStore::open(home) {
            Ok(store) => {
                let store = Arc::new(store);
                *blobs = Arc::downgrade(&store);
                store
            }
            Err(error) => {
                tracing::warn!("checkpoints are off: their store cannot be opened: {error}");
                return None;
            }
        },
    };
    let workspace = match workspaces.get(roots).and_then(Weak::upgrade) {
        Some(workspace) => workspace,
        None => {
            let workspace = Arc::new(Workspace::new(
                roots.to_vec(),
                store.clone(),
                bounds,
                places,
            ));
            workspaces.insert(roots.to_vec(), Arc::downgrade(&workspace));
            warm(&workspace);
            workspace
        }
    };
    Some(Arc::new(Checkpoints {
        blobs: store,
        workspace,
    }))
}

/// Reads the workspace's index on a thread of its own.
fn warm(workspace: &Arc<Workspace>) {
    let workspace = workspace.clone();
    let started = std::thread::Builder::new()
        .name("talaria-checkpoint-warm".into())
        .spawn(move || workspace.before_command());
    if let Err(error) = started {
        tracing::debug!("the checkpoint index is read by the first command: {error}");
    }
}

/// What was read before a call ran.
pub(crate) enum Before {
    /// The call changes nothing in the workspace.
    Nothing,
    /// A file tool: the files it names.
    Files(FilesBefore),
    /// A command (or a call that says nothing of itself): the index was brought up to date.
    Walked,
}

impl Checkpoints {
    /// Reads what a call is about to change (off the runtime thread).
    pub(crate) async fn before(self: &Arc<Self>, writes: &[PathBuf], walk: bool) -> Before {
        let this = self.clone();
        let writes = writes.to_vec();
        let before = tokio::task::spawn_blocking(move || {
            if walk {
                this.workspace.before_command();
                Before::Walked
            } else if writes.is_empty() {
                Before::Nothing
            } else {
                Before::Files(this.workspace.files_before(&writes))
            }
        });
        before.await.unwrap_or(Before::Nothing)
    }

    /// What the call changed, its contents held by `session`.
    pub(crate) async fn after(self: &Arc<Self>, session: &str, before: Before) -> Capture {
        if matches!(before, Before::Nothing) {
            return Capture::default();
        }
        let this = self.clone();
        let session = session.to_string();
        let after = tokio::task::spawn_blocking(move || match before {
            Before::Nothing => Capture::default(),
            Before::Walked => this.workspace.after_command(&session),
            Before::Files(files) => this.workspace.files_after(&session, files),
        });
        after.await.unwrap_or_default()
    }

    /// Puts back what `changes` changed, newest first (blocking).
    pub fn restore(
        &self,
        session: &str,
        changes: &[talaria_record::FileChange],
        force: bool,
    ) -> talaria_checkpoints::RestoreReport {
        self.workspace.restore(session, changes, force)
    }

    /// A fork holds what its parent's checkpoints hold (blocking).
    pub fn copy_holdings(&self, from: &str, to: &str) {
        if let Err(error) = self.blobs.copy_holdings(from, to) {
            tracing::warn!("the fork's checkpoints could not be copied: {error}");
        }
    }
}

/// Drops what a deleted session's checkpoints hold in `home`, and the contents no other
/// session holds (blocking).
pub fn prune_checkpoints(home: &Path, session: &str) {
    if let Err(error) = talaria_checkpoints::prune_session(home, session) {
        tracing::warn!("the checkpoints of {session} could not be pruned: {error}");
    }
}
