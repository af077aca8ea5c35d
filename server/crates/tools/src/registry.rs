//! The registry: definitions for the model and dispatch of the model's calls.
//!
//! Invariant: every call gets a [`ToolOutcome`]. An unknown tool, arguments that are not a
//! JSON object, or a tool outside the session's whitelist give a failed outcome that says what
//! was wrong, so the model can correct itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::tool::{CallDescription, Tool, ToolContext, ToolDefinition, ToolOutcome};

/// A set of tools by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

/// The arguments of a call after parsing, or why they could not be parsed.
pub type ParsedArgs = Result<Value, String>;

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a later tool with the same name replaces the earlier one.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.definition().name, tool);
    }

    /// A registry holding only the named tools (the rest are not offered and not dispatched).
    pub fn restricted_to(&self, names: &[&str]) -> Registry {
        Registry {
            tools: self
                .tools
                .iter()
                .filter(|(name, _)| names.contains(name))
                .map(|(name, tool)| (*name, tool.clone()))
                .collect(),
        }
    }

    /// Definitions of every tool, in name order (stable, so prompts cache well).
    pub fn definitions(&self) -> impl Iterator<Item = &ToolDefinition> {
        self.tools.values().map(|tool| tool.definition())
    }

    /// Looks up a tool's definition.
    pub fn definition(&self, name: &str) -> Option<&ToolDefinition> {
        self.tools.get(name).map(|tool| tool.definition())
    }

    /// Parses raw model arguments: empty means `{}`; anything else must be a JSON object.
    pub fn parse_args(raw: &str) -> ParsedArgs {
        if raw.trim().is_empty() {
            return Ok(Value::Object(Default::default()));
        }
        match serde_json::from_str::<Value>(raw) {
            Ok(value @ Value::Object(_)) => Ok(value),
            Ok(other) => Err(format!(
                "tool arguments must be a JSON object, got: {}",
                truncate(&other.to_string(), 200)
            )),
            Err(e) => Err(format!(
                "tool arguments are not valid JSON ({e}): {}",
                truncate(raw, 200)
            )),
        }
    }

    /// Describes a call for display before it runs.
    pub fn describe(&self, name: &str, args: &ParsedArgs, ctx: &ToolContext) -> CallDescription {
        match (self.tools.get(name), args) {
            (Some(tool), Ok(args)) => tool.describe(args, ctx),
            _ => CallDescription {
                title: name.to_string(),
                locations: Vec::new(),
            },
        }
    }

    /// Runs a call. Never panics on bad input; every problem becomes a failed outcome.
    pub async fn dispatch(&self, name: &str, args: ParsedArgs, ctx: &ToolContext) -> ToolOutcome {
        let Some(tool) = self.tools.get(name) else {
            let available: Vec<_> = self.tools.keys().copied().collect();
            return ToolOutcome::failed(format!(
                "Unknown tool `{name}`. Available tools: {}.",
                available.join(", ")
            ));
        };
        match args {
            Ok(args) => tool.call(args, ctx).await,
            Err(why) => ToolOutcome::failed(format!("Invalid arguments for `{name}`: {why}")),
        }
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolStatus;
    use tokio_util::sync::CancellationToken;

    fn ctx() -> ToolContext {
        ToolContext {
            cwd: std::env::temp_dir(),
            cancel: CancellationToken::new(),
        }
    }

    #[tokio::test]
    async fn unknown_tool_names_the_available_ones() {
        let registry = crate::builtin_registry();
        let outcome = registry
            .dispatch("rm_everything", Ok(Value::Null), &ctx())
            .await;
        assert_eq!(outcome.status, ToolStatus::Failed);
        assert!(outcome.content.contains("Unknown tool `rm_everything`"));
        assert!(outcome.content.contains("read_file"));
    }

    #[tokio::test]
    async fn non_json_arguments_fail_readably() {
        let registry = crate::builtin_registry();
        let args = Registry::parse_args("{\"path\": ");
        let outcome = registry.dispatch("read_file", args, &ctx()).await;
        assert_eq!(outcome.status, ToolStatus::Failed);
        assert!(
            outcome.content.contains("not valid JSON"),
            "{}",
            outcome.content
        );
        let args = Registry::parse_args("[1]");
        assert!(args.as_ref().is_err_and(|e| e.contains("JSON object")));
        assert_eq!(Registry::parse_args("  ").ok(), Some(serde_json::json!({})));
    }

    #[test]
    fn restriction_hides_tools() {
        let registry = crate::builtin_registry().restricted_to(&[]);
        assert_eq!(registry.definitions().count(), 0);
    }
}
