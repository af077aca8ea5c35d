//! The session room's errors as the client sees them: JSON-RPC errors with a useful message
//! (a configuration problem is invalid params naming the file, never an internal error).

use talaria_protocol::acp;
use talaria_protocol::errors;
use talaria_store::StoreError;

use crate::sessions::SessionError;

use super::capabilities;

impl From<SessionError> for acp::Error {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::Invalid(message) => errors::invalid_params(message),
            SessionError::Config(error) => config_error(error),
            SessionError::LoggedOut => capabilities::auth_required(
                "logged_out",
                "logged out",
                "this agent was logged out: sessions start again once the client authenticates",
            ),
            SessionError::NoCredentials { provider, missing } => {
                capabilities::credentials_missing(&provider, &missing)
            }
            SessionError::Store(error) => store_error(error),
            SessionError::Internal(message) => errors::internal_error(message),
        }
    }
}

/// A configuration problem as the client sees it: invalid params naming the file (and, for
/// a bad value, the key and line), never an internal error.
pub(super) fn config_error(error: talaria_engine::ConfigError) -> acp::Error {
    tracing::error!("configuration: {error}");
    errors::invalid_params(format!("configuration problem: {error}"))
}

/// What the store said, as the client sees it: a session it cannot have is invalid params,
/// a store that cannot answer now is unavailable.
pub(super) fn store_error(error: StoreError) -> acp::Error {
    match error {
        StoreError::NotFound(id) => errors::invalid_params(format!("no saved session {id}")),
        StoreError::NoRecord(_) | StoreError::Deleted(_) => {
            errors::invalid_params(error.to_string())
        }
        StoreError::InUse { .. } => errors::invalid_params(error.to_string()),
        StoreError::NotOpenYet(_)
        | StoreError::TimedOut(_)
        | StoreError::Busy(_)
        | StoreError::Overloaded(_)
        | StoreError::Unreachable(_) => errors::unavailable(error),
        other => errors::internal_error(other.to_string()),
    }
}
