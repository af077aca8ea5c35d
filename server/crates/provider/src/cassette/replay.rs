//! Replay: a provider that serves the model's side from a cassette. Each request is matched,
//! in order, by its normalised form; a request no recording matches fails the call with what
//! changed against the nearest one. Events come as fast as possible, or at the recorded
//! pace.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream;

use super::{Ending, Exchange, Normaliser, describe_miss};
use crate::error::StreamFailure;
use crate::model::{ChatRequest, StreamEvent};
use crate::{ChatProvider, EventStream, ProviderError};

/// The provider's name in messages.
const NAME: &str = "replay";

/// How fast a replay streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplayTiming {
    /// Every event at once.
    #[default]
    Fast,
    /// Each event when it came in the recording (for testing a frontend's streaming).
    Recorded,
}

/// Serves recorded calls.
pub struct ReplayProvider {
    exchanges: Vec<Exchange>,
    /// Which exchanges were served already.
    served: Mutex<Vec<bool>>,
    normaliser: Normaliser,
    timing: ReplayTiming,
}

impl ReplayProvider {
    pub fn new(exchanges: Vec<Exchange>, normaliser: Normaliser, timing: ReplayTiming) -> Self {
        let served = Mutex::new(vec![false; exchanges.len()]);
        Self {
            exchanges,
            served,
            normaliser,
            timing,
        }
    }

    /// The next exchange not served yet that recorded this request, marked served.
    fn take(&self, request: &serde_json::Value) -> Option<&Exchange> {
        let mut served = talaria_util::lock(&self.served);
        let (index, exchange) = self
            .exchanges
            .iter()
            .enumerate()
            .find(|(index, exchange)| !served[*index] && exchange.request == *request)?;
        served[index] = true;
        Some(exchange)
    }

    /// Why no recording matches `request`: what changed against the next one not served.
    fn miss(&self, request: &serde_json::Value) -> ProviderError {
        let served = talaria_util::lock(&self.served);
        let nearest = served
            .iter()
            .position(|done| !done)
            .and_then(|index| self.exchanges.get(index))
            .or_else(|| self.exchanges.last());
        let detail = match nearest {
            Some(nearest) => format!(
                "no recorded model call matches this request; against the next recorded one, \
                 {}",
                describe_miss(request, &nearest.request)
            ),
            None => "the cassette has no recorded model calls".into(),
        };
        ProviderError::Request {
            provider: NAME.into(),
            detail,
        }
    }
}

impl ChatProvider for ReplayProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let key = self.normaliser.request(request);
        let found = self.take(&key).map(|exchange| {
            let events: Vec<(u64, StreamEvent)> = exchange
                .events
                .iter()
                .map(|(after, event)| (*after, self.restored(event)))
                .collect();
            (events, exchange.ending.clone(), exchange.ended_after_ms)
        });
        let found = found.ok_or_else(|| self.miss(&key));
        let timing = self.timing;
        Box::pin(async move {
            let (events, ending, ended_after_ms) = found?;
            Ok(served(events, ending, ended_after_ms, timing))
        })
    }
}

impl ReplayProvider {
    /// A recorded event with this run's values in place of the placeholders.
    fn restored(&self, event: &StreamEvent) -> StreamEvent {
        let mut value = serde_json::to_value(event).unwrap_or_default();
        self.normaliser.restore_value(&mut value);
        serde_json::from_value(value).unwrap_or_else(|_| event.clone())
    }
}

/// The recorded events as a stream, paced as `timing` says, ending as recorded.
fn served(
    events: Vec<(u64, StreamEvent)>,
    ending: Ending,
    ended_after_ms: u64,
    timing: ReplayTiming,
) -> EventStream {
    let started = tokio::time::Instant::now();
    let pace = move |after_ms: u64| async move {
        if timing == ReplayTiming::Recorded {
            tokio::time::sleep_until(started + Duration::from_millis(after_ms)).await;
        }
    };
    let items = events.into_iter().map(|(after, event)| (after, Ok(event)));
    let last = match ending {
        Ending::Finished => None,
        Ending::Failed(message) => Some((
            ended_after_ms,
            Err(ProviderError::Stream {
                provider: NAME.into(),
                failure: StreamFailure::ErrorEvent,
                detail: message,
            }),
        )),
    };
    Box::pin(stream::unfold(
        items.chain(last),
        move |mut items| async move {
            let (after, item) = items.next()?;
            pace(after).await;
            Some((item, items))
        },
    ))
}
