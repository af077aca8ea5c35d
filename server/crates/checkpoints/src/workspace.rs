//! What a call changed in the workspace: a content-addressed index of every file under the
//! roots, brought up to date before a command and compared after it; and, for a file tool,
//! the files it names read before and after.
//!
//! The index holds each file's stat and content hash; the content itself is kept pending in
//! the [`BlobStore`] until a checkpoint names it. Only files whose stat moved are read again,
//! so a walk of an unchanged workspace reads no file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use talaria_files::{Places, Root};
use talaria_record::{FileChange, FileVersion};

use crate::blobs::BlobStore;
use crate::walk::{Stat, stat_walk};

/// How much a checkpoint holds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Past this many files under the roots, commands are not checkpointed.
    pub max_files: usize,
    /// Past this many bytes of files under the roots (what the first index would read),
    /// commands are not checkpointed either.
    pub max_workspace_bytes: u64,
    /// A file larger than this is noted as changed, its content not kept.
    pub max_file_bytes: u64,
    /// What one call's checkpoint reads at most; past it, changed files are noted, their
    /// content not kept.
    pub max_call_bytes: u64,
    /// The free room kept for the session store on the disk that holds the checkpoints (at
    /// most `1 / store_reserve_share` of that disk): a content that would leave less is
    /// noted, not kept.
    pub store_reserve_bytes: u64,
    pub store_reserve_share: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_files: 100_000,
            max_workspace_bytes: 2 << 30,
            max_file_bytes: 16 << 20,
            max_call_bytes: 256 << 20,
            store_reserve_bytes: 64 << 20,
            store_reserve_share: 2,
        }
    }
}

/// What a call's checkpoint kept: the files it changed, and what could not be kept.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Capture {
    pub changes: Vec<FileChange>,
    /// Said to the user: contents over the bounds, a workspace too large to watch.
    pub notes: Vec<String>,
}

/// Why a version's content was not kept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Unkept {
    /// Over the bound of one file.
    OverFile,
    /// Past what one call may keep.
    OverCall,
    /// Keeping it would have left the store's disk under its reserve.
    Reserve { free: u64, reserve: u64 },
    /// The content store could not write it (a full disk, an I/O error).
    Store(String),
    /// It could not be read (gone, swapped for a link, unreadable).
    Unreadable,
}

/// What the index knows of one file.
#[derive(Debug, Clone)]
struct Known {
    stat: Stat,
    /// `None`: the content was not kept, for the reason `unkept` says.
    hash: Option<String>,
    unkept: Option<Unkept>,
}

impl Known {
    fn version(&self) -> FileVersion {
        FileVersion {
            hash: self.hash.clone(),
            mode: self.stat.mode,
            len: self.stat.len,
        }
    }

    fn unkept(stat: Stat, why: Unkept) -> Self {
        Known {
            stat,
            hash: None,
            unkept: Some(why),
        }
    }
}

#[derive(Debug)]
enum Index {
    Unbuilt,
    Built(HashMap<PathBuf, Known>),
    /// More files (or bytes) than the bounds: commands here are not checkpointed, and the
    /// workspace is not walked again in this process; the sessions told so.
    TooLarge(std::collections::HashSet<String>),
}

/// The workspace of one or more sessions (the same roots share one index).
#[derive(Debug)]
pub struct Workspace {
    /// The roots, each resolved and held when the workspace was first used.
    roots: Vec<Root>,
    /// `/`, for a file a tool names outside the roots (reached with no link on its way).
    system: Option<Root>,
    pub(crate) blobs: Arc<BlobStore>,
    bounds: Bounds,
    index: Mutex<Index>,
}

impl Workspace {
    /// The workspace of `roots` (each resolved now and held; one that cannot be opened is
    /// not walked), judged by `places` (what the sandbox hides is never read or written).
    pub fn new(
        roots: Vec<PathBuf>,
        blobs: Arc<BlobStore>,
        bounds: Bounds,
        places: Arc<dyn Places>,
    ) -> Self {
        let held = roots
            .iter()
            .filter_map(|root| match Root::open(root, places.clone()) {
                Ok(held) => Some(held),
                Err(error) => {
                    tracing::warn!("checkpoints do not cover {}: {error}", root.display());
                    None
                }
            })
            .collect();
        Workspace {
            roots: held,
            system: Root::system(places).ok(),
            blobs,
            bounds,
            index: Mutex::new(Index::Unbuilt),
        }
    }

    /// The root `path` is below and its path there: a workspace root, or `/` for a path
    /// outside them.
    pub(crate) fn locate<'a>(&'a self, path: &'a Path) -> Option<(&'a Root, &'a Path)> {
        self.roots
            .iter()
            .find_map(|root| root.relative(path).map(|relative| (root, relative)))
            .or_else(|| {
                let system = self.system.as_ref()?;
                let relative = path.strip_prefix("/").ok()?;
                let plain = relative
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
                plain.then_some((system, relative))
            })
    }

    /// The place of `root` among the roots (`usize::MAX`: `/`).
    pub(crate) fn root_index(&self, root: &Root) -> usize {
        self.roots
            .iter()
            .position(|held| std::ptr::eq(held, root))
            .unwrap_or(usize::MAX)
    }

    /// The root at `index` ([`Workspace::root_index`]).
    pub(crate) fn root_at(&self, index: usize) -> Option<&Root> {
        match index {
            usize::MAX => self.system.as_ref(),
            index => self.roots.get(index),
        }
    }

    /// `path`'s own status if it is a regular file now (not a link, a folder or a socket,
    /// and reached with no link on its way).
    pub(crate) fn regular_stat(&self, path: &Path) -> Option<talaria_files::Stat> {
        let (root, relative) = self.locate(path)?;
        root.stat(relative)
            .ok()
            .flatten()
            .filter(talaria_files::Stat::is_file)
    }

    /// Reads one file's content into the store, within `budget` (bytes left for this call).
    fn keep(&self, path: &Path, stat: Stat, budget: &mut u64) -> Known {
        if stat.len > self.bounds.max_file_bytes {
            return Known::unkept(stat, Unkept::OverFile);
        }
        if stat.len > *budget {
            return Known::unkept(stat, Unkept::OverCall);
        }
        if let Some(why) = self.under_reserve(stat.len) {
            return Known::unkept(stat, why);
        }
        let Some((root, relative)) = self.locate(path) else {
            return Known::unkept(stat, Unkept::Unreadable);
        };
        let Ok(bytes) = root.read(relative, self.bounds.max_file_bytes) else {
            return Known::unkept(stat, Unkept::Unreadable);
        };
        *budget = budget.saturating_sub(bytes.len() as u64);
        match self.blobs.keep_pending(&bytes) {
            Ok(hash) => Known {
                stat,
                hash: Some(hash),
                unkept: None,
            },
            Err(error) => Known::unkept(stat, Unkept::Store(error.to_string())),
        }
    }

    /// Why `len` more bytes would not be kept on the store's disk: what would be left is
    /// under the reserve for the session store (at most half the disk).
    fn under_reserve(&self, len: u64) -> Option<Unkept> {
        let (free, size) = self.blobs.room()?;
        shortfall(&self.bounds, free, size, len)
    }

    /// Brings the index up to date before a command (what changed since it last looked, by
    /// the user or anything else, is not the command's). The first call reads the whole
    /// workspace.
    pub fn before_command(&self) {
        let mut budget = u64::MAX;
        let mut index = talaria_util::lock(&self.index);
        if !matches!(*index, Index::TooLarge(_)) {
            self.refresh(&mut index, &mut budget);
        }
    }

    /// What changed since [`Workspace::before_command`]: the command's changes, their
    /// contents held by `session`.
    pub fn after_command(&self, session: &str) -> Capture {
        let mut budget = self.bounds.max_call_bytes;
        let mut index = talaria_util::lock(&self.index);
        let diffs = match *index {
            Index::TooLarge(_) => None,
            _ => self.refresh(&mut index, &mut budget),
        };
        let Some(diffs) = diffs else {
            let Index::TooLarge(told) = &mut *index else {
                return Capture::default();
            };
            let first = told.insert(session.to_string());
            return Capture {
                changes: Vec::new(),
                notes: first
                    .then(|| {
                        format!(
                            "Checkpoints do not cover commands here: the workspace holds more \
                             than {} files or {} GiB. A rewind cannot put back what commands \
                             change (file tools' edits are still kept).",
                            self.bounds.max_files,
                            self.bounds.max_workspace_bytes >> 30
                        )
                    })
                    .into_iter()
                    .collect(),
            };
        };
        drop(index);
        finish(&self.blobs, session, diffs, &self.bounds)
    }

    /// Walks the roots and reads what moved; returns what changed (before, after), or `None`
    /// when the workspace is over the file bound.
    fn refresh(&self, index: &mut Index, budget: &mut u64) -> Option<Vec<Diff>> {
        let walked = stat_walk(&self.roots, self.bounds.max_files).filter(|walked| {
            walked.values().map(|stat| stat.len).sum::<u64>() <= self.bounds.max_workspace_bytes
        });
        let Some(walked) = walked else {
            *index = Index::TooLarge(std::collections::HashSet::new());
            return None;
        };
        let known = match index {
            Index::Built(known) => known,
            Index::TooLarge(_) | Index::Unbuilt => {
                *index = Index::Built(HashMap::with_capacity(walked.len()));
                let Index::Built(known) = index else {
                    return None;
                };
                known
            }
        };
        let mut diffs = Vec::new();
        for (path, stat) in &walked {
            if known.get(path).is_some_and(|k| k.stat == *stat) {
                continue;
            }
            let now = self.keep(path, *stat, budget);
            let before = known.insert(path.clone(), now.clone());
            diffs.push((path.clone(), before, Some(now)));
        }
        let gone: Vec<PathBuf> = known
            .keys()
            .filter(|p| !walked.contains_key(*p))
            .cloned()
            .collect();
        for path in gone {
            let before = known.remove(&path);
            diffs.push((path, before, None));
        }
        Some(diffs)
    }
}

/// Why keeping `len` more bytes on a disk of `size` bytes with `free` left would take the
/// room the session store needs, if it would.
fn shortfall(bounds: &Bounds, free: u64, size: u64, len: u64) -> Option<Unkept> {
    let reserve = bounds
        .store_reserve_bytes
        .min(size / bounds.store_reserve_share.max(1));
    (free.saturating_sub(len) < reserve).then_some(Unkept::Reserve { free, reserve })
}

/// A file's state before and after (`None`: absent).
type Diff = (PathBuf, Option<Known>, Option<Known>);

/// Whether a file's state before and after are the same version: a touch that changed
/// neither content nor mode (or, where a content was not kept, nothing its stat shows).
fn same_version(before: Option<&Known>, after: Option<&Known>) -> bool {
    match (before, after) {
        (None, None) => true,
        (Some(b), Some(a)) if b.hash.is_some() && a.hash.is_some() => {
            b.hash == a.hash && b.stat.mode == a.stat.mode
        }
        (Some(b), Some(a)) => b.stat == a.stat,
        _ => false,
    }
}

/// The changes among `diffs`, their contents held by `session`, and what could not be kept
/// (with why).
fn finish(blobs: &BlobStore, session: &str, mut diffs: Vec<Diff>, bounds: &Bounds) -> Capture {
    diffs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut capture = Capture::default();
    let mut unkept: Vec<(Unkept, String)> = Vec::new();
    for (path, before, after) in diffs {
        if same_version(before.as_ref(), after.as_ref()) {
            continue;
        }
        let shown = path.display().to_string();
        for known in [&before, &after].into_iter().flatten() {
            let held = match &known.hash {
                Some(hash) => blobs
                    .hold(session, hash)
                    .map_err(|error| Unkept::Store(error.to_string())),
                None => Err(known.unkept.clone().unwrap_or(Unkept::Unreadable)),
            };
            if let Err(why) = held {
                unkept.push((why, shown.clone()));
            }
        }
        capture.changes.push(FileChange {
            path: shown,
            before: before.as_ref().map(Known::version),
            after: after.as_ref().map(Known::version),
        });
    }
    if let Some(note) = unkept_note(unkept, bounds) {
        capture.notes.push(note);
    }
    capture
}

/// What the user is told of the versions not kept, grouped by the true reason.
fn unkept_note(mut unkept: Vec<(Unkept, String)>, bounds: &Bounds) -> Option<String> {
    unkept.sort();
    unkept.dedup();
    let mib = |bytes: u64| bytes.div_ceil(1 << 20);
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (why, path) in unkept {
        let reason = match why {
            Unkept::OverFile => format!("over {} MiB each", mib(bounds.max_file_bytes)),
            Unkept::OverCall => format!(
                "past the {} MiB one call may keep",
                mib(bounds.max_call_bytes)
            ),
            Unkept::Reserve { free, reserve } => format!(
                "the disk holding Talaria's home has {} MiB free, and checkpoints leave the                  last {} MiB to the session store",
                free >> 20,
                mib(reserve)
            ),
            Unkept::Store(error) => format!("the checkpoint store could not write them: {error}"),
            Unkept::Unreadable => "they could not be read".to_string(),
        };
        // Sorted and without repeats: each path once per reason.
        match groups.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, paths)) => paths.push(path),
            None => groups.push((reason, vec![path])),
        }
    }
    let count: usize = groups.iter().map(|(_, paths)| paths.len()).sum();
    (count > 0).then(|| {
        let parts: Vec<String> = groups
            .iter()
            .map(|(reason, paths)| format!("{} ({reason})", paths.join(", ")))
            .collect();
        format!(
            "The checkpoint could not keep every version of {count} file(s): a rewind cannot              put back {}.",
            parts.join("; ")
        )
    })
}

/// The files a file tool names, as they were before it ran.
#[derive(Debug, Default)]
pub struct FilesBefore {
    files: Vec<(PathBuf, Option<Known>)>,
}

impl Workspace {
    /// Reads the files a file tool is about to write (absent ones noted as absent; anything
    /// but a regular file reached with no link is left out: the tool refuses it, or replaces
    /// a link's name, which is no content of the user's).
    pub fn files_before(&self, paths: &[PathBuf]) -> FilesBefore {
        let mut budget = self.bounds.max_call_bytes;
        let mut files = Vec::new();
        for path in paths {
            let Some((root, relative)) = self.locate(path) else {
                continue;
            };
            match root.stat(relative) {
                Ok(None) => files.push((path.clone(), None)),
                Ok(Some(stat)) if stat.is_file() => {
                    let known = self.keep(path, Stat::of(&stat), &mut budget);
                    files.push((path.clone(), Some(known)));
                }
                _ => {}
            }
        }
        FilesBefore { files }
    }

    /// What a file tool changed of the files read by [`Workspace::files_before`].
    pub fn files_after(&self, session: &str, before: FilesBefore) -> Capture {
        let mut budget = self.bounds.max_call_bytes;
        let diffs = before
            .files
            .into_iter()
            .map(|(path, was)| {
                let now = self
                    .regular_stat(&path)
                    .map(|stat| self.keep(&path, Stat::of(&stat), &mut budget));
                (path, was, now)
            })
            .collect();
        finish(&self.blobs, session, diffs, &self.bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(hash: Option<&str>, mode: u32, len: u64) -> Known {
        Known {
            stat: Stat {
                len,
                mtime_ns: 1,
                ctime_ns: 1,
                inode: 1,
                mode,
            },
            hash: hash.map(str::to_string),
            unkept: hash.is_none().then_some(Unkept::OverFile),
        }
    }

    #[test]
    fn a_version_is_the_same_only_with_the_same_content_and_mode() {
        let a = known(Some("sha256:a"), 0o644, 1);
        assert!(same_version(None, None));
        assert!(same_version(Some(&a), Some(&a)));
        assert!(!same_version(
            Some(&a),
            Some(&known(Some("sha256:b"), 0o644, 1))
        ));
        assert!(!same_version(
            Some(&a),
            Some(&known(Some("sha256:a"), 0o755, 1))
        ));
        assert!(!same_version(None, Some(&a)) && !same_version(Some(&a), None));
        // Without a kept content, only the stat can tell.
        let unkept = known(None, 0o644, 1);
        assert!(same_version(Some(&unkept), Some(&unkept)));
        assert!(!same_version(Some(&unkept), Some(&known(None, 0o644, 2))));
        // One kept and one not (over a bound since): the stat decides.
        assert!(same_version(Some(&a), Some(&known(None, 0o644, 1))));
        assert!(!same_version(Some(&a), Some(&known(None, 0o644, 3))));
    }

    #[test]
    fn the_reserve_is_the_bound_or_a_share_of_a_small_disk() {
        let bounds = Bounds {
            store_reserve_bytes: 64,
            store_reserve_share: 2,
            ..Bounds::default()
        };
        // A large disk: the bound itself.
        assert_eq!(shortfall(&bounds, 100, 1000, 36), None);
        assert_eq!(
            shortfall(&bounds, 100, 1000, 37),
            Some(Unkept::Reserve {
                free: 100,
                reserve: 64
            })
        );
        // A small disk: half of it.
        assert_eq!(shortfall(&bounds, 50, 60, 20), None);
        assert_eq!(
            shortfall(&bounds, 50, 60, 21),
            Some(Unkept::Reserve {
                free: 50,
                reserve: 30
            })
        );
        // More than is free.
        assert!(shortfall(&bounds, 10, 1000, 20).is_some());
    }
}
