//! The stat walk of a workspace: every regular file under the roots that `.gitignore` does
//! not ignore, outside any `.git`, with what tells a change without reading it.

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
/// workspace holds more than that). One `readdir` per folder and one `fstatat` per file
/// (through the folder, as `std` does); a `.gitignore` is read only where a listing shows one.
pub(crate) fn stat_walk(roots: &[PathBuf], max_files: usize) -> Option<HashMap<PathBuf, Stat>> {
    let mut found = HashMap::new();
    for root in roots {
        let ignores = parent_ignores(root);
        let mut folders = Vec::new();
        walk_one(root, &ignores, &mut found, &mut folders, max_files)?;
        walk_spread(folders, &mut found, max_files)?;
    }
    Some(found)
}

/// Walks `folders` (each with the `.gitignore`s that apply to it) on the machine's cores,
/// each thread down its own share of the tree.
fn walk_spread(
    folders: Vec<(PathBuf, Ignores)>,
    found: &mut HashMap<PathBuf, Stat>,
    max_files: usize,
) -> Option<()> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let mut shares: Vec<Vec<(PathBuf, Ignores)>> = (0..threads).map(|_| Vec::new()).collect();
    for (index, folder) in folders.into_iter().enumerate() {
        shares[index % threads].push(folder);
    }
    let walk_share = move |share: Vec<(PathBuf, Ignores)>| {
        let mut own = HashMap::new();
        for (folder, ignores) in share {
            walk_dir(&folder, &ignores, &mut own, max_files)?;
        }
        Some(own)
    };
    let walked: Vec<Option<HashMap<PathBuf, Stat>>> = std::thread::scope(|scope| {
        let mut running = Vec::new();
        let mut here = Vec::new();
        for share in shares {
            // A share whose thread cannot start (a low process limit) is walked here.
            match std::thread::Builder::new()
                .name("talaria-checkpoint-walk".into())
                .spawn_scoped(scope, {
                    let share = share.clone();
                    move || walk_share(share)
                }) {
                Ok(thread) => running.push(thread),
                Err(_) => here.push(walk_share(share)),
            }
        }
        running
            .into_iter()
            .map(|t| t.join().ok().flatten())
            .chain(here)
            .collect()
    });
    for part in walked {
        found.extend(part?);
        if found.len() > max_files {
            return None;
        }
    }
    Some(())
}

/// The `.gitignore`s that apply in a folder, outermost first (shared by the folders below).
type Ignores = Arc<[Arc<Gitignore>]>;

/// The `.gitignore`s above `root`, up to its repository's top (a folder holding `.git`).
fn parent_ignores(root: &Path) -> Ignores {
    let mut found = Vec::new();
    let mut at = root.parent();
    if root.join(".git").exists() {
        return found.into();
    }
    while let Some(dir) = at {
        if let Some(ignore) = read_ignore(dir, &dir.join(".gitignore")) {
            found.push(Arc::new(ignore));
        }
        if dir.join(".git").exists() {
            break;
        }
        at = dir.parent();
    }
    found.reverse();
    found.into()
}

fn read_ignore(dir: &Path, file: &Path) -> Option<Gitignore> {
    if !file.is_file() {
        return None;
    }
    let mut builder = GitignoreBuilder::new(dir);
    builder.add(file);
    builder.build().ok().filter(|ignore| !ignore.is_empty())
}

/// Whether the innermost `.gitignore` that has a say ignores `path`.
fn ignored(ignores: &[Arc<Gitignore>], path: &Path, is_dir: bool) -> bool {
    for ignore in ignores.iter().rev() {
        match ignore.matched(path, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

/// Lists `dir`: its files into `found`, its folders (with the `.gitignore`s that apply) into
/// `folders`, to be walked.
fn walk_one(
    dir: &Path,
    ignores: &Ignores,
    found: &mut HashMap<PathBuf, Stat>,
    folders: &mut Vec<(PathBuf, Ignores)>,
    max_files: usize,
) -> Option<()> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Some(());
    };
    // Read whole and closed before the folders below are opened: one descriptor at a time.
    let entries: Vec<std::fs::DirEntry> = listing.flatten().collect();
    let mut ignores = ignores.clone();
    if entries.iter().any(|e| e.file_name() == ".gitignore")
        && let Some(own) = read_ignore(dir, &dir.join(".gitignore"))
    {
        ignores = ignores.iter().cloned().chain([Arc::new(own)]).collect();
    }
    for entry in entries {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() && entry.file_name() != ".git" && !ignored(&ignores, &path, true) {
            folders.push((path, ignores.clone()));
        } else if kind.is_file() && !ignored(&ignores, &path, false) {
            let Ok(meta) = entry.metadata() else { continue };
            if found.len() >= max_files {
                return None;
            }
            found.insert(path, Stat::of(&meta));
        }
    }
    Some(())
}

/// Walks `dir` and everything below it that is not ignored.
fn walk_dir(
    dir: &Path,
    ignores: &Ignores,
    found: &mut HashMap<PathBuf, Stat>,
    max_files: usize,
) -> Option<()> {
    let mut folders = vec![(dir.to_path_buf(), ignores.clone())];
    while let Some((folder, ignores)) = folders.pop() {
        walk_one(&folder, &ignores, found, &mut folders, max_files)?;
    }
    Some(())
}

/// Whether `path` is a regular file now (not a link, a folder or a socket).
pub(crate) fn regular_stat(path: &Path) -> Option<Stat> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|meta| Stat::of(&meta))
}
