//! The wire room: the only place that knows ACP. It translates — requests into session-room
//! calls and engine ops, engine events into `session/update` notifications and prompt
//! responses — and assembles nothing: sessions are made and kept by the session room
//! (`crate::sessions`). The shared state is `state.rs` (a leaf); `dispatch` is the loop and
//! the method routing (the only `impl Agent`); each job's handlers are free functions over
//! the agent in a module of their own: `start` and `lifecycle` (session starts, loads,
//! lists, closes, deletes, forks), `prompt`, `settings`, `steering`, `rewind`, `providers`…;
//! `client_bridge` serves the engine's requests to the client (`questions` asks every
//! attached client), `forwarder` is a session's one writer (to every client attached:
//! `attach` and `audience`), `updates` and `replay` translate events and records.
//!
//! Invariants:
//! - The dispatch loop never waits on a turn: `session/prompt` is queued and answered later by
//!   the session's forwarder, after every update of that turn has been sent.
//! - A panic while handling one request is answered with `-32603`; the loop goes on.
//! - At end of input every request read before it is answered (the slow parts still running
//!   are waited for, within a deadline), then every session is cancelled and `serve` returns
//!   once output is flushed.

mod attach;
mod attached;
mod audience;
mod capabilities;
mod catching_up;
mod client_bridge;
mod client_prompt;
mod compaction;
mod delivery;
mod dispatch;
mod follow;
mod forwarder;
mod handover;
mod interception;
mod lifecycle;
mod logout;
mod mcp_sign_in;
mod plan_updates;
mod prompt;
mod prompt_input;
mod providers;
mod questions;
mod quota;
mod replay;
mod rewind;
mod run_command;
mod session_errors;
mod session_options;
mod settings;
mod shutdown;
mod start;
mod state;
mod steering;
mod take_over;
mod trust;
mod trust_apply;
mod updates;

pub use dispatch::{prepare_process, serve, serve_connection, serve_connection_on_streams};
pub use shutdown::ConnectionStop;
