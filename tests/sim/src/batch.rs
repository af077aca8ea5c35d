//! The crash suite's `talaria batch` task: a dataset of two tasks (an answer, a tool call)
//! run one at a time, the process killed (or the step refused) at each point it passes, then
//! `--resume` on the same output folder. What the run was told is its `results.jsonl`: every
//! whole line written before the cut stays as it was, each with its trajectory whole (synced
//! before the line); after the resume every task has exactly one line; every task's session
//! is whole in the store; no spool is left.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::crash::{Cut, Landed, SuiteOptions, Variant, at_pass_only, fresh_home};
use crate::home::{Faults, Home};
use crate::invariants::{Problems, store_whole, tail};
use crate::points::{Pass, passes_from, read_trace};

const TASKS: [&str; 2] = ["t0", "t1"];

/// Each task's marker and the replies of its conversation.
fn script(home: &Home) {
    for id in TASKS {
        let marker = format!("[task {id}]");
        let replies = if id == "t1" {
            vec![
                MockReply::tool_call(
                    "w",
                    "write_file",
                    json!({"path": "made.txt", "content": "made\n"}),
                ),
                MockReply::text(&["wrote made.txt"]),
            ]
        } else {
            vec![MockReply::text(&[&format!("the answer of {id}")])]
        };
        // Twice: a task cut by the kill is asked again by the resume.
        let mut twice = replies.clone();
        twice.extend(replies);
        home.mock.script_for_prompt(&marker, twice);
    }
}

/// The dataset, written beside the home; its path and the output folder.
fn dataset(home: &Home) -> anyhow::Result<(PathBuf, PathBuf)> {
    let lines: String = TASKS
        .iter()
        .map(|id| {
            format!(
                "{}\n",
                json!({"id": id, "prompt": format!("[task {id}] go")})
            )
        })
        .collect();
    let path = home.scratch("tasks.jsonl");
    std::fs::write(&path, lines)?;
    Ok((path, home.scratch("out")))
}

/// Runs `talaria batch` to its end (at most a minute); its exit and log.
async fn batch(
    home: &Home,
    faults: &Faults,
    dataset: &Path,
    out: &Path,
    resume: bool,
) -> anyhow::Result<(std::process::ExitStatus, String)> {
    let mut command = tokio::process::Command::new(crate::agent_bin::failpoints_bin());
    command
        .arg("batch")
        .arg(dataset)
        .arg("--out")
        .arg(out)
        .args(["--parallel", "1", "--approve", "once", "--quiet"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(home.env(faults))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if resume {
        command.arg("--resume");
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await??;
    Ok((
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// The whole lines of `results.jsonl` (a line cut by a kill left out), by task id.
fn results(out: &Path) -> (HashMap<String, Value>, Vec<String>) {
    let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap_or_default();
    let mut by_id = HashMap::new();
    let mut doubled = Vec::new();
    for line in text.lines() {
        let Ok(result) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let id = result["id"].as_str().unwrap_or_default().to_string();
        if by_id.insert(id.clone(), result).is_some() {
            doubled.push(id);
        }
    }
    (by_id, doubled)
}

/// What is wrong with the trajectory of task `id`.
fn trajectory_problem(out: &Path, id: &str) -> Option<String> {
    let path = out.join("trajectories").join(format!("{id}.json"));
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => return Some(format!("task {id} has a result and no trajectory: {e}")),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(kept) if kept["task"]["id"] == id => None,
        Ok(kept) => Some(format!("task {id}'s trajectory names {}", kept["task"])),
        Err(e) => Some(format!("task {id}'s trajectory is not whole: {e}")),
    }
}

/// The batch run whole with a trace: every pass it made.
pub async fn traced(options: &SuiteOptions) -> anyhow::Result<Vec<Pass>> {
    let home = fresh_home(options).await?;
    script(&home);
    let (dataset, out) = dataset(&home)?;
    let trace = home.scratch("trace");
    let faults = Faults {
        trace: Some(trace.clone()),
        ..Faults::default()
    };
    let (status, log) = batch(&home, &faults, &dataset, &out, false).await?;
    anyhow::ensure!(
        status.success(),
        "talaria batch fails on a healthy home: {status:?}\n{}",
        tail(&log)
    );
    Ok(passes_from(&read_trace(&trace), 0))
}

/// The batch cut at `pass`, resumed, and checked.
pub async fn cut_at(options: &SuiteOptions, pass: Pass) -> anyhow::Result<Cut> {
    let home = fresh_home(options).await?;
    script(&home);
    let (dataset, out) = dataset(&home)?;
    let trace = home.scratch("trace");
    let mut faults = Faults {
        trace: Some(trace.clone()),
        ..Faults::default()
    };
    match options.variant {
        Variant::Refuse => faults.failpoints = Some(at_pass_only(&pass, "return")),
        Variant::Stall => faults.failpoints = Some(at_pass_only(&pass, crate::crash::STALL)),
        _ => faults.crash_at = Some(pass.clone()),
    }
    let (status, log) = batch(&home, &faults, &dataset, &out, false).await?;
    let mut problems = Problems::default();
    let killed = {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(9)
    };
    let landed = if killed || options.variant != Variant::Kill {
        Landed::AtThePoint
    } else {
        Landed::NotReached
    };
    let (before, _) = results(&out);
    for id in before.keys() {
        if let Some(problem) = trajectory_problem(&out, id) {
            problems.say(format!("before the resume: {problem}"));
        }
    }
    // The resume asks what was cut again: its scripts afresh.
    home.mock.take_scripts();
    script(&home);
    let (status, resumed_log) = batch(&home, &Faults::default(), &dataset, &out, true).await?;
    if !status.success() {
        problems.say(format!(
            "the resume failed: {status:?}\n{}\nthe cut run:\n{}",
            tail(&resumed_log),
            tail(&log)
        ));
    }
    check_resumed(&home, &out, &before, &mut problems).await;
    let kept = (!problems.is_empty()).then(|| home.keep());
    Ok((landed, problems, kept))
}

/// After the resume: each task once, the lines written before the cut as they were, every
/// trajectory whole, every task's session whole in the store, no spool left.
async fn check_resumed(
    home: &Home,
    out: &Path,
    before: &HashMap<String, Value>,
    problems: &mut Problems,
) {
    let (after, doubled) = results(out);
    for id in doubled {
        problems.say(format!("task {id} finished twice"));
    }
    for id in TASKS {
        match after.get(id) {
            None => problems.say(format!("task {id} has no result after the resume")),
            Some(result) => {
                if let Some(problem) = trajectory_problem(out, id) {
                    problems.say(problem);
                }
                if before.get(id).is_some_and(|was| was != result) {
                    problems.say(format!(
                        "task {id}'s result changed: {} -> {result}",
                        before[id]
                    ));
                }
            }
        }
    }
    problems.0.extend(store_whole(home).await.0);
    let sessions: Vec<String> = after
        .values()
        .filter_map(|r| r["session_id"].as_str().map(str::to_string))
        .collect();
    if let Err(e) = crate::invariants::snapshot(home, &sessions).await {
        problems.say(format!(
            "a task's session does not load from the store: {e}"
        ));
    }
    if !home.spooled().is_empty() {
        problems.say(format!("spools are left: {:?}", home.spooled()));
    }
    for refused in home.mock.take_problems() {
        problems.say(format!("the mock refused a request: {refused}"));
    }
}
