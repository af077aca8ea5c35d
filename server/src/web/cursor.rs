//! Stream cursors, as the durable-transport draft has them: every message of a stream carries
//! its place, `TAG.N` — `N` counts the stream's messages from 1, `TAG` names the stream (a
//! cursor of another stream, or of a server that restarted, is never taken for one of this
//! one) — as the SSE `id` and in the message itself, `_meta["acp/cursor"]` (in `params` of a
//! request or notification, `result` of an answer, `error.data` of an error).

use serde_json::{Map, Value};

/// The `_meta` key of a message's cursor.
pub const META_KEY: &str = "acp/cursor";

/// A cursor as a client gives it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// `TAG.N`, or a bare count `N` (what WebSocket clients sent before cursors had tags).
    At { tag: Option<String>, seq: u64 },
    /// Not a cursor this server writes.
    Unreadable,
}

/// Reads a cursor a client sent (`Last-Event-ID`, `after`).
pub fn parse(text: &str) -> Asked {
    let text = text.trim();
    let (tag, count) = match text.split_once('.') {
        Some((tag, count)) => (Some(tag.to_string()), count),
        None => (None, text),
    };
    match count.parse::<u64>() {
        Ok(seq) if tag.as_deref().is_none_or(is_tag) => Asked::At { tag, seq },
        _ => Asked::Unreadable,
    }
}

fn is_tag(tag: &str) -> bool {
    !tag.is_empty() && tag.len() <= 16 && tag.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A fresh stream's tag: 8 random hexadecimal digits.
pub fn new_tag() -> String {
    format!("{:08x}", uuid::Uuid::new_v4().as_u128() as u32)
}

/// The cursor text of message `seq` of the stream tagged `tag`.
pub fn text(tag: &str, seq: u64) -> String {
    format!("{tag}.{seq}")
}

/// `message` with `cursor` in its `_meta`. The messages the agent's peer writes (a request,
/// notification or result whose object is its last member) get it without being parsed
/// whole; anything else is parsed and written again. A message with no object to hold it
/// (a `null` result) is returned as it is.
pub fn stamp(message: String, cursor: &str) -> String {
    match stamp_in_place(&message, cursor) {
        Some(stamped) => stamped,
        None => stamp_parsed(message, cursor),
    }
}

/// The fast path: `{"jsonrpc":"2.0",` … `"params":{…}}` or `"result":{…}}`, no `_meta` anywhere.
fn stamp_in_place(message: &str, cursor: &str) -> Option<String> {
    if !message.starts_with(r#"{"jsonrpc":"2.0","#) || message.contains("\"_meta\"") {
        return None;
    }
    let open = [r#","params":{"#, r#","result":{"#]
        .iter()
        .filter_map(|member| message.find(member).map(|at| at + member.len() - 1))
        .min()?;
    let close = matching_brace(message.as_bytes(), open)?;
    // The object must be the envelope's last member: its brace, then the envelope's.
    if close + 2 != message.len() || !message.ends_with("}}") {
        return None;
    }
    let comma = if close == open + 1 { "" } else { "," };
    let mut stamped = String::with_capacity(message.len() + cursor.len() + 24);
    stamped.push_str(&message[..close]);
    stamped.push_str(comma);
    stamped.push_str(r#""_meta":{"acp/cursor":""#);
    stamped.push_str(cursor);
    stamped.push_str(r#""}}}"#);
    Some(stamped)
}

/// Where the object opened at `open` closes, strings and escapes respected.
fn matching_brace(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, &byte) in bytes.iter().enumerate().skip(open) {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

fn stamp_parsed(message: String, cursor: &str) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(&message) else {
        return message;
    };
    let holder = if value.get("method").is_some() {
        let params = &mut value["params"];
        if params.is_null() {
            *params = Value::Object(Map::new());
        }
        params.as_object_mut()
    } else if value.get("error").is_some() {
        let data = &mut value["error"]["data"];
        if data.is_null() {
            *data = Value::Object(Map::new());
        }
        data.as_object_mut()
    } else {
        value.get_mut("result").and_then(Value::as_object_mut)
    };
    let Some(holder) = holder else {
        return message;
    };
    let meta = holder
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    match meta.as_object_mut() {
        Some(meta) => {
            meta.insert(META_KEY.into(), Value::String(cursor.into()));
            value.to_string()
        }
        None => message,
    }
}

/// The cursor a stamped message carries, if any.
#[cfg(test)]
pub fn of(message: &Value) -> Option<&str> {
    [
        &message["params"],
        &message["result"],
        &message["error"]["data"],
    ]
    .into_iter()
    .find_map(|holder| holder["_meta"][META_KEY].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stamped(message: &str) -> Value {
        let text = stamp(message.to_string(), "ab12.7");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn take_meta_out(holder: Option<&mut Value>) {
        let Some(holder) = holder.and_then(Value::as_object_mut) else {
            return;
        };
        if let Some(meta) = holder.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(META_KEY);
            if meta.is_empty() {
                holder.remove("_meta");
            }
        }
    }

    #[test]
    fn every_kind_of_message_carries_its_cursor_and_keeps_everything_else() {
        let cases = [
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"text":"a } \" { b"}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"session/request_permission","params":{"sessionId":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":"x","result":{"stopReason":"end_turn"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","method":"n","params":{}}"#,
            r#"{"error":{"code":-32600,"message":"m"},"id":null,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m","data":{"k":1}}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"_meta":{"talaria":1},"sessionId":"s"}}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{"a":{"b":[1,{"c":"}}"}]}},"extra":{}}"#,
            r#"{"jsonrpc":"2.0","method":"m"}"#,
        ];
        for case in cases {
            let original: Value = serde_json::from_str(case).expect("json");
            let mut got = stamped(case);
            assert_eq!(of(&got), Some("ab12.7"), "{case}");
            // Take the cursor out again: what is left is the original.
            for holder in ["params", "result"] {
                take_meta_out(got.get_mut(holder));
            }
            let error = got.get_mut("error").and_then(|e| e.as_object_mut());
            if let Some(error) = error {
                take_meta_out(error.get_mut("data"));
                if error.get("data") == Some(&json!({})) {
                    error.remove("data");
                }
            }
            if original.get("params").is_none() && got.get("params") == Some(&json!({})) {
                got.as_object_mut().expect("object").remove("params");
            }
            assert_eq!(got, original, "{case}");
        }
    }

    #[test]
    fn a_result_with_no_object_is_left_as_it_is_and_cursors_read_back() {
        let null = r#"{"jsonrpc":"2.0","id":1,"result":null}"#;
        assert_eq!(stamp(null.to_string(), "t.1"), null);
        assert_eq!(
            parse("3fa9c2d1.42"),
            Asked::At {
                tag: Some("3fa9c2d1".into()),
                seq: 42
            }
        );
        assert_eq!(parse("17"), Asked::At { tag: None, seq: 17 });
        for bad in ["", "x", "a.b", ".3", "a-b.3", "1.2.3", "-4"] {
            assert_eq!(parse(bad), Asked::Unreadable, "{bad}");
        }
        let tag = new_tag();
        assert_eq!(
            parse(&text(&tag, 9)),
            Asked::At {
                tag: Some(tag),
                seq: 9
            }
        );
    }
}
