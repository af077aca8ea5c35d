//! Local files opened so that no path can change between the check and the use: a sandboxed
//! command that swaps a workspace file (or a folder above it) for a link while a file tool
//! works must not make the tool read or write what the link leads to.
//!
//! Each operation resolves its path once ([`std::fs::canonicalize`]), judges where that
//! resolution leads ([`LinkRules`]: a link never takes a file tool where the sandbox hides
//! things, nor a write out of the places commands may write), then opens exactly the
//! resolved, link-free path with `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//! (component by component with `O_NOFOLLOW` on kernels before 5.6): a link that appears in
//! between makes the open fail, it is never followed. What was opened is then checked on its
//! descriptor (a regular file; not a credential under another name, by device and inode),
//! and a write goes to a new file in the parent's descriptor, put in place by `renameat`
//! within it, so the name written is the one judged.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, CWD, Mode, OFlags, ResolveFlags};
use talaria_sandbox::{PathAccess, SandboxPolicy};

use super::{BINARY_SNIFF_BYTES, FileError, MAX_TEXT_FILE_BYTES};
use crate::sensitive::SensitivePaths;

/// What a link may lead a file tool to.
#[derive(Debug, Clone)]
pub struct LinkRules {
    /// Which paths hold secrets.
    pub sensitive: Arc<SensitivePaths>,
    /// The sandbox's view, when commands run in it: a link leads nowhere it hides, and a
    /// write through a link stays where commands may write.
    pub policy: Option<Arc<SandboxPolicy>>,
}

impl LinkRules {
    /// The rules of this process's environment, without a sandbox view.
    pub fn from_env() -> Self {
        Self {
            sensitive: Arc::new(SensitivePaths::from_env()),
            policy: None,
        }
    }

    /// Why reaching `real` through `named` (a different path: links on the way) is refused,
    /// if it is. A file named by its own path is judged by the approval, not here.
    fn refusal(&self, named: &Path, real: &Path, writing: bool) -> Option<String> {
        if named == real {
            return None;
        }
        let secrecy = |path: &Path| self.sensitive.classify(path);
        if secrecy(real) > secrecy(named) {
            return Some(format!(
                "{} leads through a link to {}, which may hold secrets or credentials; it is \
                 never read or changed through a link. If it is really needed, name it by its \
                 own path: the user will be asked.",
                named.display(),
                real.display()
            ));
        }
        let policy = self.policy.as_ref()?;
        if policy.access(real) == PathAccess::Hidden {
            return Some(format!(
                "{} leads through a link to {}, which the sandbox hides; name it by its own \
                 path if it is really needed.",
                named.display(),
                real.display()
            ));
        }
        if writing
            && policy.access(named) == PathAccess::Writable
            && policy.access(real) != PathAccess::Writable
        {
            return Some(format!(
                "{} leads through a link to {}, outside the places commands may write; it is \
                 not changed through the link. Name it by its own path if it is really meant.",
                named.display(),
                real.display()
            ));
        }
        None
    }
}

fn io_failure(action: &str, path: &Path, error: impl std::fmt::Display) -> FileError {
    FileError::Other(format!("cannot {action} {}: {error}", path.display()))
}

/// A link appeared on the way while the tool worked.
fn changed(path: &Path) -> FileError {
    FileError::Other(format!(
        "{} changed while it was being opened (a link appeared on its path); nothing was read \
         or written through it. Try again once whatever is changing it has finished.",
        path.display()
    ))
}

fn from_errno(action: &str, path: &Path, errno: rustix::io::Errno) -> FileError {
    match errno {
        rustix::io::Errno::NOENT => FileError::NotFound(path.to_path_buf()),
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => changed(path),
        other => io_failure(action, path, std::io::Error::from(other)),
    }
}

/// Opens `path` (absolute, without links) with no link followed on the way.
fn open_unlinked(path: &Path, flags: OFlags) -> Result<OwnedFd, rustix::io::Errno> {
    // openat2 refuses flags beside `O_PATH` but these (EINVAL).
    let flags = if flags.contains(OFlags::PATH) {
        flags | OFlags::CLOEXEC
    } else {
        flags | OFlags::CLOEXEC | OFlags::NOCTTY
    };
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(CWD, path, flags, Mode::empty(), resolve) {
        // Kernels before 5.6, or a filter that refuses the call: one component at a time.
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => open_walking(path, flags),
        other => other,
    }
}

/// Opens `path` one component at a time, refusing a link at each.
fn open_walking(path: &Path, flags: OFlags) -> Result<OwnedFd, rustix::io::Errno> {
    let root = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    walk_below(&root, path, flags)
}

/// Opens `path`'s normal components below `dir` one at a time with `O_NOFOLLOW` (the walk
/// of kernels without `openat2`): a link anywhere on the way fails the open.
fn walk_below(dir: &OwnedFd, path: &Path, flags: OFlags) -> Result<OwnedFd, rustix::io::Errno> {
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some((last, above)) = names.split_last() else {
        return rustix::fs::openat(dir, ".", flags, Mode::empty());
    };
    let mut current = rustix::fs::openat(
        dir,
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for name in above {
        current = rustix::fs::openat(
            &current,
            *name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
    }
    rustix::fs::openat(&current, *last, flags | OFlags::NOFOLLOW, Mode::empty())
}

/// The path resolved now: the file's own if it exists, else its deepest existing folder's
/// followed by the names still to be made (which hold no `..`: the path is lexical).
fn resolve_now(path: &Path) -> Result<PathBuf, FileError> {
    if let Ok(real) = std::fs::canonicalize(path) {
        return Ok(real);
    }
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        match std::fs::symlink_metadata(existing) {
            // A dangling link: what it names does not exist; it is written as a new file
            // in place of the link.
            Ok(meta) if meta.file_type().is_symlink() && existing == path => {
                let parent = existing.parent().unwrap_or(Path::new("/"));
                let real_parent =
                    std::fs::canonicalize(parent).map_err(|e| io_failure("resolve", parent, e))?;
                return Ok(real_parent.join(existing.file_name().unwrap_or_default()));
            }
            Ok(_) => break,
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name.to_os_string());
                    existing = parent;
                }
                _ => return Err(FileError::NotFound(path.to_path_buf())),
            },
        }
    }
    let mut real =
        std::fs::canonicalize(existing).map_err(|e| io_failure("resolve", existing, e))?;
    real.extend(missing.iter().rev());
    Ok(real)
}

/// Refuses a file that is a credential under another name (a hard link), judged on what was
/// opened.
fn refuse_linked(
    rules: &LinkRules,
    named: &Path,
    meta: &std::fs::Metadata,
) -> Result<(), FileError> {
    if rules.sensitive.is_linked_credential(meta) {
        return Err(FileError::Other(format!(
            "Refused: {} is another name (a hard link) for a credential (a key, a token store \
             or Talaria's own settings); it is never read or changed through it. If the \
             credential is really needed, read it by its own path: the user will be asked.",
            named.display()
        )));
    }
    Ok(())
}

/// Reads a local text file, pinned (blocking).
pub fn read_text(rules: &LinkRules, path: &Path) -> Result<String, FileError> {
    let real = std::fs::canonicalize(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FileError::NotFound(path.to_path_buf()),
        _ => io_failure("read", path, e),
    })?;
    if let Some(why) = rules.refusal(path, &real, false) {
        return Err(FileError::Other(why));
    }
    // Not blocking on a pipe that took the file's place.
    let fd = open_unlinked(&real, OFlags::RDONLY | OFlags::NONBLOCK)
        .map_err(|e| from_errno("read", path, e))?;
    let mut file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| io_failure("read", path, e))?;
    if meta.is_dir() {
        return Err(FileError::IsDirectory(path.to_path_buf()));
    }
    if !meta.is_file() {
        return Err(FileError::Other(format!(
            "{} is not a regular file (a pipe, socket or device); only files are read",
            path.display()
        )));
    }
    refuse_linked(rules, path, &meta)?;
    if meta.len() > MAX_TEXT_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            bytes: meta.len(),
            limit: MAX_TEXT_FILE_BYTES,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    Read::by_ref(&mut file)
        .take(MAX_TEXT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_failure("read", path, e))?;
    if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
        return Err(FileError::Binary {
            path: path.to_path_buf(),
            bytes: bytes.len(),
        });
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Opens the folder `dir` (resolved, link-free), making the missing ones below its deepest
/// existing folder, each inside the one above it.
fn open_dir_making(dir: &Path) -> Result<OwnedFd, FileError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY;
    match open_unlinked(dir, flags) {
        Ok(fd) => return Ok(fd),
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(from_errno("open", dir, e)),
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(FileError::NotFound(dir.to_path_buf()));
    };
    let above = open_dir_making(parent)?;
    match rustix::fs::mkdirat(&above, name, Mode::from_raw_mode(0o777)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(from_errno("create", dir, e)),
    }
    rustix::fs::openat2(
        &above,
        name,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
    )
    .or_else(|e| match e {
        rustix::io::Errno::NOSYS | rustix::io::Errno::PERM => rustix::fs::openat(
            &above,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ),
        other => Err(other),
    })
    .map_err(|e| from_errno("open", dir, e))
}

static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Replaces (or creates, with its folders) a local text file, pinned (blocking): the text
/// goes to a new file beside it, put in place by a rename within the folder's descriptor.
/// An existing file keeps its mode (and owner, where this user may keep it).
pub fn write_text(rules: &LinkRules, path: &Path, text: &str) -> Result<(), FileError> {
    let real = resolve_now(path)?;
    if let Some(why) = rules.refusal(path, &real, true) {
        return Err(FileError::Other(why));
    }
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(io_failure("write", path, "not a file's path"));
    };
    let dir = open_dir_making(parent)?;
    let existing = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Some(stat),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(from_errno("write", path, e)),
    };
    let mut mode = Mode::from_raw_mode(0o644);
    if let Some(stat) = &existing {
        let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
        if kind == rustix::fs::FileType::Directory {
            return Err(FileError::IsDirectory(path.to_path_buf()));
        }
        if kind == rustix::fs::FileType::RegularFile {
            let fd = rustix::fs::openat(
                &dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| from_errno("write", path, e))?;
            let meta = std::fs::File::from(fd)
                .metadata()
                .map_err(|e| io_failure("write", path, e))?;
            refuse_linked(rules, path, &meta)?;
            mode = Mode::from_raw_mode(stat.st_mode & 0o7777);
        }
    }
    let temporary = format!(
        ".{}.talaria-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
    );
    let written = write_new(&dir, &temporary, text, mode, existing.as_ref()).and_then(|()| {
        rustix::fs::renameat(&dir, temporary.as_str(), &dir, name).map_err(std::io::Error::from)
    });
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&dir, temporary.as_str(), AtFlags::empty());
        return Err(io_failure("write", path, e));
    }
    Ok(())
}

/// Writes `text` to a new file `name` in `dir`.
fn write_new(
    dir: &impl AsFd,
    name: &str,
    text: &str,
    mode: Mode,
    replaced: Option<&rustix::fs::Stat>,
) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        mode,
    )?;
    // The mode asked for, whatever the umask took away; the replaced file's owner where
    // this user may give it (root editing another user's file).
    rustix::fs::fchmod(&fd, mode)?;
    if let Some(stat) = replaced {
        let owner = (stat.st_uid, stat.st_gid);
        let mut file = std::fs::File::from(fd);
        if let Ok(meta) = file.metadata()
            && (meta.uid(), meta.gid()) != owner
        {
            let _ = std::os::unix::fs::fchown(&file, Some(owner.0), Some(owner.1));
        }
        return file.write_all(text.as_bytes());
    }
    std::fs::File::from(fd).write_all(text.as_bytes())
}

/// Opens a file found by a walk below `root` (the walk does not follow links) for reading,
/// with no link followed and nothing above `root` reached: a file swapped for a link since
/// the walk saw it is not opened.
pub fn open_found(root: &OwnedFd, relative: &Path) -> std::io::Result<std::fs::File> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH;
    let fd = match rustix::fs::openat2(root, relative, flags, Mode::empty(), resolve) {
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
            if relative
                .components()
                .any(|c| !matches!(c, Component::Normal(_)))
            {
                return Err(std::io::Error::other("not a path below the root"));
            }
            walk_below(root, relative, flags)?
        }
        other => other?,
    };
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Opens the root of a search (resolved now, link-free) for [`open_found`].
pub fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    let real = std::fs::canonicalize(root)?;
    open_unlinked(&real, OFlags::PATH | OFlags::DIRECTORY).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> LinkRules {
        LinkRules {
            sensitive: Arc::new(SensitivePaths::with_homes(Vec::new(), None)),
            policy: None,
        }
    }

    #[test]
    fn writes_make_folders_and_reads_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let file = root.join("a/b/c.txt");
        write_text(&rules(), &file, "one\n").expect("written");
        assert_eq!(read_text(&rules(), &file).expect("read"), "one\n");
        write_text(&rules(), &file, "two\n").expect("replaced");
        assert_eq!(read_text(&rules(), &file).expect("read"), "two\n");
        let left: Vec<_> = std::fs::read_dir(root.join("a/b"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
    }

    fn guarded(talaria_home: &Path, writable: &Path) -> LinkRules {
        LinkRules {
            sensitive: Arc::new(SensitivePaths::with_homes(
                Vec::new(),
                Some(talaria_home.to_path_buf()),
            )),
            policy: Some(Arc::new(SandboxPolicy {
                writable: vec![writable.to_path_buf()],
                hidden: vec![talaria_home.to_path_buf()],
                ..SandboxPolicy::default()
            })),
        }
    }

    #[test]
    fn a_link_never_leads_a_read_or_a_write_to_what_the_sandbox_hides() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (home, ws) = (root.join("talaria"), root.join("ws"));
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(&ws).expect("ws");
        std::fs::write(home.join("config.toml"), "key = \"SECRET\"\n").expect("config");
        std::os::unix::fs::symlink(home.join("config.toml"), ws.join("config.toml")).expect("link");
        let rules = guarded(&home, &ws);
        let read = read_text(&rules, &ws.join("config.toml"));
        assert!(
            matches!(&read, Err(FileError::Other(why)) if why.contains("through a link")),
            "{read:?}"
        );
        let wrote = write_text(&rules, &ws.join("config.toml"), "sandbox = false\n");
        assert!(wrote.is_err(), "{wrote:?}");
        assert_eq!(
            std::fs::read_to_string(home.join("config.toml")).expect("config"),
            "key = \"SECRET\"\n"
        );
        // A folder on the way that is a link counts the same.
        std::os::unix::fs::symlink(&home, ws.join("settings")).expect("link");
        assert!(read_text(&rules, &ws.join("settings/config.toml")).is_err());
        assert!(write_text(&rules, &ws.join("settings/new.toml"), "x").is_err());
        assert!(!home.join("new.toml").exists());
    }

    #[test]
    fn a_write_through_a_link_stays_where_commands_may_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (home, ws, outside) = (root.join("talaria"), root.join("ws"), root.join("outside"));
        for d in [&home, &ws, &outside] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(outside.join("profile"), "original\n").expect("profile");
        std::os::unix::fs::symlink(outside.join("profile"), ws.join("profile")).expect("link");
        let rules = guarded(&home, &ws);
        assert!(write_text(&rules, &ws.join("profile"), "planted\n").is_err());
        assert_eq!(
            std::fs::read_to_string(outside.join("profile")).expect("read"),
            "original\n"
        );
        // Reading it is what a command may do too.
        assert_eq!(
            read_text(&rules, &ws.join("profile")).expect("read"),
            "original\n"
        );
        // A link inside the workspace to a file inside it is followed for both.
        std::fs::write(ws.join("real.txt"), "a\n").expect("real");
        std::os::unix::fs::symlink(ws.join("real.txt"), ws.join("alias.txt")).expect("link");
        write_text(&rules, &ws.join("alias.txt"), "b\n").expect("written through an inner link");
        assert_eq!(
            std::fs::read_to_string(ws.join("real.txt")).expect("read"),
            "b\n"
        );
        assert!(ws.join("alias.txt").is_symlink(), "the link stays a link");
    }

    #[test]
    fn a_link_that_appears_on_a_resolved_path_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("target")).expect("mkdir");
        std::fs::write(root.join("target/secret"), "SECRET").expect("secret");
        std::os::unix::fs::symlink(root.join("target"), root.join("swapped")).expect("link");
        // As if `swapped` were a folder when the path was resolved, and a link when opened.
        let opened = open_unlinked(&root.join("swapped/secret"), OFlags::RDONLY);
        assert_eq!(opened.err(), Some(rustix::io::Errno::LOOP));
        let walked = open_walking(&root.join("swapped/secret"), OFlags::RDONLY);
        assert!(walked.is_err(), "the walk refuses the link too");
        let fd = open_root(&root).expect("root");
        assert!(open_found(&fd, Path::new("swapped/secret")).is_err());
        assert!(open_found(&fd, Path::new("target/secret")).is_ok());
    }

    #[test]
    fn a_pipe_in_a_files_place_is_refused_without_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().canonicalize().expect("canonical").join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return;
        }
        let read = read_text(&rules(), &fifo);
        assert!(
            matches!(&read, Err(FileError::Other(why)) if why.contains("not a regular file")),
            "{read:?}"
        );
    }

    #[test]
    fn a_replaced_file_keeps_its_mode_and_a_dangling_link_is_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let script = root.join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        write_text(&rules(), &script, "#!/bin/sh\necho hi\n").expect("written");
        let mode = std::fs::metadata(&script)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o750);
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).expect("link");
        write_text(&rules(), &root.join("dangling"), "new\n").expect("written");
        assert_eq!(
            std::fs::read_to_string(root.join("dangling")).expect("read"),
            "new\n"
        );
    }
}
