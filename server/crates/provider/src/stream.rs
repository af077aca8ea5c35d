//! The shared driver of a streaming response: bytes → SSE events → a decoder → stream events,
//! with the idle (stale-stream) timeout and the "ended too early" check in one place.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use crate::error::StreamFailure;
use crate::error::error_chain;
use crate::sse::{SseDecoder, SseEvent};
use crate::{EventStream, ProviderError, StreamEvent};

/// Events produced while decoding: those of one read, drained before the next.
pub type Out = VecDeque<Result<StreamEvent, ProviderError>>;

/// An API's stream format.
pub trait Decoder: Send + 'static {
    /// Handles one SSE event; returns true once the response is complete (or failed).
    fn event(&mut self, event: &SseEvent, out: &mut Out) -> bool;
    /// The bytes ended without a completing event. Returns true if what was received counts as
    /// a complete response (the decoder then pushed `Finished`). By default it does not.
    fn ended(&mut self, _out: &mut Out) -> bool {
        false
    }
}

struct State<D> {
    bytes: BoxStream<'static, reqwest::Result<Bytes>>,
    provider: String,
    idle_timeout: Duration,
    sse: SseDecoder,
    events: Vec<SseEvent>,
    out: Out,
    decoder: D,
    done: bool,
}

/// A stream error from `provider`.
pub fn stream_error(
    provider: &str,
    failure: StreamFailure,
    detail: impl Into<String>,
) -> ProviderError {
    ProviderError::Stream {
        provider: provider.into(),
        failure,
        detail: detail.into(),
    }
}

/// Drives `decoder` over a response body.
pub fn drive<D: Decoder>(
    response: reqwest::Response,
    provider: &str,
    idle_timeout: Duration,
    decoder: D,
) -> EventStream {
    drive_bytes(
        response.bytes_stream().boxed(),
        provider,
        idle_timeout,
        decoder,
    )
}

/// Drives `decoder` over a byte stream (also used by tests).
pub fn drive_bytes<D: Decoder>(
    bytes: BoxStream<'static, reqwest::Result<Bytes>>,
    provider: &str,
    idle_timeout: Duration,
    decoder: D,
) -> EventStream {
    let state = State {
        bytes,
        provider: provider.to_string(),
        idle_timeout,
        sse: SseDecoder::default(),
        events: Vec::new(),
        out: VecDeque::new(),
        decoder,
        done: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.out.pop_front() {
                return Some((event, state));
            }
            if state.done {
                return None;
            }
            match tokio::time::timeout(state.idle_timeout, state.bytes.next()).await {
                Err(_) => {
                    state.done = true;
                    let detail = format!(
                        "no data for {} s; the stream was abandoned",
                        state.idle_timeout.as_secs()
                    );
                    state.out.push_back(Err(stream_error(
                        &state.provider,
                        StreamFailure::Stalled,
                        detail,
                    )));
                }
                Ok(Some(Ok(chunk))) => {
                    let mut events = std::mem::take(&mut state.events);
                    state.sse.feed(&chunk, &mut events);
                    for event in events.drain(..) {
                        if state.decoder.event(&event, &mut state.out) {
                            state.done = true;
                            break;
                        }
                    }
                    state.events = events;
                }
                Ok(Some(Err(e))) => {
                    state.done = true;
                    let detail = format!("connection broke mid-stream: {}", error_chain(&e));
                    state.out.push_back(Err(stream_error(
                        &state.provider,
                        StreamFailure::Broken,
                        detail,
                    )));
                }
                Ok(None) => {
                    state.done = true;
                    let mut events = Vec::new();
                    state.sse.finish(&mut events);
                    let mut complete = false;
                    for event in &events {
                        if state.decoder.event(event, &mut state.out) {
                            complete = true;
                            break;
                        }
                    }
                    if !complete && !state.decoder.ended(&mut state.out) {
                        let detail = "the stream ended before the response was complete";
                        state.out.push_back(Err(stream_error(
                            &state.provider,
                            StreamFailure::EndedEarly,
                            detail,
                        )));
                    }
                }
            }
        }
    })
    .boxed()
}

/// Parses an event's JSON, logging and skipping malformed data.
pub fn parse_json(provider: &str, data: &str) -> Option<serde_json::Value> {
    match serde_json::from_str(data) {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::warn!(provider, "skipping malformed SSE data ({e}): {:.200}", data);
            None
        }
    }
}

/// Decodes a whole body given as chunks (for decoder tests).
#[cfg(test)]
pub fn decode_chunks<D: Decoder>(
    chunks: &[&'static str],
    decoder: D,
) -> Vec<Result<StreamEvent, ProviderError>> {
    let bytes = futures_util::stream::iter(
        chunks
            .iter()
            .map(|c| Ok::<_, reqwest::Error>(Bytes::from_static(c.as_bytes())))
            .collect::<Vec<_>>(),
    )
    .boxed();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    runtime
        .block_on(drive_bytes(bytes, "test", Duration::from_secs(5), decoder).collect::<Vec<_>>())
}
