//! The model's way to MCP resources: `mcp_resources` lists (and searches) what the session's
//! servers offer, `mcp_read_resource` reads one. Both are offered only when some server
//! offers resources; a read's text goes through the same result budget as any tool's.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use talaria_tools::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolImage, ToolKind, ToolOutcome,
};

use crate::hub::Hub;

/// The toolset both tools are in.
pub const TOOLSET: &str = "mcp";
/// The most entries one listing shows.
const LISTED: usize = 200;

/// `mcp_resources`: the resources and resource templates of the session's servers.
pub struct ListResources {
    hub: Arc<Hub>,
    definition: ToolDefinition,
}

/// `mcp_read_resource`: one resource's contents.
pub struct ReadResource {
    hub: Arc<Hub>,
    definition: ToolDefinition,
}

/// Both tools, when some server of the session offers resources.
pub fn tools(hub: &Arc<Hub>) -> Vec<Arc<dyn Tool>> {
    if !hub.offers_resources() {
        return Vec::new();
    }
    vec![
        Arc::new(ListResources {
            hub: hub.clone(),
            definition: ToolDefinition {
                name: "mcp_resources".into(),
                toolset: TOOLSET.into(),
                description: "List the resources (files, records, documents) the session's MCP servers offer, with the templates that make more; `query` keeps those whose URI, name or description contains it.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "Text to look for in URIs, names and descriptions"},
                        "server": {"type": "string", "description": "Only this server's resources"}
                    }
                }),
                kind: ToolKind::Search,
                approval: ApprovalNeed::ReadOnly,
                concurrency: Concurrency::ReadOnly,
                max_result_chars: None,
                effects: Effects::reads(&[]),
            },
        }),
        Arc::new(ReadResource {
            hub: hub.clone(),
            definition: ToolDefinition {
                name: "mcp_read_resource".into(),
                toolset: TOOLSET.into(),
                description: "Read an MCP resource by its URI (from mcp_resources, or made from one of its templates); `server` when several servers could have it.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "uri": {"type": "string", "description": "The resource's URI"},
                        "server": {"type": "string", "description": "The server to read it from"}
                    },
                    "required": ["uri"]
                }),
                kind: ToolKind::Read,
                // The URI goes to the server, which may be anywhere: asked like its tools.
                approval: ApprovalNeed::Unknown,
                concurrency: Concurrency::ReadOnly,
                max_result_chars: None,
                effects: Effects::reads(&[]),
            },
        }),
    ]
}

fn text_arg<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args[name].as_str().map(str::trim).filter(|s| !s.is_empty())
}

/// One listed resource or template, as a line.
fn entry_line(server: &str, entry: &Value) -> String {
    let (uri, template) = match entry["uri"].as_str() {
        Some(uri) => (uri, false),
        None => (entry["uriTemplate"].as_str().unwrap_or("?"), true),
    };
    let mut line = format!(
        "- {}{uri} — {}",
        if template { "template " } else { "" },
        entry["title"]
            .as_str()
            .or(entry["name"].as_str())
            .unwrap_or("")
    );
    if let Some(description) = entry["description"].as_str().filter(|d| !d.is_empty()) {
        line.push_str(&format!(": {}", description.lines().next().unwrap_or("")));
    }
    let mut facts = Vec::new();
    if let Some(mime) = entry["mimeType"].as_str() {
        facts.push(mime.to_string());
    }
    if let Some(size) = entry["size"].as_u64() {
        facts.push(format!("{size} bytes"));
    }
    facts.push(format!("server {server}"));
    line.push_str(&format!(" ({})", facts.join(", ")));
    line
}

fn matches(entry: &Value, query: &str) -> bool {
    let query = query.to_lowercase();
    ["uri", "uriTemplate", "name", "title", "description"]
        .iter()
        .filter_map(|key| entry[*key].as_str())
        .any(|text| text.to_lowercase().contains(&query))
}

impl Tool for ListResources {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        CallDescription {
            title: match text_arg(args, "query") {
                Some(query) => format!("MCP resources matching {query:?}"),
                None => "MCP resources".into(),
            },
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let (query, only) = (text_arg(&args, "query"), text_arg(&args, "server"));
            let mut lines = Vec::new();
            for (server, catalog) in self.hub.catalogs(only).await {
                let entries = catalog.resources.iter().chain(catalog.templates.iter());
                for entry in entries.filter(|e| query.is_none_or(|q| matches(e, q))) {
                    lines.push(entry_line(&server, entry));
                }
            }
            if lines.is_empty() {
                return ToolOutcome::completed(match (query, only) {
                    (Some(query), _) => format!("No MCP resource matches {query:?}."),
                    (None, Some(server)) => format!("The MCP server {server} lists no resources."),
                    (None, None) => "The session's MCP servers list no resources.".into(),
                });
            }
            let more = lines.len().saturating_sub(LISTED);
            lines.truncate(LISTED);
            if more > 0 {
                lines.push(format!("… and {more} more: narrow it with `query`."));
            }
            ToolOutcome::completed(lines.join("\n"))
        })
    }
}

/// The text the model reads of a resource's contents, and its images.
fn render_contents(contents: &[Value]) -> (String, Vec<ToolImage>) {
    let mut parts = Vec::new();
    let mut images = Vec::new();
    for content in contents {
        let uri = content["uri"].as_str().unwrap_or("?");
        let mime = content["mimeType"].as_str().unwrap_or("");
        if let Some(text) = content["text"].as_str() {
            parts.push(format!("[resource {uri}]\n{text}"));
            continue;
        }
        let blob = content["blob"].as_str().unwrap_or("");
        let bytes = blob.len() / 4 * 3;
        if mime.starts_with("image/") {
            images.push(ToolImage {
                mime_type: mime.to_string(),
                data: blob.to_string(),
            });
        }
        parts.push(format!(
            "[resource {uri}: {}, about {bytes} bytes of binary data]",
            if mime.is_empty() {
                "unknown type"
            } else {
                mime
            }
        ));
    }
    (parts.join("\n"), images)
}

impl Tool for ReadResource {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        CallDescription {
            title: format!(
                "Read {}",
                text_arg(args, "uri").unwrap_or("an MCP resource")
            ),
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let Some(uri) = text_arg(&args, "uri") else {
                return ToolOutcome::failed("`uri` is required: a URI from mcp_resources.");
            };
            let read = tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return ToolOutcome::failed("Cancelled."),
                read = self.hub.read_resource(uri, text_arg(&args, "server")) => read,
            };
            match read {
                Ok((_, contents)) if contents.is_empty() => {
                    ToolOutcome::completed(format!("{uri} is empty."))
                }
                Ok((server, contents)) => {
                    let (text, images) = render_contents(&contents);
                    ToolOutcome::completed(text)
                        .with_images(images)
                        .with_raw_output(json!({"server": server, "contents": contents}))
                }
                Err(why) => ToolOutcome::failed(why),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_of_every_kind_are_rendered_and_images_kept() {
        let (text, images) = render_contents(&[
            json!({"uri": "demo://a", "mimeType": "text/plain", "text": "hello"}),
            json!({"uri": "demo://b", "mimeType": "image/png", "blob": "AAAA"}),
            json!({"uri": "demo://c", "blob": "AAAAAAAA"}),
        ]);
        assert_eq!(
            text,
            "[resource demo://a]\nhello\n[resource demo://b: image/png, about 3 bytes of binary data]\n[resource demo://c: unknown type, about 6 bytes of binary data]"
        );
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].mime_type, "image/png");
    }

    #[test]
    fn a_listing_line_says_what_the_resource_is_and_where_it_lives() {
        let line = entry_line(
            "everything",
            &json!({"uri": "demo://r/1", "name": "one", "description": "First\nmore", "mimeType": "text/plain", "size": 12}),
        );
        assert_eq!(
            line,
            "- demo://r/1 — one: First (text/plain, 12 bytes, server everything)"
        );
        let template = entry_line("s", &json!({"uriTemplate": "demo://t/{id}", "name": "t"}));
        assert_eq!(template, "- template demo://t/{id} — t (server s)");
        assert!(matches(&json!({"uri": "demo://X/1", "name": "n"}), "x/1"));
        assert!(!matches(&json!({"uri": "demo://X/1", "name": "n"}), "zzz"));
    }
}
