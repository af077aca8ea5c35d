//! Batch runs from a Rust harness, in its own process: the `talaria-batch` runner (the one
//! `talaria batch` uses) driving an agent started as a child (`talaria acp`, or any ACP
//! agent that offers `_talaria/run_command` for `setup` and `check`).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
pub use talaria_batch::{
    Approve, Dataset, OutputDir, RunOptions, TaskPlaces, TaskResult, TrajectoryFormat, Verdict,
};
use tokio::process::Command;

/// What to run and where the outputs go.
pub struct BatchRun<'a> {
    /// The agent's program and arguments (`talaria`, `["acp"]`).
    pub agent: &'a Path,
    pub args: &'a [&'a str],
    /// Its environment: exactly these variables (plus `PATH`).
    pub env: &'a [(String, String)],
    /// The dataset's text and the folder its relative paths start from.
    pub tasks: &'a str,
    pub base: &'a Path,
    /// The output folder (results.jsonl, trajectories/, summary.md).
    pub out: &'a Path,
    pub parallel: usize,
    pub approve: Approve,
    pub resume: bool,
}

/// Runs the dataset against a child agent; every finished task's result (those of a resumed
/// folder included). The agent ends with the run.
pub async fn run(run: BatchRun<'_>) -> anyhow::Result<Vec<TaskResult>> {
    let dataset = talaria_batch::task::parse(run.tasks, run.base);
    let out = OutputDir::open(run.out, run.resume)?;
    let mut child = Command::new(run.agent)
        .args(run.args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(run.env.iter().cloned())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawning {}", run.agent.display()))?;
    let (to_agent, from_agent) = (
        child.stdin.take().context("no stdin")?,
        child.stdout.take().context("no stdout")?,
    );
    let agent = talaria_batch::AgentLink::connect(from_agent, to_agent, run.approve).await?;
    let out_dir = std::path::absolute(run.out)?;
    let options = RunOptions {
        parallel: run.parallel.max(1),
        format: TrajectoryFormat::OpenAi,
        places: TaskPlaces {
            work: out_dir.join(".work"),
            record: None,
            replay: None,
        },
        quiet: true,
        // A harness's run ends with its dataset (its own process decides about signals).
        stop: Default::default(),
    };
    let out = talaria_batch::run_dataset(&agent, &dataset, out, &options).await?;
    drop(agent);
    let _ = child.start_kill();
    let _ = child.wait().await;
    Ok(out.results().to_vec())
}

/// The trajectory a run wrote for `id`.
pub fn trajectory(out: &Path, id: &str) -> anyhow::Result<serde_json::Value> {
    let path: PathBuf = out.join("trajectories").join(format!("{id}.json"));
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(serde_json::from_str(&text)?)
}
