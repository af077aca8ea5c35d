//! Tool calls a model wrote as text (small local models often put a call in a ```json fence
//! instead of the API's tool-call field). A call is taken from the text only when it is
//! unambiguous: exactly one JSON object naming an offered tool, with arguments that pass that
//! tool's schema. Anything else is left as the answer: text that does not validate never runs.

use serde_json::{Map, Value};
use talaria_provider::ToolCallRequest;
use talaria_tools::Registry;

/// What the text held.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TextCall {
    /// One valid call, and the answer's text without it.
    Call { call: ToolCallRequest, rest: String },
    /// It names an offered tool, but its arguments do not fit (not run).
    Invalid { tool: String, why: String },
}

/// JSON objects in the text: fenced blocks first, else the whole text when it is one object.
fn candidates(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let mut found = Vec::new();
    let mut rest = 0;
    while let Some(open) = text[rest..].find("```") {
        let start = rest + open;
        let body_start = match text[start + 3..].find('\n') {
            Some(newline) => start + 3 + newline + 1,
            None => break,
        };
        let Some(close) = text[body_start..].find("```") else {
            break;
        };
        let end = body_start + close + 3;
        found.push((text[body_start..body_start + close].to_string(), start..end));
        rest = end;
    }
    let trimmed = text.trim();
    if found.is_empty() && trimmed.starts_with('{') && trimmed.ends_with('}') {
        found.push((trimmed.to_string(), 0..text.len()));
    }
    found
}

fn string_field<'a>(object: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
}

/// The (name, arguments) a JSON object describes, in the shapes models use.
fn call_shape(value: &Value) -> Option<(String, Value)> {
    let object = value.as_object()?;
    if let Some(function) = object.get("function").and_then(Value::as_object) {
        return call_shape(&Value::Object(function.clone()));
    }
    let name = string_field(object, &["name", "tool", "tool_name"])?;
    let arguments = ["arguments", "parameters", "args", "input"]
        .iter()
        .find_map(|k| object.get(*k))
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let arguments = match arguments {
        Value::String(text) => serde_json::from_str(&text).ok()?,
        other => other,
    };
    Some((name.to_string(), arguments))
}

/// Looks for a tool call in `text`; `offered` are the tools the model was given.
pub(crate) fn find(text: &str, registry: &Registry, offered: &[String]) -> Option<TextCall> {
    let mut valid = Vec::new();
    let mut invalid = None;
    for (body, span) in candidates(text) {
        let Ok(value) = serde_json::from_str::<Value>(body.trim()) else {
            continue;
        };
        let Some((name, arguments)) = call_shape(&value) else {
            continue;
        };
        if !offered.contains(&name) {
            continue;
        }
        let raw = arguments.to_string();
        match registry.parse_args(&name, &raw) {
            Ok(_) => valid.push((name, raw, span)),
            Err(why) => invalid = Some(TextCall::Invalid { tool: name, why }),
        }
    }
    match valid.as_slice() {
        [(name, arguments, span)] => {
            let mut rest = text.to_string();
            rest.replace_range(span.clone(), "");
            Some(TextCall::Call {
                call: ToolCallRequest {
                    id: format!("text_{name}"),
                    name: name.clone(),
                    arguments: arguments.clone(),
                },
                rest: rest.trim().to_string(),
            })
        }
        [] => invalid,
        // Several calls in text: ambiguous, left alone.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered() -> (Registry, Vec<String>) {
        let registry = talaria_tools::builtin_registry();
        let names = registry.definitions().map(|d| d.name.to_string()).collect();
        (registry, names)
    }

    #[test]
    fn a_fenced_call_with_valid_arguments_is_taken() {
        let (registry, names) = offered();
        let text = "I'll read it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n```";
        let Some(TextCall::Call { call, rest }) = find(text, &registry, &names) else {
            panic!("no call");
        };
        assert_eq!(call.name, "read_file");
        assert_eq!(call.arguments, "{\"path\":\"main.py\"}");
        assert_eq!(rest, "I'll read it.");
        let bare = "{\"function\": {\"name\": \"terminal\", \"arguments\": \"{\\\"command\\\": \\\"ls\\\"}\"}}";
        assert!(
            matches!(find(bare, &registry, &names), Some(TextCall::Call { call, .. }) if call.name == "terminal")
        );
    }

    #[test]
    fn invalid_unknown_or_ambiguous_text_is_never_run() {
        let (registry, names) = offered();
        let invalid = "```json\n{\"name\": \"read_file\", \"arguments\": {\"file\": 3}}\n```";
        assert!(
            matches!(find(invalid, &registry, &names), Some(TextCall::Invalid { tool, .. }) if tool == "read_file")
        );
        let unknown = "```json\n{\"name\": \"rm_everything\", \"arguments\": {}}\n```";
        assert_eq!(find(unknown, &registry, &names), None);
        let prose = "The config is `{\"a\": 1}` and nothing else.";
        assert_eq!(find(prose, &registry, &names), None);
        let two = "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}\n```";
        assert_eq!(find(two, &registry, &names), None);
        let not_offered: Vec<String> = vec!["write_file".into()];
        let fenced = "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```";
        assert_eq!(find(fenced, &registry, &not_offered), None);
    }
}
