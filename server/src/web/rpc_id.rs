//! JSON-RPC ids as map keys, shared by what tracks requests and their answers.

use serde_json::Value;

/// A JSON-RPC id as a map key (`s:` string, `n:` number); `None` for `null` or no id.
pub fn id_key(id: &Value) -> Option<String> {
    match id {
        Value::String(s) => Some(format!("s:{s}")),
        Value::Number(n) => Some(format!("n:{n}")),
        _ => None,
    }
}
