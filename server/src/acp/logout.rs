//! `logout` (`agentCapabilities.auth.logout`): forgets the keys `talaria setup` stored in
//! `config.toml` (every other setting stays; the file is rewritten whole, in place, 0600),
//! and the agent counts as logged out until the client authenticates again: every session
//! start is answered `auth_required` meanwhile (a key from the environment included, which
//! this process cannot forget).

use std::path::Path;

use futures_util::FutureExt;

use super::{Agent, Reply, config_error, load_config, to_value};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;

/// `text` without its `api_key = …` and `api_keys = [ … ]` settings; `None` when nothing
/// was removed.
fn without_keys(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut removed = false;
    let mut in_array = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if in_array {
            if trimmed.trim_end().ends_with(']') {
                in_array = false;
            }
            continue;
        }
        let key = trimmed
            .split_once('=')
            .map(|(key, _)| key.trim().trim_matches('"'));
        match key {
            Some("api_key") => removed = true,
            Some("api_keys") => {
                removed = true;
                let value = trimmed.split_once('=').map_or("", |(_, v)| v.trim());
                in_array = value.starts_with('[') && !value.trim_end().ends_with(']');
            }
            _ => out.push_str(line),
        }
    }
    removed.then_some(out)
}

/// Why the stored keys could not be forgotten.
#[derive(Debug, PartialEq, thiserror::Error)]
enum LogoutError {
    #[error("cannot read {path}: {why}")]
    Read { path: String, why: String },
    #[error("{path} could not be rewritten without its keys ({why}); remove `api_key` by hand")]
    Unparsable { path: String, why: String },
    #[error("cannot rewrite {path}: {why}")]
    Write { path: String, why: String },
}

/// Removes the stored keys from `path`; `Ok(false)` when it held none (or does not exist).
fn forget_keys(path: &Path) -> Result<bool, LogoutError> {
    let shown = || path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(LogoutError::Read {
                path: shown(),
                why: e.to_string(),
            });
        }
    };
    let Some(kept) = without_keys(&text) else {
        return Ok(false);
    };
    // What is left must still be the same configuration, less the keys.
    if let Err(e) = toml::from_str::<toml::Table>(&kept) {
        return Err(LogoutError::Unparsable {
            path: shown(),
            why: e.to_string(),
        });
    }
    let temporary = path.with_extension("toml.logout");
    let written = {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| {
                file.write_all(kept.as_bytes())?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, path))
    };
    written.map(|()| true).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        LogoutError::Write {
            path: shown(),
            why: e.to_string(),
        }
    })
}

impl Agent {
    /// `logout`: the stored keys forgotten off the loop; then every session start asks to
    /// authenticate until the client does.
    pub(super) fn logout(&mut self, request: RequestId) -> Option<Reply> {
        let slow = async move {
            let config = load_config().await.map_err(config_error)?;
            let path = config.home.join("config.toml");
            let forgot = tokio::task::spawn_blocking(move || forget_keys(&path))
                .await
                .map_err(|e| errors::internal_error(format!("logout failed: {e}")))?
                .map_err(|e| errors::internal_error(e.to_string()))?;
            Ok(forgot)
        };
        self.defer(request, "logout", slow, |agent, forgot| {
            async move {
                agent.logged_out = true;
                tracing::info!(
                    forgot,
                    "logged out: sessions start again after authenticate"
                );
                to_value(acp::LogoutResponse::new())
            }
            .boxed_local()
        });
        None
    }

    /// The answer for a session start while logged out.
    pub(super) fn logged_out_error() -> acp::Error {
        errors::auth_required(format!(
            "logged out; {}",
            super::capabilities::auth_methods_hint()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_keys_go_and_the_rest_stays() {
        let text = "provider = \"openai\"\nmodel = \"m\"\n\n[openai]\nbase_url = \"u\"\n\
                    api_key = \"sk-1\"\napi_keys = [\n  \"a\",\n  \"b\",\n]\ntimeout = 3\n";
        let kept = without_keys(text).expect("removed");
        assert_eq!(
            kept,
            "provider = \"openai\"\nmodel = \"m\"\n\n[openai]\nbase_url = \"u\"\ntimeout = 3\n"
        );
        assert_eq!(without_keys("model = \"m\"\n"), None);
        assert_eq!(
            without_keys("[anthropic]\napi_keys = [\"x\", \"y\"]\nmodel = \"m\"\n").as_deref(),
            Some("[anthropic]\nmodel = \"m\"\n")
        );
    }

    #[test]
    fn the_file_is_rewritten_private_and_a_file_without_keys_is_left_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "model = \"m\"\n[openai]\napi_key = \"sk\"\n").expect("write");
        assert_eq!(forget_keys(&path), Ok(true));
        let kept = std::fs::read_to_string(&path).expect("read");
        assert_eq!(kept, "model = \"m\"\n[openai]\n");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(forget_keys(&path), Ok(false));
        assert_eq!(forget_keys(&dir.path().join("none.toml")), Ok(false));
    }
}
