//! Where a server's sign-in is kept: one file per server address under the store folder
//! (`$TALARIA_HOME/mcp-auth`), the folder readable only by the user (0700) and each file too
//! (0600), written whole to a temporary file and renamed, so a crash never leaves half a token.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What is kept of a sign-in: the client registered with the authorization server, and its
/// tokens. Never logged: its `Debug` shows no secret.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stored {
    /// The MCP server's address (the file's key).
    pub server_url: String,
    /// Where tokens are refreshed.
    pub token_endpoint: String,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Seconds since the Unix epoch when the access token expires (`None`: not said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Seconds the access token was granted for (to refresh it well before it expires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<u64>,
    /// The resource the tokens were asked for (RFC 8707).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("server_url", &self.server_url)
            .field("client_id", &self.client_id)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The sign-ins of one user, in one folder.
#[derive(Debug, Clone)]
pub struct TokenStore {
    dir: PathBuf,
}

/// Why a sign-in could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot keep the sign-in in {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the sign-in in {path} cannot be read: {detail}")]
    Unreadable { path: PathBuf, detail: String },
}

impl TokenStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The file of a server's sign-in: its host for people, a hash of its whole address to
    /// keep two servers on one host apart.
    pub fn path_for(&self, server_url: &str) -> PathBuf {
        let digest = Sha256::digest(server_url.as_bytes());
        let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let host: String = reqwest::Url::parse(server_url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_string))
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        self.dir.join(format!("{host}-{hash}.json"))
    }

    /// The server's sign-in, when one is kept (a file of someone else's mode is not trusted:
    /// it is read only when nobody else can read or write it).
    pub fn load(&self, server_url: &str) -> Result<Option<Stored>, StoreError> {
        let path = self.path_for(server_url);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        let mode = std::fs::metadata(&path)
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(StoreError::Unreadable {
                path,
                detail: format!(
                    "others may read or write it (mode {:o}); sign in again",
                    mode & 0o777
                ),
            });
        }
        let stored: Stored =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Unreadable {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        Ok((stored.server_url == server_url).then_some(stored))
    }

    /// Keeps a sign-in (the folder made, or narrowed, to the user alone).
    pub fn save(&self, stored: &Stored) -> Result<(), StoreError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io(&self.dir))?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io(&self.dir))?;
        let path = self.path_for(&stored.server_url);
        let partial = path.with_extension(format!("json.{}.partial", std::process::id()));
        let body = serde_json::to_vec_pretty(stored).map_err(|e| StoreError::Unreadable {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&partial)?;
            file.write_all(&body)?;
            file.sync_all()?;
            std::fs::rename(&partial, &path)
        };
        write().map_err(|source| {
            let _ = std::fs::remove_file(&partial);
            StoreError::Io {
                path: path.clone(),
                source,
            }
        })
    }

    /// Forgets a server's sign-in (its tokens were refused for good).
    pub fn forget(&self, server_url: &str) {
        let _ = std::fs::remove_file(self.path_for(server_url));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(url: &str) -> Stored {
        Stored {
            server_url: url.into(),
            token_endpoint: "http://127.0.0.1:1/token".into(),
            client_id: "client".into(),
            access_token: "secret-access".into(),
            refresh_token: Some("secret-refresh".into()),
            expires_at: Some(10),
            ..Stored::default()
        }
    }

    #[test]
    fn a_sign_in_is_kept_for_the_user_alone_and_read_back() {
        let home = tempfile::tempdir().expect("dir");
        let store = TokenStore::new(home.path().join("mcp-auth"));
        let url = "https://mcp.example.com/mcp";
        store.save(&stored(url)).expect("saved");
        let path = store.path_for(url);
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&home.path().join("mcp-auth")), 0o700);
        assert_eq!(store.load(url).expect("read"), Some(stored(url)));
        assert_eq!(
            store.load("https://mcp.example.com/other").expect("read"),
            None
        );
        assert!(!format!("{:?}", stored(url)).contains("secret"));
    }

    #[test]
    fn a_sign_in_others_can_read_is_refused() {
        let home = tempfile::tempdir().expect("dir");
        let store = TokenStore::new(home.path());
        let url = "https://mcp.example.com/mcp";
        store.save(&stored(url)).expect("saved");
        std::fs::set_permissions(store.path_for(url), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let error = store.load(url).expect_err("refused");
        assert!(error.to_string().contains("others may read"), "{error}");
    }

    #[test]
    fn two_servers_on_one_host_keep_two_files() {
        let store = TokenStore::new("/x");
        let a = store.path_for("https://h.example/a");
        let b = store.path_for("https://h.example/b");
        assert_ne!(a, b);
        assert!(a.to_string_lossy().contains("h.example-"));
    }
}
