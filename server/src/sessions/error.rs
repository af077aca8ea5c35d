//! Why a session could not be started, read, forked or deleted: typed here, told to the
//! client by the wire room (`acp/session_errors.rs`).

use talaria_engine::ConfigError;
use talaria_store::StoreError;

/// What went wrong in the session room.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The request asks for what cannot be (a relative cwd, a bad `_meta` value…).
    #[error("{0}")]
    Invalid(String),
    /// The configuration could not be read.
    #[error("configuration problem: {0}")]
    Config(#[from] ConfigError),
    /// `logout` was answered and no `authenticate` since.
    #[error("logged out")]
    LoggedOut,
    /// The configuration has no key for its provider.
    #[error("no API key for the {provider} provider")]
    NoCredentials { provider: String, missing: String },
    /// The store refused or could not answer.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// What should not happen (a task that panicked, a value that did not serialize).
    #[error("{0}")]
    Internal(String),
}
