//! Checkpoints as sessions use them: one content store per Talaria home and one index per
//! set of workspace roots in this process, and the capture around a call that may change
//! the workspace (its files read before and after, or a stat walk before and after a
//! command).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use talaria_checkpoints::{BlobStore, Bounds, Capture, FilesBefore, Workspace};

/// What a session's calls are checkpointed with: the home's content store and the roots'
/// index, opened off the session's start (a thread of its own; the first call that needs
/// them waits for the opening, which is done once).
#[derive(Debug)]
pub struct Checkpoints {
    opened: OnceLock<Option<Opened>>,
    /// What the opening needs: the home, the roots and what the sandbox hides.
    place: Place,
}

/// The store and the index, once opened.
#[derive(Debug)]
struct Opened {
    blobs: Arc<BlobStore>,
    workspace: Arc<Workspace>,
}

struct Place {
    home: PathBuf,
    roots: Vec<PathBuf>,
    places: Arc<dyn talaria_files::Places>,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place")
            .field("home", &self.home)
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

type Shared = HashMap<PathBuf, (Weak<BlobStore>, HashMap<Vec<PathBuf>, Weak<Workspace>>)>;

fn shared() -> &'static Mutex<Shared> {
    static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
    SHARED.get_or_init(Mutex::default)
}

/// The checkpoints of a session in `roots` whose home is `home`. Never waits for the disk:
/// a store and index this process has open already are shared at once; otherwise they are
/// opened on a thread of its own (the store's folders made and swept, the roots resolved and
/// held, then the index first read, so the first command does not wait for it), and the
/// session's first call that needs them waits for that. What the sandbox hides (`places`,
/// the session's shell's) is never read or written. A store that cannot be opened is logged
/// and the session's calls go without checkpoints.
pub fn checkpoints_for(
    home: &Path,
    roots: &[PathBuf],
    places: Arc<dyn talaria_files::Places>,
) -> Arc<Checkpoints> {
    let checkpoints = Arc::new(Checkpoints {
        opened: OnceLock::new(),
        place: Place {
            home: home.to_path_buf(),
            roots: roots.to_vec(),
            places,
        },
    });
    if let Some(opened) = already_open(home, roots) {
        let _ = checkpoints.opened.set(Some(opened));
        return checkpoints;
    }
    let opening = checkpoints.clone();
    let started = std::thread::Builder::new()
        .name("talaria-checkpoints-open".into())
        .spawn(move || opening.open_and_warm());
    if let Err(error) = started {
        tracing::debug!("the checkpoints open with the first call that needs them: {error}");
    }
    checkpoints
}

/// The store and index this process has open for `home` and `roots`, without waiting: an
/// opening under way elsewhere is not waited for here.
fn already_open(home: &Path, roots: &[PathBuf]) -> Option<Opened> {
    let shared = shared().try_lock().ok()?;
    let (blobs, workspaces) = shared.get(home)?;
    Some(Opened {
        blobs: blobs.upgrade()?,
        workspace: workspaces.get(roots)?.upgrade()?,
    })
}

/// Opens the store and the index (shared with the other sessions of this home and roots);
/// says whether the index is new (not read yet).
fn open(place: &Place) -> Option<(Opened, bool)> {
    talaria_util::failpoint::step("checkpoints::open::before");
    let bounds = Bounds::default();
    let mut shared = talaria_util::lock(shared());
    let (blobs, workspaces) = shared.entry(place.home.clone()).or_default();
    let store = match blobs.upgrade() {
        Some(store) => store,
        None => match BlobStore::open(&place.home) {
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
    if let Some(workspace) = workspaces.get(&place.roots).and_then(Weak::upgrade) {
        let opened = Opened {
            blobs: store,
            workspace,
        };
        return Some((opened, false));
    }
    let workspace = Arc::new(Workspace::new(
        place.roots.clone(),
        store.clone(),
        bounds,
        place.places.clone(),
    ));
    workspaces.insert(place.roots.clone(), Arc::downgrade(&workspace));
    let opened = Opened {
        blobs: store,
        workspace,
    };
    Some((opened, true))
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
    /// The store and the index, opened by this call when the opening thread has not yet
    /// (blocking; `None`: the store cannot be opened).
    fn opened(&self) -> Option<&Opened> {
        self.opened
            .get_or_init(|| open(&self.place).map(|(opened, _)| opened))
            .as_ref()
    }

    /// The opening thread: opens, then reads the index, unless a call was first.
    fn open_and_warm(&self) {
        let mut unread = false;
        let opened = self.opened.get_or_init(|| {
            let (opened, new) = open(&self.place)?;
            unread = new;
            Some(opened)
        });
        if let (true, Some(opened)) = (unread, opened) {
            opened.workspace.before_command();
        }
    }

    /// Reads what a call is about to change (off the runtime thread).
    pub(crate) async fn before(self: &Arc<Self>, writes: &[PathBuf], walk: bool) -> Before {
        let this = self.clone();
        let writes = writes.to_vec();
        let before = tokio::task::spawn_blocking(move || {
            let Some(opened) = this.opened() else {
                return Before::Nothing;
            };
            if walk {
                opened.workspace.before_command();
                Before::Walked
            } else if writes.is_empty() {
                Before::Nothing
            } else {
                Before::Files(opened.workspace.files_before(&writes))
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
        let after = tokio::task::spawn_blocking(move || match (this.opened(), before) {
            (None, _) | (_, Before::Nothing) => Capture::default(),
            (Some(opened), Before::Walked) => opened.workspace.after_command(&session),
            (Some(opened), Before::Files(files)) => opened.workspace.files_after(&session, files),
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
        match self.opened() {
            Some(opened) => opened.workspace.restore(session, changes, force),
            None => talaria_checkpoints::RestoreReport {
                failed: changes
                    .iter()
                    .map(|change| {
                        let why = "the checkpoints' store cannot be opened (see the log)";
                        (change.path.clone(), why.to_string())
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    /// A fork holds what its parent's checkpoints hold (blocking).
    pub fn copy_holdings(&self, from: &str, to: &str) {
        let Some(opened) = self.opened() else {
            return;
        };
        if let Err(error) = opened.blobs.copy_holdings(from, to) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &Path) -> talaria_record::FileChange {
        talaria_record::FileChange {
            path: path.display().to_string(),
            before: None,
            after: None,
        }
    }

    /// A home whose checkpoint store cannot be made (a file where its folder goes): the
    /// session's start is not refused, calls keep nothing, and a restore says why each file
    /// could not go back instead of pretending.
    #[tokio::test]
    async fn a_store_that_cannot_open_keeps_nothing_and_says_so_on_restore() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cwd = dir.path().canonicalize().expect("canonical");
        let home = cwd.join("home");
        std::fs::create_dir(&home).expect("home");
        std::fs::write(home.join("checkpoints"), "not a folder").expect("blocker");
        let checkpoints = checkpoints_for(
            &home,
            std::slice::from_ref(&cwd),
            Arc::new(talaria_files::Unguarded),
        );
        let file = cwd.join("a.txt");
        let before = checkpoints.before(std::slice::from_ref(&file), false).await;
        assert!(matches!(before, Before::Nothing));
        std::fs::write(&file, "made").expect("write");
        assert_eq!(checkpoints.after("s1", before).await, Capture::default());
        let report = checkpoints.restore("s1", &[change(&file)], false);
        assert!(report.restored.is_empty());
        assert_eq!(report.failed.len(), 1, "{report:?}");
        assert!(
            report.failed[0].1.contains("cannot be opened"),
            "{report:?}"
        );
    }

    /// Sessions of one home and workspace share the store and the index: a second start
    /// finds them open and is given them at once (no thread, no disk).
    #[tokio::test]
    async fn a_second_start_in_the_same_workspace_shares_what_the_first_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cwd = dir.path().canonicalize().expect("canonical");
        let home = cwd.join(".home");
        let roots = std::slice::from_ref(&cwd);
        let first = checkpoints_for(&home, roots, Arc::new(talaria_files::Unguarded));
        let opened = first.opened().expect("opened");
        let second = checkpoints_for(&home, roots, Arc::new(talaria_files::Unguarded));
        let shared = second
            .opened
            .get()
            .and_then(Option::as_ref)
            .expect("at once");
        assert!(Arc::ptr_eq(&opened.blobs, &shared.blobs));
        assert!(Arc::ptr_eq(&opened.workspace, &shared.workspace));
    }
}
