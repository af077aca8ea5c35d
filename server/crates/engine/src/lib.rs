//! The session engine: configuration, one actor per session, the model/tool turn loop, and
//! the events a turn emits.
//!
//! Knows nothing of ACP: the protocol edge sends [`SessionHandle`] commands and turns
//! [`EngineEvent`]s into wire messages.

pub mod approval;
pub mod bridge;
pub mod budget;
pub mod config;
pub mod events;
mod orchestrator;
pub mod provider_factory;
pub mod session;
pub mod system_prompt;
mod turn;

pub use approval::Mode;
pub use bridge::{ClientBridge, PermissionAnswer, PermissionChoice, PermissionRequest};
pub use config::{Config, ConfigError, ProviderKind};
pub use events::{Barrier, EngineEvent, StopReason, ToolCallView, TurnError, TurnId};
pub use session::{SessionHandle, SessionSettings, spawn_session};

#[cfg(test)]
mod session_tests;
