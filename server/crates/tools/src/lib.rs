//! The tool registry and Talaria's tools.
//!
//! This crate is the root of the dependency graph: it imports nothing from the engine, the
//! providers or ACP. The engine asks the [`Registry`] for definitions to show the model and
//! dispatches the model's calls through it; the ACP edge only ever sees what the engine reports.

pub mod read_file;
pub mod registry;
pub mod tool;

pub use registry::Registry;
pub use tool::{
    Tool, ToolContext, ToolDefinition, ToolKind, ToolLocation, ToolOutcome, ToolStatus,
};

/// The registry with every built-in tool this build offers.
pub fn builtin_registry() -> Registry {
    let mut registry = Registry::new();
    registry.register(std::sync::Arc::new(read_file::ReadFile));
    registry
}
