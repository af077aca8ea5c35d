//! Recording: a provider that forwards every call to the real one and keeps, per call, the
//! normalised request and each event the stream yielded with its time, in a [`CassetteLog`]
//! its owner writes out.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::Stream;
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::{Line, Normaliser};
use crate::model::{ChatRequest, StreamEvent};
use crate::{ChatProvider, EventStream, ProviderError};

/// The lines a recording made so far, in order, starting with the header; shared between the
/// recording provider and whoever writes the cassette (each line's JSON goes to the sink, when
/// there is one, as it is added).
#[derive(Debug, Clone)]
pub struct CassetteLog {
    lines: Arc<Mutex<Vec<Line>>>,
    sink: Option<std::sync::mpsc::Sender<String>>,
}

impl Default for CassetteLog {
    fn default() -> Self {
        Self {
            lines: Arc::new(Mutex::new(vec![super::header()])),
            sink: None,
        }
    }
}

impl CassetteLog {
    /// A log whose lines also go, as JSON text and in order, to `sink` (the header at once).
    pub fn writing_to(sink: std::sync::mpsc::Sender<String>) -> Self {
        if let Ok(header) = serde_json::to_string(&super::header()) {
            let _ = sink.send(header);
        }
        Self {
            sink: Some(sink),
            ..Self::default()
        }
    }

    /// The cassette as text: JSON lines, one line each.
    pub fn text(&self) -> String {
        let lines = talaria_util::lock(&self.lines);
        let mut out = String::new();
        for line in lines.iter() {
            if let Ok(json) = serde_json::to_string(line) {
                out.push_str(&json);
                out.push('\n');
            }
        }
        out
    }

    /// Model calls recorded so far.
    pub fn calls(&self) -> usize {
        talaria_util::lock(&self.lines)
            .iter()
            .filter(|line| matches!(line, Line::Request { .. }))
            .count()
    }

    /// Records a tool call (its arguments and outcome already normalised).
    pub fn tool(&self, name: &str, arguments: Value, outcome: Value) {
        self.append(vec![Line::Tool {
            name: name.to_string(),
            arguments,
            outcome,
        }]);
    }

    fn append(&self, lines: Vec<Line>) {
        let mut kept = talaria_util::lock(&self.lines);
        if let Some(sink) = &self.sink {
            for line in &lines {
                if let Ok(json) = serde_json::to_string(line) {
                    let _ = sink.send(json);
                }
            }
        }
        kept.extend(lines);
    }
}

/// Forwards every call to `inner` and records it in `log`.
pub struct RecordingProvider {
    inner: Arc<dyn ChatProvider>,
    normaliser: Normaliser,
    log: CassetteLog,
}

impl RecordingProvider {
    pub fn new(inner: Arc<dyn ChatProvider>, normaliser: Normaliser, log: CassetteLog) -> Self {
        Self {
            inner,
            normaliser,
            log,
        }
    }
}

impl ChatProvider for RecordingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let mut call = Call {
            lines: vec![Line::Request {
                request: self.normaliser.request(request),
            }],
            started: Instant::now(),
            normaliser: self.normaliser.clone(),
            log: Some(self.log.clone()),
        };
        let starting = self.inner.stream(request);
        Box::pin(async move {
            match starting.await {
                Ok(stream) => Ok(Box::pin(Tee { stream, call }) as EventStream),
                Err(error) => {
                    call.failed(&error);
                    Err(error)
                }
            }
        })
    }
}

/// One call being recorded; its lines reach the log when it ends (or is dropped).
struct Call {
    lines: Vec<Line>,
    started: Instant,
    normaliser: Normaliser,
    log: Option<CassetteLog>,
}

impl Call {
    fn after_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn event(&mut self, event: &StreamEvent) {
        let mut value = serde_json::to_value(event).unwrap_or_default();
        self.normaliser.value(&mut value);
        if let Ok(event) = serde_json::from_value(value) {
            let after_ms = self.after_ms();
            self.lines.push(Line::Event { after_ms, event });
        }
    }

    fn failed(&mut self, error: &ProviderError) {
        let after_ms = self.after_ms();
        let message = self.normaliser.text(&error.to_string());
        self.lines.push(Line::Error { after_ms, message });
        self.flush();
    }

    fn ended(&mut self) {
        let after_ms = self.after_ms();
        self.lines.push(Line::End { after_ms });
        self.flush();
    }

    fn flush(&mut self) {
        if let Some(log) = self.log.take() {
            log.append(std::mem::take(&mut self.lines));
        }
    }
}

impl Drop for Call {
    /// A stream dropped after its `finished` event (its reader needs nothing after it) ended;
    /// one dropped before (the turn was cancelled) is recorded as failed.
    fn drop(&mut self) {
        if self.log.is_none() {
            return;
        }
        let answered = matches!(
            self.lines.last(),
            Some(Line::Event {
                event: StreamEvent::Finished { .. },
                ..
            })
        );
        if answered {
            self.ended();
            return;
        }
        let after_ms = self.after_ms();
        self.lines.push(Line::Error {
            after_ms,
            message: "the call was abandoned before its end (cancelled)".into(),
        });
        self.flush();
    }
}

/// The real stream, each item recorded as it passes.
struct Tee {
    stream: EventStream,
    call: Call,
}

impl Stream for Tee {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.stream.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(event))) => self.call.event(event),
            Poll::Ready(Some(Err(error))) => self.call.failed(error),
            Poll::Ready(None) => self.call.ended(),
            Poll::Pending => {}
        }
        polled
    }
}
