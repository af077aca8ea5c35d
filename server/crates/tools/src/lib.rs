//! The tool registry and Talaria's tools.
//!
//! This crate is the root of the dependency graph: it imports nothing from the engine, the
//! providers or ACP. The engine asks the [`Registry`] for definitions to show the model and
//! dispatches the model's calls through it; the ACP edge only ever sees what the engine reports.
//! Where tools touch the outside world they go through traits ([`fs::FileAccess`],
//! [`shell::CommandRunner`]) so the edge can route them to the editor.

pub mod clarify;
pub mod diff;
mod error;
pub mod fs;
pub mod interfaces;
pub mod patch;
pub mod process;
pub mod read_file;
pub mod registry;
pub mod schema;
pub mod search_files;
pub mod sensitive;
pub mod session_state;
pub mod shell;
pub mod terminal;
pub mod todo;
pub mod tool;
pub mod write_file;

use std::sync::Arc;

pub use error::{ArgsError, ToolError};
pub use interfaces::SessionToolState;
pub use registry::{ParsedArgs, Registry};
pub use sensitive::{PathSecrecy, SensitivePaths};
pub use tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Kept, Progress, ProgressSink, TodoItem,
    Tool, ToolContext, ToolDefinition, ToolEffect, ToolImage, ToolKind, ToolLocation, ToolOutcome,
    ToolStatus,
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
