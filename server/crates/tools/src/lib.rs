//! The tool registry and Talaria's tools.
//!
//! This crate is the root of the dependency graph: it imports nothing from the engine, the
//! providers or ACP. The engine asks the [`Registry`] for definitions to show the model and
//! dispatches the model's calls through it; the ACP edge only ever sees what the engine reports.
//! Where tools touch the outside world they go through traits ([`FileAccess`],
//! [`CommandRunner`]) so the edge can route them to the editor.

// Every module is private: what other crates use is named below, once. Within the crate,
// modules import each other by their own paths, never through this root (it stands above
// them all: it assembles the built-in registry), and only downward in the layering that
// `server/tests/module_graph.rs` declares for this crate.
mod clarify;
mod diff;
mod error;
mod fs;
mod interfaces;
mod patch;
mod process;
mod read_file;
mod registry;
mod schema;
mod search_files;
mod sensitive;
mod session_state;
mod shell;
mod terminal;
mod todo;
mod tool;
mod write_file;

use std::sync::Arc;

// What a tool is, and the registry the engine asks.
pub use error::{ArgsError, ToolError};
pub use interfaces::{
    BackgroundProcess, ExitInfo, FormAnswer, ProcessTable, SessionToolState, UserQuestions,
};
pub use registry::{ParsedArgs, Registry};
pub use tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Kept, Progress, ProgressSink, TodoItem,
    Tool, ToolContext, ToolDefinition, ToolEffect, ToolImage, ToolKind, ToolLocation, ToolOutcome,
    ToolStatus, parse_args, resolve_in,
};
// The built-in tools.
pub use clarify::Clarify;
pub use patch::Patch;
pub use process::Process;
pub use read_file::ReadFile;
pub use search_files::SearchFiles;
pub use terminal::Terminal;
pub use todo::Todo;
pub use write_file::WriteFile;
// Where tools meet the user's world: secrets, files and commands.
pub use fs::{FileAccess, FileError, FileSides, LinkRules, LocalFiles};
pub use sensitive::{PathSecrecy, SensitivePaths, is_env_file};
pub use shell::launch::spec_variable;
pub use shell::output::HeadTail;
pub use shell::safety::{CommandClass, ShellEnv, classify_in};
pub use shell::{
    CommandResult, CommandRunner, CommandSpec, Launch, LocalRunner, Sandboxing, Shell,
    ShellSettings, kill_group, sweep_private_tmps,
};

/// The toolset of an MCP server's tools is this prefix plus the server's name.
pub const MCP_TOOLSET_PREFIX: &str = "mcp-";

/// The registry with every built-in tool this build offers.
pub fn builtin_registry() -> Registry {
    let mut registry = Registry::new();
    registry.register(Arc::new(read_file::ReadFile));
    registry.register(Arc::new(write_file::WriteFile));
    registry.register(Arc::new(patch::Patch));
    registry.register(Arc::new(search_files::SearchFiles));
    registry.register(Arc::new(terminal::Terminal));
    registry.register(Arc::new(process::Process));
    registry.register(Arc::new(todo::Todo));
    registry
}
