//! Putting files back: for each file the rewound turns changed, the version before the
//! first of those changes, written whole or not at all, through the one way to the user's
//! files (below the workspace's held roots, no link followed, the temporary file made
//! exclusively and renamed within its folder). A file that is neither as the agent's last
//! change left it nor already back is left alone unless forced. Doing it again is harmless: a
//! file already back counts as put back, so a restore cut off by a crash is finished by
//! running it again, and the temporary names a cut-off write left are swept.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use talaria_files::{Replace, Root};
use talaria_record::{FileChange, FileVersion};

use crate::Workspace;
use crate::blobs::hash_of;

/// What a restore did, by path (each path once).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Put back as they were (or found already back).
    pub restored: Vec<String>,
    /// Changed since the agent last did (by hand, or by something else): left as they are.
    pub skipped: Vec<String>,
    /// Could not be put back, with why (left as they were before the attempt).
    pub failed: Vec<(String, String)>,
}

/// Why one file could not be checked or put back.
#[derive(Debug, thiserror::Error)]
enum RestoreError {
    #[error("the checkpoint did not keep this version (over its bound)")]
    NotKept,
    #[error("its kept content cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("it is not a path Talaria can reach with no link on its way")]
    Unreachable,
    #[error("{0}")]
    File(#[from] talaria_files::FileError),
    #[error("the write failed as a full disk would (failpoint)")]
    Injected,
}

/// The history of one file among the changes undone: the state to put back (before its
/// first change) and the state the agent's last change left.
struct History<'a> {
    target: Option<&'a FileVersion>,
    left: Option<&'a FileVersion>,
}

impl Workspace {
    /// Undoes `changes` (in the order they were made): each file goes back to how it was
    /// before the first of them, newest-changed first. A file that is not as the agent's last
    /// change left it (nor already back) is skipped; with `force`, put back anyway.
    pub fn restore(&self, session: &str, changes: &[FileChange], force: bool) -> RestoreReport {
        let mut histories: HashMap<&str, History<'_>> = HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        for change in changes {
            let path = change.path.as_str();
            match histories.get_mut(path) {
                Some(history) => history.left = change.after.as_ref(),
                None => {
                    histories.insert(
                        path,
                        History {
                            target: change.before.as_ref(),
                            left: change.after.as_ref(),
                        },
                    );
                }
            }
            order.retain(|p| *p != path);
            order.push(path);
        }
        let mut report = RestoreReport::default();
        for path in order.iter().rev() {
            let Some(history) = histories.get(path) else {
                continue;
            };
            match self.restore_one(session, Path::new(path), history, force) {
                Ok(true) => report.restored.push(path.to_string()),
                Ok(false) => report.skipped.push(path.to_string()),
                Err(why) => report.failed.push((path.to_string(), why.to_string())),
            }
        }
        self.sweep_temporaries(&order);
        report
    }

    /// Puts one file back; `false` when it is left as it is (changed since the agent).
    fn restore_one(
        &self,
        session: &str,
        path: &Path,
        history: &History<'_>,
        force: bool,
    ) -> Result<bool, RestoreError> {
        let (root, relative) = self.locate(path).ok_or(RestoreError::Unreachable)?;
        if !force {
            if history.target.is_some_and(|t| t.hash.is_some())
                && matches_now(root, relative, history.target).unwrap_or(false)
            {
                return Ok(true);
            }
            if history.target.is_none() && matches_now(root, relative, None)? {
                return Ok(true);
            }
            if !matches_now(root, relative, history.left)? {
                return Ok(false);
            }
        }
        self.put_back(session, root, relative, history.target)?;
        Ok(true)
    }

    /// Writes `version` at `relative` below `root` (`None`: removes the file there).
    fn put_back(
        &self,
        session: &str,
        root: &Root,
        relative: &Path,
        version: Option<&FileVersion>,
    ) -> Result<(), RestoreError> {
        if talaria_util::failpoint::injected("rewind::file::before") {
            return Err(RestoreError::Injected);
        }
        match version {
            None => {
                root.remove(relative)?;
            }
            Some(version) => {
                let hash = version.hash.as_deref().ok_or(RestoreError::NotKept)?;
                let bytes = self
                    .blobs
                    .content(session, hash)
                    .map_err(RestoreError::Unreadable)?;
                let how = Replace {
                    mode: Some(version.mode),
                    sync: true,
                };
                root.replace(relative, &bytes, &how)?;
            }
        }
        talaria_util::failpoint::step("rewind::file::after");
        Ok(())
    }

    /// Removes what writes cut off by a crash left beside the files of `paths`: one listing
    /// per folder.
    fn sweep_temporaries(&self, paths: &[&str]) {
        let mut folders: BTreeMap<(usize, PathBuf), Vec<OsString>> = BTreeMap::new();
        for path in paths {
            let Some((root, relative)) = self.locate(Path::new(path)) else {
                continue;
            };
            let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
                continue;
            };
            let index = self.root_index(root);
            folders
                .entry((index, parent.to_path_buf()))
                .or_default()
                .push(name.to_os_string());
        }
        for ((index, parent), names) in folders {
            let Some(root) = self.root_at(index) else {
                continue;
            };
            let Ok(dir) = root.dir(&parent) else {
                continue;
            };
            for name in names {
                if let Err(error) = dir.sweep_temporaries(&name) {
                    tracing::debug!("temporary files of {name:?} not swept: {error}");
                }
            }
        }
    }
}

/// Whether the file at `relative` is `expected` now (`None`: it is absent). A version whose
/// content was not kept cannot be compared.
fn matches_now(
    root: &Root,
    relative: &Path,
    expected: Option<&FileVersion>,
) -> Result<bool, RestoreError> {
    let stat = match root.stat(relative) {
        Ok(stat) => stat,
        // A folder on the way swapped for a link: the file is not as anything left it.
        Err(talaria_files::FileError::Link(_)) => return Ok(false),
        Err(error) => return Err(error.into()),
    };
    let Some(stat) = stat else {
        return Ok(expected.is_none());
    };
    let Some(expected) = expected else {
        return Ok(false);
    };
    if !stat.is_file() || stat.len != expected.len {
        return Ok(false);
    }
    let Some(hash) = &expected.hash else {
        return Err(RestoreError::NotKept);
    };
    if stat.mode != expected.mode {
        return Ok(false);
    }
    let bytes = match root.read(relative, expected.len) {
        Ok(bytes) => bytes,
        Err(talaria_files::FileError::Link(_) | talaria_files::FileError::TooLarge { .. }) => {
            return Ok(false);
        }
        Err(error) => return Err(error.into()),
    };
    Ok(hash_of(&bytes) == *hash)
}
