//! What changed between a request and the nearest one a cassette recorded: which message,
//! which field, both values — so a harness sees exactly what its conversation did
//! differently.

use serde_json::Value;

/// How much of each value a message shows.
const SHOWN_CHARS: usize = 240;

/// The request's difference from `recorded`, in a sentence or two.
pub fn describe_miss(request: &Value, recorded: &Value) -> String {
    let messages = |v: &Value| v["messages"].as_array().cloned().unwrap_or_default();
    let (asked, had) = (messages(request), messages(recorded));
    for (index, (now, then)) in asked.iter().zip(&had).enumerate() {
        if now != then {
            let role = now["role"].as_str().unwrap_or("?");
            let (field, now_value, then_value) = first_difference(now, then);
            return format!(
                "message {index} ({role}) differs in `{field}`: now {}, recorded {}",
                shown(&now_value),
                shown(&then_value)
            );
        }
    }
    if asked.len() != had.len() {
        return format!(
            "the conversation has {} messages; the recording had {} (first extra: {})",
            asked.len(),
            had.len(),
            asked
                .get(had.len())
                .or_else(|| had.get(asked.len()))
                .map_or_else(|| "none".into(), shown)
        );
    }
    for key in ["model", "tools", "max_tokens"] {
        if request[key] != recorded[key] {
            return format!(
                "the request's `{key}` differs: now {}, recorded {}",
                shown(&request[key]),
                shown(&recorded[key])
            );
        }
    }
    "the request differs from the recording outside its messages".into()
}

/// The first field two messages differ in, with both values.
fn first_difference(now: &Value, then: &Value) -> (String, Value, Value) {
    if let (Value::Object(a), Value::Object(b)) = (now, then) {
        let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let (x, y) = (
                a.get(key).cloned().unwrap_or(Value::Null),
                b.get(key).cloned().unwrap_or(Value::Null),
            );
            if x != y {
                return (key.clone(), x, y);
            }
        }
    }
    ("message".into(), now.clone(), then.clone())
}

fn shown(value: &Value) -> String {
    let text = match value {
        Value::String(text) => format!("{text:?}"),
        other => other.to_string(),
    };
    match head(&text) {
        Some(head) => format!("{head}…"),
        None => text,
    }
}

/// The first [`SHOWN_CHARS`] characters, when the text is longer.
fn head(text: &str) -> Option<&str> {
    let (cut, _) = text.char_indices().nth(SHOWN_CHARS)?;
    Some(&text[..cut])
}
