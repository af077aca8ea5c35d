//! The session engine: configuration, one actor per session, the model/tool turn loop, and
//! the events a turn emits.
//!
//! Knows nothing of ACP: the protocol edge sends [`SessionHandle`] commands and turns
//! [`EngineEvent`]s into wire messages.

mod approval;
mod backoff;
mod budget;
mod call_error;
mod checkpointing;
mod client;
mod client_access;
mod config;
mod config_place;
mod context;
mod credentials;
mod delegation_kit;
mod events;
mod external_agents;
mod external_delegation;
mod grounding;
mod hooks;
mod intent;
mod journal;
mod model_call;
mod orchestrator;
mod pace;
mod plan_handover;
mod provider_factory;
mod providers;
mod review;
mod review_kit;
mod rewind;
mod router;
mod sandbox;
mod session;
mod session_search;
mod session_state;
mod settings;
mod side_task;
mod slash;
mod steering;
mod subagent;
mod system_prompt;
mod text_calls;
mod trust;
mod turn;
mod verify;
mod window_sizing;

// The front door: the edge uses only what is named here (every module above is private).
pub use approval::{Mode, SecretReads};
pub use checkpointing::{Checkpoints, checkpoints_for, prune_checkpoints};
pub use client::{
    ClientAnswer, ClientAsk, ClientRequest, Delegation, InterceptDecision, InterceptError,
    InterceptPhase, InterceptedCall, Interception, PermissionAnswer, PermissionChoice,
    PermissionRequest,
};
pub use config::reference::{
    markdown as configuration_reference, variables_set as configuration_variables_set,
};
pub use config::{
    AgentEntry, Config, ConfigError, Endpoint, Learning, McpServerEntry, ProviderKind, RetryPolicy,
    Settings, StoreConfig, default_home, is_local, without_password,
};
pub use events::{
    CompactionStatus, CompactionView, ContextUse, EngineEvent, LimitsView, NoticeLevel, Signal,
    StopReason, SubagentMessage, SubagentStop, SubagentView, ToolCallView, TurnError, TurnId,
    TurnUsage, limits_pool,
};
pub use external_agents::{
    AgentSet, ChildAnswer, ChildCall, ChildCallEnd, ChildCallKind, ChildCommand, ChildExit,
    ChildOption, ChildOptionKind, ChildOutput, ChildQuestion, ExternalAgents, ExternalHost,
    ExternalReport, ExternalRun, HostError, SteeredReport, Steers,
};
pub use hooks::{
    HookConfigError, HookEvent, HookOrigin, Hooks, claude_names, project_hooks as project_hooks_of,
};
pub use journal::{ANSWER_DEADLINE, Journal, READ_DEADLINE, SessionJournal};
pub use model_call::CallError;
pub use provider_factory::{build_router, build_router_through};
pub use providers::OPENAI as OPENAI_SERVICE;
pub use providers::{LOCAL_SERVERS, LocalServer, key_tables};
pub use review_kit::{ReviewFactory, ReviewKit};
pub use rewind::{
    MessagePoint, RewindOutcome, RewindRequest, fingerprint as message_fingerprint, user_message_id,
};
pub use router::ModelRouter;
pub use sandbox::{
    Helper as SandboxHelper, env_rules, layers as sandbox_layers, notice as sandbox_notice,
    refusals_dir, self_test as sandbox_self_test, shell as sandboxed_shell, state as sandbox_state,
};
pub use session::{
    MAX_PENDING_SETS, MAX_QUEUED_TURNS, NotQueued, Room, SessionHandle, SessionSettings,
    SessionStart, UserInput, spawn_session_with,
};
#[cfg(test)]
pub use session::{SessionSnapshot, spawn_session};
pub use session_search::SessionSearch;
pub use session_state::SessionView;
pub use side_task::SideTaskError;
pub use slash::{
    Asking, Attached, CommandArgError, CommandReply, CommandRuns, DeclaredCommand, Expansion,
    MCP_PROMPT_PREFIX, PromptInput, RewindArgs, SLASH_COMMANDS, SkillsAction, SlashCommand,
    SlashCommands, ToolsetChange, TypedCommand, parse_command,
};
pub use steering::{IdleSteer, SteerOutcome};
pub use subagent::cancel_subagent;
pub use system_prompt::{SessionPrompt, build as session_prompt};
pub use talaria_checkpoints::RestoreReport;
pub use talaria_provider::Effort;
pub use trust::{
    Assessment as TrustAssessment, InstructionFile, InstructionGate, PinnedSkillFiles,
    Standing as TrustStanding, TRUST_ENV, TRUST_FILE, TrustDecision, TrustError, TrustFile,
    TrustStatus, TrustStore, assess as assess_trust, revoke_folder, trust_folder,
    trust_for_process, trusted_by_environment,
};
pub use window_sizing::{PendingSizing, WindowSizing};

#[cfg(test)]
mod session_tests;
#[cfg(test)]
pub mod testkit;
