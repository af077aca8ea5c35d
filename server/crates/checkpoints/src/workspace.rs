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

use talaria_record::{FileChange, FileVersion};

use crate::blobs::BlobStore;
use crate::walk::{Stat, regular_stat, stat_walk};

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
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_files: 100_000,
            max_workspace_bytes: 2 << 30,
            max_file_bytes: 16 << 20,
            max_call_bytes: 256 << 20,
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

/// What the index knows of one file.
#[derive(Debug, Clone)]
struct Known {
    stat: Stat,
    /// `None`: the content was over a bound (or unreadable) and is not kept.
    hash: Option<String>,
}

impl Known {
    fn version(&self) -> FileVersion {
        FileVersion {
            hash: self.hash.clone(),
            mode: self.stat.mode,
            len: self.stat.len,
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
    roots: Vec<PathBuf>,
    blobs: Arc<BlobStore>,
    bounds: Bounds,
    index: Mutex<Index>,
}

/// Reads one file's content into the store, within `budget` (bytes left for this call).
fn keep(blobs: &BlobStore, path: &Path, stat: Stat, budget: &mut u64, max: u64) -> Known {
    let hash = if stat.len <= max && stat.len <= *budget {
        std::fs::read(path).ok().and_then(|bytes| {
            *budget = budget.saturating_sub(bytes.len() as u64);
            blobs.keep_pending(&bytes).ok()
        })
    } else {
        None
    };
    Known { stat, hash }
}

impl Workspace {
    pub fn new(roots: Vec<PathBuf>, blobs: Arc<BlobStore>, bounds: Bounds) -> Self {
        Workspace {
            roots,
            blobs,
            bounds,
            index: Mutex::new(Index::Unbuilt),
        }
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
            let now = keep(&self.blobs, path, *stat, budget, self.bounds.max_file_bytes);
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

/// A file's state before and after (`None`: absent).
type Diff = (PathBuf, Option<Known>, Option<Known>);

/// The changes among `diffs` (a touch that changed neither content nor mode is none), their
/// contents held by `session`, and what could not be kept.
fn finish(blobs: &BlobStore, session: &str, mut diffs: Vec<Diff>, bounds: &Bounds) -> Capture {
    diffs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut capture = Capture::default();
    let mut unkept = Vec::new();
    for (path, before, after) in diffs {
        let same = match (&before, &after) {
            (None, None) => true,
            (Some(b), Some(a)) if b.hash.is_some() && a.hash.is_some() => {
                b.hash == a.hash && b.stat.mode == a.stat.mode
            }
            (Some(b), Some(a)) => b.stat == a.stat,
            _ => false,
        };
        if same {
            continue;
        }
        for known in [&before, &after].into_iter().flatten() {
            match &known.hash {
                Some(hash) => {
                    if let Err(error) = blobs.hold(session, hash) {
                        tracing::warn!("a checkpoint could not keep {}: {error}", path.display());
                    }
                }
                None => unkept.push(path.display().to_string()),
            }
        }
        capture.changes.push(FileChange {
            path: path.display().to_string(),
            before: before.as_ref().map(Known::version),
            after: after.as_ref().map(Known::version),
        });
    }
    unkept.dedup();
    if !unkept.is_empty() {
        capture.notes.push(format!(
            "The checkpoint could not keep every version of {} file(s) (over {} MiB each, or \
             over {} MiB for one call): a rewind cannot put back {}.",
            unkept.len(),
            bounds.max_file_bytes >> 20,
            bounds.max_call_bytes >> 20,
            unkept.join(", ")
        ));
    }
    capture
}

/// The files a file tool names, as they were before it ran.
#[derive(Debug, Default)]
pub struct FilesBefore {
    files: Vec<(PathBuf, Option<Known>)>,
}

/// Reads the files a file tool is about to write (absent ones noted as absent; anything but
/// a regular file is left out: the tool refuses it).
pub fn files_before(blobs: &BlobStore, paths: &[PathBuf], bounds: &Bounds) -> FilesBefore {
    let mut budget = bounds.max_call_bytes;
    let mut files = Vec::new();
    for path in paths {
        match std::fs::symlink_metadata(path) {
            Err(_) => files.push((path.clone(), None)),
            Ok(meta) if meta.is_file() => {
                let known = keep(
                    blobs,
                    path,
                    Stat::of(&meta),
                    &mut budget,
                    bounds.max_file_bytes,
                );
                files.push((path.clone(), Some(known)));
            }
            Ok(_) => {}
        }
    }
    FilesBefore { files }
}

/// What a file tool changed of the files read by [`files_before`].
pub fn files_after(
    blobs: &BlobStore,
    session: &str,
    before: FilesBefore,
    bounds: &Bounds,
) -> Capture {
    let mut budget = bounds.max_call_bytes;
    let diffs = before
        .files
        .into_iter()
        .map(|(path, was)| {
            let now = regular_stat(&path)
                .map(|stat| keep(blobs, &path, stat, &mut budget, bounds.max_file_bytes));
            (path, was, now)
        })
        .collect();
    finish(blobs, session, diffs, bounds)
}
