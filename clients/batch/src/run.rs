//! Running tasks: one task as one session of the agent (workspace, `setup`, the prompt under
//! its timeout, `check`, the trajectory — written by the agent's provider tap, asked for in
//! `session/new`'s `_meta.talaria.trajectory`), and a dataset `--parallel N` at a time into
//! an output folder, skipping what a resumed folder already holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

use crate::agent::{AgentError, AgentLink};
use crate::outputs::{OutputDir, OutputError, TaskResult, TrajectoryFormat, Verdict};
use crate::pacing;
use crate::progress::Progress;
use crate::task::{Dataset, TaskAt};
use crate::workspace;

/// The class of a turn a rate limit refused (`data.talaria.class`).
const RATE_LIMITED: &str = "rate_limit";

/// How `setup` and `check` may run at most.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);
/// After a timeout's cancel, how long the turn has to end.
const CANCEL_GRACE: Duration = Duration::from_secs(30);
/// When the run is stopped, how long a task's cancelled turn and close have to end (the
/// process is stopping: the agent's own stop bounds the rest).
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Where a task's files go.
#[derive(Debug, Clone)]
pub struct TaskPlaces {
    /// Throwaway workspaces and trajectories being written.
    pub work: PathBuf,
    /// Cassettes recorded into `record/ID/`.
    pub record: Option<PathBuf>,
    /// Cassettes replayed from `replay/ID/`.
    pub replay: Option<PathBuf>,
}

/// A finished task: its result line and its trajectory (OpenAI chat format).
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    pub result: TaskResult,
    pub trajectory: Option<Value>,
    /// A rate limit refused its turn; `Some(at)` when the agent said when it resets.
    pub rate_limited: Option<Option<SystemTime>>,
}

impl TaskOutcome {
    /// The agent went away before the task ended: it did not finish, and runs again.
    pub fn agent_gone(&self) -> bool {
        self.result.error_class.as_deref() == Some("agent_gone")
    }
}

/// How the turn ended.
enum TurnEnd {
    Answered(Value),
    TimedOut,
    Failed(AgentError),
}

fn blank_result(at: &TaskAt) -> TaskResult {
    TaskResult {
        id: at.task.id.clone(),
        line: at.line,
        agent: at.task.agent.clone(),
        verdict: Verdict::Error,
        stop_reason: None,
        turns: 0,
        model_calls: 0,
        tool_calls: 0,
        tokens_in: 0,
        tokens_out: 0,
        cost: None,
        wall_s: 0.0,
        error_class: None,
        error: None,
        session_id: None,
        check_exit: None,
        metadata: at.task.metadata.clone(),
        unwritten: Vec::new(),
    }
}

fn failed(result: &mut TaskResult, agent: &AgentLink, class: &str, error: String) {
    result.verdict = Verdict::Error;
    let gone = agent.closed().is_cancelled();
    result.error_class = Some(if gone { "agent_gone" } else { class }.to_string());
    result.error = Some(error);
}

/// Runs one task as one session of `agent`; when `stop` fires (the run is stopped) its turn
/// is cancelled and the task ends [`Verdict::Interrupted`].
pub async fn run_task(
    agent: &AgentLink,
    at: &TaskAt,
    places: &TaskPlaces,
    stop: &tokio_util::sync::CancellationToken,
) -> TaskOutcome {
    let started = Instant::now();
    let mut result = blank_result(at);
    let task = at.task.clone();
    let work = places.work.clone();
    let prepared = tokio::task::spawn_blocking(move || workspace::prepare(&task, &work)).await;
    let workspace = match prepared {
        Ok(Ok(workspace)) => workspace,
        Ok(Err(error)) => {
            failed(&mut result, agent, "workspace", error.to_string());
            return finish(result, None, started);
        }
        Err(error) => {
            failed(&mut result, agent, "workspace", error.to_string());
            return finish(result, None, started);
        }
    };
    let trajectory_path = places.work.join(format!("{}.trajectory.json", at.task.id));
    let session = match open_session(agent, at, workspace.path(), places, &trajectory_path).await {
        Ok(session) => session,
        Err(error) => {
            let class = error.class.clone().unwrap_or_else(|| "session".into());
            failed(&mut result, agent, &class, error.to_string());
            return finish(result, None, started);
        }
    };
    result.session_id = Some(session.clone());
    let (end, stopped) = tokio::select! {
        end = run_session(agent, at, &session, &mut result) => (end, false),
        () = stop.cancelled() => (SessionEnd::default(), true),
    };
    let close = agent.call("session/close", json!({"sessionId": session}));
    if stopped {
        interrupted(agent, &session, &mut result).await;
        let _ = tokio::time::timeout(STOP_GRACE, close).await;
    } else {
        let _ = close.await;
    }
    let tally = agent.tally(&session);
    agent.forget(&session);
    result.tool_calls = tally.tool_calls;
    result.cost = tally.cost;
    let read = tokio::task::spawn_blocking(move || read_trajectory(&trajectory_path))
        .await
        .unwrap_or_else(|e| Err(NoTrajectory::Stopped(e.to_string())));
    let trajectory = match read {
        Ok(trajectory) => {
            count_from(&trajectory, &mut result);
            Some(trajectory)
        }
        // A turn that was answered called the model: its trajectory must be there.
        Err(why) if end.answered => {
            result.unwritten.push(format!("trajectory: {why}"));
            None
        }
        Err(_) => None,
    };
    // The throwaway workspace is removed off the runtime's threads too.
    let _ = tokio::task::spawn_blocking(move || drop(workspace)).await;
    TaskOutcome {
        rate_limited: end.rate_limited,
        ..finish(result, trajectory, started)
    }
}

/// Runs one task once the run's pacing lets it start ([`crate::pacing`]); a task a rate
/// limit refused runs again after the limit resets (at most [`pacing::MAX_RERUNS`] times),
/// so the limit slows the batch down instead of failing its tasks.
pub async fn run_task_paced(
    agent: &AgentLink,
    at: &TaskAt,
    places: &TaskPlaces,
    stop: &tokio_util::sync::CancellationToken,
) -> TaskOutcome {
    let mut reruns = 0;
    loop {
        agent.pacer().ready().await;
        let outcome = run_task(agent, at, places, stop).await;
        let Some(resets_at) = outcome.rate_limited else {
            return outcome;
        };
        if reruns >= pacing::MAX_RERUNS || agent.closed().is_cancelled() || stop.is_cancelled() {
            return outcome;
        }
        reruns += 1;
        let until = resets_at.unwrap_or_else(|| SystemTime::now() + pacing::UNKNOWN_RESET_WAIT);
        agent.pacer().refused(until);
        tracing::info!(task = %at.task.id, reruns, "a rate limit refused the task; it runs again after the reset");
    }
}

/// The run was stopped while the task ran: its turn is cancelled (the agent records it as
/// interrupted) and the task is marked so; `--resume` runs it again.
async fn interrupted(agent: &AgentLink, session: &str, result: &mut TaskResult) {
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await;
    result.verdict = Verdict::Interrupted;
    result.stop_reason = Some("cancelled".into());
    result.error_class = Some("interrupted".into());
    result.error = Some(
        "the run was stopped while the task ran; its turn was cancelled (--resume runs it \
         again)"
            .into(),
    );
}

/// How a task's session ended, for [`run_task`].
#[derive(Default)]
struct SessionEnd {
    /// The prompt was answered (the model was called: its trajectory must be there).
    answered: bool,
    /// A rate limit refused the turn (`Some`, with when the limit resets when the agent said).
    rate_limited: Option<Option<SystemTime>>,
}

fn finish(mut result: TaskResult, trajectory: Option<Value>, started: Instant) -> TaskOutcome {
    result.wall_s = started.elapsed().as_secs_f64();
    let trajectory = trajectory.map(|mut t| {
        t["task"] = json!({"id": result.id, "verdict": result.verdict,
                           "stop_reason": result.stop_reason, "metadata": result.metadata});
        t
    });
    TaskOutcome {
        result,
        trajectory,
        rate_limited: None,
    }
}

/// `setup`, the prompt, `check`: the verdict and the turn's figures into `result`; how the
/// session ended.
async fn run_session(
    agent: &AgentLink,
    at: &TaskAt,
    session: &str,
    result: &mut TaskResult,
) -> SessionEnd {
    let task = &at.task;
    if let Some(setup) = &task.setup {
        match run_command(agent, session, setup).await {
            Ok((Some(0), _)) => {}
            Ok((exit, output)) => {
                result.verdict = Verdict::SetupFailed;
                result.error = Some(format!("setup exited {exit:?}: {}", tail(&output)));
                return SessionEnd::default();
            }
            Err(error) => {
                failed(result, agent, "setup", error.to_string());
                return SessionEnd::default();
            }
        }
    }
    match prompt(agent, at, session).await {
        TurnEnd::Answered(answer) => {
            result.stop_reason = answer["stopReason"].as_str().map(str::to_string);
            result.tokens_in = answer["usage"]["inputTokens"].as_u64().unwrap_or(0);
            result.tokens_out = answer["usage"]["outputTokens"].as_u64().unwrap_or(0);
            result.verdict = Verdict::Done;
        }
        TurnEnd::TimedOut => {
            result.verdict = Verdict::Timeout;
            result.stop_reason = Some("cancelled".into());
            return SessionEnd::default();
        }
        TurnEnd::Failed(error) => {
            let class = error.class.clone().unwrap_or_else(|| "agent".into());
            let rate_limited = (class == RATE_LIMITED).then_some(error.resets_at);
            failed(result, agent, &class, error.message);
            return SessionEnd {
                answered: false,
                rate_limited,
            };
        }
    }
    if let Some(check) = &task.check {
        match run_command(agent, session, check).await {
            Ok((exit, output)) => {
                result.check_exit = exit;
                result.verdict = if exit == Some(0) {
                    Verdict::Pass
                } else {
                    result.error = Some(format!("check exited {exit:?}: {}", tail(&output)));
                    Verdict::Fail
                };
            }
            Err(error) => failed(result, agent, "check", error.to_string()),
        }
    }
    SessionEnd {
        answered: true,
        rate_limited: None,
    }
}

/// The last few hundred bytes of a command's output.
fn tail(output: &str) -> String {
    let start = output.len().saturating_sub(400);
    let start = (start..output.len())
        .find(|i| output.is_char_boundary(*i))
        .unwrap_or(output.len());
    output[start..].trim().to_string()
}

async fn open_session(
    agent: &AgentLink,
    at: &TaskAt,
    cwd: &Path,
    places: &TaskPlaces,
    trajectory: &Path,
) -> Result<String, AgentError> {
    let task = &at.task;
    let mut taps = json!({"trajectory": trajectory});
    if let Some(dir) = &places.record {
        taps["record"] = json!(dir.join(&task.id));
    }
    if let Some(dir) = &places.replay {
        taps["replay"] = json!(dir.join(&task.id));
    }
    if let Some(most) = task.max_turns {
        taps["maxTurnRequests"] = json!(most);
    }
    let mut params = json!({"cwd": cwd, "mcpServers": [], "_meta": {"talaria": taps}});
    if let Some(text) = &task.system_prompt {
        params["systemPrompt"] =
            json!({"mode": "append", "content": [{"type": "text", "text": text}]});
    }
    let answer = agent.call("session/new", params).await?;
    let session = answer["sessionId"].as_str().unwrap_or_default().to_string();
    if let Some(mode) = &task.mode {
        agent
            .call(
                "session/set_mode",
                json!({"sessionId": session, "modeId": mode}),
            )
            .await?;
    }
    if let Some(model) = &task.model {
        let option = json!({"sessionId": session, "configId": "model", "value": model});
        agent.call("session/set_config_option", option).await?;
    }
    Ok(session)
}

/// A command in the session's sandbox: its exit code and output.
async fn run_command(
    agent: &AgentLink,
    session: &str,
    command: &str,
) -> Result<(Option<i32>, String), AgentError> {
    let timeout_ms = COMMAND_TIMEOUT.as_millis() as u64;
    let params = json!({"sessionId": session, "command": command, "timeoutMs": timeout_ms});
    let answer = agent.call("_talaria/run_command", params).await?;
    let exit = answer["exitCode"]
        .as_i64()
        .and_then(|c| i32::try_from(c).ok());
    let exit = if answer["timedOut"] == true {
        None
    } else {
        exit
    };
    Ok((exit, answer["output"].as_str().unwrap_or("").to_string()))
}

/// The prompt, cancelled when the task's timeout passes.
async fn prompt(agent: &AgentLink, at: &TaskAt, session: &str) -> TurnEnd {
    // Another agent runs the task as the session's turn (`/agent`, inside the agent's walls).
    let prompt = match &at.task.agent {
        Some(name) => vec![json!({"type": "text",
            "text": format!("/agent {name} {}", at.task.prompt.text())})],
        None => at.task.prompt.blocks(),
    };
    let params = json!({"sessionId": session, "prompt": prompt});
    let turn = agent.call("session/prompt", params);
    tokio::pin!(turn);
    let limit = at
        .task
        .timeout_s
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::MAX);
    let ended = match tokio::time::timeout(limit, &mut turn).await {
        Ok(ended) => ended,
        Err(_) => {
            agent
                .notify("session/cancel", json!({"sessionId": session}))
                .await;
            let _ = tokio::time::timeout(CANCEL_GRACE, &mut turn).await;
            return TurnEnd::TimedOut;
        }
    };
    match ended {
        Ok(answer) => TurnEnd::Answered(answer),
        Err(error) => TurnEnd::Failed(error),
    }
}

/// The most a trajectory the agent kept may hold.
const MAX_TRAJECTORY_BYTES: u64 = 1 << 30;

/// Why a task's trajectory is not there to copy.
#[derive(Debug, thiserror::Error)]
enum NoTrajectory {
    #[error("the agent wrote none to {0} (its log says why)")]
    NotWritten(String),
    #[error("{0}")]
    Unreadable(talaria_files::FileError),
    #[error("{0} is not JSON: {1}")]
    NotJson(String, serde_json::Error),
    #[error("reading it stopped: {0}")]
    Stopped(String),
}

/// The trajectory the agent kept (the file is removed), read through the one way to files:
/// a link a task's command planted at its name is neither followed nor read; else why
/// there is none.
fn read_trajectory(path: &Path) -> Result<Value, NoTrajectory> {
    let shown = || path.display().to_string();
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(NoTrajectory::NotWritten(shown()));
    };
    let missing = |e| match e {
        talaria_files::FileError::NotFound(_) => NoTrajectory::NotWritten(shown()),
        other => NoTrajectory::Unreadable(other),
    };
    let folder = talaria_files::Root::open(folder, std::sync::Arc::new(talaria_files::Unguarded))
        .map_err(missing)?;
    let read = folder.as_dir().read(name, MAX_TRAJECTORY_BYTES);
    let _ = folder.as_dir().remove(name);
    let bytes = read.map_err(missing)?;
    serde_json::from_slice(&bytes).map_err(|e| NoTrajectory::NotJson(shown(), e))
}

/// The trajectory's figures into `result`.
fn count_from(trajectory: &Value, result: &mut TaskResult) {
    let stats = &trajectory["stats"];
    result.model_calls = stats["model_calls"].as_u64().unwrap_or(0);
    result.turns = trajectory["messages"].as_array().map_or(0, |m| {
        m.iter().filter(|m| m["role"] == "assistant").count() as u64
    });
    if result.tokens_in == 0 && result.tokens_out == 0 {
        result.tokens_in = stats["input_tokens"].as_u64().unwrap_or(0);
        result.tokens_out = stats["output_tokens"].as_u64().unwrap_or(0);
    }
}

/// What a local run is asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub parallel: usize,
    pub format: TrajectoryFormat,
    pub places: TaskPlaces,
    /// No progress on stderr.
    pub quiet: bool,
    /// Stops the run: no task starts after it, the running ones end interrupted.
    pub stop: tokio_util::sync::CancellationToken,
}

/// Why a batch stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Output(#[from] OutputError),
    #[error("the agent ended with {0} tasks unfinished: run again with --resume")]
    AgentGone(usize),
    #[error(
        "stopped: {0} running tasks were interrupted (marked in results.jsonl), the rest did \
         not start; run again with --resume"
    )]
    Stopped(usize),
}

/// Runs `dataset`'s tasks not yet in `out`, `parallel` at a time; every result is in `out`
/// (and `summary.md` written) when this returns it. The folder is written off the runtime's
/// threads, by a writer of its own.
pub async fn run_dataset(
    agent: &AgentLink,
    dataset: &Dataset,
    out: OutputDir,
    options: &RunOptions,
) -> Result<OutputDir, RunError> {
    let started = Instant::now();
    let finished = out.finished_ids();
    let todo: Vec<TaskAt> = dataset
        .tasks
        .iter()
        .filter(|t| !finished.contains(&t.task.id))
        .cloned()
        .collect();
    let mut progress = Progress::new(todo.len(), options.quiet);
    agent.pacer().quiet(options.quiet);
    // Unbounded: at most one outcome and one start per task of the batch (its file).
    let (outcomes, mut received) = mpsc::unbounded_channel();
    let (starts, mut started_one) = mpsc::unbounded_channel();
    let permits = Arc::new(Semaphore::new(options.parallel.max(1)));
    for at in todo {
        let (agent, places, permits) = (agent.clone(), options.places.clone(), permits.clone());
        let (outcomes, starts, stop) = (outcomes.clone(), starts.clone(), options.stop.clone());
        tokio::spawn(async move {
            // A task that had not started when the run was stopped does not start.
            let permit = tokio::select! {
                permit = permits.acquire_owned() => permit,
                () = stop.cancelled() => return,
            };
            let Ok(_permit) = permit else {
                return;
            };
            if stop.is_cancelled() {
                return;
            }
            let _ = starts.send(());
            let _ = outcomes.send(run_task_paced(&agent, &at, &places, &stop).await);
        });
    }
    drop((outcomes, starts));
    let (to_writer, writer) = writer(out, dataset.problems.clone(), options.format, started);
    let mut gone = 0;
    let mut interrupted = 0;
    loop {
        tokio::select! {
            Some(()) = started_one.recv() => progress.started_one(),
            outcome = received.recv() => {
                let Some(outcome) = outcome else { break };
                if outcome.agent_gone() {
                    gone += 1;
                    continue;
                }
                if outcome.result.verdict == Verdict::Interrupted {
                    interrupted += 1;
                }
                progress.finished(&outcome.result);
                if to_writer.send(outcome).is_err() {
                    break;
                }
            }
        }
    }
    progress.end();
    drop(to_writer);
    let out = writer
        .await
        .map_err(|e| RunError::Output(OutputError::Writer(e.to_string())))??;
    if gone > 0 {
        return Err(RunError::AgentGone(gone));
    }
    if options.stop.is_cancelled() {
        return Err(RunError::Stopped(interrupted));
    }
    Ok(out)
}

type Written = tokio::task::JoinHandle<Result<OutputDir, OutputError>>;

/// The folder's writer: each outcome written (and synced) as it comes, then the summary.
fn writer(
    mut out: OutputDir,
    problems: Vec<crate::task::Problem>,
    format: TrajectoryFormat,
    started: Instant,
) -> (std::sync::mpsc::Sender<TaskOutcome>, Written) {
    // Unbounded: one outcome per task, each a task's whole run apart.
    let (to_writer, outcomes) = std::sync::mpsc::channel::<TaskOutcome>();
    let written = tokio::task::spawn_blocking(move || {
        for outcome in outcomes {
            out.finish(outcome.result, outcome.trajectory.as_ref(), format)?;
        }
        out.write_summary(&problems, started.elapsed().as_secs_f64())?;
        Ok(out)
    });
    (to_writer, written)
}
