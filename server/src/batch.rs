//! `talaria batch`: a dataset of tasks run as sessions of an agent in this process, a client
//! of it over an in-process ACP connection like any other (`talaria-batch` is the runner;
//! the engine does not know a batch from an editor). With `--queue`, the tasks go through
//! PostgreSQL to workers on any number of machines.

use std::path::PathBuf;

use talaria_batch::{AgentLink, Approve, OutputDir, RunOptions, TaskPlaces, TrajectoryFormat};
use tokio_util::sync::CancellationToken;

/// `talaria batch`'s options.
#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// The dataset: JSONL, one task a line (see README: Batch runs). With --queue, loaded into
    /// the queue.
    #[arg(value_name = "TASKS.jsonl")]
    tasks: Option<PathBuf>,
    /// The output folder: results.jsonl, trajectories/, summary.md.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Tasks at once (default: as many as a local model server serves at once, when it says;
    /// else twice the cores; between 1 and 16).
    #[arg(long, value_name = "N")]
    parallel: Option<usize>,
    /// How permission questions are answered: reject, once or always.
    #[arg(long, value_name = "POLICY", default_value = "reject")]
    approve: Approve,
    /// Go on with the results already in --out (tasks there are not run again).
    #[arg(long)]
    resume: bool,
    /// Record each task's model calls into DIR/cassettes/ID/.
    #[arg(long, conflicts_with = "replay")]
    record: bool,
    /// Serve each task's model calls from FROM/cassettes/ID/ (a recorded run's folder): no
    /// model is needed.
    #[arg(long, value_name = "FROM")]
    replay: Option<PathBuf>,
    /// Trajectories as OpenAI chat messages (openai) or ShareGPT conversations (sharegpt).
    #[arg(long, value_name = "FORMAT", default_value = "openai")]
    format: TrajectoryFormat,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
    /// A PostgreSQL queue (postgres://…): with TASKS, load them; with --worker, take tasks
    /// from it; with --export DIR, write its results as a local run would.
    #[arg(long, value_name = "URL")]
    queue: Option<String>,
    /// Take tasks from --queue until none is left.
    #[arg(long, requires = "queue")]
    worker: bool,
    /// Write the queue's results, trajectories and summary into DIR.
    #[arg(long, value_name = "DIR", requires = "queue")]
    export: Option<PathBuf>,
    /// A worker's lease on a task, in seconds: renewed a third of the way through while the
    /// task runs; a worker that dies has its task taken again when it runs out.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    lease: f64,
    /// The batch's name in the queue (one queue holds many).
    #[arg(long, value_name = "NAME", default_value = "default")]
    batch: String,
}

/// The default `--parallel`: twice the cores, between 2 and 16.
fn default_parallel() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    (cores * 2).clamp(2, 16)
}

/// Tasks at once: `--parallel`, else as many as the configured local model server serves at
/// once (llama.cpp's slots: more would only wait at the server, their time counted against
/// their timeouts), else [`default_parallel`].
async fn parallel_for(args: &BatchArgs) -> usize {
    if let Some(parallel) = args.parallel {
        return parallel.max(1);
    }
    match local_server_slots().await {
        Some(slots) => {
            if !args.quiet {
                eprintln!(
                    "talaria batch: the local model server serves {slots} requests at once: --parallel {slots}"
                );
            }
            slots
        }
        None => default_parallel(),
    }
}

/// What the configured model server says it serves at once, when it is on this machine or a
/// private network and says (between 1 and 16).
async fn local_server_slots() -> Option<usize> {
    let config = tokio::task::spawn_blocking(talaria_engine::Config::load)
        .await
        .ok()?
        .ok()?;
    let report = crate::sessions::local_server_report(&config, "batch").await;
    let slots = usize::try_from(report.slots?).unwrap_or(usize::MAX);
    Some(slots.clamp(1, 16))
}

/// Runs the batch; the process's exit code (2: bad usage or input, 1: the run stopped, 3:
/// every task finished but some outputs could not be written).
pub async fn run(args: BatchArgs) -> std::process::ExitCode {
    // The in-process agent's dispatch loop is not `Send`: it runs on this task set.
    let local = tokio::task::LocalSet::new();
    match local.run_until(dispatch(args)).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(BatchFailure::Unwritten(why)) => {
            eprintln!("talaria batch: {why}");
            std::process::ExitCode::from(3)
        }
        Err(BatchFailure::Usage(why)) => {
            eprintln!("talaria batch: {why}");
            std::process::ExitCode::from(2)
        }
        Err(BatchFailure::Run(why)) => {
            eprintln!("talaria batch: {why}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Why a batch did not run to its end.
#[derive(Debug, thiserror::Error)]
enum BatchFailure {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Run(String),
    /// The run ended, but some of its outputs could not be written.
    #[error("{0}")]
    Unwritten(String),
}

async fn dispatch(args: BatchArgs) -> Result<(), BatchFailure> {
    if let Some(url) = args.queue.clone() {
        return queue::dispatch(args, url).await;
    }
    let (Some(tasks), Some(out)) = (&args.tasks, &args.out) else {
        return Err(BatchFailure::Usage(
            "give the dataset and --out DIR (or --queue URL)".into(),
        ));
    };
    let (tasks, folder, resume) = (tasks.clone(), out.clone(), args.resume);
    let (dataset, output) = tokio::task::spawn_blocking(move || {
        let dataset = read_dataset(&tasks)?;
        let output =
            OutputDir::open(&folder, resume).map_err(|e| BatchFailure::Usage(e.to_string()))?;
        Ok::<_, BatchFailure>((dataset, output))
    })
    .await
    .map_err(|e| BatchFailure::Run(e.to_string()))??;
    let options = run_options(&args, out, parallel_for(&args).await);
    let agent = start_agent(args.approve).await?;
    stop_on_signals(options.stop.clone());
    let ran = talaria_batch::run_dataset(&agent, &dataset, output, &options).await;
    let output = ran.map_err(|e| BatchFailure::Run(e.to_string()))?;
    let failed = output
        .results()
        .iter()
        .filter(|r| r.verdict.failed())
        .count();
    eprintln!(
        "talaria batch: {} tasks finished ({failed} did not pass), {} bad lines; see {}",
        output.results().len(),
        dataset.problems.len(),
        out.join("summary.md").display()
    );
    // The throwaway workspaces' folder, once empty.
    let work = options.places.work;
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir(work)).await;
    match output.unwritten() {
        0 => Ok(()),
        tasks => Err(BatchFailure::Unwritten(format!(
            "{tasks} tasks have outputs that could not be written: see \"Outputs not written\" in {}",
            out.join("summary.md").display()
        ))),
    }
}

/// SIGTERM, SIGINT or SIGHUP stops the run: `stop` fires (the running tasks end interrupted,
/// marked in `results.jsonl`, and the summary is written); a second one ends the process at
/// once (code 130).
fn stop_on_signals(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let kinds = [
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::interrupt(), "SIGINT"),
        (SignalKind::hangup(), "SIGHUP"),
    ];
    for (kind, name) in kinds {
        let Ok(mut signals) = signal(kind) else {
            tracing::warn!("{name} cannot be handled: it ends the batch without marks");
            continue;
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            signals.recv().await;
            if stop.is_cancelled() {
                eprintln!("talaria batch: {name} again: exiting now");
                std::process::exit(130);
            }
            eprintln!(
                "talaria batch: {name}: the running tasks are interrupted and marked; a second \
                 signal exits at once"
            );
            stop.cancel();
            signals.recv().await;
            eprintln!("talaria batch: {name} again: exiting now");
            std::process::exit(130);
        });
    }
}

fn read_dataset(path: &std::path::Path) -> Result<talaria_batch::Dataset, BatchFailure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BatchFailure::Usage(format!("{}: {e}", path.display())))?;
    let base = path
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let dataset = talaria_batch::task::parse(&text, &base);
    for problem in &dataset.problems {
        eprintln!(
            "talaria batch: {} line {}: {}",
            path.display(),
            problem.line,
            problem.error
        );
    }
    Ok(dataset)
}

fn run_options(args: &BatchArgs, out: &std::path::Path, parallel: usize) -> RunOptions {
    let out = std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
    RunOptions {
        parallel,
        format: args.format,
        places: TaskPlaces {
            work: out.join(".work"),
            record: args.record.then(|| out.join("cassettes")),
            replay: args.replay.as_ref().map(|from| {
                std::path::absolute(from)
                    .unwrap_or_else(|_| from.clone())
                    .join("cassettes")
            }),
        },
        quiet: args.quiet,
        stop: CancellationToken::new(),
    }
}

/// The agent of this process, its ACP connection served on the local task set.
async fn start_agent(approve: Approve) -> Result<AgentLink, BatchFailure> {
    crate::acp::prepare_process();
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (agent_in, agent_out) = tokio::io::split(theirs);
    let (from_agent, to_agent) = tokio::io::split(ours);
    tokio::task::spawn_local(async move {
        let shared = crate::sessions::ProcessShared::single_client();
        let stop = CancellationToken::new();
        if let Err(error) =
            crate::acp::serve_connection_on_streams(agent_in, agent_out, stop, shared).await
        {
            tracing::error!("the batch's agent failed: {error:#}");
        }
    });
    AgentLink::connect(from_agent, to_agent, approve)
        .await
        .map_err(|e| BatchFailure::Run(format!("the agent did not start: {e}")))
}

#[cfg(feature = "postgres")]
mod queue {
    use std::sync::Arc;
    use std::time::Duration;

    use talaria_batch::queue::{self, Queue, WorkerOptions};

    use super::{BatchArgs, BatchFailure};

    fn failed(error: impl std::fmt::Display) -> BatchFailure {
        BatchFailure::Run(error.to_string())
    }

    /// `--queue URL` with the dataset (load), `--export DIR` and/or `--worker`.
    pub(super) async fn dispatch(args: BatchArgs, url: String) -> Result<(), BatchFailure> {
        if args.tasks.is_none() && args.export.is_none() && !args.worker {
            return Err(BatchFailure::Usage(
                "with --queue, give the dataset to load, --worker, or --export DIR".into(),
            ));
        }
        let name = args.batch.clone();
        let queue = tokio::task::spawn_blocking(move || {
            let connect: queue::Connect = Box::new(move || {
                talaria_store::PgStore::client(&url).map_err(|e| Box::new(e) as _)
            });
            Queue::open(connect, &name)
        })
        .await
        .map_err(failed)?
        .map_err(failed)?;
        let queue = Arc::new(queue);
        if let Some(tasks) = args.tasks.clone() {
            let loading = queue.clone();
            let added = tokio::task::spawn_blocking(move || {
                let dataset = super::read_dataset(&tasks)?;
                loading.load(&dataset).map_err(failed)
            })
            .await
            .map_err(failed)??;
            eprintln!(
                "talaria batch: {added} new tasks in the queue's batch {:?}",
                args.batch
            );
        }
        if args.worker {
            work(&args, queue.clone()).await?;
        }
        if let Some(dir) = args.export.clone() {
            let format = args.format;
            let count = tokio::task::spawn_blocking(move || queue::export(&queue, &dir, format))
                .await
                .map_err(failed)?
                .map_err(failed)?;
            eprintln!("talaria batch: {count} finished tasks exported");
        }
        Ok(())
    }

    /// This machine's name, for the worker's name in the queue.
    fn host_name() -> String {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    }

    async fn work(args: &BatchArgs, queue: Arc<Queue>) -> Result<(), BatchFailure> {
        let local = match &args.out {
            Some(out) => out.clone(),
            None => std::env::temp_dir().join(format!("talaria-batch-{}", std::process::id())),
        };
        let options = super::run_options(args, &local, super::parallel_for(args).await);
        let worker = WorkerOptions {
            parallel: options.parallel,
            lease: Duration::from_secs_f64(args.lease.max(1.0)),
            wait_for_tasks: Duration::from_secs(600),
            places: options.places,
            name: format!("{} pid {}", host_name(), std::process::id()),
            quiet: args.quiet,
        };
        let agent = super::start_agent(args.approve).await?;
        let finished = queue::work(&agent, queue, &worker).await;
        if args.out.is_none() {
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(local)).await;
        }
        eprintln!("talaria batch: this worker finished {finished} tasks");
        Ok(())
    }
}

#[cfg(not(feature = "postgres"))]
mod queue {
    use super::{BatchArgs, BatchFailure};

    /// This build has no PostgreSQL support.
    pub(super) async fn dispatch(_args: BatchArgs, _url: String) -> Result<(), BatchFailure> {
        Err(BatchFailure::Usage(
            "--queue needs a build with PostgreSQL support (the `postgres` feature)".into(),
        ))
    }
}
