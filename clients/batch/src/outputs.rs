//! What a batch writes to its folder: `results.jsonl` (a line a finished task, appended and
//! synced, so a killed run loses at most the tasks that were running), `trajectories/ID.json`,
//! `problems.jsonl` (the dataset's bad lines) and `summary.md`.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::choice::BadChoice;
use crate::task::Problem;

/// A task's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// `check` exited 0.
    Pass,
    /// `check` exited otherwise.
    Fail,
    /// The turn ended and there is no `check`.
    Done,
    /// `timeout_s` passed; the turn was cancelled.
    Timeout,
    /// `setup` failed; nothing was prompted.
    SetupFailed,
    /// The workspace, the agent or the model failed (`error_class` says which).
    Error,
    /// The run was stopped (SIGTERM, SIGINT, SIGHUP) while the task ran: its turn was
    /// cancelled and recorded as interrupted. Not finished: `--resume` runs it again.
    Interrupted,
}

impl Verdict {
    pub fn failed(self) -> bool {
        !matches!(self, Self::Pass | Self::Done)
    }
}

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub id: String,
    /// The dataset line it came from.
    pub line: usize,
    /// The other agent that ran it (`[agents.<name>]`); none: the agent's own loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    pub verdict: Verdict,
    pub stop_reason: Option<String>,
    /// The model's answers (assistant messages) in the turn.
    pub turns: u64,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// In USD, when the agent knows the model's prices.
    pub cost: Option<f64>,
    pub wall_s: f64,
    pub error_class: Option<String>,
    pub error: Option<String>,
    /// The session's id: `session/load` it to look at the task in an editor.
    pub session_id: Option<String>,
    pub check_exit: Option<i32>,
    #[serde(default)]
    pub metadata: Value,
    /// The outputs of this task that could not be written, each with why (a trajectory
    /// the agent did not write, or this folder refused): the run's summary lists them and
    /// its exit code says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unwritten: Vec<String>,
}

/// How trajectories are written (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrajectoryFormat {
    /// The messages in the OpenAI chat format.
    #[default]
    OpenAi,
    /// `conversations` of `from`/`value` turns.
    ShareGpt,
}

impl std::str::FromStr for TrajectoryFormat {
    type Err = BadChoice;
    fn from_str(text: &str) -> Result<Self, BadChoice> {
        match text {
            "openai" => Ok(Self::OpenAi),
            "sharegpt" => Ok(Self::ShareGpt),
            other => Err(BadChoice {
                flag: "--format",
                given: other.to_string(),
                expected: "openai, sharegpt",
            }),
        }
    }
}

/// Why the output folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} already holds results: --resume to go on with them, or choose another --out")]
    NotEmpty(PathBuf),
    #[error("the output's writer stopped: {0}")]
    Writer(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The output folder of a batch, held: every output is written below it through the one way
/// to files (`talaria-files`), so a folder inside a task's workspace that a command swaps
/// for a link, or a name it plants there, is never written through.
pub struct OutputDir {
    dir: PathBuf,
    held: talaria_files::Root,
    results: std::fs::File,
    /// The results already there when a run resumed, and those written since.
    finished: Vec<TaskResult>,
}

impl OutputDir {
    /// Opens `dir` (created if needed). Without `resume`, a folder with results is refused;
    /// with it, the finished tasks are read (a line cut by a kill is dropped).
    pub fn open(dir: &Path, resume: bool) -> Result<Self, OutputError> {
        let held = held_folder(dir)?;
        held.make_dirs(Path::new("trajectories"))
            .map_err(|e| io(dir)(e.into()))?;
        let path = dir.join("results.jsonl");
        let results = held
            .as_dir()
            .open_append("results.jsonl".as_ref())
            .map_err(|e| io(&path)(e.into()))?;
        let mut text = String::new();
        (&results).read_to_string(&mut text).map_err(io(&path))?;
        if !resume && !text.trim().is_empty() {
            return Err(OutputError::NotEmpty(dir.to_path_buf()));
        }
        let (mut finished, whole_bytes) = read_results(&text);
        // What an earlier run marked interrupted runs again: its line stays, it counts no more.
        finished.retain(|r| r.verdict != Verdict::Interrupted);
        // A line a kill cut short goes: the next result starts on a line of its own.
        results.set_len(whole_bytes as u64).map_err(io(&path))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            held,
            results,
            finished,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The ids already finished (an interrupted task is not: it runs again).
    pub fn finished_ids(&self) -> HashSet<String> {
        self.finished
            .iter()
            .filter(|r| r.verdict != Verdict::Interrupted)
            .map(|r| r.id.clone())
            .collect()
    }

    /// Writes a task's trajectory, then its result (synced before this returns). A
    /// trajectory that cannot be written is named in the result (`unwritten`); a result that
    /// cannot be written stops the run.
    pub fn finish(
        &mut self,
        mut result: TaskResult,
        trajectory: Option<&Value>,
        format: TrajectoryFormat,
    ) -> Result<(), OutputError> {
        if let Some(trajectory) = trajectory
            && let Err(error) = write_trajectory(&self.held, &result.id, trajectory, format)
        {
            result.unwritten.push(format!("trajectory: {error}"));
        }
        let path = self.dir.join("results.jsonl");
        let mut line = serde_json::to_string(&result).unwrap_or_default();
        line.push('\n');
        talaria_util::failpoint::step("batch::result::before");
        self.results
            .write_all(line.as_bytes())
            .and_then(|()| self.results.sync_data())
            .map_err(io(&path))?;
        talaria_util::failpoint::step("batch::result::after");
        self.finished.push(result);
        Ok(())
    }

    /// `problems.jsonl` and `summary.md`, from every result in the folder.
    pub fn write_summary(&self, problems: &[Problem], wall_s: f64) -> Result<(), OutputError> {
        write_problems(&self.held, problems)?;
        let text = summary(&self.finished, problems, wall_s);
        replace(&self.held, Path::new("summary.md"), text.as_bytes(), false)
    }

    pub fn results(&self) -> &[TaskResult] {
        &self.finished
    }

    /// The finished tasks with an output that could not be written.
    pub fn unwritten(&self) -> usize {
        self.finished
            .iter()
            .filter(|r| !r.unwritten.is_empty())
            .count()
    }
}

/// The results in `text`, and how many of its bytes are whole lines.
fn read_results(text: &str) -> (Vec<TaskResult>, usize) {
    let mut results = Vec::new();
    let mut whole = 0;
    for line in text.split_inclusive('\n') {
        if !line.ends_with('\n') {
            break;
        }
        whole += line.len();
        if let Ok(result) = serde_json::from_str::<TaskResult>(line) {
            results.push(result);
        }
    }
    (results, whole)
}

/// The output folder `dir` (made when missing), held.
pub fn held_folder(dir: &Path) -> Result<talaria_files::Root, OutputError> {
    talaria_files::Root::open_making(dir, std::sync::Arc::new(talaria_files::Unguarded))
        .map_err(|e| io(dir)(e.into()))
}

/// Replaces `relative` below `held` whole (synced first when `sync`): a new file made
/// exclusively beside it, renamed within its folder.
fn replace(
    held: &talaria_files::Root,
    relative: &Path,
    bytes: &[u8],
    sync: bool,
) -> Result<(), OutputError> {
    let how = talaria_files::Replace { mode: None, sync };
    held.replace(relative, bytes, &how)
        .map_err(|e| io(&held.shown().join(relative))(e.into()))
}

/// `DIR/trajectories/ID.json` in `format`.
pub fn write_trajectory(
    dir: &talaria_files::Root,
    id: &str,
    trajectory: &Value,
    format: TrajectoryFormat,
) -> Result<(), OutputError> {
    let shaped = match format {
        TrajectoryFormat::OpenAi => trajectory.clone(),
        TrajectoryFormat::ShareGpt => crate::sharegpt::from_openai(trajectory),
    };
    let relative = Path::new("trajectories").join(format!("{id}.json"));
    let text = serde_json::to_vec_pretty(&shaped).unwrap_or_default();
    // Synced before it is renamed: the result line that follows never names a trajectory
    // a power cut could lose.
    talaria_util::failpoint::step("batch::trajectory::before");
    replace(dir, &relative, &text, true)?;
    talaria_util::failpoint::step("batch::trajectory::after");
    Ok(())
}

/// `DIR/problems.jsonl`: the dataset's bad lines.
pub fn write_problems(dir: &talaria_files::Root, problems: &[Problem]) -> Result<(), OutputError> {
    let text: String = problems
        .iter()
        .filter_map(|p| serde_json::to_string(p).ok())
        .map(|line| line + "\n")
        .collect();
    replace(dir, Path::new("problems.jsonl"), text.as_bytes(), false)
}

/// When tasks ran on more than one agent (`agent`; the agent's own loop is `talaria`), a
/// table comparing them: tasks, passed, did not pass, mean wall time, tokens, cost.
fn by_agent(results: &[TaskResult], out: &mut String) {
    let name = |r: &TaskResult| r.agent.clone().unwrap_or_else(|| "talaria".into());
    let mut agents: Vec<String> = results.iter().map(name).collect();
    agents.sort();
    agents.dedup();
    if agents.len() < 2 {
        return;
    }
    out.push_str(
        "\n## By agent\n\n| agent | tasks | pass | did not pass | mean wall (s) | tokens in / out | cost (USD) |\n|---|---|---|---|---|---|---|\n",
    );
    for agent in agents {
        let ran: Vec<&TaskResult> = results.iter().filter(|r| name(r) == agent).collect();
        let passed = ran.iter().filter(|r| r.verdict == Verdict::Pass).count();
        let failed = ran.iter().filter(|r| r.verdict.failed()).count();
        let wall = ran.iter().map(|r| r.wall_s).sum::<f64>() / ran.len().max(1) as f64;
        let tokens_in: u64 = ran.iter().map(|r| r.tokens_in).sum();
        let tokens_out: u64 = ran.iter().map(|r| r.tokens_out).sum();
        let cost: f64 = ran.iter().filter_map(|r| r.cost).sum();
        out.push_str(&format!(
            "| {} | {} | {passed} | {failed} | {wall:.1} | {tokens_in} / {tokens_out} | {cost:.4} |\n",
            agent.replace('|', "\\|"),
            ran.len()
        ));
    }
}

/// `summary.md`: totals, verdicts, and the tasks that did not pass.
pub fn summary(results: &[TaskResult], problems: &[Problem], wall_s: f64) -> String {
    let count = |verdict| results.iter().filter(|r| r.verdict == verdict).count();
    let tokens_in: u64 = results.iter().map(|r| r.tokens_in).sum();
    let tokens_out: u64 = results.iter().map(|r| r.tokens_out).sum();
    let calls: u64 = results.iter().map(|r| r.model_calls).sum();
    let cost: f64 = results.iter().filter_map(|r| r.cost).sum();
    let mut out = format!(
        "# Batch summary\n\n| | |\n|---|---|\n| tasks finished | {} |\n| pass | {} |\n| fail | {} |\n| done (no check) | {} |\n| timeout | {} |\n| setup failed | {} |\n| error | {} |\n| interrupted (run again with --resume) | {} |\n| bad dataset lines | {} |\n| tasks with outputs not written | {} |\n| model calls | {calls} |\n| tokens in / out | {tokens_in} / {tokens_out} |\n| cost (USD) | {cost:.4} |\n| wall time (s) | {wall_s:.1} |\n",
        results.len(),
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Done),
        count(Verdict::Timeout),
        count(Verdict::SetupFailed),
        count(Verdict::Error),
        count(Verdict::Interrupted),
        problems.len(),
        results.iter().filter(|r| !r.unwritten.is_empty()).count(),
    );
    by_agent(results, &mut out);
    let failed: Vec<&TaskResult> = results.iter().filter(|r| r.verdict.failed()).collect();
    if !failed.is_empty() {
        out.push_str("\n## Tasks that did not pass\n\n| id | verdict | why |\n|---|---|---|\n");
        for r in failed {
            let why = r
                .error
                .clone()
                .or(r.check_exit.map(|c| format!("check exited {c}")))
                .unwrap_or_default()
                .replace('|', "\\|")
                .replace('\n', " ");
            let verdict = serde_json::to_value(r.verdict).unwrap_or_default();
            out.push_str(&format!(
                "| {} | {} | {why} |\n",
                r.id,
                verdict.as_str().unwrap_or("")
            ));
        }
    }
    let unwritten: Vec<&TaskResult> = results.iter().filter(|r| !r.unwritten.is_empty()).collect();
    if !unwritten.is_empty() {
        out.push_str("\n## Outputs not written\n\n| id | what and why |\n|---|---|\n");
        for r in unwritten {
            let why = r
                .unwritten
                .join("; ")
                .replace('|', "\\|")
                .replace('\n', " ");
            out.push_str(&format!("| {} | {why} |\n", r.id));
        }
    }
    if !problems.is_empty() {
        out.push_str("\n## Dataset lines that are not tasks\n\n| line | problem |\n|---|---|\n");
        for p in problems {
            out.push_str(&format!(
                "| {} | {} |\n",
                p.line,
                p.error.replace('|', "\\|")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, verdict: Verdict) -> TaskResult {
        TaskResult {
            id: id.into(),
            line: 1,
            agent: None,
            verdict,
            stop_reason: Some("end_turn".into()),
            turns: 1,
            model_calls: 1,
            tool_calls: 0,
            tokens_in: 10,
            tokens_out: 5,
            cost: None,
            wall_s: 0.1,
            error_class: None,
            error: None,
            session_id: None,
            check_exit: Some(0),
            metadata: Value::Null,
            unwritten: Vec::new(),
        }
    }

    #[test]
    fn a_line_cut_by_a_kill_is_dropped_on_resume_and_the_next_result_starts_on_its_own_line() {
        let dir = tempfile::tempdir().expect("dir");
        let mut out = OutputDir::open(dir.path(), false).expect("open");
        out.finish(result("a", Verdict::Pass), None, TrajectoryFormat::OpenAi)
            .expect("a");
        drop(out);
        let path = dir.path().join("results.jsonl");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        file.write_all(br#"{"id":"b","li"#).expect("cut");
        assert!(matches!(
            OutputDir::open(dir.path(), false),
            Err(OutputError::NotEmpty(_))
        ));
        let mut out = OutputDir::open(dir.path(), true).expect("resume");
        assert_eq!(out.finished_ids(), HashSet::from(["a".to_string()]));
        out.finish(result("b", Verdict::Fail), None, TrajectoryFormat::OpenAi)
            .expect("b");
        let text = std::fs::read_to_string(&path).expect("read");
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<TaskResult>(l)
                    .expect("whole line")
                    .id
            })
            .collect();
        assert_eq!(ids, ["a", "b"]);
        out.write_summary(&[], 1.0).expect("summary");
        let summary = std::fs::read_to_string(dir.path().join("summary.md")).expect("summary");
        assert!(
            summary.contains("| pass | 1 |") && summary.contains("| b | fail | check exited 0 |"),
            "{summary}"
        );
    }
}
