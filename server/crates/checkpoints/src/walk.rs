//! The stat walk of a workspace: every regular file under the roots that `.gitignore` does
//! not ignore, outside any `.git` and any place the sandbox hides, with what tells a change
//! without reading it. Every folder is opened below its root's held descriptor with no link
//! followed (`talaria-files`): a folder a command swaps for a link while the walk runs is not
//! entered, whatever it leads to.

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_files::{Dir, Kind, Root};

/// The most a `.gitignore` read by the walk may hold.
const MAX_IGNORE_BYTES: u64 = 1 << 20;

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
    pub(crate) fn of(stat: &talaria_files::Stat) -> Self {
        Stat {
            len: stat.len,
            mtime_ns: stat.mtime_ns,
            ctime_ns: stat.ctime_ns,
            inode: stat.ino,
            mode: stat.mode,
        }
    }
}

/// The files under `roots` and their stats, by path as the root names them; stops counting
/// past `max_files` (`None`: the workspace holds more than that). One listing per folder and
/// one `fstatat` per file, through the folder's descriptor; a `.gitignore` is read only where
/// a listing shows one.
pub(crate) fn stat_walk(roots: &[Root], max_files: usize) -> Option<HashMap<PathBuf, Stat>> {
    let mut found = HashMap::new();
    for root in roots {
        let ignores = parent_ignores(root);
        let mut folders = Vec::new();
        walk_one(
            root,
            Path::new(""),
            &ignores,
            &mut found,
            &mut folders,
            max_files,
        )?;
        walk_spread(root, folders, &mut found, max_files)?;
    }
    Some(found)
}

/// A folder still to walk: its path below the root, and the `.gitignore`s that apply to it.
type Folder = (PathBuf, Ignores);

/// Walks `folders` on the machine's cores, each thread down its own share of the tree.
fn walk_spread(
    root: &Root,
    folders: Vec<Folder>,
    found: &mut HashMap<PathBuf, Stat>,
    max_files: usize,
) -> Option<()> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let mut shares: Vec<Vec<Folder>> = (0..threads).map(|_| Vec::new()).collect();
    for (index, folder) in folders.into_iter().enumerate() {
        shares[index % threads].push(folder);
    }
    let walk_share = move |share: Vec<Folder>| {
        let mut own = HashMap::new();
        for (folder, ignores) in share {
            walk_dir(root, &folder, &ignores, &mut own, max_files)?;
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

/// The `.gitignore`s above the root, up to its repository's top (a folder holding `.git`),
/// each read below its own folder with no link followed.
fn parent_ignores(root: &Root) -> Ignores {
    let mut found = Vec::new();
    let has_git = |dir: &Dir| dir.stat(".git".as_ref()).is_ok_and(|s| s.is_some());
    if has_git(root.as_dir()) {
        return found.into();
    }
    let mut at = root.shown().parent();
    while let Some(dir) = at {
        let Ok(above) = Root::open(dir, root.places()) else {
            break;
        };
        if let Some(ignore) = read_ignore(above.as_dir(), dir) {
            found.push(Arc::new(ignore));
        }
        if has_git(above.as_dir()) {
            break;
        }
        at = dir.parent();
    }
    found.reverse();
    found.into()
}

/// The `.gitignore` of `dir` (named `shown`), if it has one that says something.
fn read_ignore(dir: &Dir, shown: &Path) -> Option<Gitignore> {
    let bytes = dir.read(".gitignore".as_ref(), MAX_IGNORE_BYTES).ok()?;
    let file = shown.join(".gitignore");
    let mut builder = GitignoreBuilder::new(shown);
    for line in String::from_utf8_lossy(&bytes).lines() {
        let _ = builder.add_line(Some(file.clone()), line);
    }
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

/// Lists the folder `relative` below the root: its files into `found`, its folders (with the
/// `.gitignore`s that apply) into `folders`, to be walked. A folder that cannot be opened
/// with no link on the way (swapped for one, or hidden) is passed over.
fn walk_one(
    root: &Root,
    relative: &Path,
    ignores: &Ignores,
    found: &mut HashMap<PathBuf, Stat>,
    folders: &mut Vec<Folder>,
    max_files: usize,
) -> Option<()> {
    let Ok(dir) = root.dir(relative) else {
        return Some(());
    };
    // Read whole and closed before the folders below are opened: one listing at a time.
    let Ok(entries) = dir.entries() else {
        return Some(());
    };
    let shown = root.shown().join(relative);
    let mut ignores = ignores.clone();
    if entries.iter().any(|(name, _)| name == ".gitignore")
        && let Some(own) = read_ignore(&dir, &shown)
    {
        ignores = ignores.iter().cloned().chain([Arc::new(own)]).collect();
    }
    for (name, kind) in entries {
        let path = shown.join(&name);
        if kind == Kind::Directory && name != ".git" && !ignored(&ignores, &path, true) {
            folders.push((relative.join(&name), ignores.clone()));
        } else if kind == Kind::File && !ignored(&ignores, &path, false) {
            let Ok(Some(stat)) = dir.stat(&name) else {
                continue;
            };
            if !stat.is_file() {
                continue;
            }
            if found.len() >= max_files {
                return None;
            }
            found.insert(path, Stat::of(&stat));
        }
    }
    Some(())
}

/// Walks the folder `relative` and everything below it that is not ignored.
fn walk_dir(
    root: &Root,
    relative: &Path,
    ignores: &Ignores,
    found: &mut HashMap<PathBuf, Stat>,
    max_files: usize,
) -> Option<()> {
    let mut folders = vec![(relative.to_path_buf(), ignores.clone())];
    while let Some((folder, ignores)) = folders.pop() {
        walk_one(root, &folder, &ignores, found, &mut folders, max_files)?;
    }
    Some(())
}
