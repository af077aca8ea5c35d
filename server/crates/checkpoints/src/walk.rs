//! The stat walk of a workspace: every regular file under the roots that `.gitignore` does
//! not ignore, outside any `.git`, with what tells a change without reading it.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ignore::{WalkBuilder, WalkState};

/// What tells that a file changed without reading it: a write moves its mtime or ctime, a
/// replacement its inode, a `chmod` its ctime and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub len: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub inode: u64,
    pub mode: u32,
}

impl Stat {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        Stat {
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            inode: meta.ino(),
            mode: meta.mode() & 0o7777,
        }
    }
}

/// The files under `roots` and their stats; stops counting past `max_files` (`None`: the
/// workspace holds more than that).
pub(crate) fn stat_walk(roots: &[PathBuf], max_files: usize) -> Option<HashMap<PathBuf, Stat>> {
    let Some((first, rest)) = roots.split_first() else {
        return Some(HashMap::new());
    };
    let mut builder = WalkBuilder::new(first);
    for root in rest {
        builder.add(root);
    }
    builder
        .hidden(false)
        .ignore(false)
        .git_global(false)
        .require_git(false)
        .git_ignore(true)
        .git_exclude(true)
        .parents(true)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .threads(
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(4),
        );
    let found: Mutex<HashMap<PathBuf, Stat>> = Mutex::new(HashMap::new());
    let over = std::sync::atomic::AtomicBool::new(false);
    builder.build_parallel().run(|| {
        Box::new(|entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let Ok(meta) = entry.metadata() else {
                return WalkState::Continue;
            };
            let mut found = talaria_util::lock(&found);
            if found.len() >= max_files {
                over.store(true, std::sync::atomic::Ordering::Relaxed);
                return WalkState::Quit;
            }
            found.insert(entry.into_path(), Stat::of(&meta));
            WalkState::Continue
        })
    });
    if over.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    Some(talaria_util::into_inner(found))
}

/// Whether `path` is a regular file now (not a link, a folder or a socket).
pub(crate) fn regular_stat(path: &Path) -> Option<Stat> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|meta| Stat::of(&meta))
}
