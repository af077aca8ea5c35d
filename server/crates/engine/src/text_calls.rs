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
    let unwrapped = without_call_tags(text);
    let trimmed = unwrapped.trim();
    if found.is_empty() && trimmed.starts_with('{') && trimmed.ends_with('}') {
        found.push((trimmed.to_string(), 0..text.len()));
    }
    found
}

/// Tag names models wrap a call in (`<tool_call>`, `<tools>`, `<function_call>`, `<|tool_call|>`).
fn is_call_tag(inner: &str) -> bool {
    let name = inner.trim_matches(|c: char| c == '/' || c == '|' || c.is_whitespace());
    name.len() <= 24
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && (name.contains("tool") || name.contains("function"))
}

/// The text without call tags around or beside a call.
fn without_call_tags(text: &str) -> String {
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

/// The (name, arguments) a JSON object describes, in the shapes models use.
fn call_shape(value: &Value) -> Option<(String, Value)> {
    let object = value.as_object()?;
    if let Some(function) = object.get("function").and_then(Value::as_object) {
        return call_shape(&Value::Object(function.clone()));
    }
    // `{"function": "read_file", "arguments": …}` names the tool with a string.
    let name = string_field(object, &["name", "tool", "tool_name", "function"])?;
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

/// What the model is told about a call it wrote as text whose arguments do not fit.
pub(crate) fn misfit_instruction(tool: &str, why: &str) -> String {
    format!(
        "Your `{tool}` call was not run: {why}. Call `{tool}` again with arguments that fit its \
         schema."
    )
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

/// Whether a JSON text is a call of an offered tool (in any of the shapes models use).
fn names_offered_tool(json: &str, offered: &[String]) -> bool {
    serde_json::from_str::<Value>(json.trim())
        .ok()
        .and_then(|value| call_shape(&value))
        .is_some_and(|(name, _)| offered.contains(&name))
}

/// Where a streaming answer may hold a tool call written as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Showable {
    /// The answer can be shown up to here; the rest waits until the answer is complete.
    pub upto: usize,
    /// Scanning can resume here next time (outside any fence).
    pub resume: usize,
}

/// How much of a streaming answer can be shown now: everything before the first place where
/// a tool call written as text may begin — an answer that opens with `{`, or a fence whose
/// body opens with `{` and is still open or names an offered tool. Other fences (code, or
/// JSON that is not a call) stream as they come. `resume` is from the previous scan.
pub(crate) fn showable(text: &str, resume: usize, offered: &[String]) -> Showable {
    let hold = |at: usize, resume: usize| Showable { upto: at, resume };
    if resume == 0 {
        let start = text.len() - text.trim_start().len();
        let opening = &text[start..];
        if opening.starts_with('{') || opens_call_tag(opening) {
            return hold(start, 0);
        }
    }
    let mut pos = resume;
    loop {
        let Some(fence) = next_fence(text, pos) else {
            // A line that may still become a fence waits for its next character.
            if let Some(at) = partial_fence(text, pos) {
                return hold(at, pos);
            }
            return hold(text.len(), settled(text, pos));
        };
        let Some(newline) = text[fence + 3..].find('\n') else {
            return hold(fence, pos);
        };
        let body = fence + 3 + newline + 1;
        let close = text[body..].find("```").map(|c| body + c);
        match text[body..].trim_start().chars().next() {
            None => return hold(fence, pos),
            Some('{') => match close {
                None => return hold(fence, pos),
                Some(close) if names_offered_tool(&text[body..close], offered) => {
                    return hold(fence, pos);
                }
                Some(close) => pos = close + 3,
            },
            // Code: shown as it streams; scanning resumes after its closing fence.
            Some(_) => match close {
                None => return hold(text.len(), pos),
                Some(close) => pos = close + 3,
            },
        }
    }
}

/// Whether an answer opens with a call tag (or what may still become one).
fn opens_call_tag(opening: &str) -> bool {
    if !opening.starts_with('<') {
        return false;
    }
    match opening.find('>') {
        Some(close) => is_call_tag(&opening[1..close]),
        // Still streaming the tag: hold while it may become one.
        None => opening.len() <= 26 && !opening[1..].contains(char::is_whitespace),
    }
}

/// Where the next scan can start when no fence follows `from`: the end, when the last line
/// has begun with something other than a backtick (no fence can open on it any more), else
/// that line's start. Stays at 0 until the answer's first character is known.
fn settled(text: &str, from: usize) -> usize {
    if text.trim_start().is_empty() {
        return from;
    }
    let line_start = match text[from..].rfind('\n') {
        Some(n) => from + n + 1,
        None if from == 0 || text[..from].ends_with('\n') => from,
        // Mid-line: this line was settled before.
        None => return text.len(),
    };
    match text[line_start..]
        .trim_start_matches([' ', '\t'])
        .chars()
        .next()
    {
        Some(c) if c != '`' => text.len(),
        _ => line_start,
    }
}

/// The next ``` that opens a line, from `from`.
fn next_fence(text: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(found) = text[at..].find("```") {
        let index = at + found;
        if text[..index].trim_end_matches([' ', '\t']).ends_with('\n')
            || text[..index].trim().is_empty()
        {
            return Some(index);
        }
        at = index + 3;
    }
    None
}

/// A last line that is one or two backticks: it may become a fence. (A line begun before
/// `from`, mid-line, was settled as no fence.)
fn partial_fence(text: &str, from: usize) -> Option<usize> {
    let line_start = match text[from..].rfind('\n') {
        Some(n) => from + n + 1,
        None if from == 0 || text[..from].ends_with('\n') => from,
        None => return None,
    };
    let line = text[line_start..].trim_start();
    (line == "`" || line == "``").then(|| text.len() - line.len())
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
        let named = "```json\n{\"function\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```";
        assert!(
            matches!(find(named, &registry, &names), Some(TextCall::Call { call, .. }) if call.name == "read_file")
        );
        assert!(
            matches!(find(bare, &registry, &names), Some(TextCall::Call { call, .. }) if call.name == "terminal")
        );
    }

    #[test]
    fn a_call_written_as_text_is_held_back_while_it_streams_and_code_is_not() {
        let (_, names) = offered();
        let upto = |text: &str| showable(text, 0, &names).upto;
        // A fenced call is held from its fence, also before it is complete.
        let call = "I'll read it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```";
        let fence = call.find("```").unwrap_or_default();
        for cut in [fence + 1, fence + 3, fence + 8, fence + 12, call.len()] {
            assert_eq!(upto(&call[..cut]), fence, "{:?}", &call[..cut]);
        }
        assert_eq!(upto("I'll read it.\n`"), "I'll read it.\n".len());
        // An answer that is one JSON object is held whole.
        assert_eq!(upto("  {\"name\": \"terminal\""), 2);
        // Code and JSON that names no offered tool stream, and so does what follows them.
        let code = "Run:\n```sh\ncargo test\n```\nThen look.";
        assert_eq!(upto(code), code.len());
        assert_eq!(upto(&code[..12]), 12, "an open code fence streams");
        let config = "Config:\n```json\n{\"port\": 8080}\n```\ndone";
        assert_eq!(upto(config), config.len());
        assert_eq!(upto(&config[..20]), 8, "open JSON waits until it closes");
        // Scanning resumes where it settled and gives what a fresh scan gives, piece by piece.
        for text in [
            call,
            code,
            config,
            "one\ntwo ```not a fence\n``` \n{",
            "  \n{\"name\": 1}",
        ] {
            let mut resume = 0;
            for end in (1..=text.len()).filter(|&e| text.is_char_boundary(e)) {
                let step = showable(&text[..end], resume, &names);
                assert_eq!(step.upto, upto(&text[..end]), "{:?}", &text[..end]);
                resume = step.resume;
            }
        }
        assert_eq!(upto("plain prose"), "plain prose".len());
    }

    #[test]
    fn a_call_in_call_tags_is_taken_and_held_while_it_streams() {
        let (registry, names) = offered();
        for text in [
            "<tools>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n</tools>",
            "<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}</tool_call>",
        ] {
            let Some(TextCall::Call { call, rest }) = find(text, &registry, &names) else {
                panic!("no call in {text}");
            };
            assert_eq!(call.name, "read_file");
            assert_eq!(rest, "");
            for cut in [1, 4, 8, 20, text.len()] {
                assert_eq!(
                    showable(&text[..cut], 0, &names).upto,
                    0,
                    "{:?}",
                    &text[..cut]
                );
            }
        }
        assert_eq!(
            showable("<b>bold</b> claim", 0, &names).upto,
            "<b>bold</b> claim".len()
        );
        assert_eq!(find("<p>{\"a\": 1}</p>", &registry, &names), None);
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
