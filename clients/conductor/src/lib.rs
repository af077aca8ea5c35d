//! Talaria as the ACP client of another agent (`[agents.NAME]` in the configuration).
//!
//! [`ChildAgent::start`] runs the agent's command, speaks ACP to it over its stdio, and
//! initializes it with the capabilities the caller's [`ChildHost`] serves. Sessions are opened
//! and prompted through the handle; everything the child sends — its `session/update`s and
//! its requests for files, terminals and permission — goes to the host, which decides under
//! its own rules. This crate decides nothing about safety: it only carries.
//!
//! Invariants:
//! - Every request of the child is answered exactly once: by the host, or with "method not
//!   found" for what the host does not serve, or with a cancellation when the child withdraws
//!   it. A host's slow answer never holds back the child's updates.
//! - A prompt ends: with the child's answer, with [`ChildError::Exited`] when the child's
//!   output ends, with [`ChildError::Hung`] when the child says nothing for the idle limit
//!   while nothing waits on the host, or when the caller cancels (`session/cancel` first, the
//!   process killed if no answer follows within the grace).
//! - The child's process is killed when its handle is dropped.

mod child;
mod command;
mod error;
mod host;
mod requests;
mod stderr_tail;

pub use child::{AgentInfo, ChildAgent, PromptOutcome, Timings};
pub use command::AgentCommand;
pub use error::ChildError;
pub use host::{ChildHost, HostFuture};
