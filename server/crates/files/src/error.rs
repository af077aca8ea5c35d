//! Why a file could not be reached, read or written.

use std::path::PathBuf;

/// Why an operation on the user's files failed; each names the path as the caller named it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0} does not exist")]
    NotFound(PathBuf),
    #[error(
        "{0} has a link on its way (made or swapped in since it was chosen); it is never \
         followed, nothing was read or written through it"
    )]
    Link(PathBuf),
    #[error("{0} is not below the folder it is reached from")]
    Outside(PathBuf),
    #[error("{0} is where the sandbox hides things; it is never read or written for the agent")]
    Hidden(PathBuf),
    #[error("{0} is a folder, not a file")]
    IsDirectory(PathBuf),
    #[error("{0} is not a regular file (a pipe, socket, device or link)")]
    NotRegular(PathBuf),
    #[error("{path} is over {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl FileError {
    /// The failure of `action` on `path` as the kernel said it.
    pub(crate) fn of(
        action: &'static str,
        path: impl Into<PathBuf>,
        errno: rustix::io::Errno,
    ) -> Self {
        let path = path.into();
        match errno {
            rustix::io::Errno::NOENT => FileError::NotFound(path),
            rustix::io::Errno::LOOP => FileError::Link(path),
            rustix::io::Errno::XDEV => FileError::Outside(path),
            rustix::io::Errno::ISDIR => FileError::IsDirectory(path),
            other => FileError::Io {
                action,
                path,
                source: std::io::Error::from(other),
            },
        }
    }

    /// The failure of `action` on `path` as `std` said it.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        FileError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

impl From<FileError> for std::io::Error {
    fn from(error: FileError) -> Self {
        match error {
            FileError::Io { source, .. } => source,
            FileError::NotFound(_) => std::io::Error::new(std::io::ErrorKind::NotFound, error),
            FileError::IsDirectory(_) => {
                std::io::Error::new(std::io::ErrorKind::IsADirectory, error)
            }
            other => std::io::Error::other(other),
        }
    }
}
