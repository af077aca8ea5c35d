//! Text file access behind a trait: the local disk (through the one way to the user's files,
//! `talaria-files`, judged as the sandbox judges: `pinned.rs`, `places.rs`), or the editor's
//! buffers (implemented by the protocol edge, judged here first), so tools never care which.

mod hidden_files;
pub mod pinned;
mod places;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;

pub use pinned::LinkRules;
pub use places::SandboxPlaces;

/// Files larger than this are not read as text.
pub const MAX_TEXT_FILE_BYTES: u64 = 50 * 1024 * 1024;
/// How many leading bytes are checked for NUL to detect binary files.
pub(crate) const BINARY_SNIFF_BYTES: usize = 8192;

/// Why a file could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("file not found: {0}")]
    NotFound(PathBuf),
    #[error("{0} is a directory, not a file")]
    IsDirectory(PathBuf),
    #[error("{path} looks like a binary file ({bytes} bytes); only text can be read")]
    Binary { path: PathBuf, bytes: usize },
    #[error("{path} is {bytes} bytes, over the {limit}-byte limit")]
    TooLarge {
        path: PathBuf,
        bytes: u64,
        limit: u64,
    },
    #[error("{0}")]
    Other(String),
}

/// Reads and writes whole text files.
pub trait FileAccess: Send + Sync {
    /// The file's text.
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>>;
    /// Replaces (or creates, with parent directories) the file's text.
    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>>;
    /// Whether `path` may be changed on this machine's disk other than by `write_text` (a
    /// removal): refused when what the caller knows of the file may not be the disk's.
    fn may_change_disk(&self, _path: &Path) -> Result<(), FileError> {
        Ok(())
    }
    /// Which side answered this turn's file requests (files that can be an editor's
    /// buffers); a subagent's turn shares its parent's.
    fn sides(&self) -> Option<FileSides> {
        None
    }
}

/// Which side answered a turn's file requests: the editor's buffers, this machine's disk.
/// Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct FileSides {
    pub editor: Arc<std::sync::atomic::AtomicBool>,
    pub disk: Arc<std::sync::atomic::AtomicBool>,
}

/// The local file system, each file opened pinned (`pinned.rs`): no link that appears
/// while a tool works is followed, and no link takes a tool where the sandbox hides things.
#[derive(Debug, Clone)]
pub struct LocalFiles {
    rules: Arc<LinkRules>,
}

impl LocalFiles {
    /// Local files judged by these rules.
    pub fn new(rules: LinkRules) -> Self {
        Self {
            rules: Arc::new(rules),
        }
    }
}

impl Default for LocalFiles {
    /// The rules of this process's environment, without a sandbox view.
    fn default() -> Self {
        Self::new(LinkRules::from_env())
    }
}

impl LocalFiles {
    /// Where `path` leads, if a file tool may go there (`writing` or reading): what a tool
    /// hands to the editor is judged here first, as a local read or write would be.
    pub async fn judge(&self, path: &Path, writing: bool) -> Result<PathBuf, FileError> {
        let rules = self.rules.clone();
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || pinned::judge(&rules, &path, writing))
            .await
            .unwrap_or_else(|e| Err(FileError::Other(format!("the check failed: {e}"))))
    }
}

impl FileAccess for LocalFiles {
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        let rules = self.rules.clone();
        let path = path.to_path_buf();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || pinned::read_text(&rules, &path))
                .await
                .unwrap_or_else(|e| Err(FileError::Other(format!("the read failed: {e}"))))
        })
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        let rules = self.rules.clone();
        let path = path.to_path_buf();
        let text = text.to_string();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || pinned::write_text(&rules, &path, &text))
                .await
                .unwrap_or_else(|e| Err(FileError::Other(format!("the write failed: {e}"))))
        })
    }
}
