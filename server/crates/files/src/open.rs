//! Opening a path below a held folder in one step, following no link: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, or, where the kernel has
//! no `openat2` (before 5.6, or a filter refuses it), one component at a time with
//! `O_NOFOLLOW`, refusing anything but plain names.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::FileError;

/// How `openat2` resolves every path here.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The flags every open here adds: close on exec, and no terminal taken over by a device.
pub(crate) fn with_defaults(flags: OFlags) -> OFlags {
    if flags.contains(OFlags::PATH) {
        // `O_PATH` admits only these beside it (`openat2` refuses others).
        flags.union(OFlags::CLOEXEC)
    } else {
        flags.union(OFlags::CLOEXEC).union(OFlags::NOCTTY)
    }
}

/// A folder passed on the way by the walk of old kernels: held, never through a link.
pub(crate) const FOLDER_STEP: OFlags = OFlags::PATH
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// `/` held.
pub(crate) const SYSTEM_ROOT: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// The plain names of `relative` (`.` left out), or `XDEV` for anything that could leave the
/// folder (`..`, a root, a prefix).
fn plain_names(relative: &Path) -> Result<Vec<&OsStr>, Errno> {
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Errno::XDEV);
            }
        }
    }
    Ok(names)
}

/// Opens `relative` below `dir` with no link followed and nothing above `dir` reached.
pub(crate) fn open_beneath(
    dir: impl AsFd,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let names = plain_names(relative)?;
    let flags = with_defaults(flags);
    if names.is_empty() {
        return rustix::fs::openat(&dir, ".", flags, mode);
    }
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(&dir, relative, flags, mode, RESOLVE) {
            // Kernels before 5.6, or a filter that refuses the call.
            Err(Errno::NOSYS | Errno::PERM) => return walk(&dir, &names, flags, mode),
            // A rename elsewhere on the file system while resolving: asked again.
            Err(Errno::AGAIN) if tries < 8 => tries += 1,
            other => return other,
        }
    }
}

/// The walk of kernels without `openat2`: each folder opened `O_PATH | O_DIRECTORY |
/// O_NOFOLLOW` inside the one above (a link there is not a folder: `ENOTDIR`, told as a
/// link), the last name with `O_NOFOLLOW`.
fn walk(dir: impl AsFd, names: &[&OsStr], flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
    let Some((last, above)) = names.split_last() else {
        return rustix::fs::openat(&dir, ".", flags, mode);
    };
    let mut current = rustix::fs::openat(&dir, ".", FOLDER_STEP, Mode::empty())?;
    for name in above {
        current = match rustix::fs::openat(&current, *name, FOLDER_STEP, Mode::empty()) {
            Err(Errno::NOTDIR) if is_link(&current, name) => return Err(Errno::LOOP),
            other => other?,
        };
    }
    let fd = rustix::fs::openat(&current, *last, flags.union(OFlags::NOFOLLOW), mode)?;
    // `O_PATH | O_NOFOLLOW` opens a link itself rather than failing.
    if flags.contains(OFlags::PATH)
        && rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode)
            == rustix::fs::FileType::Symlink
    {
        return Err(Errno::LOOP);
    }
    Ok(fd)
}

fn is_link(dir: impl AsFd, name: &OsStr) -> bool {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|stat| {
        rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Symlink
    })
}

/// The folder `/`, held.
pub(crate) fn system_root() -> Result<OwnedFd, Errno> {
    rustix::fs::open("/", SYSTEM_ROOT, Mode::empty())
}

/// Opens `path` (absolute, already resolved and judged by the caller: no link on it) with no
/// link followed on the way: a link that appeared since the caller resolved it makes the
/// open fail ([`FileError::Link`]).
pub fn open_resolved(path: &Path, flags: OFlags) -> Result<OwnedFd, FileError> {
    let relative = path
        .strip_prefix("/")
        .map_err(|_| FileError::Outside(path.to_path_buf()))?;
    let root = system_root().map_err(|e| FileError::of("open", "/", e))?;
    open_beneath(&root, relative, flags, Mode::empty()).map_err(|e| FileError::of("open", path, e))
}

#[cfg(test)]
pub(crate) fn walk_for_test(
    dir: impl AsFd,
    relative: &Path,
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    walk(
        dir,
        &plain_names(relative)?,
        with_defaults(flags),
        Mode::empty(),
    )
}
