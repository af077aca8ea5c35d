//! One-line accounts of old tool outputs: what the call did and how it ended, in place of
//! its output (`[terminal] ran cargo test → exit 101, 240 lines`).

use serde_json::Value;
use talaria_record::{ResultStatus, ToolResultEntry};

/// Characters of an argument (a command, a pattern) kept in an account.
const ARG_CHARS: usize = 80;

fn shorten(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    let mut short: String = line.chars().take(ARG_CHARS).collect();
    if line.chars().count() > ARG_CHARS || text.trim().lines().count() > 1 {
        short.push('…');
    }
    short
}

fn arg<'a>(input: &'a Value, name: &str) -> Option<&'a str> {
    input.get(name).and_then(Value::as_str)
}

fn lines(text: &str) -> usize {
    text.lines().count()
}

/// The first and last line numbers of a `read_file` listing (`     12|text`).
fn line_span(text: &str) -> Option<(u64, u64)> {
    let numbers: Vec<u64> = text
        .lines()
        .filter_map(|line| line.split_once('|'))
        .filter_map(|(number, _)| number.trim().parse().ok())
        .collect();
    Some((*numbers.first()?, *numbers.last()?))
}

/// The total a search footer states: `(12 matches)` or `of 12;`.
fn match_count(text: &str) -> Option<String> {
    let tail = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    if tail.starts_with("No ") {
        return Some("no matches".into());
    }
    if let Some((_, rest)) = tail.split_once(" of ") {
        let total: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !total.is_empty() {
            return Some(format!("{total} matches"));
        }
    }
    let inner = tail.strip_prefix('(')?.strip_suffix(')')?;
    let (total, noun) = inner.split_once(' ')?;
    total.parse::<u64>().ok()?;
    Some(format!("{total} {noun}"))
}

/// The account of one tool result, from its arguments, status and output.
pub fn account(result: &ToolResultEntry) -> String {
    let input = &result.raw_input;
    let text = &result.model_text;
    let failed = result.status == ResultStatus::Failed;
    let outcome = |ok: String| {
        if failed {
            format!("failed: {}", shorten(text))
        } else {
            ok
        }
    };
    let body = match result.tool.as_str() {
        "terminal" => {
            let command = arg(input, "command").map_or_else(|| "a command".into(), shorten);
            let exit = result
                .raw_output
                .as_ref()
                .and_then(|o| o.get("exit_code"))
                .and_then(Value::as_i64)
                .map_or_else(|| "ended".to_string(), |code| format!("exit {code}"));
            format!("ran {command} → {exit}, {} lines", lines(text))
        }
        "read_file" => {
            let path = arg(input, "path").unwrap_or("a file");
            outcome(match line_span(text) {
                Some((first, last)) => format!("read {path} lines {first}–{last}"),
                None => format!("read {path} ({} lines)", lines(text)),
            })
        }
        "search_files" => {
            let pattern = arg(input, "pattern").map_or_else(String::new, shorten);
            let path = arg(input, "path").unwrap_or(".");
            let found = match_count(text).unwrap_or_else(|| format!("{} lines", lines(text)));
            outcome(format!("'{pattern}' in {path} → {found}"))
        }
        "write_file" => {
            let path = arg(input, "path").unwrap_or("a file");
            let written = arg(input, "content").map_or(0, lines);
            outcome(format!("wrote {path} ({written} lines)"))
        }
        "patch" => {
            let path = arg(input, "path").unwrap_or("files of a patch");
            outcome(format!("edited {path}"))
        }
        _ => outcome(format!(
            "output cleared to save context ({} characters)",
            text.chars().count()
        )),
    };
    format!("[{}] {body}", result.tool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use talaria_record::ToolDisplay;

    fn entry(tool: &str, input: Value, output: Option<Value>, text: &str) -> ToolResultEntry {
        ToolResultEntry {
            call_id: "c".into(),
            client_id: "c".into(),
            tool: tool.into(),
            status: ResultStatus::Completed,
            display: ToolDisplay::default(),
            raw_input: input,
            raw_output: output,
            model_text: text.into(),
            images: Vec::new(),
        }
    }

    #[test]
    fn accounts_say_what_each_tool_did() {
        let run = entry(
            "terminal",
            json!({"command": "cargo test"}),
            Some(json!({"exit_code": 101})),
            &"line\n".repeat(240),
        );
        assert_eq!(
            account(&run),
            "[terminal] ran cargo test → exit 101, 240 lines"
        );
        let listing: String = (1..=200).map(|n| format!("{n:>6}|code\n")).collect();
        let read = entry("read_file", json!({"path": "src/main.rs"}), None, &listing);
        assert_eq!(account(&read), "[read_file] read src/main.rs lines 1–200");
        let search = entry(
            "search_files",
            json!({"pattern": "fn main", "path": "src"}),
            None,
            "src/a.rs:1:fn main\n\n(12 matches)",
        );
        assert_eq!(
            account(&search),
            "[search_files] 'fn main' in src → 12 matches"
        );
        let mut failed = entry("read_file", json!({"path": "x"}), None, "no such file");
        failed.status = ResultStatus::Failed;
        assert_eq!(account(&failed), "[read_file] failed: no such file");
        let other = entry("todo", Value::Null, None, "abc");
        assert_eq!(
            account(&other),
            "[todo] output cleared to save context (3 characters)"
        );
    }
}
