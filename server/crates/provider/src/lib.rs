//! Model providers behind one trait, with a provider-neutral request and event model.
//!
//! Knows nothing of ACP or the engine. The engine builds a [`ChatRequest`] and consumes the
//! [`StreamEvent`]s; retries, fallback and error classification plug in at this seam.

pub mod anthropic;
pub mod cassette;
pub mod classify;
pub mod demo;
pub mod error;
pub mod http;
pub mod model;
pub mod openai;
pub mod rate_limits;
pub mod responses;
#[cfg(test)]
mod scripted;
pub mod server_window;
pub mod sse;
pub mod stream;
pub mod trajectory;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

pub use classify::{ClassPolicy, Classified, ErrorClass, classify};
pub use error::{ProviderError, StreamFailure};
pub use model::{
    ChatRequest, Effort, FinishReason, ModelMessage, Reasoning, StreamEvent, ToolCallRequest,
    ToolSpec, Transcript, Usage, UserPart,
};
pub use rate_limits::{LimitKind, LimitWindow, RateLimits};

/// The events of one model call, in order, ending with [`StreamEvent::Finished`] or an error.
pub type EventStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// A model endpoint that can stream a chat completion.
pub trait ChatProvider: Send + Sync {
    /// A short name for logs and messages (e.g. `openai`).
    fn name(&self) -> &str;

    /// Starts one streaming call. The request is serialized before this returns, so the
    /// future does not borrow it. Dropping the stream aborts the HTTP request.
    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>>;
}
