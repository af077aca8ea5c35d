//! Files only this user may read: Talaria's home (every session's transcript, prompts, file
//! contents and command output live under it) is a folder of mode 0700, which keeps other
//! users out of everything below it whatever each file's own mode; the files Talaria writes
//! there and elsewhere (the store, its journals, cassettes) are 0600 as well.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of a private folder.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// The mode of a private file.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// What making a place private did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privacy {
    /// It was created private.
    Created,
    /// It was private already.
    Private,
    /// It was open to other users (this mode) and is private now.
    Tightened { was: u32 },
}

/// Creates `dir` (and its missing parents, those with the usual mode) as a private folder,
/// or makes an existing one private.
pub fn private_dir(dir: &Path) -> io::Result<Privacy> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => tighten(dir, meta.permissions().mode()),
        // A link to the home (a dotfiles set-up): the folder it leads to is made private.
        Ok(meta) if meta.file_type().is_symlink() && dir.is_dir() => {
            let mode = std::fs::metadata(dir)?.permissions().mode();
            tighten(dir, mode)
        }
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a folder", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            match std::fs::DirBuilder::new()
                .mode(PRIVATE_DIR_MODE)
                .create(dir)
            {
                Ok(()) => Ok(Privacy::Created),
                // Another process made it meanwhile.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => private_dir(dir),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Makes an existing file private (nothing when it does not exist).
pub fn private_file(file: &Path) -> io::Result<Privacy> {
    match std::fs::metadata(file) {
        Ok(meta) => tighten(file, meta.permissions().mode()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Privacy::Private),
        Err(e) => Err(e),
    }
}

/// Creates `file` private if it does not exist yet (an existing file is made private), so a
/// program that creates it by the usual mode later (SQLite) finds it private already.
pub fn create_private_file(file: &Path) -> io::Result<Privacy> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .open(file)
    {
        Ok(_) => Ok(Privacy::Created),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => private_file(file),
        Err(e) => Err(e),
    }
}

/// Opens `file` for appending, creating it private.
pub fn append_private(file: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(PRIVATE_FILE_MODE)
        .open(file)
}

/// Writes `bytes` as the whole of `file`, created (or made) private.
pub fn write_private(file: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(PRIVATE_FILE_MODE)
        .open(file)?;
    private_file(file)?;
    out.write_all(bytes)?;
    out.sync_data()
}

/// Whether a mode lets users other than the owner in.
pub fn open_to_others(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// Takes group and other users' rights away, keeping the owner's as they are (a folder the
/// user made read-only stays read-only).
fn tighten(path: &Path, mode: u32) -> io::Result<Privacy> {
    if !open_to_others(mode) {
        return Ok(Privacy::Private);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7700))?;
    Ok(Privacy::Tightened { was: mode & 0o7777 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).map_or(0, |m| m.permissions().mode() & 0o777)
    }

    #[test]
    fn a_new_home_is_private_and_an_open_one_is_tightened() {
        let base = std::env::temp_dir().join(format!("talaria-private-{}", std::process::id()));
        let home = base.join("a/.talaria");
        assert_eq!(private_dir(&home).ok(), Some(Privacy::Created));
        assert_eq!(mode(&home), 0o700);
        assert_eq!(private_dir(&home).ok(), Some(Privacy::Private));
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).ok();
        assert_eq!(
            private_dir(&home).ok(),
            Some(Privacy::Tightened { was: 0o755 })
        );
        assert_eq!(mode(&home), 0o700);
        let db = home.join("state.db");
        assert_eq!(create_private_file(&db).ok(), Some(Privacy::Created));
        assert_eq!(mode(&db), 0o600);
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).ok();
        assert_eq!(
            create_private_file(&db).ok(),
            Some(Privacy::Tightened { was: 0o644 })
        );
        assert_eq!(
            private_file(&home.join("none")).ok(),
            Some(Privacy::Private)
        );
        let appended = home.join("log.jsonl");
        assert!(append_private(&appended).is_ok());
        assert_eq!(mode(&appended), 0o600);
        // A home the user made read-only stays read-only.
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o555)).ok();
        assert_eq!(
            private_dir(&home).ok(),
            Some(Privacy::Tightened { was: 0o555 })
        );
        assert_eq!(mode(&home), 0o500);
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).ok();
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_file_where_the_home_should_be_is_an_error() {
        let base = std::env::temp_dir().join(format!("talaria-private-f-{}", std::process::id()));
        std::fs::create_dir_all(&base).ok();
        let file = base.join("home");
        std::fs::write(&file, "").ok();
        assert!(private_dir(&file).is_err());
        let _ = std::fs::remove_dir_all(&base);
    }
}
