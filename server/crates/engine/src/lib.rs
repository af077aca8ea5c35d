//! The session engine: configuration, one actor per session, the model/tool turn loop, and
//! the events a turn emits.
//!
//! Knows nothing of ACP: the protocol edge sends [`SessionHandle`] commands and turns
//! [`EngineEvent`]s into wire messages.

pub mod approval;
mod backoff;
pub mod budget;
mod call_error;
pub mod client;
mod client_access;
pub mod config;
mod config_place;
mod context;
pub mod credentials;
pub mod events;
mod grounding;
mod intent;
pub mod journal;
pub mod model_call;
mod orchestrator;
pub mod pace;
mod plan_handover;
pub mod provider_factory;
pub mod providers;
pub mod review;
mod review_kit;
pub mod router;
pub mod sandbox;
pub mod session;
pub mod session_search;
mod session_state;
mod settings;
mod side_task;
mod slash;
pub mod steering;
mod subagent;
pub mod system_prompt;
mod text_calls;
mod turn;
mod verify;
pub mod window_sizing;

pub use approval::Mode;
pub use client::{
    ClientAnswer, ClientAsk, ClientRequest, Delegation, PermissionAnswer, PermissionChoice,
    PermissionRequest,
};
pub use config::{
    Config, ConfigError, Learning, ProviderKind, RetryPolicy, StoreConfig, without_password,
};
pub use events::{
    CompactionStatus, CompactionView, EngineEvent, NoticeLevel, Signal, StopReason,
    SubagentMessage, SubagentStop, SubagentView, ToolCallView, TurnError, TurnId, TurnUsage,
};
pub use model_call::CallError;
pub use review_kit::{ReviewFactory, ReviewKit};
pub use router::ModelRouter;
pub use session::{SessionHandle, SessionSettings, SessionStart, UserInput, spawn_session_with};
#[cfg(test)]
pub use session::{SessionSnapshot, spawn_session};
pub use session_state::SessionView;
pub use side_task::SideTaskError;
pub use slash::{CommandReply, Expansion, PromptInput, SlashCommand, SlashCommands};
pub use subagent::cancel_subagent;
pub use talaria_provider::Effort;

#[cfg(test)]
mod session_tests;
#[cfg(test)]
pub mod testkit;
