//! The bearer token of `talaria serve`: 32 random bytes written, readable only by the user,
//! to `$TALARIA_HOME/serve.token`, or read from `--token-file`; compared in constant time,
//! whatever the length of what was offered. A server holds `serve.token.lock` shared for its
//! life, so one starting beside a running server on the same home keeps the token that
//! server uses (and its clients' copies stay good) and only a start with no server running
//! writes a new one; starts decide one at a time (`serve.token.start.lock`).

use std::fs::File;
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
    #[error("reading or writing the token was interrupted: {0}")]
    Interrupted(String),
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: String,
        source: std::io::Error,
    },
}

/// A server's hold on the token it uses: while held, a server starting on the same home
/// keeps this token rather than writing a new one.
pub struct Held {
    /// Whether this start wrote it (no server was running).
    pub fresh: bool,
    /// `serve.token.lock`, locked shared for the server's life.
    _running: File,
}

fn lock_file(path: &Path) -> Result<File, TokenError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|source| TokenError::Lock {
            path: path.display().to_string(),
            source,
        })
}

/// The token in `path` (`$TALARIA_HOME/serve.token`): the one a running server uses, or,
/// with none running, a fresh one written there.
pub fn keep_or_generate(path: &Path) -> Result<(Token, Held), TokenError> {
    let lock_error = |at: &Path| {
        let at = at.display().to_string();
        move |source| TokenError::Lock { path: at, source }
    };
    let start_path = path.with_extension("token.start.lock");
    let start = lock_file(&start_path)?;
    start.lock().map_err(lock_error(&start_path))?;
    let running_path = path.with_extension("token.lock");
    let running = lock_file(&running_path)?;
    let none_running = match running.try_lock() {
        Ok(()) => true,
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(std::fs::TryLockError::Error(e)) => return Err(lock_error(&running_path)(e)),
    };
    let kept = if none_running {
        let _ = running.unlock();
        None
    } else {
        // A running server's token: its clients hold copies of it.
        Token::read_from(path).ok()
    };
    let (token, fresh) = match kept {
        Some(token) => (token, false),
        None => (Token::generate_into(path)?, true),
    };
    running.lock_shared().map_err(lock_error(&running_path))?;
    drop(start);
    Ok((
        token,
        Held {
            fresh,
            _running: running,
        },
    ))
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
        if talaria_util::failpoint::injected("serve::token::write::before") {
            return Err(write_error(std::io::Error::other(
                "injected: the disk is full",
            )));
        }
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
        talaria_util::failpoint::step("serve::token::write::after");
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
    fn a_token_a_running_server_holds_is_kept_and_a_new_one_written_once_none_runs() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("serve.token");
        let (first_token, first) = keep_or_generate(&path).expect("first");
        assert!(first.fresh);
        let first_text = first_token.text().to_string();
        let (second_token, second) = keep_or_generate(&path).expect("second");
        assert!(!second.fresh, "a server runs: its token is kept");
        assert_eq!(second_token.text(), first_text);
        drop(first);
        let (_, third) = keep_or_generate(&path).expect("third");
        assert!(!third.fresh, "the second still runs");
        drop(second);
        drop(third);
        let (after_token, after) = keep_or_generate(&path).expect("after");
        assert!(after.fresh, "none runs: a new token");
        assert_ne!(after_token.text(), first_text);
        let written = std::fs::read_to_string(&path).expect("read");
        assert_eq!(written.trim(), after_token.text());
        // A running server's token that cannot be read any more is replaced (its clients
        // could not read it either).
        std::fs::write(&path, "short\n").expect("spoil");
        let (_, replaced) = keep_or_generate(&path).expect("replaced");
        assert!(replaced.fresh);
        for lock in ["serve.token.lock", "serve.token.start.lock"] {
            let mode = std::fs::metadata(dir.path().join(lock))
                .expect("lock")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{lock}");
        }
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
