//! Where a tool call written as text can sit in an answer (a fence, call tags, the whole
//! answer) and the shapes models write one in: `{"name": …, "arguments": …}` and its
//! relatives, `tool_name {…}`, or a fence labelled with the tool's name around its arguments.

use std::ops::Range;

use serde_json::{Map, Value};

/// A stretch of the answer that may hold calls.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Candidate {
    /// A fence's label (`json`, a tool's name); empty elsewhere.
    pub info: String,
    pub body: String,
    /// Where it sits in the answer, markers included.
    pub span: Range<usize>,
}

/// A call read from a candidate.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Parsed {
    pub name: String,
    pub arguments: Value,
    /// It says outright it is a call (a name and an arguments field), so a name that is not
    /// offered is a call of a missing tool rather than some other JSON.
    pub explicit: bool,
}

/// Candidates in the order they appear: fences, call-tag blocks not around a fence, else the
/// whole answer when it is one JSON object (call tags aside).
pub(super) fn candidates(text: &str) -> Vec<Candidate> {
    let mut found = fenced(text);
    for block in tagged(text) {
        let around_a_fence = found
            .iter()
            .any(|c| c.span.start < block.span.end && block.span.start < c.span.end);
        if !around_a_fence {
            found.push(block);
        }
    }
    found.sort_by_key(|c| c.span.start);
    let unwrapped = without_call_tags(text);
    let trimmed = unwrapped.trim();
    if found.is_empty() && trimmed.starts_with('{') && trimmed.ends_with('}') {
        found.push(Candidate {
            info: String::new(),
            body: trimmed.to_string(),
            span: 0..text.len(),
        });
    }
    if found.is_empty() {
        found = bare_lines(text);
    }
    found
}

/// Lines of prose that are a whole JSON object on their own (a small model's bare call
/// after a sentence).
fn bare_lines(text: &str) -> Vec<Candidate> {
    let mut found = Vec::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let end = start + line.len();
        let body = line.trim();
        if body.starts_with('{') && body.ends_with('}') {
            found.push(Candidate {
                info: String::new(),
                body: body.to_string(),
                span: start..end,
            });
        }
        start = end;
    }
    found
}

/// Closed ``` fences, with their labels.
fn fenced(text: &str) -> Vec<Candidate> {
    let mut found = Vec::new();
    let mut rest = 0;
    while let Some(open) = text[rest..].find("```") {
        let start = rest + open;
        let Some(newline) = text[start + 3..].find('\n') else {
            break;
        };
        let body_start = start + 3 + newline + 1;
        let info = text[start + 3..start + 3 + newline].trim().to_string();
        let Some(close) = text[body_start..].find("```") else {
            // The answer ended inside this fence (cut by the output limit, or a server that
            // failed on the closing fence): only its whole values count.
            let whole = super::near_json::whole_values_prefix(text[body_start..].trim_start());
            if !whole.is_empty() {
                found.push(Candidate {
                    info,
                    body: whole.to_string(),
                    span: start..text.len(),
                });
            }
            break;
        };
        let end = body_start + close + 3;
        found.push(Candidate {
            info,
            body: text[body_start..body_start + close].to_string(),
            span: start..end,
        });
        rest = end;
    }
    found
}

/// Blocks opened by a call tag, up to the next call tag (its closing one) or the end.
fn tagged(text: &str) -> Vec<Candidate> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(tag) = next_call_tag(text, at) {
        at = tag.end;
        if tag.closing {
            continue;
        }
        let (body_end, span_end) = match next_call_tag(text, tag.end) {
            Some(next) if next.closing => (next.start, next.end),
            Some(next) => (next.start, next.start),
            None => (text.len(), text.len()),
        };
        // A tag that names the call itself (`<function name="…" arguments='…'/>`) is part
        // of it.
        let body_start = if tag.attributes { tag.start } else { tag.end };
        found.push(Candidate {
            info: String::new(),
            body: text[body_start..body_end].to_string(),
            span: tag.start..span_end,
        });
        at = span_end.max(tag.end);
    }
    found
}

/// A call tag found in the text.
struct Tag {
    start: usize,
    end: usize,
    closing: bool,
    attributes: bool,
}

fn next_call_tag(text: &str, from: usize) -> Option<Tag> {
    let mut at = from;
    while let Some(open) = text[at..].find('<') {
        let start = at + open;
        let close = text[start..].find('>')?;
        let inner = &text[start + 1..start + close];
        if is_call_tag(inner) {
            let closing = inner
                .trim_start_matches(|c: char| c == '|' || c.is_whitespace())
                .starts_with('/');
            return Some(Tag {
                start,
                end: start + close + 1,
                closing,
                attributes: has_attributes(inner),
            });
        }
        at = start + 1;
    }
    None
}

/// A tag's name: what comes before its attributes (`function` in `<function name="…">` and
/// `<function=read_file>`).
fn tag_name(inner: &str) -> &str {
    let inner = inner.trim_matches(|c: char| c == '/' || c == '|' || c.is_whitespace());
    inner
        .split(|c: char| c.is_whitespace() || c == '=')
        .next()
        .unwrap_or_default()
        .trim_end_matches(['/', '|'])
}

/// Whether a tag has attributes (or names its tool after `=`).
fn has_attributes(inner: &str) -> bool {
    let inner = inner.trim_matches(|c: char| c == '/' || c == '|' || c.is_whitespace());
    inner.contains(|c: char| c.is_whitespace() || c == '=')
}

/// Tag names models wrap a call in (`<tool_call>`, `<tools>`, `<function_call>`,
/// `<|tool_call|>`, `<function name="…">`).
pub(super) fn is_call_tag(inner: &str) -> bool {
    let name = tag_name(inner);
    name.len() <= 24
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && (name.contains("tool") || name.contains("function"))
}

/// The text without call tags.
pub(super) fn without_call_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        out.push_str(&rest[..open]);
        let tag = &rest[open + 1..open + close];
        if !is_call_tag(tag) {
            out.push_str(&rest[open..=open + close]);
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

fn string_field<'a>(object: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
}

/// The call a JSON object describes, in the shapes models use.
fn call_shape(value: &Value) -> Option<Parsed> {
    let object = value.as_object()?;
    if let Some(function) = object.get("function").and_then(Value::as_object) {
        return call_shape(&Value::Object(function.clone()));
    }
    // `{"function": "read_file", "arguments": …}` names the tool with a string.
    let name = string_field(object, &["name", "tool", "tool_name", "function"])?;
    let given = ["arguments", "parameters", "args", "input"]
        .iter()
        .find_map(|k| object.get(*k))
        .cloned();
    let explicit = given.is_some();
    let arguments = match given.unwrap_or_else(|| Value::Object(Map::new())) {
        Value::String(text) => super::near_json::value(&text)?,
        other => other,
    };
    Some(Parsed {
        name: name.to_string(),
        arguments,
        explicit,
    })
}

/// The JSON values of a body that is nothing but JSON values (one or several; arrays are
/// opened), or nothing.
fn json_values(body: &str) -> Vec<Value> {
    let mut values = Vec::new();
    for value in super::near_json::values(body).unwrap_or_default() {
        match value {
            Value::Array(items) => values.extend(items),
            value => values.push(value),
        }
    }
    values
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The calls a candidate holds. `offered` decides the two shapes that name a tool outside
/// the JSON (`terminal {…}`, a fence labelled `terminal`): only offered names count there.
pub(super) fn calls_in(info: &str, body: &str, offered: &[String]) -> Vec<Parsed> {
    let body = body.trim();
    if body.starts_with('<') {
        return tagged_call(body).into_iter().collect();
    }
    let label = offered.iter().find(|name| name.as_str() == info.trim());
    if body.starts_with('{') || body.starts_with('[') {
        return json_values(body)
            .into_iter()
            .filter_map(|value| match (call_shape(&value), label) {
                (Some(parsed), _) if label.is_none_or(|l| *l == parsed.name) => Some(parsed),
                (_, Some(label)) if value.is_object() => Some(Parsed {
                    name: label.clone(),
                    arguments: value,
                    explicit: true,
                }),
                _ => None,
            })
            .collect();
    }
    // `terminal {"command": "pytest"}` (or `terminal({…})`).
    let name_end = body.find(|c: char| !is_name_char(c)).unwrap_or(body.len());
    let (name, rest) = body.split_at(name_end);
    if !offered.iter().any(|o| o == name) {
        return Vec::new();
    }
    let rest = rest.trim();
    let rest = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or(rest)
        .trim();
    match super::near_json::value(rest) {
        Some(arguments @ Value::Object(_)) => vec![Parsed {
            name: name.to_string(),
            arguments,
            explicit: true,
        }],
        _ => Vec::new(),
    }
}

/// The value of `key="…"` (or `'…'`) among a tag's attributes.
fn attribute<'a>(attributes: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = attributes;
    while let Some(at) = rest.find(key) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + key.len()..].trim_start();
        rest = &rest[at + key.len()..];
        if before.is_some_and(|c| !c.is_whitespace()) {
            continue;
        }
        let Some(value) = after.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        let quote = value.chars().next().filter(|q| *q == '"' || *q == '\'')?;
        let inner = &value[1..];
        return inner.find(quote).map(|end| &inner[..end]);
    }
    None
}

/// A call written as a tag: `<function name="read_file" arguments='{…}'/>`,
/// `<function name="read_file">{…}</function>` or `<function=read_file>{…}</function>`.
fn tagged_call(body: &str) -> Option<Parsed> {
    let close = body.find('>')?;
    let inner = body[1..close].trim().trim_end_matches('/').trim_end();
    let content = body[close + 1..]
        .split("</")
        .next()
        .unwrap_or_default()
        .trim();
    let (name, given) = match inner.split_once('=') {
        // `function=read_file`: the name after `=`, the arguments as the content.
        Some((head, name)) if !head.contains(char::is_whitespace) => {
            (name.trim().trim_matches(['"', '\'']).to_string(), None)
        }
        _ => {
            let attributes = inner.split_once(char::is_whitespace)?.1;
            let name = attribute(attributes, "name")?.to_string();
            let given =
                attribute(attributes, "arguments").or_else(|| attribute(attributes, "parameters"));
            (name, given)
        }
    };
    let arguments = match given.or((!content.is_empty()).then_some(content)) {
        Some(json) => super::near_json::value(json)?,
        None => Value::Object(Map::new()),
    };
    (!name.is_empty()).then_some(Parsed {
        name,
        arguments,
        explicit: true,
    })
}

/// Whether an answer being streamed may be starting a call at a fence: it is labelled with a
/// tool's name, or its body so far is (or may still become) a call of an offered tool. A
/// closed fence counts only when it holds such a call.
pub(super) fn fence_may_be_call(info: &str, body: &str, closed: bool, offered: &[String]) -> bool {
    if offered.iter().any(|name| name == info.trim()) {
        return true;
    }
    if closed {
        return calls_in(info, body, offered)
            .iter()
            .any(|call| offered.contains(&call.name));
    }
    let body = body.trim_start();
    match body.chars().next() {
        None | Some('{' | '[') => true,
        Some(_) => {
            let name_end = body.find(|c: char| !is_name_char(c)).unwrap_or(body.len());
            let (name, rest) = body.split_at(name_end);
            if rest.is_empty() {
                return offered.iter().any(|o| o.starts_with(name));
            }
            offered.iter().any(|o| o == name)
                && matches!(rest.trim_start().chars().next(), None | Some('{' | '('))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        ["terminal", "todo", "read_file"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn every_shape_a_model_writes_is_read() {
        let offered = names();
        let shapes = [
            (
                "json",
                r#"{"name": "terminal", "arguments": {"command": "ls"}}"#,
            ),
            (
                "",
                r#"{"function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}"#,
            ),
            (
                "",
                r#"{"tool": "terminal", "parameters": {"command": "ls"}}"#,
            ),
            (
                "",
                r#"[{"name": "terminal", "arguments": {"command": "ls"}}]"#,
            ),
            ("", r#"terminal {"command": "ls"}"#),
            ("", r#"terminal({"command": "ls"})"#),
            ("terminal", r#"{"command": "ls"}"#),
            (
                "",
                r#"<function name="terminal" arguments='{"command": "ls"}'/>"#,
            ),
            (
                "",
                r#"<function name="terminal">{"command": "ls"}</function>"#,
            ),
            ("", r#"<function=terminal>{"command": "ls"}</function>"#),
        ];
        for (info, body) in shapes {
            let calls = calls_in(info, body, &offered);
            assert_eq!(calls.len(), 1, "{info} {body}");
            assert_eq!(calls[0].name, "terminal", "{body}");
            assert_eq!(calls[0].arguments["command"], "ls", "{body}");
        }
        let two = "{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}\n{\"name\": \"todo\", \"arguments\": {}}";
        assert_eq!(calls_in("json", two, &offered).len(), 2);
    }

    #[test]
    fn text_that_is_not_a_call_gives_none() {
        let offered = names();
        for (info, body) in [
            ("sh", "terminal --help"),
            ("", "mytool {\"a\": 1}"),
            ("json", "{\"port\": 8080}"),
            ("json", "{\"name\": \"terminal\", \"arguments\": {} oops"),
            ("python", "print({\"a\": 1})"),
        ] {
            let calls = calls_in(info, body, &offered);
            assert!(
                calls.iter().all(|c| !offered.contains(&c.name)),
                "{info} {body}: {calls:?}"
            );
        }
        // A name and arguments make a call, even of a tool that does not exist.
        let missing = calls_in("", r#"{"name": "add", "arguments": {"a": 5}}"#, &offered);
        assert!(missing[0].explicit && missing[0].name == "add");
        let person = calls_in("", r#"{"name": "Bob", "age": 3}"#, &offered);
        assert!(!person[0].explicit);
    }

    #[test]
    fn candidates_come_in_order_and_tags_around_a_fence_give_way_to_it() {
        let text = "a\n<tool_call>\n```json\n{}\n```\n</tool_call>\nb <tool_call>{\"x\":1}</tool_call> c <tool_call>{\"y\":2}";
        let found = candidates(text);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].info, "json");
        assert_eq!(found[1].body, "{\"x\":1}");
        assert_eq!(
            &text[found[1].span.clone()],
            "<tool_call>{\"x\":1}</tool_call>"
        );
        assert_eq!(found[2].body, "{\"y\":2}");
    }
}
