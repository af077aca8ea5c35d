//! One actor per session. The actor owns the session's state (the record, mode, model,
//! remembered rules, tool state, usage) and receives `Op`s through its [`SessionHandle`];
//! it emits one stream of [`EngineEvent`]s.
//!
//! Invariants:
//! - At most one turn of a session runs at a time; prompts run in arrival order, never
//!   interleaved. Side tasks and snapshots wait for the running turn.
//! - A mode change applies to the next decision, also within a running turn; a model change
//!   applies from the next model call after the current turn. Both are recorded as markers.
//! - `cancel` ends the running turn (or side task) and every prompt queued before it; each of
//!   them still finishes with [`EngineEvent::TurnFinished`] (`Cancelled`). Prompts sent after
//!   the cancel run normally. Cancellation bypasses the queue so it is immediate.
//! - Every prompt gets exactly one `TurnFinished`, even if the turn panics; a failed or
//!   panicked turn stays in the record, interrupted.
//!
//! Rooms: `settings` (how a session begins; what it is started with is `crate::settings`),
//! `ops` (what the handle tells the actor), `handle`, and `actor` (the loop, with prompts,
//! turns, saving, titles and learning each in a file of its own).

mod actor;
mod handle;
mod ops;
mod settings;

pub use crate::settings::{SessionSettings, UserInput};
#[cfg(test)]
pub use actor::spawn_session;
pub use actor::spawn_session_with;
pub use handle::{NotQueued, Room, SessionHandle};
#[cfg(test)]
pub use ops::SessionSnapshot;
pub use ops::{MAX_PENDING_SETS, MAX_QUEUED_TURNS};
pub use settings::SessionStart;
