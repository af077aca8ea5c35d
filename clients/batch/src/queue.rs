//! A batch spread over machines through PostgreSQL: the dataset is loaded into a table once;
//! workers anywhere take a task with `FOR UPDATE SKIP LOCKED` under a lease they renew while
//! it runs; a task whose worker died is taken again when its lease runs out; only the
//! holder of a task's lease can finish it, so no task is finished twice. Results and
//! trajectories land in the table; [`export`] writes them as a local run would. Nothing but
//! PostgreSQL distributes the work.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::Client;
use serde_json::Value;

use crate::agent::AgentLink;
use crate::outputs::{OutputDir, OutputError, TaskResult, TrajectoryFormat};
use crate::progress::Progress;
use crate::run::{TaskOutcome, TaskPlaces, run_task_paced};
use crate::task::{Dataset, Problem, TaskAt};

/// Opens a connection to the queue's database.
pub type Connect =
    Box<dyn Fn() -> Result<Client, Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

/// What went wrong with the queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("the queue's database: {0}")]
    Database(String),
    #[error("{0}")]
    Output(#[from] OutputError),
    #[error("the batch {0:?} has no tasks in the queue")]
    Empty(String),
}

fn db(error: impl std::fmt::Display) -> QueueError {
    QueueError::Database(error.to_string())
}

const SCHEMA: &str = "
    SELECT pg_advisory_xact_lock(7260185501);
    CREATE TABLE IF NOT EXISTS talaria_batch_tasks (
        batch text NOT NULL,
        id text NOT NULL,
        line integer NOT NULL,
        task jsonb NOT NULL,
        state text NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'running', 'done')),
        worker text,
        lease_until timestamptz,
        attempts integer NOT NULL DEFAULT 0,
        result jsonb,
        trajectory jsonb,
        finished_at timestamptz,
        PRIMARY KEY (batch, id)
    );
    CREATE TABLE IF NOT EXISTS talaria_batch_problems (
        batch text NOT NULL,
        line integer NOT NULL,
        problem jsonb NOT NULL,
        PRIMARY KEY (batch, line)
    );";

/// A queue: one batch in the tables, and a connection made again after a loss.
pub struct Queue {
    connect: Connect,
    client: Mutex<Option<Client>>,
    batch: String,
}

impl Drop for Queue {
    /// The driver blocks when a connection closes, which a runtime's thread may not: there,
    /// the connection is closed on a thread of its own.
    fn drop(&mut self) {
        let held = self
            .client
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(client) = held {
            if tokio::runtime::Handle::try_current().is_ok() {
                let _ = std::thread::Builder::new()
                    .name("talaria-queue-close".into())
                    .spawn(move || drop(client));
            } else {
                drop(client);
            }
        }
    }
}

impl Queue {
    /// The batch `batch` of the queue `connect` reaches; the tables are made if missing.
    pub fn open(connect: Connect, batch: &str) -> Result<Self, QueueError> {
        let queue = Self {
            connect,
            client: Mutex::new(None),
            batch: batch.to_string(),
        };
        queue.with(|client| {
            let mut tx = client.transaction()?;
            tx.batch_execute(SCHEMA)?;
            tx.commit()
        })?;
        Ok(queue)
    }

    /// Runs `work` on the connection; a failed one is dropped (the next call connects).
    fn with<T>(
        &self,
        work: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, QueueError> {
        let mut held = self
            .client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.as_ref().is_none_or(Client::is_closed) {
            *held = Some((self.connect)().map_err(db)?);
        }
        let Some(client) = held.as_mut() else {
            return Err(QueueError::Database("no connection".into()));
        };
        let done = work(client);
        if done.is_err() {
            *held = None;
        }
        done.map_err(db)
    }

    /// Loads a dataset (tasks already there are kept as they are); how many were new.
    pub fn load(&self, dataset: &Dataset) -> Result<u64, QueueError> {
        let rows: Vec<(String, i32, String)> = dataset
            .tasks
            .iter()
            .map(|t| {
                let task = serde_json::to_string(&t.task).unwrap_or_default();
                (
                    t.task.id.clone(),
                    i32::try_from(t.line).unwrap_or(i32::MAX),
                    task,
                )
            })
            .collect();
        let problems: Vec<(i32, String)> = dataset
            .problems
            .iter()
            .map(|p| {
                let line = i32::try_from(p.line).unwrap_or(i32::MAX);
                (line, serde_json::to_string(p).unwrap_or_default())
            })
            .collect();
        self.with(|client| {
            let mut tx = client.transaction()?;
            let mut added = 0;
            for (id, line, task) in &rows {
                added += tx.execute(
                    "INSERT INTO talaria_batch_tasks (batch, id, line, task)
                     VALUES ($1, $2, $3, $4::text::jsonb) ON CONFLICT (batch, id) DO NOTHING",
                    &[&self.batch, id, line, task],
                )?;
            }
            for (line, problem) in &problems {
                tx.execute(
                    "INSERT INTO talaria_batch_problems (batch, line, problem)
                     VALUES ($1, $2, $3::text::jsonb) ON CONFLICT (batch, line) DO NOTHING",
                    &[&self.batch, line, problem],
                )?;
            }
            tx.commit()?;
            Ok(added)
        })
    }

    /// Takes the next task that waits, or whose lease ran out, for `worker`.
    pub fn claim(&self, worker: &str, lease: Duration) -> Result<Option<TaskAt>, QueueError> {
        let row = self.with(|client| {
            client.query_opt(
                "UPDATE talaria_batch_tasks SET state = 'running', worker = $2,
                     lease_until = now() + make_interval(secs => $3), attempts = attempts + 1
                 WHERE (batch, id) = (
                     SELECT batch, id FROM talaria_batch_tasks
                     WHERE batch = $1 AND (state = 'waiting'
                         OR (state = 'running' AND lease_until < now()))
                     ORDER BY line LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING line, task::text",
                &[&self.batch, &worker, &lease.as_secs_f64()],
            )
        })?;
        let Some(row) = row else {
            return Ok(None);
        };
        let line: i32 = row.get(0);
        let task: String = row.get(1);
        let task = serde_json::from_str(&task).map_err(db)?;
        Ok(Some(TaskAt {
            line: usize::try_from(line).unwrap_or(0),
            task,
        }))
    }

    /// Renews `worker`'s lease on task `id`; false when it is no longer the holder.
    pub fn renew(&self, id: &str, worker: &str, lease: Duration) -> Result<bool, QueueError> {
        self.with(|client| {
            client.execute(
                "UPDATE talaria_batch_tasks SET lease_until = now() + make_interval(secs => $4)
                 WHERE batch = $1 AND id = $2 AND worker = $3 AND state = 'running'",
                &[&self.batch, &id, &worker, &lease.as_secs_f64()],
            )
        })
        .map(|rows| rows == 1)
    }

    /// Finishes a task with its outcome, if `worker` still holds it; false when another
    /// worker took it over (the outcome is then dropped: it finishes once, there).
    pub fn finish(&self, worker: &str, outcome: &TaskOutcome) -> Result<bool, QueueError> {
        let result = serde_json::to_string(&outcome.result).unwrap_or_default();
        let trajectory = outcome
            .trajectory
            .as_ref()
            .map(|t| serde_json::to_string(t).unwrap_or_default());
        talaria_util::failpoint::step("batch::queue_result::before");
        let finished = self.with(|client| {
            client.execute(
                "UPDATE talaria_batch_tasks SET state = 'done', result = $4::text::jsonb,
                     trajectory = $5::text::jsonb, finished_at = now(), lease_until = NULL
                 WHERE batch = $1 AND id = $2 AND worker = $3 AND state = 'running'",
                &[
                    &self.batch,
                    &outcome.result.id,
                    &worker,
                    &result,
                    &trajectory,
                ],
            )
        });
        talaria_util::failpoint::step("batch::queue_result::after");
        finished.map(|rows| rows == 1)
    }

    /// Tasks in the batch, and how many are done.
    pub fn counts(&self) -> Result<(i64, i64), QueueError> {
        let row = self.with(|client| {
            client.query_one(
                "SELECT count(*), count(*) FILTER (WHERE state = 'done')
                 FROM talaria_batch_tasks WHERE batch = $1",
                &[&self.batch],
            )
        })?;
        Ok((row.get(0), row.get(1)))
    }

    /// Every finished task's result and trajectory, in dataset order; the bad lines.
    pub fn finished(&self) -> Result<Finished, QueueError> {
        let (rows, problems) = self.with(|client| {
            let rows = client.query(
                "SELECT result::text, trajectory::text FROM talaria_batch_tasks
                 WHERE batch = $1 AND state = 'done' ORDER BY line",
                &[&self.batch],
            )?;
            let problems = client.query(
                "SELECT problem::text FROM talaria_batch_problems WHERE batch = $1 ORDER BY line",
                &[&self.batch],
            )?;
            Ok((rows, problems))
        })?;
        let finished = rows
            .iter()
            .filter_map(|row| {
                let result: TaskResult = serde_json::from_str(row.get::<_, &str>(0)).ok()?;
                let trajectory = row
                    .get::<_, Option<&str>>(1)
                    .and_then(|t| serde_json::from_str(t).ok());
                Some((result, trajectory))
            })
            .collect();
        let problems = problems
            .iter()
            .filter_map(|row| serde_json::from_str(row.get::<_, &str>(0)).ok())
            .collect();
        Ok((finished, problems))
    }
}

/// A queue's finished tasks (result and trajectory, in dataset order) and its bad lines.
pub type Finished = (Vec<(TaskResult, Option<Value>)>, Vec<Problem>);

/// How a worker works.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub parallel: usize,
    pub lease: Duration,
    /// How long to wait for a batch that has no tasks yet.
    pub wait_for_tasks: Duration,
    pub places: TaskPlaces,
    /// This worker's name in the table (host and process).
    pub name: String,
    pub quiet: bool,
}

/// Runs a queue's call off the runtime's threads (the driver blocks).
async fn blocking<T: Send + 'static>(
    queue: &Arc<Queue>,
    call: impl FnOnce(&Queue) -> Result<T, QueueError> + Send + 'static,
) -> Result<T, QueueError> {
    let queue = queue.clone();
    tokio::task::spawn_blocking(move || call(&queue))
        .await
        .map_err(|e| QueueError::Database(e.to_string()))?
}

/// Takes and runs tasks, `parallel` at a time, until every task of the batch is done.
pub async fn work(agent: &AgentLink, queue: Arc<Queue>, options: &WorkerOptions) -> u64 {
    let progress = Arc::new(Mutex::new(Progress::new(0, options.quiet)));
    let slots: Vec<_> = (0..options.parallel.max(1))
        .map(|_| {
            let (agent, queue, options) = (agent.clone(), queue.clone(), options.clone());
            let progress = progress.clone();
            tokio::spawn(async move { slot(&agent, &queue, &options, &progress).await })
        })
        .collect();
    let mut finished = 0;
    for slot in slots {
        finished += slot.await.unwrap_or(0);
    }
    finished
}

/// One slot of a worker: claim, run with the lease renewed, finish; until nothing is left.
async fn slot(
    agent: &AgentLink,
    queue: &Arc<Queue>,
    options: &WorkerOptions,
    progress: &Mutex<Progress>,
) -> u64 {
    let mut finished = 0;
    let started = Instant::now();
    loop {
        let (name, lease) = (options.name.clone(), options.lease);
        match blocking(queue, move |q| q.claim(&name, lease)).await {
            Ok(Some(at)) => {
                let outcome = run_held(agent, queue, options, &at).await;
                if finish_surely(queue, &options.name, &outcome).await {
                    finished += 1;
                    if let Ok(mut shown) = progress.lock() {
                        shown.finished(&outcome.result);
                    }
                }
            }
            Ok(None) => match blocking(queue, Queue::counts).await {
                Ok((total, done)) if total > 0 && total == done => return finished,
                Ok((0, _)) if started.elapsed() > options.wait_for_tasks => return finished,
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            },
            Err(error) => {
                tracing::warn!("the queue: {error}; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        if agent.closed().is_cancelled() {
            return finished;
        }
    }
}

/// Runs a claimed task, renewing its lease a third of the way through each.
async fn run_held(
    agent: &AgentLink,
    queue: &Arc<Queue>,
    options: &WorkerOptions,
    at: &TaskAt,
) -> TaskOutcome {
    // A worker's tasks are not stopped here: a stopped worker's leases run out and its
    // tasks are taken again.
    let never = tokio_util::sync::CancellationToken::new();
    let running = run_task_paced(agent, at, &options.places, &never);
    tokio::pin!(running);
    loop {
        tokio::select! {
            outcome = &mut running => return outcome,
            () = tokio::time::sleep(options.lease / 3) => {
                let (id, name, lease) = (at.task.id.clone(), options.name.clone(), options.lease);
                match blocking(queue, move |q| q.renew(&id, &name, lease)).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(task = %at.task.id, "the lease was lost: another worker has the task"),
                    Err(error) => tracing::warn!(task = %at.task.id, "renewing the lease: {error}"),
                }
            }
        }
    }
}

/// Records a task's outcome, waiting out a database that is away (for up to ten minutes);
/// whether this worker's outcome is the task's.
async fn finish_surely(queue: &Arc<Queue>, worker: &str, outcome: &TaskOutcome) -> bool {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut delay = Duration::from_millis(250);
    loop {
        let (name, kept) = (worker.to_string(), outcome.clone());
        match blocking(queue, move |q| q.finish(&name, &kept)).await {
            Ok(ours) => return ours,
            Err(error) if Instant::now() < deadline => {
                tracing::warn!(task = %outcome.result.id, "finishing: {error}; trying again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(error) => {
                tracing::error!(task = %outcome.result.id, "finishing failed: {error}");
                return false;
            }
        }
    }
}

/// Writes the queue's finished tasks into `dir` as a local run's files.
pub fn export(queue: &Queue, dir: &Path, format: TrajectoryFormat) -> Result<usize, QueueError> {
    let (finished, problems) = queue.finished()?;
    let mut out = OutputDir::open(dir, false)?;
    let count = finished.len();
    for (result, trajectory) in finished {
        out.finish(result, trajectory.as_ref(), format)?;
    }
    out.write_summary(&problems, 0.0)?;
    Ok(count)
}
