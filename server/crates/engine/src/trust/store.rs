//! The user's trust decisions, remembered in `TALARIA_HOME/trusted_folders.json`: the folders
//! trusted (each with the hashes of the instruction files the user accepted) and the ones
//! declined. Read whole; written whole under an exclusive `flock` on a lock file beside it,
//! through a private temporary file renamed over the old one and the folder synced, so a
//! reader sees the old decisions or the new, never half of them. A file that cannot be read
//! trusts nothing (fail closed) and is never written over.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name under `TALARIA_HOME`.
pub const TRUST_FILE: &str = "trusted_folders.json";
const LOCK_FILE: &str = "trusted_folders.lock";

/// A trust store problem.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path} cannot be read ({why}); nothing is trusted until it is fixed or removed \
         (`talaria trust --list` shows it)"
    )]
    Unreadable { path: PathBuf, why: String },
    #[error("{0}")]
    Refused(String),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> TrustError + '_ {
    move |source| TrustError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One trusted folder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustedFolder {
    /// When it was trusted (milliseconds since the epoch).
    pub trusted_at: u64,
    /// The folder's identity when it was trusted: another folder put under its name is not
    /// trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
    /// Its birth time (nanoseconds since the epoch), where the file system keeps one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub born_ns: Option<u64>,
    /// The instruction files the user accepted: absolute path → SHA-256 of the content.
    #[serde(default)]
    pub instructions: BTreeMap<String, String>,
}

/// Everything the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustFile {
    /// Trusted folders by their resolved absolute path; each covers its subfolders.
    #[serde(default)]
    pub folders: BTreeMap<String, TrustedFolder>,
    /// Folders the user declined (not asked again; `talaria trust` still trusts them).
    #[serde(default)]
    pub declined: Vec<String>,
}

/// What the file says about a resolved folder: the nearest decision at or above it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Trusted through this folder (itself or an ancestor).
    Trusted(PathBuf, TrustedFolder),
    /// Declined at this folder (or an ancestor), with no nearer trust.
    Declined(PathBuf),
    Unknown,
}

impl TrustFile {
    /// The nearest decision covering `folder` (a resolved path): the longest recorded path
    /// that is `folder` or one of its ancestors, compared component by component.
    pub fn standing(&self, folder: &Path) -> Standing {
        let trusted = self
            .folders
            .iter()
            .filter(|(path, _)| folder.starts_with(path))
            .max_by_key(|(path, _)| Path::new(path).components().count());
        let declined = self
            .declined
            .iter()
            .filter(|path| folder.starts_with(path))
            .max_by_key(|path| Path::new(path).components().count());
        let depth = |path: &str| Path::new(path).components().count();
        match (trusted, declined) {
            (Some((path, _)), Some(no)) if depth(no) > depth(path) => {
                Standing::Declined(PathBuf::from(no))
            }
            (Some((path, entry)), _) => Standing::Trusted(PathBuf::from(path), entry.clone()),
            (None, Some(no)) => Standing::Declined(PathBuf::from(no)),
            (None, None) => Standing::Unknown,
        }
    }
}

/// The trust file of a Talaria home.
#[derive(Debug, Clone)]
pub struct TrustStore {
    home: PathBuf,
}

impl TrustStore {
    pub fn new(home: &Path) -> Self {
        Self {
            home: home.to_path_buf(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.home.join(TRUST_FILE)
    }

    /// The decisions; none when there is no file yet. Only a plain file of the user's that
    /// no one else may write is believed: a link (into a workspace, say) or a file others
    /// could have written trusts nothing.
    pub fn read(&self) -> Result<TrustFile, TrustError> {
        let path = self.path();
        let unreadable = |why: String| TrustError::Unreadable {
            path: path.clone(),
            why,
        };
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(TrustFile::default()),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(unreadable("it is a link".into()));
            }
            Err(e) => return Err(unreadable(e.to_string())),
        };
        let meta = file.metadata().map_err(|e| unreadable(e.to_string()))?;
        if let Some(why) = not_believed(&meta) {
            return Err(unreadable(why.into()));
        }
        let mut bytes = Vec::new();
        (&file)
            .read_to_end(&mut bytes)
            .map_err(|e| unreadable(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))
    }

    /// Changes the decisions under the lock: reads them again, applies `change`, writes
    /// them whole. An unreadable file is left as it is and the change refused.
    pub fn update<T>(
        &self,
        change: impl FnOnce(&mut TrustFile) -> Result<T, TrustError>,
    ) -> Result<T, TrustError> {
        talaria_util::private::private_dir(&self.home).map_err(io_error(&self.home))?;
        let lock_path = self.home.join(LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        talaria_util::private::private_file(&lock_path).map_err(io_error(&lock_path))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io_error(&lock_path)(e.into()))?;
        let mut file = self.read()?;
        let answer = change(&mut file)?;
        self.write(&file)?;
        Ok(answer)
    }

    /// Writes `file` whole: a private temporary file, synced, renamed over the old one, the
    /// folder synced.
    fn write(&self, file: &TrustFile) -> Result<(), TrustError> {
        let path = self.path();
        let temporary = self
            .home
            .join(format!(".{TRUST_FILE}.{}.tmp", std::process::id()));
        let bytes = serde_json::to_vec_pretty(file)
            .map_err(|e| TrustError::Refused(format!("the trust file cannot be written: {e}")))?;
        let _ = std::fs::remove_file(&temporary);
        talaria_util::private::write_private(&temporary, &bytes).map_err(io_error(&temporary))?;
        std::fs::rename(&temporary, &path).map_err(io_error(&path))?;
        std::fs::File::open(&self.home)
            .and_then(|dir| dir.sync_all())
            .map_err(io_error(&self.home))
    }
}

/// Why a trust file is not believed: not a plain file, not the user's, or writable by others.
fn not_believed(meta: &std::fs::Metadata) -> Option<&'static str> {
    if !meta.is_file() {
        return Some("it is not a plain file");
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Some("it belongs to another user");
    }
    (meta.mode() & 0o022 != 0).then_some("others can write it")
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
