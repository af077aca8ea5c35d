//! A provider for this crate's tests: each call is answered with the next scripted events.

use std::sync::Mutex;

use futures_util::future::BoxFuture;

use crate::model::{ChatRequest, StreamEvent};
use crate::{ChatProvider, EventStream, ProviderError};

/// Answers each call with the next scripted events.
pub(crate) struct Scripted(pub(crate) Mutex<Vec<Vec<StreamEvent>>>);

impl ChatProvider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(
        &self,
        _: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let events = talaria_util::lock(&self.0).remove(0);
        Box::pin(async move {
            Ok(Box::pin(futures_util::stream::iter(events.into_iter().map(Ok))) as EventStream)
        })
    }
}
