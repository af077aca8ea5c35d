//! After a turn that edited files and ran nothing: the project's obvious check (its tests,
//! or the edited program), so the model is asked once to run it before it answers — a
//! half-done rename across files shows itself there, not in the user's next run.

use std::path::Path;

use talaria_record::{EntryBody, ResultStatus, Transcript};

/// What this turn did with tools, read from the record since its user message.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TurnWork {
    /// Tools ran.
    pub used_tools: bool,
    /// Files changed (as the calls named them), in order, once each.
    pub edited: Vec<String>,
    /// A command ran after the last edit.
    pub ran_after_edit: bool,
}

/// The turn's work so far.
pub(crate) fn turn_work(history: &Transcript) -> TurnWork {
    let entries = history.entries();
    let start = entries
        .iter()
        .rposition(|e| matches!(e.body, EntryBody::User { .. }))
        .map_or(0, |i| i + 1);
    let mut work = TurnWork::default();
    for entry in &entries[start..] {
        let EntryBody::ToolResult(result) = &entry.body else {
            continue;
        };
        work.used_tools = true;
        let completed = result.status == ResultStatus::Completed;
        // What the tool declared it does, never its name: any tool that writes a path is an
        // edit, any that runs commands a check.
        let effects = result.effects();
        if effects.writes && completed {
            if let Some(path) = effects.path(&result.raw_input)
                && !work.edited.iter().any(|p| p == path)
            {
                work.edited.push(path.to_string());
            }
            work.ran_after_edit = false;
        } else if effects.runs_commands {
            work.ran_after_edit = true;
        }
    }
    work
}

/// The project's obvious check for these edits, as a command to suggest: its test runner
/// when the project shows one, else the edited program itself; `None` when there is none.
pub(crate) async fn obvious_check(cwd: &Path, edited: &[String]) -> Option<String> {
    let has = |name: &str| {
        let path = cwd.join(name);
        async move { tokio::fs::metadata(path).await.is_ok() }
    };
    if has("Cargo.toml").await {
        return Some("cargo test".into());
    }
    if has("go.mod").await {
        return Some("go test ./...".into());
    }
    if let Ok(package) = tokio::fs::read_to_string(cwd.join("package.json")).await
        && package.contains("\"test\"")
    {
        return Some("npm test".into());
    }
    let python_tests = has("pytest.ini").await
        || has("tests").await
        || has("test").await
        || edited
            .iter()
            .any(|p| file_name(p).starts_with("test_") || file_name(p).ends_with("_test.py"))
        || python_test_files(cwd).await;
    if python_tests {
        return Some("python3 -m pytest (or python3 -m unittest)".into());
    }
    if let Ok(makefile) = tokio::fs::read_to_string(cwd.join("Makefile")).await
        && makefile.lines().any(|l| l.starts_with("test:"))
    {
        return Some("make test".into());
    }
    let program = edited.iter().rev().find(|p| {
        let name = file_name(p);
        [".py", ".sh", ".js", ".rb"]
            .iter()
            .any(|ext| name.ends_with(ext))
    })?;
    let runner = match Path::new(program).extension().and_then(|e| e.to_str()) {
        Some("py") => "python3",
        Some("sh") => "sh",
        Some("js") => "node",
        _ => "ruby",
    };
    Some(format!("{runner} {program}"))
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether the project's top folder holds Python test files.
async fn python_test_files(cwd: &Path) -> bool {
    let Ok(mut entries) = tokio::fs::read_dir(cwd).await else {
        return false;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py")) {
            return true;
        }
    }
    false
}

/// What the model is told when it ended a turn that edited files without checking them.
pub(crate) fn verify_nudge(edited: &[String], check: &str) -> String {
    let files: Vec<String> = edited.iter().map(|p| format!("`{p}`")).collect();
    format!(
        "You changed {} but ran nothing to check the change. Run `{check}` with the terminal \
         tool now; if it fails, fix what it shows. Then answer.",
        files.join(", ")
    )
}

/// What the model is told when its final answer after tool calls was empty.
pub(crate) const EMPTY_ANSWER_NUDGE: &str = "Your answer was empty. Tell the user, in a few \
    sentences, what you found or did and what the results were.";

#[cfg(test)]
mod tests {
    use serde_json::json;
    use talaria_record::testing::{assistant, result, user};

    use super::*;

    /// A completed result of `tool` with these arguments and declared effects.
    fn declared(
        tool: &str,
        arguments: serde_json::Value,
        effects: talaria_record::ToolEffects,
    ) -> talaria_record::EntryBody {
        let mut body = result("c", tool, "done");
        if let EntryBody::ToolResult(entry) = &mut body {
            entry.raw_input = arguments;
            entry.effects = Some(effects);
        }
        body
    }

    fn writes(path_arg: &str) -> talaria_record::ToolEffects {
        talaria_record::ToolEffects {
            writes: true,
            path_args: vec![path_arg.into()],
            declared: true,
            ..Default::default()
        }
    }

    fn runs() -> talaria_record::ToolEffects {
        talaria_record::ToolEffects {
            runs_commands: true,
            declared: true,
            ..Default::default()
        }
    }

    fn edit(path: &str) -> talaria_record::EntryBody {
        declared("patch", json!({"path": path}), writes("path"))
    }

    #[test]
    fn the_turns_edits_and_later_commands_are_read_from_its_record() {
        let mut history = Transcript::new();
        history.push(user("earlier"));
        history.push(edit("old.py"));
        history.push(user("rename add to plus"));
        history.push(assistant("", &[("c", "patch", "{}")]));
        history.push(edit("calc.py"));
        history.push(edit("main.py"));
        history.push(edit("calc.py"));
        let work = turn_work(&history);
        assert_eq!(work.edited, ["calc.py", "main.py"]);
        assert!(work.used_tools && !work.ran_after_edit);
        history.push(declared("terminal", json!({"command": "pytest"}), runs()));
        assert!(turn_work(&history).ran_after_edit);
        history.push(edit("calc.py"));
        assert!(!turn_work(&history).ran_after_edit, "an edit after the run");
    }

    #[test]
    fn any_tool_is_seen_by_what_it_declares_never_by_its_name() {
        let mut history = Transcript::new();
        history.push(user("update the docs"));
        // A tool nobody named here (an MCP server's, a new one) that writes its `target`.
        history.push(declared(
            "mcp__docs__rewrite",
            json!({"target": "guide.md"}),
            writes("target"),
        ));
        // A result named like an edit tool whose tool declared nothing is no edit.
        history.push(declared(
            "patch",
            json!({"path": "x.py"}),
            Default::default(),
        ));
        let work = turn_work(&history);
        assert_eq!(work.edited, ["guide.md"]);
        assert!(!work.ran_after_edit);
        history.push(declared("mcp__ci__run_suite", json!({}), runs()));
        assert!(turn_work(&history).ran_after_edit);
    }

    #[tokio::test]
    async fn the_obvious_check_comes_from_the_project() {
        let dir = tempfile::tempdir().expect("dir");
        let edited = vec!["tool.py".to_string()];
        assert_eq!(
            obvious_check(dir.path(), &edited).await.as_deref(),
            Some("python3 tool.py")
        );
        std::fs::write(dir.path().join("test_tool.py"), "").expect("write");
        assert!(
            obvious_check(dir.path(), &edited)
                .await
                .is_some_and(|c| c.contains("pytest"))
        );
        std::fs::write(dir.path().join("Cargo.toml"), "").expect("write");
        assert_eq!(
            obvious_check(dir.path(), &edited).await.as_deref(),
            Some("cargo test")
        );
        let empty = tempfile::tempdir().expect("dir");
        assert_eq!(
            obvious_check(empty.path(), &["notes.md".into()]).await,
            None
        );
    }
}
