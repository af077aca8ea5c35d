//! `logout` (`agentCapabilities.auth.logout`): forgets the keys `talaria setup` stored in
//! `config.toml` (`crate::config_file`: only `api_key`/`api_keys` of the services' tables
//! go, every other byte stays; the file is replaced atomically, 0600), and the agent counts
//! as logged out until the client authenticates again: every session start is answered
//! `auth_required` meanwhile (a key from the environment included, which this process
//! cannot forget).

use std::path::Path;

use futures_util::FutureExt;

use super::session_errors::config_error;
use super::state::{Agent, Reply, to_value};
use crate::config_file::{self, ConfigFileError};
use crate::sessions::load_config;
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;

/// Removes the stored keys from `path`; `Ok(false)` when it held none (or does not exist).
fn forget_keys(path: &Path) -> Result<bool, ConfigFileError> {
    let Some(text) = config_file::read(path)? else {
        return Ok(false);
    };
    let Some(kept) = config_file::without_keys(&text, path)? else {
        return Ok(false);
    };
    config_file::rewrite(path, &kept)?;
    Ok(true)
}

/// `logout`: the stored keys forgotten off the loop; then every session start asks to
/// authenticate until the client does.
pub(super) fn logout(agent: &mut Agent, request: RequestId) -> Option<Reply> {
    let slow = async move {
        let config = load_config().await.map_err(config_error)?;
        let path = config.home.join("config.toml");
        let forgot = tokio::task::spawn_blocking(move || forget_keys(&path))
            .await
            .map_err(|e| errors::internal_error(format!("logout failed: {e}")))?
            .map_err(|e| errors::internal_error(e.to_string()))?;
        Ok(forgot)
    };
    agent.defer(request, "logout", slow, |agent, forgot| {
        async move {
            agent.room.logged_out = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_rewritten_private_and_a_file_without_keys_is_left_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "model = \"m\"\n[openai]\napi_key = \"sk\"\n").expect("write");
        assert!(forget_keys(&path).expect("forgot"));
        let kept = std::fs::read_to_string(&path).expect("read");
        assert_eq!(kept, "model = \"m\"\n[openai]\n");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let before = std::fs::metadata(&path)
            .expect("meta")
            .modified()
            .expect("time");
        assert!(!forget_keys(&path).expect("nothing to forget"));
        let after = std::fs::metadata(&path)
            .expect("meta")
            .modified()
            .expect("time");
        assert_eq!(before, after, "a file without keys is not rewritten");
        assert!(!forget_keys(&dir.path().join("none.toml")).expect("no file"));
    }
}
