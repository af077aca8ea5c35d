//! The bearer token of `talaria serve`: generated at start (32 random bytes) and written,
//! readable only by the user, to `$TALARIA_HOME/serve.token`, or read from `--token-file`;
//! compared in constant time, whatever the length of what was offered.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// Why the token cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write the token file {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("the token file {0} is empty")]
    Empty(String),
    #[error("the token file {path} can be read by other users (mode {mode:o}); make it 0600")]
    Open { path: String, mode: u32 },
    #[error("the token in {0} is shorter than 16 characters")]
    Short(String),
    #[error("no randomness for the token: {0}")]
    Random(String),
}

/// The token every connection must show.
pub struct Token {
    /// Its SHA-256: what offered tokens are compared with (same length, whatever was offered).
    digest: [u8; 32],
    text: String,
}

impl Token {
    /// A fresh token, written to `path` (0600, whole or not at all).
    pub fn generate_into(path: &Path) -> Result<Self, TokenError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
        let text = URL_SAFE_NO_PAD.encode(bytes);
        let write_error = |source| TokenError::Write {
            path: path.display().to_string(),
            source,
        };
        let partial = path.with_extension(format!("token.{}.partial", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .map_err(write_error)?;
        file.write_all(format!("{text}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&partial, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                write_error(e)
            })?;
        Ok(Self::of(text))
    }

    /// The token in `path` (given with `--token-file`), which others may not read.
    pub fn read_from(path: &Path) -> Result<Self, TokenError> {
        let shown = path.display().to_string();
        let read_error = |source| TokenError::Read {
            path: shown.clone(),
            source,
        };
        let mode = std::fs::metadata(path)
            .map_err(read_error)?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(TokenError::Open {
                path: shown,
                mode: mode & 0o777,
            });
        }
        let text = std::fs::read_to_string(path)
            .map_err(read_error)?
            .trim()
            .to_string();
        if text.is_empty() {
            return Err(TokenError::Empty(shown));
        }
        if text.len() < 16 {
            return Err(TokenError::Short(shown));
        }
        Ok(Self::of(text))
    }

    fn of(text: String) -> Self {
        Self {
            digest: Sha256::digest(text.as_bytes()).into(),
            text,
        }
    }

    /// Whether `offered` is the token: digests compared in constant time, so neither the
    /// length nor a matching prefix shows in the time taken.
    pub fn accepts(&self, offered: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(offered.as_bytes()).into();
        digest
            .iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// The token itself (for `--open`'s address only).
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_is_the_users_alone_and_accepted_only_whole() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("serve.token");
        let token = Token::generate_into(&path).expect("token");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let written = std::fs::read_to_string(&path).expect("read");
        assert!(token.accepts(written.trim()));
        assert!(!token.accepts(&written.trim()[1..]));
        assert!(!token.accepts(""));
        assert!(!token.accepts(&format!("{}x", written.trim())));
        assert_eq!(
            Token::read_from(&path).expect("read back").text(),
            token.text()
        );
    }

    #[test]
    fn a_token_file_others_can_read_or_a_short_one_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("t");
        std::fs::write(&path, "a-long-enough-token-text\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(
            Token::read_from(&path),
            Err(TokenError::Open { .. })
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(Token::read_from(&path).is_ok());
        std::fs::write(&path, "short\n").expect("write");
        assert!(matches!(Token::read_from(&path), Err(TokenError::Short(_))));
    }
}
