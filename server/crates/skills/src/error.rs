//! Why a skill, memory or proposal operation failed: the caller's mistake, a refusal by the
//! safety scan, a missing name, or the disk. Each says what happened in words the model (or
//! the user) can act on.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// The request is not valid (a missing argument, a bad name, a refused path, text that
    /// does not occur): the caller can fix it.
    #[error("{0}")]
    Invalid(String),
    /// The content matches a pattern the safety scan refuses.
    #[error("{0}")]
    Refused(String),
    /// Nothing by that name or id.
    #[error("{0}")]
    NotFound(String),
    /// A stored file is not what it should be (unreadable JSON, no front matter).
    #[error("{0}")]
    Corrupt(String),
    /// The disk failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SkillError {
    /// Maps an I/O error of `action` (`read`, `write`, …) on `path`.
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}
