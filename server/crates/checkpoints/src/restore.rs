//! Putting files back: the changes of rewound turns undone newest first, each file written
//! whole or not at all, and a file changed since the agent last did left alone unless forced.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use talaria_record::{FileChange, FileVersion};

use crate::blobs::{BlobStore, hash_of};

/// What a restore did, by path (each path once).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Put back as they were.
    pub restored: Vec<String>,
    /// Changed since the agent last did (by hand, or by something else): left as they are.
    pub skipped: Vec<String>,
    /// Could not be put back, with why (left as they were before the attempt).
    pub failed: Vec<(String, String)>,
}

/// Why one file could not be checked or put back.
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error("the checkpoint did not keep this version (over its bound)")]
    NotKept,
    #[error("its kept content cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("it has no folder or name")]
    NoName,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// How a file stands now, compared with what a change left.
fn matches_now(path: &Path, expected: Option<&FileVersion>) -> Result<bool, FileError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(expected.is_none());
        }
        Err(error) => return Err(error.into()),
    };
    let Some(expected) = expected else {
        return Ok(false);
    };
    if !meta.is_file() || meta.len() != expected.len {
        return Ok(false);
    }
    let Some(hash) = &expected.hash else {
        return Err(FileError::NotKept);
    };
    let bytes = fs::read(path)?;
    Ok(hash_of(&bytes) == *hash && meta.permissions().mode() & 0o7777 == expected.mode)
}

/// Puts one file back to `version` (`None`: removes it).
fn put_back(
    blobs: &BlobStore,
    session: &str,
    path: &Path,
    version: Option<&FileVersion>,
) -> Result<(), FileError> {
    let Some(version) = version else {
        return match fs::remove_file(path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error.into()),
            _ => Ok(()),
        };
    };
    let hash = version.hash.as_deref().ok_or(FileError::NotKept)?;
    let bytes = blobs
        .content(session, hash)
        .map_err(FileError::Unreadable)?;
    let dir = path.parent().ok_or(FileError::NoName)?;
    fs::create_dir_all(dir)?;
    let name = path.file_name().ok_or(FileError::NoName)?.to_string_lossy();
    let temporary = dir.join(format!(".{name}.talaria-restore"));
    let written = fs::File::create(&temporary)
        .and_then(|mut file| {
            file.write_all(&bytes)?;
            file.sync_all()?;
            file.set_permissions(fs::Permissions::from_mode(version.mode))
        })
        .and_then(|()| fs::rename(&temporary, path));
    written.map_err(|error| {
        let _ = fs::remove_file(&temporary);
        error.into()
    })
}

/// Undoes `changes` (in the order they were made) newest first. A file that is not as the
/// agent's last change left it is skipped (with `force`, put back anyway); once a file is
/// skipped or fails, its older changes are left too, so no file is put back half-way along
/// its history.
pub fn restore(
    blobs: &BlobStore,
    session: &str,
    changes: &[FileChange],
    force: bool,
) -> RestoreReport {
    let mut report = RestoreReport::default();
    let mut stopped: HashSet<&str> = HashSet::new();
    let mut restored: HashSet<&str> = HashSet::new();
    for change in changes.iter().rev() {
        let path = change.path.as_str();
        if stopped.contains(path) {
            continue;
        }
        let as_left = if force || restored.contains(path) {
            Ok(true)
        } else {
            matches_now(Path::new(path), change.after.as_ref())
        };
        match as_left {
            Ok(true) => {}
            Ok(false) => {
                report.skipped.push(path.to_string());
                stopped.insert(path);
                continue;
            }
            Err(why) => {
                report.failed.push((path.to_string(), why.to_string()));
                stopped.insert(path);
                continue;
            }
        }
        match put_back(blobs, session, Path::new(path), change.before.as_ref()) {
            Ok(()) => {
                if restored.insert(path) {
                    report.restored.push(path.to_string());
                }
            }
            Err(why) => {
                report.restored.retain(|p| p != path);
                report.failed.push((path.to_string(), why.to_string()));
                stopped.insert(path);
            }
        }
    }
    report
}
