//! The crash suite and the seeded simulation of durability (docs/durability.md, "Proven by
//! crashing"): the real `talaria`, built with failpoints, is killed or faulted at every
//! durable step it passes, and each time restarted on the same home and checked against
//! what its clients were told.
//!
//! - [`home`]: one run's world (home, workspace, mock LLM, store) and its agent processes.
//! - [`client`], [`ledger`]: a client that keeps what it sent, and the promises its answers
//!   made.
//! - [`invariants`]: the checks after a restart.
//! - [`operations`], [`crash`]: the operations the suite cuts, and its runner.
//! - [`sim`]: random interleavings of operations over sessions and processes, by seed, with
//!   faults, checked after each step; a failing seed shrunk to a short sequence.

// A test crate: its set-up steps panic on failure like the tests that use them.
#![allow(clippy::expect_used)]

pub mod agent_bin;
pub mod batch;
pub mod client;
pub mod crash;
pub mod home;
pub mod invariants;
pub mod ledger;
pub mod operations;
pub mod points;
pub mod serve;
pub mod sim;
pub mod stalls;
