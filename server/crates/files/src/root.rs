//! A folder resolved once and held ([`Root`]), and the folders opened below it ([`Dir`]):
//! every read, write, listing and removal on the user's files goes through them.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::open::{open_beneath, open_resolved};
use crate::places::access_of;
use crate::temporary::{is_temporary_of, temporary_name};
use crate::{Access, FileError, Kind, Places, Stat};

/// How a folder is held: enough to open below it, nothing to read or write by itself.
const FOLDER: OFlags = OFlags::PATH.union(OFlags::DIRECTORY);

/// Every descriptor here is closed on exec (commands start while Talaria works: none may
/// inherit a file Talaria is writing) and never takes a terminal over.
const PRIVATE: OFlags = OFlags::CLOEXEC.union(OFlags::NOCTTY);

/// A file read: no link followed, no pipe waited on.
pub(crate) const READING: OFlags = OFlags::RDONLY
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOFOLLOW)
    .union(PRIVATE);

/// A temporary file: made here and now, never a name that exists, never through a link.
pub(crate) const TEMPORARY: OFlags = OFlags::WRONLY
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(PRIVATE);

/// A file appended to (made when missing), never through a link.
pub(crate) const APPENDING: OFlags = OFlags::WRONLY
    .union(OFlags::APPEND)
    .union(OFlags::CREATE)
    .union(OFlags::NOFOLLOW)
    .union(PRIVATE);

/// A file read and appended to (made when missing), never through a link.
pub(crate) const READ_APPENDING: OFlags = OFlags::RDWR
    .union(OFlags::APPEND)
    .union(OFlags::CREATE)
    .union(OFlags::NOFOLLOW)
    .union(PRIVATE);

/// A file a lock is held on (made when missing), never through a link.
pub(crate) const LOCKING: OFlags = OFlags::RDWR
    .union(OFlags::CREATE)
    .union(OFlags::NOFOLLOW)
    .union(PRIVATE);

/// A folder listed.
pub(crate) const LISTING: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(PRIVATE);

/// The mode a temporary file is made with: its writer's alone until it is complete.
const TEMPORARY_MODE: u32 = 0o600;

/// A folder resolved once, when it was chosen, and held open: what is below it is reached
/// through this descriptor only.
#[derive(Debug)]
pub struct Root {
    dir: Dir,
}

/// A folder opened below a [`Root`] (or the root itself): a file is named in it by one plain
/// name.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// Where it is (resolved: no link on it).
    real: PathBuf,
    /// How the caller names it (for messages).
    shown: PathBuf,
    places: Arc<dyn Places>,
}

impl Root {
    /// Resolves `path` now (the links on it are the ones its user chose) and holds the
    /// folder it leads to. A folder the sandbox hides is refused.
    pub fn open(path: &Path, places: Arc<dyn Places>) -> Result<Root, FileError> {
        let real = std::fs::canonicalize(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => FileError::NotFound(path.to_path_buf()),
            _ => FileError::io("resolve", path, e),
        })?;
        if access_of(&*places, &real) == Access::Hidden {
            return Err(FileError::Hidden(path.to_path_buf()));
        }
        let fd = open_resolved(&real, FOLDER).map_err(|e| rename_error(e, path))?;
        Ok(Root {
            dir: Dir {
                fd,
                real,
                shown: path.to_path_buf(),
                places,
            },
        })
    }

    /// As [`Root::open`], making the folder (and the missing ones above it, each inside the
    /// one above) when it does not exist yet.
    pub fn open_making(path: &Path, places: Arc<dyn Places>) -> Result<Root, FileError> {
        let mut missing: Vec<&OsStr> = Vec::new();
        let mut existing = path;
        let base = loop {
            match Root::open(existing, places.clone()) {
                Err(FileError::NotFound(_)) => match (existing.parent(), existing.file_name()) {
                    (Some(parent), Some(name)) => {
                        missing.push(name);
                        existing = parent;
                    }
                    _ => return Err(FileError::NotFound(path.to_path_buf())),
                },
                other => break other?,
            }
        };
        if missing.is_empty() {
            return Ok(base);
        }
        let relative: PathBuf = missing.iter().rev().collect();
        Ok(Root {
            dir: base.make_dirs(&relative)?,
        })
    }

    /// The folder `/`, for a path the caller resolved and judged itself (no link on it: one
    /// that appears since makes every operation on it fail).
    pub fn system(places: Arc<dyn Places>) -> Result<Root, FileError> {
        let fd = crate::open::system_root().map_err(|e| FileError::of("open", "/", e))?;
        Ok(Root {
            dir: Dir {
                fd,
                real: PathBuf::from("/"),
                shown: PathBuf::from("/"),
                places,
            },
        })
    }

    /// How the caller named the root.
    pub fn shown(&self) -> &Path {
        &self.dir.shown
    }

    /// Where the root is.
    pub fn real(&self) -> &Path {
        &self.dir.real
    }

    /// The decision of what is hidden this root asks.
    pub fn places(&self) -> Arc<dyn Places> {
        self.dir.places.clone()
    }

    /// The root itself as a folder.
    pub fn as_dir(&self) -> &Dir {
        &self.dir
    }

    /// The part of `path` below the root (named through the root as shown, or as resolved),
    /// or `None` when it is not below it (or climbs out with `..`).
    pub fn relative<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        let relative = path
            .strip_prefix(&self.dir.shown)
            .or_else(|_| path.strip_prefix(&self.dir.real))
            .ok()?;
        relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
            .then_some(relative)
    }

    /// The folder `relative` below the root (the root itself when empty).
    pub fn dir(&self, relative: &Path) -> Result<Dir, FileError> {
        self.dir.below(relative)
    }

    /// The folder `relative` below the root, made (each missing folder inside the one above
    /// it) when it does not exist.
    pub fn make_dirs(&self, relative: &Path) -> Result<Dir, FileError> {
        match self.dir.below(relative) {
            Err(FileError::NotFound(_)) => {}
            other => return other,
        }
        let names: Vec<&OsStr> = relative.iter().collect();
        // The deepest folder that exists (the root itself at least), then each missing one
        // made inside the one above.
        let (existing, mut current) = (0..names.len())
            .rev()
            .find_map(|depth| {
                let above: PathBuf = names[..depth].iter().collect();
                match self.dir.below_unjudged(&above) {
                    Err(FileError::NotFound(_)) => None,
                    other => Some(other.map(|dir| (depth, dir))),
                }
            })
            .unwrap_or_else(|| Err(FileError::NotFound(self.dir.shown.join(relative))))?;
        for name in &names[existing..] {
            current = current.make_dir(name)?;
        }
        Ok(current)
    }

    /// Opens the regular file `relative` to read, in one step: no link followed, no pipe
    /// waited on.
    pub fn open_read(&self, relative: &Path) -> Result<(std::fs::File, Stat), FileError> {
        let shown = self.dir.shown.join(relative);
        if access_of(&*self.dir.places, &self.dir.real.join(relative)) == Access::Hidden {
            return Err(FileError::Hidden(shown));
        }
        let fd = open_beneath(&self.dir.fd, relative, READING, Mode::empty())
            .map_err(|e| FileError::of("open", &shown, e))?;
        let (file, stat) = checked_file(fd, shown.clone())?;
        judge_opened(
            &*self.dir.places,
            &file,
            &stat,
            &self.dir.real.join(relative),
            shown,
        )?;
        Ok((file, stat))
    }

    /// The folder holding `relative` and the file's name in it.
    pub fn parent_of<'a>(&self, relative: &'a Path) -> Result<(Dir, &'a OsStr), FileError> {
        let (parent, name) = split(relative, &self.dir.shown)?;
        Ok((self.dir.below(parent)?, name))
    }

    /// As [`Root::parent_of`], making the missing folders.
    pub fn parent_made<'a>(&self, relative: &'a Path) -> Result<(Dir, &'a OsStr), FileError> {
        let (parent, name) = split(relative, &self.dir.shown)?;
        Ok((self.make_dirs(parent)?, name))
    }

    /// The entry `relative`'s own status (`None`: it does not exist, nor a folder on its way).
    pub fn stat(&self, relative: &Path) -> Result<Option<Stat>, FileError> {
        match self.parent_of(relative) {
            Ok((dir, name)) => dir.stat(name),
            Err(FileError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The bytes of the regular file `relative` (at most `limit`).
    pub fn read(&self, relative: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
        let (dir, name) = self.parent_of(relative)?;
        dir.read(name, limit)
    }

    /// Replaces (or creates, with its folders) the file `relative`, whole or not at all.
    pub fn replace(&self, relative: &Path, bytes: &[u8], how: &Replace) -> Result<(), FileError> {
        let (dir, name) = self.parent_made(relative)?;
        dir.replace(name, bytes, how)
    }

    /// Removes the file (or link) `relative`; `false` when there was none.
    pub fn remove(&self, relative: &Path) -> Result<bool, FileError> {
        match self.parent_of(relative) {
            Ok((dir, name)) => dir.remove(name),
            Err(FileError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// `relative` as a folder and a name in it.
fn split<'a>(relative: &'a Path, shown: &Path) -> Result<(&'a Path, &'a OsStr), FileError> {
    match (relative.parent(), relative.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(FileError::Outside(shown.join(relative))),
    }
}

/// A resolution error for `path`, whatever name the open used.
fn rename_error(error: FileError, path: &Path) -> FileError {
    match error {
        FileError::NotFound(_) => FileError::NotFound(path.to_path_buf()),
        FileError::Link(_) => FileError::Link(path.to_path_buf()),
        FileError::Outside(_) => FileError::Outside(path.to_path_buf()),
        FileError::Io { action, source, .. } => FileError::Io {
            action,
            path: path.to_path_buf(),
            source,
        },
        other => other,
    }
}

/// How a replacement is written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Replace {
    /// The new file's mode; `None`: the replaced file's, or `0o644` for a new one.
    pub mode: Option<u32>,
    /// Synced to the disk before it is put in place.
    pub sync: bool,
}

/// One plain name: no `/`, not `.` or `..`, not empty.
fn checked(name: &OsStr) -> Result<&OsStr, Errno> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(Errno::INVAL);
    }
    Ok(name)
}

impl Dir {
    /// Where the folder is (resolved).
    pub fn real(&self) -> &Path {
        &self.real
    }

    /// How the caller names the folder.
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    fn judge(&self, name: &OsStr) -> Result<(), FileError> {
        if access_of(&*self.places, &self.real.join(name)) == Access::Hidden {
            return Err(FileError::Hidden(self.shown.join(name)));
        }
        Ok(())
    }

    fn named(&self, name: &OsStr) -> PathBuf {
        self.shown.join(name)
    }

    /// The folder `relative` below this one.
    fn below(&self, relative: &Path) -> Result<Dir, FileError> {
        if access_of(&*self.places, &self.real.join(relative)) == Access::Hidden {
            return Err(FileError::Hidden(self.shown.join(relative)));
        }
        self.below_unjudged(relative)
    }

    /// The folder `relative` below this one, on the way to another (a folder passed through is
    /// not read: a hidden one may hold a place that is not).
    fn below_unjudged(&self, relative: &Path) -> Result<Dir, FileError> {
        let real = self.real.join(relative);
        let shown = self.shown.join(relative);
        let fd = open_beneath(&self.fd, relative, FOLDER, Mode::empty())
            .map_err(|e| FileError::of("open", &shown, e))?;
        Ok(Dir {
            fd,
            real,
            shown,
            places: self.places.clone(),
        })
    }

    /// The folder `relative` below this one (this one when empty), no link followed.
    pub fn dir(&self, relative: &Path) -> Result<Dir, FileError> {
        self.below(relative)
    }

    /// The folder `name` in this one.
    pub fn open_dir(&self, name: &OsStr) -> Result<Dir, FileError> {
        let name = checked(name).map_err(|e| FileError::of("open", self.named(name), e))?;
        self.below(Path::new(name))
    }

    /// The folder `name` in this one, made when it does not exist.
    pub fn make_dir(&self, name: &OsStr) -> Result<Dir, FileError> {
        let name = checked(name).map_err(|e| FileError::of("make", self.named(name), e))?;
        self.judge(name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(FileError::of("make", self.named(name), e)),
        }
        self.open_dir(name)
    }

    /// The entry `name`'s own status (`None`: there is none).
    pub fn stat(&self, name: &OsStr) -> Result<Option<Stat>, FileError> {
        let name = checked(name).map_err(|e| FileError::of("look at", self.named(name), e))?;
        self.judge(name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(Stat::of(&stat))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(FileError::of("look at", self.named(name), e)),
        }
    }

    /// Opens the regular file `name` to read: no link followed, no pipe waited on.
    pub fn open_read(&self, name: &OsStr) -> Result<(std::fs::File, Stat), FileError> {
        let name = checked(name).map_err(|e| FileError::of("open", self.named(name), e))?;
        self.judge(name)?;
        let fd = rustix::fs::openat(&self.fd, name, READING, Mode::empty())
            .map_err(|e| FileError::of("open", self.named(name), e))?;
        let (file, stat) = checked_file(fd, self.named(name))?;
        judge_opened(
            &*self.places,
            &file,
            &stat,
            &self.real.join(name),
            self.named(name),
        )?;
        Ok((file, stat))
    }

    /// The bytes of the regular file `name` (at most `limit`).
    pub fn read(&self, name: &OsStr, limit: u64) -> Result<Vec<u8>, FileError> {
        let (file, stat) = self.open_read(name)?;
        if stat.len > limit {
            return Err(FileError::TooLarge {
                path: self.named(name),
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(stat.len).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| FileError::io("read", self.named(name), e))?;
        if bytes.len() as u64 > limit {
            return Err(FileError::TooLarge {
                path: self.named(name),
                limit,
            });
        }
        Ok(bytes)
    }

    /// Replaces (or creates) the file `name` with `bytes`, whole or not at all: a new file
    /// made exclusively beside it, renamed over it within this folder. The replaced file's
    /// mode and owner (where this user may give it) are kept unless `how` says a mode.
    pub fn replace(&self, name: &OsStr, bytes: &[u8], how: &Replace) -> Result<(), FileError> {
        let name = checked(name).map_err(|e| FileError::of("write", self.named(name), e))?;
        let existing = self.stat(name)?;
        if existing.is_some_and(|s| s.kind == Kind::Directory) {
            return Err(FileError::IsDirectory(self.named(name)));
        }
        let replaced = existing.filter(Stat::is_file);
        let mode = how.mode.or(replaced.map(|s| s.mode)).unwrap_or(0o644);
        let (temporary, fd) = self.create_temporary(name)?;
        let written = fill(fd, bytes, mode, replaced, how.sync).and_then(|()| {
            rustix::fs::renameat(&self.fd, temporary.as_str(), &self.fd, name)
                .map_err(std::io::Error::from)
        });
        if let Err(error) = written {
            let _ = rustix::fs::unlinkat(&self.fd, temporary.as_str(), AtFlags::empty());
            return Err(FileError::io("write", self.named(name), error));
        }
        Ok(())
    }

    /// A new temporary file for `name`, made exclusively with no link followed: a name
    /// planted there (a link, a pipe, a file) is passed over for the next.
    fn create_temporary(&self, name: &OsStr) -> Result<(String, OwnedFd), FileError> {
        let shown = name.to_string_lossy();
        let mut last = Errno::EXIST;
        for _ in 0..16 {
            let temporary = temporary_name(&shown);
            match rustix::fs::openat(
                &self.fd,
                temporary.as_str(),
                TEMPORARY,
                Mode::from_raw_mode(TEMPORARY_MODE),
            ) {
                Ok(fd) => return Ok((temporary, fd)),
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(e) => return Err(FileError::of("write", self.named(name), e)),
            }
        }
        Err(FileError::of("write", self.named(name), last))
    }

    /// Removes the file (or link, never what it leads to) `name`; `false` when there was
    /// none. A folder is refused.
    pub fn remove(&self, name: &OsStr) -> Result<bool, FileError> {
        let name = checked(name).map_err(|e| FileError::of("remove", self.named(name), e))?;
        self.judge(name)?;
        // A folder is refused by the kernel (`EISDIR`), told as a folder.
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(FileError::of("remove", self.named(name), e)),
        }
    }

    /// The entries of this folder (`.` and `..` left out), each with its own kind; what the
    /// sandbox hides among them is left out.
    pub fn entries(&self) -> Result<Vec<(OsString, Kind)>, FileError> {
        let fd = rustix::fs::openat(&self.fd, ".", LISTING, Mode::empty())
            .map_err(|e| FileError::of("list", &self.shown, e))?;
        let mut listing =
            rustix::fs::Dir::new(fd).map_err(|e| FileError::of("list", &self.shown, e))?;
        let mut entries = Vec::new();
        while let Some(entry) = listing.read() {
            let entry = entry.map_err(|e| FileError::of("list", &self.shown, e))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let kind = match entry.file_type() {
                rustix::fs::FileType::RegularFile => Kind::File,
                rustix::fs::FileType::Directory => Kind::Directory,
                rustix::fs::FileType::Symlink => Kind::Link,
                rustix::fs::FileType::Unknown => match self.stat(name) {
                    Ok(Some(stat)) => stat.kind,
                    _ => continue,
                },
                _ => Kind::Other,
            };
            if access_of(&*self.places, &self.real.join(name)) == Access::Hidden {
                continue;
            }
            entries.push((name.to_os_string(), kind));
        }
        Ok(entries)
    }

    /// Appends `bytes` to the file `name` (made, mode `0o600`, when it does not exist), with
    /// no link followed.
    pub fn append(&self, name: &OsStr, bytes: &[u8]) -> Result<(), FileError> {
        let name = checked(name).map_err(|e| FileError::of("append to", self.named(name), e))?;
        self.judge(name)?;
        let fd = rustix::fs::openat(&self.fd, name, APPENDING, Mode::from_raw_mode(0o600))
            .map_err(|e| FileError::of("append to", self.named(name), e))?;
        std::fs::File::from(fd)
            .write_all(bytes)
            .map_err(|e| FileError::io("append to", self.named(name), e))
    }

    /// Opens the file `name` to read it and append to it (made, mode `0o644`, when it does
    /// not exist), with no link followed.
    pub fn open_append(&self, name: &OsStr) -> Result<std::fs::File, FileError> {
        let name = checked(name).map_err(|e| FileError::of("open", self.named(name), e))?;
        self.judge(name)?;
        let fd = rustix::fs::openat(&self.fd, name, READ_APPENDING, Mode::from_raw_mode(0o644))
            .map_err(|e| FileError::of("open", self.named(name), e))?;
        checked_file(fd, self.named(name)).map(|(file, _)| file)
    }

    /// Opens (making it, mode `0o600`) the file `name` to hold a lock on, with no link
    /// followed.
    pub fn open_lock(&self, name: &OsStr) -> Result<std::fs::File, FileError> {
        let name = checked(name).map_err(|e| FileError::of("open", self.named(name), e))?;
        self.judge(name)?;
        let fd = rustix::fs::openat(&self.fd, name, LOCKING, Mode::from_raw_mode(0o600))
            .map_err(|e| FileError::of("open", self.named(name), e))?;
        Ok(std::fs::File::from(fd))
    }

    /// Removes the folder `name` and everything in it, each entry through its folder's
    /// descriptor: a link inside is removed as a name, never followed.
    pub fn remove_tree(&self, name: &OsStr) -> Result<(), FileError> {
        let dir = self.open_dir(name)?;
        for (entry, kind) in dir.entries()? {
            if kind == Kind::Directory {
                dir.remove_tree(&entry)?;
            } else {
                dir.remove(&entry)?;
            }
        }
        let name = checked(name).map_err(|e| FileError::of("remove", self.named(name), e))?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(FileError::of("remove", self.named(name), e)),
        }
    }

    /// Removes the temporary files a replacement of `name` left here (a process killed while
    /// it wrote); how many.
    pub fn sweep_temporaries(&self, name: &OsStr) -> Result<usize, FileError> {
        let name = name.to_string_lossy();
        let mut swept = 0;
        for (entry, kind) in self.entries()? {
            if matches!(kind, Kind::File | Kind::Link)
                && is_temporary_of(&entry.to_string_lossy(), &name)
                && self.remove(&entry)?
            {
                swept += 1;
            }
        }
        Ok(swept)
    }

    /// The free room on this folder's file system, in bytes, and its size.
    pub fn room(&self) -> Result<(u64, u64), FileError> {
        let stat =
            rustix::fs::fstatvfs(&self.fd).map_err(|e| FileError::of("measure", &self.shown, e))?;
        Ok((
            stat.f_bavail.saturating_mul(stat.f_frsize),
            stat.f_blocks.saturating_mul(stat.f_frsize),
        ))
    }

    /// The descriptor (for a file walk's own opens below it).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An opened file, if it is a regular one.
fn checked_file(fd: OwnedFd, shown: PathBuf) -> Result<(std::fs::File, Stat), FileError> {
    let stat = Stat::of(&rustix::fs::fstat(&fd).map_err(|e| FileError::of("open", &shown, e))?);
    match stat.kind {
        Kind::File => Ok((std::fs::File::from(fd), stat)),
        Kind::Directory => Err(FileError::IsDirectory(shown)),
        _ => Err(FileError::NotRegular(shown)),
    }
}

/// Refuses a file opened to be read that is hidden by what it is, wherever it was reached:
/// another name (a hard link) of a file in a hidden place, or an entry of a process table
/// mounted at any path that is not one of the machine's own files.
fn judge_opened(
    places: &dyn Places,
    file: &std::fs::File,
    stat: &Stat,
    real: &Path,
    shown: PathBuf,
) -> Result<(), FileError> {
    let process_table =
        rustix::fs::fstatfs(file).map_or(true, |fs| fs.f_type == rustix::fs::PROC_SUPER_MAGIC);
    let machine_file = real.parent() == Some(Path::new("/proc"))
        && real
            .file_name()
            .is_some_and(|name| crate::places::MACHINE_FILES.iter().any(|m| name == *m));
    if (process_table && !machine_file) || (stat.nlink > 1 && places.is_hidden_file(stat)) {
        return Err(FileError::Hidden(shown));
    }
    Ok(())
}

/// Writes the new file: its mode whatever the umask took, the replaced file's owner where
/// this user may give it, the bytes, and a sync when asked.
fn fill(
    fd: OwnedFd,
    bytes: &[u8],
    mode: u32,
    replaced: Option<Stat>,
    sync: bool,
) -> std::io::Result<()> {
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    if let Some(old) = replaced {
        let now = Stat::of(&rustix::fs::fstat(&fd)?);
        if (now.uid, now.gid) != (old.uid, old.gid) {
            let _ = rustix::fs::fchown(
                &fd,
                Some(rustix::fs::Uid::from_raw(old.uid)),
                Some(rustix::fs::Gid::from_raw(old.gid)),
            );
        }
    }
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    if sync {
        file.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn judge_opened_for_test(
    places: &dyn Places,
    file: &std::fs::File,
    stat: &Stat,
    real: &Path,
) -> Result<(), FileError> {
    judge_opened(places, file, stat, real, real.to_path_buf())
}
