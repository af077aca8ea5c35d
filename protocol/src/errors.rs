//! JSON-RPC error constructors with the codes ACP uses, each carrying a useful message.

use crate::acp::{Error, ErrorCode};

/// `-32700`: the input was not JSON.
pub fn parse_error(detail: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::ParseError.into(),
        format!("Parse error: {detail}"),
    )
}

/// `-32600`: the JSON was not a valid JSON-RPC 2.0 request.
pub fn invalid_request(detail: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::InvalidRequest.into(),
        format!("Invalid request: {detail}"),
    )
}

/// `-32601`: no such method.
pub fn method_not_found(method: &str) -> Error {
    Error::new(
        ErrorCode::MethodNotFound.into(),
        format!("Method not found: {method}"),
    )
}

/// `-32602`: the parameters do not fit the method.
pub fn invalid_params(detail: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::InvalidParams.into(),
        format!("Invalid params: {detail}"),
    )
}

/// `-32603`: something went wrong inside the agent.
pub fn internal_error(detail: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::InternalError.into(),
        format!("Internal error: {detail}"),
    )
}

/// `-32800`: the request was cancelled.
pub fn request_cancelled() -> Error {
    Error::new(
        ErrorCode::RequestCancelled.into(),
        "Request cancelled".to_string(),
    )
}

/// `-32000`: credentials are missing; the message says what to set.
pub fn auth_required(detail: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::AuthRequired.into(),
        format!("Authentication required: {detail}"),
    )
}

/// Talaria's code for a request that cannot be served *yet* (the session store is not open,
/// or did not answer in time): the same request may succeed later.
pub const UNAVAILABLE: i32 = -32010;

/// `-32010`: the request cannot be served now but may be later; the message says why.
pub fn unavailable(detail: impl std::fmt::Display) -> Error {
    Error::new(
        UNAVAILABLE,
        format!("Unavailable, try again later: {detail}"),
    )
}

/// The numeric code of an error, for matching in tests and logs.
pub fn code_of(error: &Error) -> i32 {
    error.code.into()
}

/// Whether the peer answered that the request was cancelled (`-32800`).
pub fn is_cancelled(error: &Error) -> bool {
    error.code == ErrorCode::RequestCancelled
}

/// Whether the peer answered that what was asked for does not exist (`-32002`).
pub fn is_not_found(error: &Error) -> bool {
    error.code == ErrorCode::ResourceNotFound
}
