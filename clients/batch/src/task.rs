//! The dataset: one task a line of JSONL, read with its line number. A line that cannot be a
//! task (not JSON, an unknown field, a duplicate id, a repository that is not there) is a
//! [`Problem`] naming its line; the other lines still run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One task, as written in the dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub id: String,
    /// Text, or ACP content blocks.
    pub prompt: PromptInput,
    /// A directory or git repository copied (or checked out) afresh for the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<PathBuf>,
    /// The revision of `repo` to check out (a git repository only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
    /// A directory used as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// The session's mode (`ask`, `auto`, `plan`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Added to the agent's own instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The most model calls the task's turn may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// The turn is cancelled after this many seconds (the verdict is `timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// Run in the task's sandbox before the prompt; failing, the task is `setup_failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Run in the task's sandbox after the turn; its exit status is the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// Carried to the outputs as it is.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
    /// Another agent of the configuration (`[agents.<name>]`) that runs the task instead of
    /// the agent's own loop (the prompt handed to it as `/agent NAME TEXT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// A prompt: text, or ACP content blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Blocks(Vec<Value>),
}

impl PromptInput {
    /// Its text: the text itself, or its text blocks' joined.
    pub fn text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Blocks(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// As `session/prompt`'s `prompt`.
    pub fn blocks(&self) -> Vec<Value> {
        match self {
            Self::Text(text) => vec![serde_json::json!({"type": "text", "text": text})],
            Self::Blocks(blocks) => blocks.clone(),
        }
    }
}

/// A task and the line it came from (from 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskAt {
    pub line: usize,
    pub task: Task,
}

/// A line that is not a task, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub line: usize,
    /// The line's id, when it has one.
    pub id: Option<String>,
    pub error: String,
}

/// What a dataset holds.
#[derive(Debug, Default, Clone)]
pub struct Dataset {
    pub tasks: Vec<TaskAt>,
    pub problems: Vec<Problem>,
}

/// Reads a dataset's text; relative `repo` and `workspace` paths are taken from `base` (the
/// dataset's folder).
pub fn parse(text: &str, base: &Path) -> Dataset {
    let mut dataset = Dataset::default();
    let mut seen = HashSet::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(line, base) {
            Ok(task) if !seen.insert(task.id.clone()) => dataset.problems.push(Problem {
                line: number,
                error: format!("duplicate id {:?} (the first one runs)", task.id),
                id: Some(task.id),
            }),
            Ok(task) => dataset.tasks.push(TaskAt { line: number, task }),
            Err(error) => dataset.problems.push(Problem {
                line: number,
                id: serde_json::from_str::<Value>(line)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(str::to_string)),
                error: error.to_string(),
            }),
        }
    }
    dataset
}

/// Why a line is not a task.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct LineError(String);

impl From<&str> for LineError {
    fn from(why: &str) -> Self {
        Self(why.to_string())
    }
}

impl From<String> for LineError {
    fn from(why: String) -> Self {
        Self(why)
    }
}

fn parse_line(line: &str, base: &Path) -> Result<Task, LineError> {
    let mut task: Task = serde_json::from_str(line).map_err(|e| format!("not a task: {e}"))?;
    if task.id.trim().is_empty() {
        return Err("the id is empty".into());
    }
    if task.id.contains(['/', '\\']) || task.id.starts_with('.') || task.id.len() > 200 {
        return Err(format!(
            "the id {:?} cannot name a file (no slashes, no leading dot, at most 200 bytes)",
            task.id
        )
        .into());
    }
    if task.repo.is_some() && task.workspace.is_some() {
        return Err("give repo or workspace, not both".into());
    }
    if task.rev.is_some() && task.repo.is_none() {
        return Err("rev needs a repo".into());
    }
    if let Some(timeout) = task.timeout_s
        && !(timeout.is_finite() && timeout > 0.0)
    {
        return Err(format!("timeout_s must be a positive number, got {timeout}").into());
    }
    if let PromptInput::Blocks(blocks) = &task.prompt
        && (blocks.is_empty() || blocks.iter().any(|b| !b.is_object()))
    {
        return Err("prompt must be text or a non-empty list of content blocks".into());
    }
    if let Some(agent) = &task.agent
        && (agent.is_empty() || agent.contains(char::is_whitespace))
    {
        return Err(format!("agent {agent:?} cannot name an [agents.<name>] table").into());
    }
    if task.agent.is_some() && task.prompt.text().trim().is_empty() {
        return Err("a task for another agent needs a prompt with text".into());
    }
    for (name, place) in [("repo", &mut task.repo), ("workspace", &mut task.workspace)] {
        if let Some(path) = place {
            let full = base.join(&*path);
            if !full.is_dir() {
                return Err(format!("{name} {} is not a directory", full.display()).into());
            }
            *path = full;
        }
    }
    Ok(task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_bad_line_is_named_by_its_line_and_the_rest_are_tasks() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("repo")).expect("repo");
        let text = [
            r#"{"id":"a","prompt":"hello"}"#,
            r#"{"id":"b","prompt":"x","colour":"red"}"#,
            r#"{"id":"a","prompt":"again"}"#,
            r#"{"id":"c","prompt":"x","repo":"missing"}"#,
            "{not json",
            "",
            r#"{"id":"d","prompt":[{"type":"text","text":"blocks"}],"repo":"repo","metadata":{"k":1}}"#,
            r#"{"id":"../e","prompt":"x"}"#,
            r#"{"id":"f","prompt":"x","timeout_s":-1}"#,
        ]
        .join("\n");
        let dataset = parse(&text, dir.path());
        let ids: Vec<&str> = dataset.tasks.iter().map(|t| t.task.id.as_str()).collect();
        assert_eq!(ids, ["a", "d"]);
        assert_eq!(dataset.tasks[1].line, 7);
        assert_eq!(dataset.tasks[1].task.repo, Some(dir.path().join("repo")));
        let lines: Vec<usize> = dataset.problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, [2, 3, 4, 5, 8, 9]);
        assert!(
            dataset.problems[0].error.contains("colour"),
            "{:?}",
            dataset.problems[0]
        );
        assert!(dataset.problems[1].error.contains("duplicate"));
        assert!(dataset.problems[2].error.contains("not a directory"));
        assert_eq!(dataset.problems[2].id.as_deref(), Some("c"));
        assert_eq!(dataset.problems[3].id, None);
    }
}
