//! The registry: definitions for the model, argument checking, and dispatch.
//!
//! Invariant: every call gets a [`ToolOutcome`]. An unknown tool, arguments that are not a
//! JSON object, arguments that do not fit the tool's schema (after coercion of the usual
//! slips), or a tool outside the session's whitelist give a failed outcome that says what was
//! wrong, so the model can correct itself.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use crate::schema::coerce_and_validate;
use crate::tool::{CallDescription, Tool, ToolContext, ToolDefinition, ToolEffect, ToolOutcome};

/// A set of tools by name, with an optional dispatch-time whitelist.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<Arc<str>, Arc<dyn Tool>>,
    /// When set, only these tools may run; the model is still offered every tool (so a fork
    /// sends the same `tools[]` as its parent and the provider's prompt cache still hits).
    dispatchable: Option<Arc<BTreeSet<Arc<str>>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

/// The arguments of a call after parsing and schema checks, or why they are unusable.
pub type ParsedArgs = Result<Value, crate::error::ArgsError>;

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a later tool with the same name replaces the earlier one.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.definition().name.clone(), tool);
    }

    /// The tools of `toolset` are those of `tools` from now on (none when it is empty).
    pub fn replace_toolset(&mut self, toolset: &str, tools: &Registry) {
        self.tools
            .retain(|_, tool| tool.definition().toolset.as_ref() != toolset);
        for tool in tools.tools.values() {
            if tool.definition().toolset.as_ref() == toolset {
                self.register(tool.clone());
            }
        }
    }

    /// The tools, in name order.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values()
    }

    /// A registry holding only the named tools (the rest are neither offered nor dispatched).
    #[cfg(test)]
    pub fn restricted_to(&self, names: &[&str]) -> Registry {
        Registry {
            tools: self
                .tools
                .iter()
                .filter(|(name, _)| names.contains(&name.as_ref()))
                .map(|(name, tool)| (name.clone(), tool.clone()))
                .collect(),
            dispatchable: self.dispatchable.clone(),
        }
    }

    /// The same tools offered to the model, but only `names` may run: any other call is
    /// refused at dispatch, whatever the model asks.
    pub fn dispatch_only(&self, names: &[&str]) -> Registry {
        Registry {
            tools: self.tools.clone(),
            dispatchable: Some(Arc::new(names.iter().map(|n| Arc::from(*n)).collect())),
        }
    }

    /// Whether a call of `name` may run here.
    #[cfg(test)]
    pub fn may_dispatch(&self, name: &str) -> bool {
        self.dispatchable
            .as_ref()
            .is_none_or(|allowed| allowed.contains(name))
    }

    /// Why a call of `name` may not run here, if it may not.
    pub fn refusal(&self, name: &str) -> Option<String> {
        let allowed = self.dispatchable.as_ref()?;
        (!allowed.contains(name)).then(|| {
            let names: Vec<&str> = allowed.iter().map(AsRef::as_ref).collect();
            format!(
                "`{name}` may not be used here; only {} may.",
                names.join(", ")
            )
        })
    }

    /// The same tools, each passed through `wrap` (a recording or a replay stands between
    /// the orchestrator and the tool).
    pub fn wrapped(&self, wrap: impl Fn(Arc<dyn Tool>) -> Arc<dyn Tool>) -> Registry {
        Registry {
            tools: self
                .tools
                .iter()
                .map(|(name, tool)| (name.clone(), wrap(tool.clone())))
                .collect(),
            dispatchable: self.dispatchable.clone(),
        }
    }

    /// A registry holding only the tools of the named toolsets.
    pub fn with_toolsets(&self, toolsets: &[&str]) -> Registry {
        Registry {
            tools: self
                .tools
                .iter()
                .filter(|(_, tool)| toolsets.contains(&tool.definition().toolset.as_ref()))
                .map(|(name, tool)| (name.clone(), tool.clone()))
                .collect(),
            dispatchable: self.dispatchable.clone(),
        }
    }

    /// Definitions of every available tool, in name order (stable, so prompts cache well).
    pub fn definitions(&self) -> impl Iterator<Item = &ToolDefinition> {
        self.tools
            .values()
            .filter(|tool| tool.available())
            .map(|tool| tool.definition())
    }

    /// Looks up a tool's definition.
    pub fn definition(&self, name: &str) -> Option<&ToolDefinition> {
        self.tools.get(name).map(|tool| tool.definition())
    }

    /// Parses raw model arguments (empty means `{}`) and checks them against the tool's
    /// schema, coercing the usual slips.
    pub fn parse_args(&self, name: &str, raw: &str) -> ParsedArgs {
        let mut value = if raw.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(raw) {
                Ok(value @ Value::Object(_)) => value,
                Ok(other) => {
                    return Err(crate::error::ArgsError(format!(
                        "tool arguments must be a JSON object, got: {}",
                        truncate(&other.to_string(), 200)
                    )));
                }
                Err(e) => {
                    return Err(crate::error::ArgsError(format!(
                        "tool arguments are not valid JSON ({e}): {}",
                        truncate(raw, 200)
                    )));
                }
            }
        };
        if let Some(tool) = self.tools.get(name) {
            coerce_and_validate(&tool.definition().parameters, &mut value)?;
        }
        Ok(value)
    }

    /// Describes a call for display and policy before it runs.
    pub fn describe(&self, name: &str, args: &ParsedArgs, ctx: &ToolContext) -> CallDescription {
        match (self.tools.get(name), args) {
            (Some(tool), Ok(args)) => tool.describe(args, ctx),
            _ => CallDescription {
                title: name.to_string(),
                ..CallDescription::default()
            },
        }
    }

    /// What a call would change (for the approval prompt).
    pub async fn preview(
        &self,
        name: &str,
        args: &ParsedArgs,
        ctx: &ToolContext,
    ) -> Vec<ToolEffect> {
        match (self.tools.get(name), args) {
            (Some(tool), Ok(args)) => tool.preview(args, ctx).await,
            _ => Vec::new(),
        }
    }

    /// Whether a call cannot succeed as asked (see [`Tool::check`]): its failed outcome.
    pub async fn check(
        &self,
        name: &str,
        args: &ParsedArgs,
        ctx: &ToolContext,
    ) -> Option<ToolOutcome> {
        match (self.tools.get(name), args) {
            (Some(tool), Ok(args)) => tool.check(args, ctx).await,
            _ => None,
        }
    }

    /// Whether a call would leave everything as it is ([`Tool::changes_nothing`]).
    pub async fn changes_nothing(&self, name: &str, args: &ParsedArgs, ctx: &ToolContext) -> bool {
        match (self.tools.get(name), args) {
            (Some(tool), Ok(args)) => tool.changes_nothing(args, ctx).await,
            _ => false,
        }
    }

    /// Runs a call. Never panics on bad input; every problem becomes a failed outcome.
    pub async fn dispatch(&self, name: &str, args: ParsedArgs, ctx: &ToolContext) -> ToolOutcome {
        if let Some(why) = self.refusal(name) {
            return ToolOutcome::failed(why);
        }
        let Some(tool) = self.tools.get(name).filter(|tool| tool.available()) else {
            let available: Vec<&str> = self.definitions().map(|d| d.name.as_ref()).collect();
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
    format!("{}…", talaria_util::within_bytes(text, max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolStatus;
    use tokio_util::sync::CancellationToken;

    fn ctx() -> ToolContext {
        ToolContext::local(
            std::env::temp_dir(),
            CancellationToken::new(),
            Default::default(),
        )
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
    async fn bad_arguments_fail_readably_and_slips_are_coerced() {
        let registry = crate::builtin_registry();
        let args = registry.parse_args("read_file", "{\"path\": ");
        let outcome = registry.dispatch("read_file", args, &ctx()).await;
        assert_eq!(outcome.status, ToolStatus::Failed);
        assert!(
            outcome.content.contains("not valid JSON"),
            "{}",
            outcome.content
        );
        assert!(
            registry
                .parse_args("read_file", "[1]")
                .is_err_and(|e| e.0.contains("JSON object"))
        );
        assert!(
            registry
                .parse_args("read_file", "{}")
                .is_err_and(|e| e.0.contains("missing required field `path`"))
        );
        assert_eq!(
            registry
                .parse_args("read_file", "{\"path\": \"x\", \"limit\": \"5\"}")
                .ok(),
            Some(serde_json::json!({"path": "x", "limit": 5}))
        );
        assert_eq!(
            registry.parse_args("todo", "  ").ok(),
            Some(serde_json::json!({}))
        );
    }

    #[test]
    fn restriction_and_toolsets_hide_tools() {
        let registry = crate::builtin_registry();
        assert_eq!(registry.restricted_to(&[]).definitions().count(), 0);
        let files = registry.with_toolsets(&["file"]);
        let names: Vec<&str> = files.definitions().map(|d| d.name.as_ref()).collect();
        assert_eq!(names, ["patch", "read_file", "search_files", "write_file"]);
    }

    #[test]
    fn a_toolset_is_replaced_whole_and_nothing_else_moves() {
        let mut registry = crate::builtin_registry();
        let before = registry.definitions().count();
        let files = registry.with_toolsets(&["file"]);
        registry.replace_toolset("file", &Registry::new());
        assert_eq!(registry.definitions().count(), before - 4);
        assert!(registry.definition("read_file").is_none());
        // Only the named toolset's tools are taken from the new set.
        registry.replace_toolset("file", &crate::builtin_registry());
        assert_eq!(registry.definitions().count(), before);
        assert_eq!(files.tools().count(), 4);
    }

    #[tokio::test]
    async fn a_dispatch_whitelist_offers_every_tool_but_refuses_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ToolContext::local(
            dir.path().to_path_buf(),
            tokio_util::sync::CancellationToken::new(),
            Default::default(),
        );
        let registry = crate::builtin_registry();
        let fork = registry.dispatch_only(&["read_file", "search_files"]);
        let offered =
            |r: &Registry| -> Vec<String> { r.definitions().map(|d| d.name.to_string()).collect() };
        assert_eq!(
            offered(&fork),
            offered(&registry),
            "same tools[] as the parent"
        );
        let args = fork.parse_args("write_file", r#"{"path": "x.txt", "content": "no"}"#);
        let refused = fork.dispatch("write_file", args, &ctx).await;
        assert_eq!(refused.status, ToolStatus::Failed);
        assert!(
            refused.content.contains("may not be used here"),
            "{}",
            refused.content
        );
        assert!(!dir.path().join("x.txt").exists(), "no side effect");
        assert!(fork.may_dispatch("read_file") && !fork.may_dispatch("terminal"));
        std::fs::write(dir.path().join("a.txt"), "hi\n").expect("write");
        let args = fork.parse_args("read_file", r#"{"path": "a.txt"}"#);
        let read = fork.dispatch("read_file", args, &ctx).await;
        assert_eq!(read.status, ToolStatus::Completed);
    }
}
