//! The file tools' way to local files, on the one way Talaria touches the user's files
//! (`talaria-files`): a sandboxed command that swaps a workspace file (or a folder above it)
//! for a link while a file tool works must not make the tool read or write what the link
//! leads to, and no name makes a tool reach what the sandbox hides.
//!
//! Each operation resolves its path once ([`std::fs::canonicalize`]) and judges where that
//! resolution leads ([`LinkRules`]: a link never takes a file tool where the sandbox hides
//! things, nor a write out of the places commands may write; a hidden place that is not a
//! credential the user may be asked about is refused by any name). It then opens exactly the
//! resolved, link-free path in one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` beneath `/` (or the search's root): a link that appears in
//! between makes the open fail, it is never followed. What was opened is checked on its
//! descriptor (a regular file; not a credential under another name, by device and inode),
//! and a write goes to a new file made `O_EXCL | O_NOFOLLOW` in the parent's descriptor, put
//! in place by `renameat` within it, so the name written is the one judged.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_files::{Access, Places, Replace, Root};

use super::{BINARY_SNIFF_BYTES, FileError, MAX_TEXT_FILE_BYTES};
use crate::sensitive::{PathSecrecy, SensitivePaths};

/// What a link may lead a file tool to.
#[derive(Debug, Clone)]
pub struct LinkRules {
    /// Which paths hold secrets.
    pub sensitive: Arc<SensitivePaths>,
    /// The sandbox's decision of what is hidden and writable ([`super::SandboxPlaces`]; with
    /// no sandbox, nothing is hidden).
    pub places: Arc<dyn Places>,
}

impl LinkRules {
    /// The rules of this process's environment, without a sandbox.
    pub fn from_env() -> Self {
        Self {
            sensitive: Arc::new(SensitivePaths::from_env()),
            places: Arc::new(talaria_files::Unguarded),
        }
    }

    /// Why reaching `real` through `named` is refused, if it is. A file named by its own path
    /// is judged by the approval, unless the sandbox hides it and it is no credential the
    /// user could be asked about (another session's temporary folder, `[sandbox] hidden`).
    pub fn refusal(&self, named: &Path, real: &Path, writing: bool) -> Option<String> {
        let hidden = self.places.access(real) == Access::Hidden;
        if named == real {
            let askable = self.sensitive.classify(real) == PathSecrecy::Credential;
            return (hidden && !askable).then(|| {
                format!(
                    "{} is hidden by the sandbox (another session's temporary folder, or a \
                     place in `[sandbox] hidden`): the file tools do not reach it either.",
                    named.display()
                )
            });
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
        if hidden {
            return Some(format!(
                "{} leads through a link to {}, which the sandbox hides; it is never read or \
                 changed for the agent.",
                named.display(),
                real.display()
            ));
        }
        if writing
            && self.places.access(named) == Access::Writable
            && self.places.access(real) != Access::Writable
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

/// The one way's failure as the file tools tell it, naming `path` as the model did.
fn told(action: &str, path: &Path, error: talaria_files::FileError) -> FileError {
    use talaria_files::FileError as Why;
    match error {
        Why::NotFound(_) => FileError::NotFound(path.to_path_buf()),
        Why::Link(_) | Why::Outside(_) => changed(path),
        Why::IsDirectory(_) => FileError::IsDirectory(path.to_path_buf()),
        Why::NotRegular(_) => FileError::Other(format!(
            "{} is not a regular file (a pipe, socket or device); only files are read",
            path.display()
        )),
        Why::Hidden(_) => FileError::Other(format!(
            "{} is hidden by the sandbox: the file tools do not reach it either.",
            path.display()
        )),
        Why::TooLarge { limit, .. } => FileError::TooLarge {
            path: path.to_path_buf(),
            bytes: limit + 1,
            limit,
        },
        Why::Io { source, .. } => io_failure(action, path, source),
    }
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
fn refuse_linked(rules: &LinkRules, named: &Path, file: &std::fs::File) -> Result<(), FileError> {
    let meta = file.metadata().map_err(|e| io_failure("read", named, e))?;
    if rules.sensitive.is_linked_credential(&meta) {
        return Err(FileError::Other(format!(
            "Refused: {} is another name (a hard link) for a credential (a key, a token store \
             or Talaria's own settings); it is never read or changed through it. If the \
             credential is really needed, read it by its own path: the user will be asked.",
            named.display()
        )));
    }
    Ok(())
}

/// `/`, held, judged by `rules`' places.
fn system(rules: &LinkRules, path: &Path) -> Result<Root, FileError> {
    Root::system(rules.places.clone()).map_err(|e| told("open", path, e))
}

/// `real` below `/`.
fn below_system(real: &Path) -> &Path {
    real.strip_prefix("/").unwrap_or(real)
}

/// Where `path` leads now, if the rules let a file tool go there (blocking). What a tool
/// delegated to the editor is judged here first.
pub fn judge(rules: &LinkRules, path: &Path, writing: bool) -> Result<PathBuf, FileError> {
    let real = if writing {
        resolve_now(path)?
    } else {
        std::fs::canonicalize(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => FileError::NotFound(path.to_path_buf()),
            _ => io_failure("read", path, e),
        })?
    };
    match rules.refusal(path, &real, writing) {
        Some(why) => Err(FileError::Other(why)),
        None => Ok(real),
    }
}

/// Reads a local text file, pinned (blocking).
pub fn read_text(rules: &LinkRules, path: &Path) -> Result<String, FileError> {
    let real = judge(rules, path, false)?;
    let (mut file, stat) = system(rules, path)?
        .open_read(below_system(&real))
        .map_err(|e| told("read", path, e))?;
    refuse_linked(rules, path, &file)?;
    if stat.len > MAX_TEXT_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            bytes: stat.len,
            limit: MAX_TEXT_FILE_BYTES,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(stat.len).unwrap_or(0));
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

/// Replaces (or creates, with its folders) a local text file, pinned (blocking): the text
/// goes to a new file beside it, put in place by a rename within the folder's descriptor.
/// An existing file keeps its mode (and owner, where this user may keep it).
pub fn write_text(rules: &LinkRules, path: &Path, text: &str) -> Result<(), FileError> {
    let real = judge(rules, path, true)?;
    let root = system(rules, path)?;
    let (dir, name) = root
        .parent_made(below_system(&real))
        .map_err(|e| told("write", path, e))?;
    match dir.open_read(name) {
        Ok((file, _)) => refuse_linked(rules, path, &file)?,
        // Nothing there, a link (its name is replaced, never what it leads to) or a pipe.
        Err(
            talaria_files::FileError::NotFound(_)
            | talaria_files::FileError::Link(_)
            | talaria_files::FileError::NotRegular(_),
        ) => {}
        Err(e) => return Err(told("write", path, e)),
    }
    dir.replace(name, text.as_bytes(), &Replace::default())
        .map_err(|e| told("write", path, e))
}

/// Removes a local file — the name itself, never what a link there leads to — judged as a
/// write (blocking).
pub fn remove_file(rules: &LinkRules, path: &Path) -> Result<(), FileError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io_failure("remove", path, "not a file's path"));
    };
    let real_parent = std::fs::canonicalize(parent).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FileError::NotFound(path.to_path_buf()),
        _ => io_failure("remove", path, e),
    })?;
    let real = real_parent.join(name);
    if let Some(why) = rules.refusal(path, &real, true) {
        return Err(FileError::Other(why));
    }
    let (dir, name) = system(rules, path)?
        .parent_of(below_system(&real))
        .map_err(|e| told("remove", path, e))?;
    match dir.remove(name) {
        Ok(true) => Ok(()),
        Ok(false) => Err(FileError::NotFound(path.to_path_buf())),
        Err(e) => Err(told("remove", path, e)),
    }
}

/// The root of a search (resolved now, judged, held): what the walk finds is opened below it
/// ([`Root::open_read`]), with no link followed and nothing above it reached.
pub fn open_search_root(rules: &LinkRules, root: &Path) -> Result<Root, FileError> {
    let real = judge(rules, root, false)?;
    Root::open(&real, rules.places.clone()).map_err(|e| told("search", root, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_sandbox::SandboxPolicy;

    fn rules() -> LinkRules {
        LinkRules {
            sensitive: Arc::new(SensitivePaths::with_homes(Vec::new(), None)),
            places: Arc::new(talaria_files::Unguarded),
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
            places: Arc::new(super::super::SandboxPlaces::new(Arc::new(SandboxPolicy {
                writable: vec![writable.to_path_buf()],
                hidden: vec![talaria_home.to_path_buf()],
                ..SandboxPolicy::default()
            }))),
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
    fn a_hidden_place_that_is_no_credential_is_refused_by_any_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (ws, tmp) = (root.join("ws"), root.join("tmp"));
        let (own, other) = (tmp.join("talaria-1-0-a"), tmp.join("talaria-2-0-b"));
        for d in [&ws, &own, &other] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(other.join("notes"), "OTHER SESSION\n").expect("notes");
        let rules = LinkRules {
            sensitive: Arc::new(SensitivePaths::with_homes(Vec::new(), None)),
            places: Arc::new(super::super::SandboxPlaces::new(Arc::new(SandboxPolicy {
                writable: vec![ws.clone(), own.clone()],
                private_tmp: Some(own),
                ..SandboxPolicy::default()
            }))),
        };
        std::os::unix::fs::symlink(&other, ws.join("peek")).expect("link");
        for path in [other.join("notes"), ws.join("peek/notes")] {
            let read = read_text(&rules, &path);
            assert!(
                matches!(&read, Err(FileError::Other(why)) if why.contains("sandbox hides") || why.contains("hidden by the sandbox")),
                "{path:?}: {read:?}"
            );
            assert!(write_text(&rules, &path, "x").is_err());
            assert!(open_search_root(&rules, path.parent().expect("parent")).is_err());
        }
        assert_eq!(
            std::fs::read_to_string(other.join("notes")).expect("notes"),
            "OTHER SESSION\n"
        );
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
