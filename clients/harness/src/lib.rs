//! Test and benchmark harness for ACP agents.
//!
//! - [`agent`]: spawn an ACP agent (by default the `talaria` binary) and drive it over stdio,
//!   in newline-delimited or `Content-Length` framing; [`websocket`]: the same for an agent in a
//!   `talaria serve`, over its WebSocket, taken back after a drop.
//! - [`mock_llm`]: a scripted mock LLM server on 127.0.0.1 speaking OpenAI Chat Completions
//!   (streaming and not): text in chunks with delays, reasoning, tool calls streamed as
//!   fragments, usage, HTTP errors with headers, hangs and dropped connections. It records every
//!   request, and whether the client went away before the response was complete.
//! - [`cassette`]: record a scenario once, replay it with no model, and compare what the
//!   client saw.
//! - [`batch`]: run a dataset of tasks against a child agent in this process (the runner
//!   `talaria batch` uses), results and trajectories out.

pub mod agent;
pub mod batch;
pub mod binary;
pub mod cassette;
pub mod mock_checks;
pub mod mock_llm;
pub mod websocket;
mod websocket_open;

pub use agent::{AgentProcess, WireFraming};
pub use mock_llm::{MockLlm, MockReply, MockToolCall, MockUsage, RecordedRequest};
