//! After a turn that edited files and ran nothing: the project's obvious check (its tests,
//! or the edited program), so the model is asked once to run it before it answers — a
//! half-done rename across files shows itself there, not in the user's next run.

use std::path::Path;
use std::sync::Arc;

use talaria_files::{Dir, Places, Root};
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

/// The most read of a project file the check is looked for in (`package.json`, `Makefile`).
const MAX_PROJECT_FILE_BYTES: u64 = 1024 * 1024;

/// The project's obvious check for these edits, as a command to suggest: its test runner
/// when the project shows one, else the edited program itself; `None` when there is none.
/// The workspace is read through the one way to the user's files, judged by `places`.
pub(crate) async fn obvious_check(
    cwd: &Path,
    edited: &[String],
    places: Arc<dyn Places>,
) -> Option<String> {
    let (cwd, edited) = (cwd.to_path_buf(), edited.to_vec());
    tokio::task::spawn_blocking(move || obvious_check_now(&cwd, &edited, places))
        .await
        .ok()
        .flatten()
}

fn obvious_check_now(cwd: &Path, edited: &[String], places: Arc<dyn Places>) -> Option<String> {
    let workspace = Root::open(cwd, places).ok();
    let top = workspace.as_ref().map(Root::as_dir);
    let has = |name: &str| top.is_some_and(|dir| matches!(dir.stat(name.as_ref()), Ok(Some(_))));
    let text = |name: &str| {
        top.and_then(|dir| dir.read(name.as_ref(), MAX_PROJECT_FILE_BYTES).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    };
    if has("Cargo.toml") {
        return Some("cargo test".into());
    }
    if has("go.mod") {
        return Some("go test ./...".into());
    }
    if text("package.json").is_some_and(|package| package.contains("\"test\"")) {
        return Some("npm test".into());
    }
    let python_tests = has("pytest.ini")
        || has("tests")
        || has("test")
        || edited
            .iter()
            .any(|p| file_name(p).starts_with("test_") || file_name(p).ends_with("_test.py"))
        || top.is_some_and(python_test_files);
    if python_tests {
        return Some("python3 -m pytest (or python3 -m unittest)".into());
    }
    if text("Makefile").is_some_and(|makefile| makefile.lines().any(|l| l.starts_with("test:"))) {
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
fn python_test_files(top: &Dir) -> bool {
    top.entries().is_ok_and(|entries| {
        entries.iter().any(|(name, _)| {
            let name = name.to_string_lossy();
            name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py"))
        })
    })
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
        effects: talaria_record::Effects,
    ) -> talaria_record::EntryBody {
        let mut body = result("c", tool, "done");
        if let EntryBody::ToolResult(entry) = &mut body {
            entry.raw_input = arguments;
            entry.effects = Some(effects);
        }
        body
    }

    fn writes(path_arg: &str) -> talaria_record::Effects {
        talaria_record::Effects {
            writes: true,
            path_args: vec![path_arg.to_string()].into(),
            declared: true,
            ..Default::default()
        }
    }

    fn runs() -> talaria_record::Effects {
        talaria_record::Effects {
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

    fn open() -> Arc<dyn Places> {
        Arc::new(talaria_files::Unguarded)
    }

    #[tokio::test]
    async fn project_files_that_are_links_are_not_read_for_the_check() {
        let dir = tempfile::tempdir().expect("dir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::write(dir.path().join("outside.json"), "{\"test\": \"x\"}").expect("write");
        std::fs::write(dir.path().join("Makefile"), "test:\n\ttrue\n").expect("write");
        std::os::unix::fs::symlink("../outside.json", ws.join("package.json")).expect("link");
        std::os::unix::fs::symlink("../Makefile", ws.join("Makefile")).expect("link");
        assert_eq!(obvious_check(&ws, &[], open()).await, None);
        std::fs::remove_file(ws.join("Makefile")).expect("rm");
        std::fs::write(ws.join("Makefile"), "test:\n\ttrue\n").expect("write");
        assert_eq!(
            obvious_check(&ws, &[], open()).await.as_deref(),
            Some("make test")
        );
    }

    #[tokio::test]
    async fn the_obvious_check_comes_from_the_project() {
        let dir = tempfile::tempdir().expect("dir");
        let edited = vec!["tool.py".to_string()];
        assert_eq!(
            obvious_check(dir.path(), &edited, open()).await.as_deref(),
            Some("python3 tool.py")
        );
        std::fs::write(dir.path().join("test_tool.py"), "").expect("write");
        assert!(
            obvious_check(dir.path(), &edited, open())
                .await
                .is_some_and(|c| c.contains("pytest"))
        );
        std::fs::write(dir.path().join("Cargo.toml"), "").expect("write");
        assert_eq!(
            obvious_check(dir.path(), &edited, open()).await.as_deref(),
            Some("cargo test")
        );
        let empty = tempfile::tempdir().expect("dir");
        assert_eq!(
            obvious_check(empty.path(), &["notes.md".into()], open()).await,
            None
        );
    }
}
