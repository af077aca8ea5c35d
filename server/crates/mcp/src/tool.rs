//! An MCP server's tool as a Talaria tool: its description and input schema as the server
//! gives them, approval asked by default (a `readOnlyHint` is shown, never trusted), results
//! kept in their structure (text, images, embedded resources, resource links) and `isError`
//! reported as a failed call.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use talaria_tools::{
    ApprovalNeed, CallDescription, Concurrency, Effects, MCP_TOOLSET_PREFIX, Tool, ToolContext,
    ToolDefinition, ToolImage, ToolKind, ToolOutcome,
};

use crate::naming::tool_name;
use crate::server::Server;

/// One tool of one server.
pub struct McpTool {
    server: Arc<Server>,
    remote: String,
    read_only_hint: bool,
    definition: ToolDefinition,
    /// The server's input schema, compiled (`None` when the server's schema does not compile:
    /// the server then checks its own arguments).
    validator: Option<jsonschema::Validator>,
}

impl McpTool {
    /// The toolset of a server's tools.
    pub fn toolset_of(server: &str) -> String {
        format!("{MCP_TOOLSET_PREFIX}{server}")
    }

    /// The tools a server offers.
    pub fn of(server: &Arc<Server>) -> Vec<Arc<dyn Tool>> {
        server
            .tools()
            .iter()
            .map(|tool| {
                let description = tool
                    .description
                    .as_deref()
                    .unwrap_or("(no description)")
                    .to_string();
                let read_only_hint = tool
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false);
                let destructive_hint = tool.annotations.as_ref().and_then(|a| a.destructive_hint);
                let definition = ToolDefinition {
                    name: tool_name(&server.config.name, &tool.name).into(),
                    toolset: Self::toolset_of(&server.config.name).into(),
                    description: format!("[MCP server {}] {description}", server.config.name)
                        .into(),
                    parameters: Value::Object((*tool.input_schema).clone()),
                    kind: ToolKind::Other,
                    approval: ApprovalNeed::Unknown,
                    concurrency: Concurrency::Exclusive,
                    max_result_chars: None,
                    effects: effects_of_hints(read_only_hint, destructive_hint),
                };
                let validator = match jsonschema::validator_for(&definition.parameters) {
                    Ok(validator) => Some(validator),
                    Err(e) => {
                        tracing::warn!(tool = %tool.name, server = %server.config.name, "the tool's input schema does not compile: {e}");
                        None
                    }
                };
                Arc::new(McpTool {
                    server: server.clone(),
                    remote: tool.name.to_string(),
                    read_only_hint,
                    definition,
                    validator,
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

/// The images of a result's content blocks, for models that take images.
fn images(content: &[Value]) -> Vec<ToolImage> {
    content
        .iter()
        .filter(|block| block["type"] == "image")
        .filter_map(|block| {
            Some(ToolImage {
                mime_type: block["mimeType"].as_str()?.to_string(),
                data: block["data"].as_str()?.to_string(),
            })
        })
        .collect()
}

/// The text the model reads of a result's content blocks.
fn render(content: &[Value]) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|block| match block["type"].as_str().unwrap_or("") {
            "text" => block["text"].as_str().unwrap_or("").to_string(),
            "image" | "audio" => format!(
                "[{} ({}, {} bytes of base64)]",
                block["type"].as_str().unwrap_or("media"),
                block["mimeType"].as_str().unwrap_or("unknown type"),
                block["data"].as_str().map_or(0, str::len)
            ),
            "resource" => {
                let resource = &block["resource"];
                let uri = resource["uri"].as_str().unwrap_or("?");
                match resource["text"].as_str() {
                    Some(text) => format!("[resource {uri}]\n{text}"),
                    None => format!(
                        "[resource {uri} ({})]",
                        resource["mimeType"].as_str().unwrap_or("binary")
                    ),
                }
            }
            "resource_link" => format!(
                "[resource link {} — {}]",
                block["uri"].as_str().unwrap_or("?"),
                block["name"].as_str().unwrap_or("")
            ),
            other => format!("[{other} content]"),
        })
        .collect();
    parts.join("\n")
}

impl Tool for McpTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn describe(&self, _args: &Value, _ctx: &ToolContext) -> CallDescription {
        CallDescription {
            title: format!(
                "{} ({}){}",
                self.remote,
                self.server.config.name,
                if self.read_only_hint {
                    " — the server says it only reads"
                } else {
                    ""
                }
            ),
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            // The registry coerced the usual slips already; what still breaks the server's
            // schema is the model's to fix.
            if let Some(validator) = &self.validator {
                let errors: Vec<String> = validator
                    .iter_errors(&args)
                    .take(5)
                    .map(|e| format!("{} (at {})", e, e.instance_path()))
                    .collect();
                if !errors.is_empty() {
                    return ToolOutcome::failed(format!(
                        "Invalid arguments for {}: {}",
                        self.definition.name,
                        errors.join("; ")
                    ));
                }
            }
            let arguments = match args {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            // The server's questions during the call go to the user of this call.
            let _asking = ctx
                .questions
                .clone()
                .map(|questions| self.server.askers.enter(questions, ctx.cancel.clone()));
            // Dropping the call on cancel sends MCP's cancellation notification.
            let called = tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return ToolOutcome::failed("Cancelled."),
                called = self.server.call(&self.remote, arguments) => called,
            };
            let result = match called {
                Ok(result) => result,
                Err(crate::McpCallError::NeedsSignIn { .. }) => {
                    // Its sign-in was refused for good: the user is asked to sign in again.
                    self.server.begin_sign_in(false);
                    return ToolOutcome::failed(self.server.sign_in_needed());
                }
                Err(why) => return ToolOutcome::failed(why),
            };
            let value = serde_json::to_value(&result).unwrap_or(Value::Null);
            let blocks = value["content"].as_array().cloned().unwrap_or_default();
            let mut text = render(&blocks);
            if let Some(structured) = value.get("structuredContent").filter(|s| !s.is_null())
                && text.trim().is_empty()
            {
                text = structured.to_string();
            }
            let outcome = if result.is_error.unwrap_or(false) {
                ToolOutcome::failed(text)
            } else {
                ToolOutcome::completed(text)
            };
            outcome
                .with_images(images(&blocks))
                .with_raw_output(json!({"content": blocks, "isError": result.is_error}))
        })
    }
}

/// What an MCP tool's annotations say it does: `readOnlyHint` reads only; otherwise it may
/// change things (`destructiveHint` or not: the hints are the server's word, and a tool that
/// says nothing is not taken as harmless). Nothing is known of its paths or commands.
fn effects_of_hints(read_only: bool, destructive: Option<bool>) -> Effects {
    if read_only {
        return Effects::reads(&[]);
    }
    match destructive {
        Some(_) => Effects {
            writes: true,
            ..Effects::NOTHING
        },
        None => Effects::UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_content_is_rendered() {
        let text = render(&[
            json!({"type": "text", "text": "hello"}),
            json!({"type": "image", "mimeType": "image/png", "data": "AAAA"}),
            json!({"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}}),
            json!({"type": "resource_link", "uri": "file:///b.txt", "name": "b"}),
        ]);
        assert_eq!(
            text,
            "hello\n[image (image/png, 4 bytes of base64)]\n[resource file:///a.txt]\ninside\n[resource link file:///b.txt — b]"
        );
    }

    #[test]
    fn an_mcp_tool_declares_what_its_annotations_say_and_no_more() {
        let read_only = effects_of_hints(true, Some(true));
        assert!(read_only.reads && !read_only.may_change_anything());
        let destructive = effects_of_hints(false, Some(true));
        assert!(destructive.writes && destructive.declared);
        let silent = effects_of_hints(false, None);
        assert!(!silent.declared && silent.may_change_anything());
    }
}
