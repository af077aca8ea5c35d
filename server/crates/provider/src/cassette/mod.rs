//! Cassettes: a session's model calls recorded once and replayed as often as wanted, so a
//! harness or a frontend can test against Talaria with no model.
//!
//! A cassette is JSON lines, one event a line, in a fixed order: a header with the format's
//! version, then per model call a `request` line (the request as sent, normalised: the same
//! conversation gives the same request whatever the temporary paths, dates and ids), one
//! `event` line per streamed event with its time since the call started, and an `end` line
//! (or an `error` line when the stream failed). Recording ([`RecordingProvider`]) and replay
//! ([`ReplayProvider`]) are providers like any other: the engine does not know which one it
//! talks to.

mod diff;
mod normalise;
mod record;
mod replay;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::StreamEvent;

pub use diff::describe_miss;
pub use normalise::Normaliser;
pub use record::{CassetteLog, RecordingProvider};
pub use replay::{ReplayProvider, ReplayTiming};

/// The format this build writes (and the only one it reads).
pub const CASSETTE_VERSION: u32 = 1;

/// One line of a cassette.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "line", rename_all = "snake_case")]
pub enum Line {
    /// The first line.
    Header { cassette: u32, talaria: String },
    /// A model call: the request as sent, normalised.
    Request { request: Value },
    /// A streamed event, `after_ms` after the call started.
    Event { after_ms: u64, event: StreamEvent },
    /// The stream ended normally.
    End { after_ms: u64 },
    /// The stream failed with this message.
    Error { after_ms: u64, message: String },
    /// A tool call and its outcome, normalised, in the order the calls finished.
    Tool {
        name: String,
        arguments: Value,
        outcome: Value,
    },
}

/// A recorded tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTool {
    pub name: String,
    pub arguments: Value,
    pub outcome: Value,
}

/// What a cassette holds: its model calls and its tool calls, each in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cassette {
    pub exchanges: Vec<Exchange>,
    pub tools: Vec<RecordedTool>,
}

/// How a recorded call's stream ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Finished,
    Failed(String),
}

/// One recorded model call.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// The request as sent, normalised.
    pub request: Value,
    /// The events, each with its time since the call started.
    pub events: Vec<(u64, StreamEvent)>,
    pub ending: Ending,
    /// When the stream ended, since the call started.
    pub ended_after_ms: u64,
}

/// A cassette that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CassetteError {
    #[error("line {line} of the cassette is not a cassette line: {detail}")]
    BadLine { line: usize, detail: String },
    #[error(
        "this cassette is version {found}; this Talaria reads version {CASSETTE_VERSION} \
         (record it again with this version)"
    )]
    Version { found: u32 },
    #[error("the cassette has no header line (is it a cassette?)")]
    NoHeader,
    #[error("line {line}: {what} before any request")]
    Orphan { line: usize, what: &'static str },
}

/// Reads a cassette's text into its model and tool calls, in order.
pub fn parse(text: &str) -> Result<Cassette, CassetteError> {
    let mut exchanges: Vec<Exchange> = Vec::new();
    let mut tools = Vec::new();
    let mut header = false;
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(raw).map_err(|e| CassetteError::BadLine {
            line: number,
            detail: e.to_string(),
        })?;
        match line {
            Line::Header { cassette, .. } => {
                if cassette != CASSETTE_VERSION {
                    return Err(CassetteError::Version { found: cassette });
                }
                header = true;
            }
            _ if !header => return Err(CassetteError::NoHeader),
            Line::Tool {
                name,
                arguments,
                outcome,
            } => tools.push(RecordedTool {
                name,
                arguments,
                outcome,
            }),
            Line::Request { request } => exchanges.push(Exchange {
                request,
                events: Vec::new(),
                ending: Ending::Finished,
                ended_after_ms: 0,
            }),
            Line::Event { after_ms, event } => {
                let Some(open) = exchanges.last_mut() else {
                    return Err(CassetteError::Orphan {
                        line: number,
                        what: "an event",
                    });
                };
                open.events.push((after_ms, event));
            }
            Line::End { after_ms } | Line::Error { after_ms, .. } => {
                let Some(open) = exchanges.last_mut() else {
                    return Err(CassetteError::Orphan {
                        line: number,
                        what: "an end",
                    });
                };
                open.ended_after_ms = after_ms;
                if let Line::Error { message, .. } = line {
                    open.ending = Ending::Failed(message);
                }
            }
        }
    }
    if !header {
        return Err(CassetteError::NoHeader);
    }
    Ok(Cassette { exchanges, tools })
}

/// The header line a new cassette starts with.
pub fn header() -> Line {
    Line::Header {
        cassette: CASSETTE_VERSION,
        talaria: env!("CARGO_PKG_VERSION").to_string(),
    }
}

#[cfg(test)]
mod tests;
