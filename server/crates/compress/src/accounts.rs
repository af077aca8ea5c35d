//! One-line accounts of old tool outputs: what the call did and how it ended, in place of
//! its output (`[terminal] ran cargo test → exit 101, 240 lines`).

use serde_json::Value;
use talaria_record::{ResultStatus, ToolKind, ToolResultEntry};

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

/// The account of one tool result, from what its tool declared it does (never its name),
/// its arguments, status and output.
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
    let effects = result.effects();
    let path = effects.path(input);
    let body = if effects.runs_commands {
        let command = effects
            .command(input)
            .map_or_else(|| "a command".into(), shorten);
        let exit = result
            .raw_output
            .as_ref()
            .and_then(|o| o.get("exit_code"))
            .and_then(Value::as_i64)
            .map_or_else(|| "ended".to_string(), |code| format!("exit {code}"));
        format!("ran {command} → {exit}, {} lines", lines(text))
    } else if effects.writes {
        outcome(format!("changed {}", path.unwrap_or("files")))
    } else if effects.reads && result.display.kind == ToolKind::Search {
        let found = match_count(text).unwrap_or_else(|| format!("{} lines", lines(text)));
        outcome(format!("{} → {found}", lower_first(&result.display.title)))
    } else if effects.reads
        && let Some(path) = path
    {
        outcome(match line_span(text) {
            Some((first, last)) => format!("read {path} lines {first}–{last}"),
            None => format!("read {path} ({} lines)", lines(text)),
        })
    } else {
        outcome(format!(
            "output cleared to save context ({} characters)",
            text.chars().count()
        ))
    };
    format!("[{}] {body}", result.tool)
}

/// A display title as part of a sentence (`Search files for …` → `search files for …`).
fn lower_first(title: &str) -> String {
    let mut chars = title.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use talaria_record::ToolDisplay;

    /// A result of `tool` whose display kind is `kind`, its effects those the tool declares.
    fn entry(
        tool: &str,
        kind: ToolKind,
        input: Value,
        output: Option<Value>,
        text: &str,
    ) -> ToolResultEntry {
        ToolResultEntry {
            call_id: "c".into(),
            client_id: "c".into(),
            tool: tool.into(),
            status: ResultStatus::Completed,
            display: ToolDisplay {
                title: "Search files for `fn main` in src".into(),
                kind,
                ..ToolDisplay::default()
            },
            raw_input: input,
            raw_output: output,
            model_text: text.into(),
            images: Vec::new(),
            effects: Some(talaria_record::Effects::of_display_kind(kind)),
            changes: Vec::new(),
        }
    }

    #[test]
    fn accounts_say_what_each_tool_did() {
        let run = entry(
            "terminal",
            ToolKind::Execute,
            json!({"command": "cargo test"}),
            Some(json!({"exit_code": 101})),
            &"line\n".repeat(240),
        );
        assert_eq!(
            account(&run),
            "[terminal] ran cargo test → exit 101, 240 lines"
        );
        let listing: String = (1..=200).map(|n| format!("{n:>6}|code\n")).collect();
        let read = entry(
            "read_file",
            ToolKind::Read,
            json!({"path": "src/main.rs"}),
            None,
            &listing,
        );
        assert_eq!(account(&read), "[read_file] read src/main.rs lines 1–200");
        let search = entry(
            "search_files",
            ToolKind::Search,
            json!({"pattern": "fn main", "path": "src"}),
            None,
            "src/a.rs:1:fn main\n\n(12 matches)",
        );
        assert_eq!(
            account(&search),
            "[search_files] search files for `fn main` in src → 12 matches"
        );
        let edit = entry(
            "patch",
            ToolKind::Edit,
            json!({"path": "src/lib.rs"}),
            None,
            "Replaced 1 occurrence",
        );
        assert_eq!(account(&edit), "[patch] changed src/lib.rs");
        let mut failed = entry(
            "read_file",
            ToolKind::Read,
            json!({"path": "x"}),
            None,
            "no such file",
        );
        failed.status = ResultStatus::Failed;
        assert_eq!(account(&failed), "[read_file] failed: no such file");
        let other = entry("todo", ToolKind::Think, Value::Null, None, "abc");
        assert_eq!(
            account(&other),
            "[todo] output cleared to save context (3 characters)"
        );
    }

    #[test]
    fn a_tool_nobody_named_is_accounted_by_what_it_declares() {
        let mut run = entry(
            "mcp__ci__run",
            ToolKind::Other,
            json!({"script": "make check"}),
            Some(json!({"exit_code": 0})),
            "ok\n",
        );
        run.effects = Some(talaria_record::Effects {
            runs_commands: true,
            command_arg: Some("script".into()),
            declared: true,
            ..Default::default()
        });
        assert_eq!(
            account(&run),
            "[mcp__ci__run] ran make check → exit 0, 1 lines"
        );
        // Named like a command tool, declaring nothing: nothing is claimed of it.
        let mut named = entry(
            "terminal",
            ToolKind::Other,
            json!({"command": "rm -rf /"}),
            None,
            "x",
        );
        named.effects = Some(Default::default());
        assert_eq!(
            account(&named),
            "[terminal] output cleared to save context (1 characters)"
        );
    }
}
