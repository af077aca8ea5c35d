//! Classification of one incoming JSON-RPC message: request, notification, response, or invalid.

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::acp::{Error, RequestId};
use crate::errors;

/// A request from the peer, handed to the application.
#[derive(Debug)]
pub struct IncomingRequest {
    /// The id to answer with.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The parameters (`null` when absent).
    pub params: Value,
    /// Fired when the peer sends `$/cancel_request` for this id (or the connection closes).
    pub cancel: CancellationToken,
}

/// What the application receives from the connection.
#[derive(Debug)]
pub enum IncomingMessage {
    /// A request; it must be answered exactly once with [`crate::Peer::respond`].
    Request(IncomingRequest),
    /// A notification; unknown ones should be ignored.
    Notification {
        /// The method name.
        method: String,
        /// The parameters (`null` when absent).
        params: Value,
    },
}

/// The shape of one parsed message.
#[derive(Debug)]
pub(crate) enum Classified {
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: RequestId,
        result: Result<Value, Error>,
    },
    /// Answer with this error (id `null` when the id could not be read).
    Invalid {
        id: RequestId,
        error: Error,
    },
    /// Answer with this error under the id exactly as received (its JSON text): an id no
    /// Rust string can hold (a lone UTF-16 surrogate escape), so it is echoed verbatim.
    InvalidRawId {
        raw_id: String,
        error: Error,
    },
    /// A malformed message that cannot be answered (e.g. a response without an id).
    Ignored(String),
}

fn request_id(value: &Value) -> Option<RequestId> {
    match value {
        Value::Null => Some(RequestId::Null),
        Value::String(s) => Some(RequestId::Str(s.clone())),
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        _ => None,
    }
}

/// The four hex digits at `at`, as a UTF-16 code unit.
fn hex_unit(bytes: &[u8], at: usize) -> Option<u16> {
    let digits = std::str::from_utf8(bytes.get(at..at + 4)?).ok()?;
    u16::from_str_radix(digits, 16).ok()
}

/// Replaces lone UTF-16 surrogate escapes in JSON strings (`"\ud800"`, which JavaScript
/// writes for half an emoji) with `\ufffd`; `None` when there are none.
fn repair_surrogates(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut repaired = false;
    let mut in_string = false;
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if !in_string {
            in_string = byte == b'"';
            out.push(byte);
            index += 1;
            continue;
        }
        match byte {
            b'"' => {
                in_string = false;
                out.push(byte);
                index += 1;
            }
            b'\\' if bytes.get(index + 1) == Some(&b'u') => {
                let unit = hex_unit(bytes, index + 2);
                let paired = |next: usize| {
                    bytes.get(next..next + 2) == Some(b"\\u".as_slice())
                        && hex_unit(bytes, next + 2).is_some_and(|u| (0xDC00..0xE000).contains(&u))
                };
                match unit {
                    Some(high @ 0xD800..0xDC00) if paired(index + 6) => {
                        let _ = high;
                        out.extend_from_slice(&bytes[index..index + 12]);
                        index += 12;
                    }
                    Some(0xD800..0xE000) => {
                        out.extend_from_slice(b"\\ufffd");
                        repaired = true;
                        index += 6;
                    }
                    _ => {
                        out.extend_from_slice(&bytes[index..(index + 2).min(bytes.len())]);
                        index += 2;
                    }
                }
            }
            b'\\' => {
                out.extend_from_slice(&bytes[index..(index + 2).min(bytes.len())]);
                index += 2;
            }
            _ => {
                out.push(byte);
                index += 1;
            }
        }
    }
    repaired.then_some(out)
}

/// Parses one message; a lone surrogate escape reads as U+FFFD instead of failing it.
/// Whether that repair was needed.
fn parse(bytes: &[u8]) -> Result<(Value, bool), serde_json::Error> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok((value, false)),
        Err(error) => match repair_surrogates(bytes) {
            Some(repaired) => serde_json::from_slice(&repaired)
                .map(|value| (value, true))
                .map_err(|_| error),
            None => Err(error),
        },
    }
}

/// The top-level `id` of a message exactly as it was written (its JSON text).
fn raw_id(bytes: &[u8]) -> Option<String> {
    let fields: std::collections::HashMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_slice(bytes).ok()?;
    fields.get("id").map(|id| id.get().to_string())
}

/// The index just after the string that opens at `start` (a `"`), escapes skipped.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

/// The top-level `id` of an object nested deeper than the parser goes: the text is walked
/// once (strings skipped, nesting counted), and the value after the top level's `"id":` is
/// read alone.
fn shallow_id(text: &str) -> Option<RequestId> {
    use serde::Deserialize;
    let bytes = text.as_bytes();
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let (mut depth, mut at, mut expecting_key) = (0usize, 0usize, false);
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                let end = string_end(bytes, at)?;
                if depth == 1 && expecting_key {
                    let key: String = serde_json::from_str(&text[at..end]).ok()?;
                    let colon = end + text[end..].find(':')?;
                    if key == "id" {
                        let mut value = serde_json::Deserializer::from_str(&text[colon + 1..]);
                        return request_id(&Value::deserialize(&mut value).ok()?);
                    }
                    expecting_key = false;
                    at = colon + 1;
                    continue;
                }
                at = end;
                continue;
            }
            b'{' => {
                depth += 1;
                expecting_key = depth == 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b',' if depth == 1 => expecting_key = true,
            _ => {}
        }
        at += 1;
    }
    None
}

/// A message that is not valid JSON: answered under its id when, read with invalid UTF-8
/// bytes replaced, the id can still be read exactly (else under `null`). A message nested
/// deeper than the parser's limit is answered under its top-level id.
fn unparsable(bytes: &[u8], error: &serde_json::Error) -> Classified {
    if error.to_string().contains("recursion limit")
        && let Some(id) = std::str::from_utf8(bytes).ok().and_then(shallow_id)
    {
        return Classified::Invalid {
            id,
            error: errors::parse_error(format!(
                "{error}: the message is nested deeper than 128 levels, which this agent does \
                 not read"
            )),
        };
    }
    let id = std::str::from_utf8(bytes)
        .is_err()
        .then(|| String::from_utf8_lossy(bytes))
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|value| value.get("id").and_then(request_id))
        .filter(|id| !matches!(id, RequestId::Str(s) if s.contains('\u{FFFD}')));
    match id {
        Some(id) => Classified::Invalid {
            id,
            error: errors::parse_error(format!(
                "the message is not valid UTF-8 ({error}); send text as UTF-8"
            )),
        },
        None => Classified::Invalid {
            id: RequestId::Null,
            error: errors::parse_error(error),
        },
    }
}

pub(crate) fn classify(bytes: &[u8]) -> Classified {
    let (value, repaired) = match parse(bytes) {
        Ok(parsed) => parsed,
        Err(e) => return unparsable(bytes, &e),
    };
    if repaired
        && matches!(value.get("id"), Some(Value::String(id)) if id.contains('\u{FFFD}'))
        && let Some(raw_id) = raw_id(bytes)
        && serde_json::from_str::<String>(&raw_id).is_err()
    {
        return Classified::InvalidRawId {
            raw_id,
            error: errors::invalid_request(
                "the request's `id` holds a lone UTF-16 surrogate (\\ud800-\\udfff), which no \
                 UTF-8 text can carry; this id is echoed as it was sent, but the request was not \
                 run: use an id without one",
            ),
        };
    }
    let mut object: Map<String, Value> = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Classified::Invalid {
                id: RequestId::Null,
                error: errors::invalid_request("batch messages are not supported by ACP v1"),
            };
        }
        other => {
            return Classified::Invalid {
                id: RequestId::Null,
                error: errors::invalid_request(format!(
                    "expected a JSON object, got {}",
                    type_name(&other)
                )),
            };
        }
    };
    let id_value = object.remove("id");
    let id = match &id_value {
        None => None,
        Some(v) => match request_id(v) {
            Some(id) => Some(id),
            None => {
                return Classified::Invalid {
                    id: RequestId::Null,
                    error: errors::invalid_request("`id` must be a string, an integer or null"),
                };
            }
        },
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Classified::Invalid {
            id: id.unwrap_or(RequestId::Null),
            error: errors::invalid_request("`jsonrpc` must be \"2.0\""),
        };
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    match object.remove("method") {
        Some(Value::String(method)) => match id {
            Some(id) => Classified::Request { id, method, params },
            None => Classified::Notification { method, params },
        },
        Some(_) => Classified::Invalid {
            id: id.unwrap_or(RequestId::Null),
            error: errors::invalid_request("`method` must be a string"),
        },
        None => match id {
            Some(id) => response(id, object),
            None => Classified::Ignored("message has neither `method` nor `id`".into()),
        },
    }
}

/// A message with an id and no method: the peer's answer to one of ours.
fn response(id: RequestId, mut object: Map<String, Value>) -> Classified {
    if let Some(error) = object.remove("error") {
        let error = serde_json::from_value::<Error>(error.clone()).unwrap_or_else(|_| {
            errors::internal_error(format!("malformed error object from peer: {error}"))
        });
        Classified::Response {
            id,
            result: Err(error),
        }
    } else if let Some(result) = object.remove("result") {
        Classified::Response {
            id,
            result: Ok(result),
        }
    } else {
        Classified::Invalid {
            id,
            error: errors::invalid_request("missing `method` (or `result`/`error`)"),
        }
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod deep_tests {
    use super::*;

    fn deep(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn a_request_nested_too_deep_is_answered_under_its_readable_id() {
        let cases = [
            (
                format!(
                    r#"{{"jsonrpc":"2.0","id":7,"method":"m","params":{}}}"#,
                    deep(10_000)
                ),
                RequestId::Number(7),
            ),
            (
                format!(
                    r#"{{"jsonrpc":"2.0","method":"m","params":{},"id":"late"}}"#,
                    deep(500)
                ),
                RequestId::Str("late".into()),
            ),
            (
                // Keys and strings that look like an id inside the nesting do not count.
                format!(
                    r#"{{"params":{{"id":1,"s":"\"id\":2 {{["}},"deep":{},"id":3}}"#,
                    deep(300)
                ),
                RequestId::Number(3),
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","params":{}}}"#, deep(400)),
                RequestId::Null,
            ),
        ];
        for (line, expected) in cases {
            match classify(line.as_bytes()) {
                Classified::Invalid { id, error } => {
                    assert_eq!(id, expected, "{}", &line[..60.min(line.len())]);
                    assert_eq!(error.code, crate::acp::ErrorCode::ParseError);
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_id_with_a_lone_surrogate_is_answered_under_its_own_text_and_not_run() {
        for raw in [r#""x\ud800""#, r#""\udfff""#, r#""a\ud83d b""#] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"session/list"}}"#);
            match classify(line.as_bytes()) {
                Classified::InvalidRawId { raw_id, error } => {
                    assert_eq!(raw_id, raw);
                    assert!(error.message.contains("surrogate"), "{}", error.message);
                }
                other => panic!("{raw}: {other:?}"),
            }
        }
        // A replacement character the client really sent is an ordinary id, even when a
        // lone surrogate elsewhere in the message was repaired.
        let line = r#"{"jsonrpc":"2.0","id":"x\ufffd","method":"m","params":{"t":"\ud800"}}"#;
        assert!(matches!(
            classify(line.as_bytes()),
            Classified::Request { id: RequestId::Str(id), .. } if id == "x\u{fffd}"
        ));
    }

    #[test]
    fn invalid_utf8_is_answered_under_the_id_when_it_can_be_read() {
        let mut line = br#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"t":""#.to_vec();
        line.extend_from_slice(&[0xFF, 0xFE]);
        line.extend_from_slice(br#""}}"#);
        match classify(&line) {
            Classified::Invalid { id, error } => {
                assert_eq!(id, RequestId::Number(7));
                assert!(error.message.contains("UTF-8"), "{}", error.message);
            }
            other => panic!("{other:?}"),
        }
        let mut line = br#"{"jsonrpc":"2.0","id":"a"#.to_vec();
        line.push(0xFF);
        line.extend_from_slice(br#"","method":"m"}"#);
        assert!(matches!(
            classify(&line),
            Classified::Invalid {
                id: RequestId::Null,
                ..
            }
        ));
        let mut line = br#"{"jsonrpc":"2.0","id":"ok","method":"m","params":"#.to_vec();
        line.push(0xC3);
        assert!(matches!(
            classify(&line),
            Classified::Invalid {
                id: RequestId::Null,
                ..
            }
        ));
    }

    use super::*;
    use crate::errors::code_of;

    fn invalid_code(input: &str) -> (RequestId, i32) {
        match classify(input.as_bytes()) {
            Classified::Invalid { id, error } => (id, code_of(&error)),
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn garbage_is_a_parse_error_with_null_id() {
        assert_eq!(invalid_code("not json"), (RequestId::Null, -32700));
    }

    #[test]
    fn wrong_shapes_are_invalid_requests() {
        assert_eq!(invalid_code("[1,2]"), (RequestId::Null, -32600));
        assert_eq!(invalid_code("42"), (RequestId::Null, -32600));
        assert_eq!(
            invalid_code(r#"{"id":3,"method":"x"}"#),
            (RequestId::Number(3), -32600)
        );
        assert_eq!(
            invalid_code(r#"{"jsonrpc":"2.0","id":"a","method":7}"#),
            (RequestId::Str("a".into()), -32600)
        );
        assert_eq!(
            invalid_code(r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#),
            (RequestId::Null, -32600)
        );
    }

    #[test]
    fn requests_notifications_and_responses() {
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}"#),
            Classified::Request { id: RequestId::Number(1), ref method, .. } if method == "m"
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"n"}"#),
            Classified::Notification { ref method, params: Value::Null } if method == "n"
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":"x","result":{}}"#),
            Classified::Response { result: Ok(_), .. }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":"x","error":{"code":-32002,"message":"nope"}}"#),
            Classified::Response { result: Err(ref e), .. } if code_of(e) == -32002
        ));
    }
}

#[cfg(test)]
mod robustness {

    #[test]
    fn a_lone_surrogate_escape_reads_as_the_replacement_character() {
        for (raw, expected) in [
            (r#"{"t":"a\ud800b"}"#, "a\u{fffd}b"),
            (r#"{"t":"\udc00"}"#, "\u{fffd}"),
            (r#"{"t":"\ud83d\ude00 ok"}"#, "😀 ok"),
            (r#"{"t":"\\ud800"}"#, "\\ud800"),
            (r#"{"t":"\ud83d"}"#, "\u{fffd}"),
        ] {
            let (value, _) = parse(raw.as_bytes()).expect(raw);
            assert_eq!(value["t"], expected, "{raw}");
        }
        assert!(parse(br#"{"t": "\u12"}"#).is_err());
    }

    use super::*;
    use crate::errors::code_of;

    /// Pieces of hostile messages.
    const PIECES: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        "\"jsonrpc\":\"2.0\"",
        "\"id\":",
        "1",
        "-1",
        "1.5",
        "null",
        "\"x\"",
        ",",
        ":",
        "\"method\":",
        "\"params\":",
        "\"result\":",
        "\"error\":",
        "{\"code\":1}",
        "true",
        "é",
        "\\u0000",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3_000, ..proptest::prelude::ProptestConfig::default() })]

        /// Whatever bytes come in, the answer agrees with what they are: text no JSON parser
        /// reads is a parse error with a null id, JSON that is not an object is an invalid
        /// request with a null id, and a well-formed request is a request with its id.
        #[test]
        fn hostile_messages_are_classified_for_what_they_are(
            indices in proptest::collection::vec(0..PIECES.len(), 0..16),
        ) {
            let message: String = indices.iter().map(|&i| PIECES[i]).collect();
            let parsed = parse(message.as_bytes());
            match classify(message.as_bytes()) {
                Classified::Invalid { id, error } if code_of(&error) == -32700 => {
                    proptest::prop_assert!(parsed.is_err(), "{message:?}");
                    proptest::prop_assert_eq!(id, RequestId::Null);
                }
                _ => proptest::prop_assert!(parsed.is_ok(), "{message:?} parsed but classified as unreadable"),
            }
            if let Ok((value, _)) = &parsed && !value.is_object() {
                let classified = classify(message.as_bytes());
                proptest::prop_assert!(
                    matches!(&classified, Classified::Invalid { id: RequestId::Null, error } if code_of(error) == -32600),
                    "{message:?}: {classified:?}"
                );
            }
            let request = format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\",\"params\":{}}}", serde_json::json!(message));
            let classified = classify(request.as_bytes());
            proptest::prop_assert!(
                matches!(&classified, Classified::Request { id: RequestId::Number(7), method, .. } if method == "m"),
                "{request:?}: {classified:?}"
            );
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_a_parse_error() {
        assert_eq!(
            invalid_code_bytes(&[0xff, 0xfe, 0x00]),
            (RequestId::Null, -32700)
        );
    }

    fn invalid_code_bytes(input: &[u8]) -> (RequestId, i32) {
        match classify(input) {
            Classified::Invalid { id, error } => (id, code_of(&error)),
            other => panic!("expected invalid, got {other:?}"),
        }
    }
}
