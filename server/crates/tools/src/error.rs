//! Why a tool's step failed: the model's arguments, an operation that cannot be done as
//! asked, the disk or a process, the client that was delegated the work, or a cancel. The
//! message is what the model reads in the failed result.

use std::path::{Path, PathBuf};

/// Arguments that are not usable: not JSON, not an object, or not what the schema says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgsError(pub String);

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The call's arguments are not valid: the model can fix them.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// The operation cannot be done as asked (a patch that does not apply, a closed stdin).
    #[error("{0}")]
    Rejected(String),
    /// A file could not be read or written (on disk, or by the client).
    #[error("Cannot {action} {}: {source}", .path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: crate::fs::FileError,
    },
    /// A process could not be started, waited for or written to.
    #[error("{what}: {source}")]
    Process {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The disk failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The client failed (or refused) the work delegated to it; its own words.
    #[error("{0}")]
    Client(String),
    /// The call was cancelled before it finished.
    #[error("{0} cancelled")]
    Cancelled(&'static str),
}

impl ToolError {
    /// Maps an I/O error of `action` (`read`, `write`, …) on `path`.
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }

    /// Maps a file error of `action` on `path`.
    pub fn file(action: &'static str, path: &Path) -> impl FnOnce(crate::fs::FileError) -> Self {
        let path = path.to_path_buf();
        move |source| Self::File {
            action,
            path,
            source,
        }
    }

    /// Arguments the model can fix.
    pub fn args(message: impl Into<String>) -> Self {
        Self::Args(ArgsError(message.into()))
    }
}
