//! Text file access behind a trait: the local disk, or the editor's buffers (implemented by the
//! protocol edge), so tools never care which.

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;

/// Files larger than this are not read as text.
pub const MAX_TEXT_FILE_BYTES: u64 = 50 * 1024 * 1024;
/// How many leading bytes are checked for NUL to detect binary files.
const BINARY_SNIFF_BYTES: usize = 8192;

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
}

/// The local file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFiles;

impl FileAccess for LocalFiles {
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        Box::pin(read_local(path))
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await.map_err(|e| {
                    FileError::Other(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            tokio::fs::write(path, text)
                .await
                .map_err(|e| FileError::Other(format!("cannot write {}: {e}", path.display())))
        })
    }
}

/// Reads a local text file with the size and binary checks.
pub async fn read_local(path: &Path) -> Result<String, FileError> {
    let metadata = match tokio::fs::metadata(path).await {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileError::NotFound(path.to_path_buf()));
        }
        Err(e) => {
            return Err(FileError::Other(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    if metadata.is_dir() {
        return Err(FileError::IsDirectory(path.to_path_buf()));
    }
    if metadata.len() > MAX_TEXT_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            bytes: metadata.len(),
            limit: MAX_TEXT_FILE_BYTES,
        });
    }
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| FileError::Other(format!("cannot read {}: {e}", path.display())))?;
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
