//! A tolerant reading of the near-JSON small models write in calls: Python's `"""…"""` and
//! `'…'` strings, `True`/`False`/`None`, doubled braces (`{{…}}`, from format strings),
//! trailing commas, raw line breaks inside strings, unquoted keys and `#`/`//` comments. The
//! text is rewritten into JSON and then parsed strictly; what still does not parse gives the
//! parser's own reason, for the model.

use serde_json::Value;

/// The values `text` holds as JSON, or as near-JSON rewritten; else why it cannot be read.
pub(super) fn values(text: &str) -> Result<Vec<Value>, serde_json::Error> {
    match strict_values(text) {
        Ok(values) => Ok(values),
        Err(strict) => {
            let rewritten = rewrite(text);
            strict_values(&rewritten).map_err(|_| strict)
        }
    }
}

/// One value (an object's arguments), strictly or rewritten.
pub(super) fn value(text: &str) -> Option<Value> {
    serde_json::from_str(text)
        .ok()
        .or_else(|| serde_json::from_str(&rewrite(text)).ok())
}

/// Every value of a sequence of JSON values (arrays opened by the caller).
fn strict_values(text: &str) -> Result<Vec<Value>, serde_json::Error> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect()
}

/// `text` rewritten into JSON where it is near-JSON; JSON comes out as it went in.
pub(super) fn rewrite(text: &str) -> String {
    let undoubled;
    let text = match undouble_braces(text) {
        Some(single) => {
            undoubled = single;
            undoubled.as_str()
        }
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        match c {
            '"' | '\'' => {
                let triple = chars.get(at + 1) == Some(&c) && chars.get(at + 2) == Some(&c);
                let (content, next) = if triple {
                    read_triple(&chars, at + 3, c)
                } else {
                    read_quoted(&chars, at + 1, c)
                };
                push_json_string(&mut out, &content);
                at = next;
            }
            ',' => {
                let next = chars[at + 1..].iter().find(|c| !c.is_whitespace());
                if !matches!(next, Some('}' | ']')) {
                    out.push(',');
                }
                at += 1;
            }
            '#' => at = skip_line(&chars, at),
            '/' if chars.get(at + 1) == Some(&'/') => at = skip_line(&chars, at),
            c if c.is_alphabetic() || c == '_' => {
                let end = chars[at..]
                    .iter()
                    .position(|c| !(c.is_alphanumeric() || *c == '_'))
                    .map_or(chars.len(), |p| at + p);
                let word: String = chars[at..end].iter().collect();
                let is_key = chars[end..].iter().find(|c| !c.is_whitespace()) == Some(&':');
                match word.as_str() {
                    _ if is_key => push_json_string(&mut out, &word),
                    "True" => out.push_str("true"),
                    "False" => out.push_str("false"),
                    "None" => out.push_str("null"),
                    _ => out.push_str(&word),
                }
                at = end;
            }
            c => {
                out.push(c);
                at += 1;
            }
        }
    }
    out
}

/// `{{…}}` written for a format string, made single where the text opens and closes so.
fn undouble_braces(text: &str) -> Option<String> {
    let trimmed = text.trim();
    if !(trimmed.starts_with("{{") && trimmed.ends_with("}}")) {
        return None;
    }
    Some(trimmed.replace("{{", "{").replace("}}", "}"))
}

/// A string's content after its opening quote, and where reading goes on.
fn read_quoted(chars: &[char], from: usize, quote: char) -> (String, usize) {
    let mut content = String::new();
    let mut at = from;
    while at < chars.len() {
        match chars[at] {
            '\\' if at + 1 < chars.len() => {
                let escaped = chars[at + 1];
                match escaped {
                    'n' => content.push('\n'),
                    't' => content.push('\t'),
                    'r' => content.push('\r'),
                    'u' => {
                        let hex: String = chars[at + 2..(at + 6).min(chars.len())].iter().collect();
                        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            Some(decoded) if hex.len() == 4 => {
                                content.push(decoded);
                                at += 4;
                            }
                            _ => content.push_str("\\u"),
                        }
                    }
                    other => content.push(other),
                }
                at += 2;
            }
            c if c == quote => return (content, at + 1),
            c => {
                content.push(c);
                at += 1;
            }
        }
    }
    (content, at)
}

/// A triple-quoted string's content (taken as it is written), and where reading goes on.
fn read_triple(chars: &[char], from: usize, quote: char) -> (String, usize) {
    let mut at = from;
    while at < chars.len() {
        let closes = chars[at] == quote
            && chars.get(at + 1) == Some(&quote)
            && chars.get(at + 2) == Some(&quote);
        if closes {
            return (chars[from..at].iter().collect(), at + 3);
        }
        at += 1;
    }
    (chars[from..].iter().collect(), chars.len())
}

/// The start of `text` that holds whole JSON values (an answer cut by the output limit
/// inside its second call keeps its first).
pub(super) fn whole_values_prefix(text: &str) -> &str {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut end = 0;
    while let Some(Ok(_)) = stream.next() {
        end = stream.byte_offset();
    }
    &text[..end]
}

fn skip_line(chars: &[char], from: usize) -> usize {
    chars[from..]
        .iter()
        .position(|c| *c == '\n')
        .map_or(chars.len(), |p| from + p)
}

fn push_json_string(out: &mut String, content: &str) {
    out.push_str(&Value::String(content.to_string()).to_string());
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_is_read_as_it_is() {
        let text = r#"{"name": "read_file", "arguments": {"path": "a \"b\".py"}}"#;
        assert_eq!(
            values(text).expect("json"),
            vec![serde_json::from_str::<Value>(text).expect("json")]
        );
    }

    #[test]
    fn each_near_json_shape_is_repaired() {
        let cases = [
            (
                r#"{"name": "write_file", "arguments": {"path": "t.py", "content": """import os
print("hi")
"""}}"#,
                json!({"name": "write_file", "arguments": {"path": "t.py", "content": "import os\nprint(\"hi\")\n"}}),
            ),
            (
                "{'name': 'terminal', 'arguments': {'command': 'ls', 'background': False}}",
                json!({"name": "terminal", "arguments": {"command": "ls", "background": false}}),
            ),
            (
                r#"{{"name": "read_file", "arguments": {{"path": "main.py"}}}}"#,
                json!({"name": "read_file", "arguments": {"path": "main.py"}}),
            ),
            (
                "{\"name\": \"search_files\", \"arguments\": {\"pattern\": \"x\", \"limit\": None,},}",
                json!({"name": "search_files", "arguments": {"pattern": "x", "limit": null}}),
            ),
            (
                "{name: \"patch\", arguments: {\"path\": \"a.py\", \"old_string\": \"x = 1\ny = 2\", \"new_string\": \"x = 2\"}} # the fix",
                json!({"name": "patch", "arguments": {"path": "a.py", "old_string": "x = 1\ny = 2", "new_string": "x = 2"}}),
            ),
            (
                "{\"name\": \"terminal\", \"arguments\": {\"command\": 'echo \\'quoted\\' \"double\"', \"timeout\": 30, \"pty\": True}}",
                json!({"name": "terminal", "arguments": {"command": "echo 'quoted' \"double\"", "timeout": 30, "pty": true}}),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(values(text).expect("repaired"), vec![expected], "{text}");
        }
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        let why = values(r#"{"name": "read_file", "arguments": {"path": "a.py"}"#)
            .expect_err("unclosed")
            .to_string();
        assert!(why.contains("EOF") || why.contains("line"), "{why}");
        assert!(values("{\"name\": \"x\" \"arguments\": {}}").is_err());
    }
}
