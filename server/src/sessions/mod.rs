//! The session room: everything that assembles and keeps sessions, for every transport —
//! the stdio loop (`acp::serve`), `talaria serve` and `talaria batch` reach it through the
//! wire room (`acp/`), which only translates. Here are the router cache and the local
//! servers' window probes (`process_shared.rs`, `server_window.rs`), the MCP hub
//! (`mcp.rs`), skills and memory (`skills.rs`), the slash commands a session runs
//! (`commands.rs`), cassettes (`cassettes/`), the tool registry's assembly and the launch
//! (`launch.rs`), the store's side of load, resume, list, close and delete (`stored.rs`),
//! and forks (`fork.rs`). One connection's room is a [`SessionRoom`] (`room.rs`).
//!
//! It speaks engine and plain types, with typed errors ([`SessionError`]; the wire room
//! turns them into JSON-RPC errors). Three ACP types still cross, because they are what the
//! client sends or shows as it is: `acp::McpServer` (a session's MCP servers, turned into
//! the hub's configuration in `mcp.rs`), `acp::SessionUpdate` (the slash commands' list,
//! built with the skills and MCP prompts it names) and `acp::ContentBlock` (a prompt read
//! for a `/skill` command, `skills::slash`).
//!
//! Where it lives: in the server, not behind the engine's front door. The engine knows
//! providers, registry, record and store, and no MCP, skills or cassettes; its front door is
//! one session actor (`spawn_session_with`), which this room feeds. Like codex's
//! `ConversationManager`, which its front ends ask for a conversation, the room can become a
//! crate of its own in front of the engine once a front end that does not speak ACP needs
//! it (and the three ACP types above are plain ones); moving it into the engine would give
//! the engine the MCP and skills crates it is kept free of.

mod cassettes;
mod client_prompt;
mod client_providers;
mod commands;
mod error;
mod fork;
mod launch;
mod mcp;
mod process_shared;
mod room;
mod server_window;
mod skills;
mod stored;
mod take_over;
mod trust;

pub use cassettes::CassetteOptions;
pub use client_prompt::{ClientPrompt, PromptMode};
pub use client_providers::{ClientEndpoint, ClientProviders, SERVICES, ServiceProtocol};
pub use error::SessionError;
pub use fork::prepare as prepare_fork;
pub use launch::{
    Assembled, ClientAbilities, Launch, Place, Ready, SessionTaps, load_config, ready_session,
};
pub use process_shared::{ClientMark, LiveSessions, ProcessShared};
pub use room::{SessionRoom, StartContext};
pub use server_window::local_server_report;
pub use stored::{
    Closing, ListPage, Reopened, delete, list, record_in_store, record_of_open, reopen,
};
pub use take_over::claim_from_elsewhere;
pub use talaria_mcp::oauth::SignInPrompt;
pub use trust::TrustQuestion;
