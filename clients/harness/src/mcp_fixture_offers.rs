//! The fixture's resources and prompts, offered with `--offers`: two resources (a note, and
//! one of 3 MB), a template (`fixture://rows/{id}`), subscriptions (a subscribe is answered,
//! then the resource is said to have changed), a prompt with a required argument, and
//! `add {}`, which adds a resource and a prompt and says both lists changed.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

/// `add {}` was called: the list has a third resource.
static ADDED: AtomicBool = AtomicBool::new(false);

/// `add {}`: a resource and a prompt more, and the client told both lists changed.
pub fn add() -> Value {
    ADDED.store(true, Ordering::SeqCst);
    super::send(&json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}));
    super::send(&json!({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}));
    json!({"content": [{"type": "text", "text": "added fixture://notes/added and the prompt added"}]})
}

/// The size of `fixture://huge`.
const HUGE: usize = 3 << 20;

/// The capabilities the fixture states: tools, and with `--offers` resources and prompts.
pub fn capabilities(offers: bool) -> Value {
    if offers {
        json!({"tools": {}, "resources": {"subscribe": true, "listChanged": true}, "prompts": {}})
    } else {
        json!({"tools": {}})
    }
}

/// The answer to a resources or prompts request (`None`: not one of them).
pub fn respond(id: &Value, method: &str, params: &Value) -> Option<Value> {
    let result = match method {
        "resources/list" => {
            let mut list = json!([
                {"uri": "fixture://notes/today", "name": "today", "description": "Today's note", "mimeType": "text/plain"},
                {"uri": "fixture://huge", "name": "huge", "mimeType": "text/plain", "size": HUGE}
            ]);
            if ADDED.load(Ordering::SeqCst)
                && let Some(items) = list.as_array_mut()
            {
                items.push(json!({"uri": "fixture://notes/added", "name": "added"}));
            }
            json!({"resources": list})
        }
        "resources/templates/list" => json!({"resourceTemplates": [
            {"uriTemplate": "fixture://rows/{id}", "name": "row", "description": "One row by id"}
        ]}),
        "resources/read" => return Some(read(id, params["uri"].as_str().unwrap_or(""))),
        "resources/subscribe" => {
            let uri = params["uri"].as_str().unwrap_or("").to_string();
            super::send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            return Some(
                json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}),
            );
        }
        "prompts/list" => {
            let mut list = json!([
                {"name": "review", "description": "Review a file", "arguments": [
                    {"name": "file", "description": "The file to review", "required": true},
                    {"name": "focus", "description": "What to look at"}
                ]}
            ]);
            if ADDED.load(Ordering::SeqCst)
                && let Some(items) = list.as_array_mut()
            {
                items.push(json!({"name": "added", "description": "A prompt added later"}));
            }
            json!({"prompts": list})
        }
        "prompts/get" => {
            let arguments = &params["arguments"];
            let Some(file) = arguments["file"].as_str() else {
                return Some(
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "file is required"}}),
                );
            };
            let focus = arguments["focus"].as_str().unwrap_or("anything");
            json!({"messages": [
                {"role": "user", "content": {"type": "text", "text": format!("Review {file}, looking at {focus}.")}}
            ]})
        }
        _ => return None,
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn read(id: &Value, uri: &str) -> Value {
    let text = match uri {
        "fixture://notes/today" => "buy milk".to_string(),
        "fixture://huge" => "huge line of the fixture\n".repeat(HUGE / 25),
        _ => match uri.strip_prefix("fixture://rows/") {
            Some(row) if !row.is_empty() => format!("row {row} of the fixture"),
            _ => {
                return json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32002, "message": format!("no resource {uri}")}});
            }
        },
    };
    json!({"jsonrpc": "2.0", "id": id, "result": {"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}})
}
