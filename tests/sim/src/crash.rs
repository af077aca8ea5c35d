//! The crash suite's runner: an operation is run once on a failpoints build with a trace to
//! list the points it passes, then once per pass (every pass of a point passed a few times;
//! the first, second, middle and last of one passed often), each on a home of its own, cut
//! there as the variant says; then the home is restarted and the invariants checked.

use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::client::Client;
use crate::home::{Faults, Home, StoreKind, initialize_params};
use crate::invariants::{Expected, Problems, Replay, check_after_restart, has_rewind, tail};
use crate::operations::{CONFIG, Marks, Operation};
use crate::points::{Pass, chosen, names, passes_from, read_trace};

/// A stalled step: past the 1.5 s an answer waits for the store.
pub const STALL: &str = "sleep(1600)";

/// What happens at the point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// SIGKILL there (as `kill -9`, a crash, the machine's OOM killer).
    Kill,
    /// The step fails there as on a full disk or a store that refuses (`return`, at the
    /// `before` points: those of the steps that can fail so); the process goes on and ends at
    /// end of input.
    Refuse,
    /// The step stalls there for 1.6 s ([`STALL`]: a store held by another program, past an
    /// answer's deadline); the process ends at end of input.
    Stall,
    /// Another program holds SQLite's write lock through the operation, a second agent runs
    /// on the same home, and the first is killed at the point; the second then loads and
    /// answers in the first one's sessions before the restart (the spool over a live
    /// sibling).
    HeldWithSibling,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Kill => "kill",
            Variant::Refuse => "refuse",
            Variant::Stall => "stall",
            Variant::HeldWithSibling => "held-with-sibling",
        }
    }
}

/// Where a run's fault landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// At the pass asked for, inside the operation.
    AtThePoint,
    /// Nowhere: the process never passed the point that many times (a step that depends on
    /// timing); it was killed after the operation instead.
    NotReached,
}

/// One run's result.
#[derive(Debug)]
pub struct RunOutcome {
    pub pass: Pass,
    pub landed: Landed,
    pub problems: Problems,
    pub took: Duration,
    /// The home, kept when a problem was found.
    pub kept: Option<std::path::PathBuf>,
}

/// What a suite cuts: an ACP client's operation on `talaria acp`, a `talaria batch` task, or
/// a `talaria serve` client's reconnection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Acp(Operation),
    BatchTask,
    ServeReconnect,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Acp(operation) => operation.name(),
            Target::BatchTask => "batch-task",
            Target::ServeReconnect => "serve-reconnect",
        }
    }
}

/// One operation's suite.
#[derive(Debug)]
pub struct SuiteReport {
    pub operation: Target,
    pub variant: Variant,
    pub postgres: bool,
    /// The distinct points the operation passed.
    pub points: Vec<String>,
    /// Every pass the trace listed.
    pub passes: usize,
    pub runs: Vec<RunOutcome>,
    pub took: Duration,
}

impl SuiteReport {
    /// The runs that found a problem.
    pub fn failures(&self) -> Vec<&RunOutcome> {
        self.runs
            .iter()
            .filter(|r| !r.problems.is_empty())
            .collect()
    }

    /// One line of figures.
    pub fn summary(&self) -> String {
        let landed = self
            .runs
            .iter()
            .filter(|r| r.landed == Landed::AtThePoint)
            .count();
        let slowest = self.runs.iter().max_by_key(|r| r.took);
        format!(
            "{} ({}, {}): {} points, {} passes, {} runs ({} at the point), {} failed, {:.1} s \
             (slowest: {})",
            self.operation.name(),
            self.variant.name(),
            if self.postgres { "postgres" } else { "sqlite" },
            self.points.len(),
            self.passes,
            self.runs.len(),
            landed,
            self.failures().len(),
            self.took.as_secs_f64(),
            slowest.map_or(String::new(), |r| format!(
                "{} {:.1} s",
                r.pass,
                r.took.as_secs_f64()
            ))
        )
    }

    /// The failures in full, for a test's message.
    pub fn details(&self) -> String {
        let mut text = self.summary();
        for run in self.failures() {
            text.push_str(&format!(
                "\n{} at {} ({:?}, home kept at {:?}):\n{}",
                self.variant.name(),
                run.pass,
                run.landed,
                run.kept,
                run.problems
            ));
        }
        text
    }
}

/// How a suite runs.
#[derive(Clone)]
pub struct SuiteOptions {
    pub variant: Variant,
    /// Runs at once (each a few processes).
    pub jobs: usize,
    /// Every pass of a point passed at most this often; the rest sampled ([`chosen`]).
    pub all_passes_up_to: u64,
    /// A PostgreSQL cluster's database maker instead of SQLite.
    pub postgres: Option<std::sync::Arc<talaria_store::test_cluster::TestCluster>>,
    /// Only the points whose name contains this (all when empty).
    pub only: String,
}

impl SuiteOptions {
    pub fn new(variant: Variant) -> SuiteOptions {
        SuiteOptions {
            variant,
            jobs: std::env::var("TALARIA_CRASH_JOBS")
                .ok()
                .and_then(|j| j.parse().ok())
                .unwrap_or(4),
            all_passes_up_to: std::env::var("TALARIA_CRASH_ALL_PASSES").map_or(3, |_| u64::MAX),
            postgres: None,
            only: std::env::var("TALARIA_CRASH_ONLY").unwrap_or_default(),
        }
    }
}

/// A fresh home on the suite's store.
pub async fn fresh_home(options: &SuiteOptions) -> anyhow::Result<Home> {
    let store = match &options.postgres {
        Some(cluster) => {
            let cluster = cluster.clone();
            StoreKind::Postgres(tokio::task::spawn_blocking(move || cluster.database()).await?)
        }
        None => StoreKind::Sqlite,
    };
    Home::new(store, CONFIG).await
}

/// Runs `operation`'s suite: the traced run, then one run per chosen pass.
pub async fn run_suite(operation: Target, options: &SuiteOptions) -> anyhow::Result<SuiteReport> {
    let started = Instant::now();
    let passes = match operation {
        Target::Acp(operation) => traced(operation, options).await?,
        Target::BatchTask => crate::batch::traced(options).await?,
        Target::ServeReconnect => crate::serve::traced(options).await?,
    };
    anyhow::ensure!(
        !passes.is_empty(),
        "{} passes no failpoint at all: is the agent built with failpoints, and does every \
         durable step of the operation have its point?",
        operation.name()
    );
    let points = names(&passes);
    let runs: Vec<Pass> = chosen(&passes, options.all_passes_up_to)
        .into_iter()
        .filter(|p| p.name.contains(&options.only))
        // A step refused after it was made is not a refusal: only `before` points refuse.
        .filter(|p| options.variant != Variant::Refuse || p.name.ends_with("::before"))
        .collect();
    let outcomes: Vec<RunOutcome> = futures_util::stream::iter(runs)
        .map(|pass| one_run(operation, options, pass))
        .buffer_unordered(options.jobs.max(1))
        .collect()
        .await;
    let mut outcomes = outcomes;
    outcomes.sort_by(|a, b| a.pass.cmp(&b.pass));
    Ok(SuiteReport {
        operation,
        variant: options.variant,
        postgres: options.postgres.is_some(),
        points,
        passes: passes.len(),
        runs: outcomes,
        took: started.elapsed(),
    })
}

/// The operation run whole with a trace; the passes it made after it began.
pub async fn traced(operation: Operation, options: &SuiteOptions) -> anyhow::Result<Vec<Pass>> {
    let home = fresh_home(options).await?;
    let prepared = operation.prepare(&home).await?;
    let trace = home.scratch("trace");
    let faults = Faults {
        trace: Some(trace.clone()),
        ..Faults::default()
    };
    let mut client = Client::new(home.initialized(&faults).await?);
    let mut marks = Marks::new(Some(trace.clone()));
    // On a held store the operation passes other points: traced so too.
    let holder = held_store(options.variant, &home, &mut client, None).await?;
    let ran = operation
        .run(&mut client, &home, &prepared, &mut marks)
        .await;
    if let Err(e) = ran {
        anyhow::bail!(
            "{} does not run on a healthy home: {e}\n{}",
            operation.name(),
            tail(&client.agent.stderr())
        );
    }
    // Steps that follow the answer (a title, a write behind it) within a moment.
    tokio::time::sleep(Duration::from_millis(400)).await;
    kill(&client);
    drop(holder);
    let _ = client.agent.wait_exit(crate::client::ANSWER_WITHIN).await;
    Ok(passes_from(
        &read_trace(&trace),
        marks.begun_at.unwrap_or_default(),
    ))
}

pub fn kill(client: &Client) {
    if let Some(pid) = client.agent.pid() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// One run at `pass`, bounded in time; a run that fails to set up is a problem too.
pub async fn one_run(operation: Target, options: &SuiteOptions, pass: Pass) -> RunOutcome {
    let started = Instant::now();
    let cut = async {
        match operation {
            Target::Acp(operation) => cut_at(operation, options, pass.clone()).await,
            Target::BatchTask => crate::batch::cut_at(options, pass.clone()).await,
            Target::ServeReconnect => crate::serve::cut_at(options, pass.clone()).await,
        }
    };
    let result = tokio::time::timeout(Duration::from_secs(120), cut).await;
    let (landed, problems, kept) = match result {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => (
            Landed::NotReached,
            Problems(vec![format!("the run failed: {e:#}")]),
            None,
        ),
        Err(_) => (
            Landed::NotReached,
            Problems(vec!["the run took over 120 s".into()]),
            None,
        ),
    };
    RunOutcome {
        pass,
        landed,
        problems,
        took: started.elapsed(),
        kept,
    }
}

/// The `FAILPOINTS` value that acts at `pass` only.
pub fn at_pass_only(pass: &Pass, action: &str) -> String {
    let before = pass.nth.saturating_sub(1);
    if before == 0 {
        format!("{}=1*{action}", pass.name)
    } else {
        format!("{}={before}*off->1*{action}", pass.name)
    }
}

/// Where a run's fault landed, what it found, and the home kept when it found something.
pub type Cut = (Landed, Problems, Option<std::path::PathBuf>);

/// Prepares a home, runs the operation cut at `pass`, restarts and checks.
async fn cut_at(operation: Operation, options: &SuiteOptions, pass: Pass) -> anyhow::Result<Cut> {
    let mut home = fresh_home(options).await?;
    let prepared = operation.prepare(&home).await?;
    let trace = home.scratch("trace");
    let mut faults = Faults {
        trace: Some(trace.clone()),
        ..Faults::default()
    };
    match options.variant {
        Variant::Kill | Variant::HeldWithSibling => faults.crash_at = Some(pass.clone()),
        Variant::Refuse => faults.failpoints = Some(at_pass_only(&pass, "return")),
        Variant::Stall => faults.failpoints = Some(at_pass_only(&pass, STALL)),
    }
    let mut problems = Problems::default();
    let mut sibling = None;
    if options.variant == Variant::HeldWithSibling {
        sibling = Some(Client::new(home.initialized(&Faults::default()).await?));
    }
    let mut client = Client::new(home.spawn(&faults).await?);
    // The store opens while the client reads `initialize`'s answer: on a fast machine a
    // point the trace saw after the operation began is passed before it. The cut lands
    // there all the same, and the operation is then never asked.
    let started = client.agent.call("initialize", initialize_params()).await;
    let (holder, ran) = match started {
        Ok(_) => {
            let mut marks = Marks::new(Some(trace.clone()));
            let holder = held_store(options.variant, &home, &mut client, sibling.as_mut()).await?;
            let ran = operation
                .run(&mut client, &home, &prepared, &mut marks)
                .await;
            (holder, ran)
        }
        Err(e) if faults.crash_at.is_some() => (None, Err(e)),
        Err(e) => return Err(e),
    };
    let landed = landing(
        options.variant,
        &mut client,
        &pass,
        &trace,
        &ran,
        &mut problems,
    )
    .await;
    drop(holder);
    client.collect().await;
    let mut facts = prepared.facts.clone();
    facts.extend(client.ledger().facts);
    let failed: Vec<String> = facts
        .iter()
        .filter_map(|f| match f {
            crate::ledger::Fact::Rewound { failed, .. } => Some(failed.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    // What the cut operation left unasked in the mock's scripts is not the next turn's.
    home.mock.take_scripts();
    let mut replays = Vec::new();
    if let Some(mut sibling) = sibling {
        let (more, shown) =
            after_the_crash(&mut sibling, &home, &prepared, &facts, &mut problems).await;
        facts.extend(more);
        replays = shown;
    }
    let expected = Expected {
        facts,
        bystanders: &prepared.bystanders,
        replays,
    };
    problems
        .0
        .extend(check_after_restart(&mut home, &expected).await.0);
    let rewound = has_rewind(&home, &prepared.main).await;
    problems
        .0
        .extend(operation.check_files(&home, &prepared, rewound, &failed).0);
    let kept = (!problems.is_empty()).then(|| {
        keep_messages(&home, "client.jsonl", &client);
        keep_messages(&home, "client.stderr", &client);
        home.keep()
    });
    Ok((landed, problems, kept))
}

/// For [`Variant::HeldWithSibling`]: the store's write lock, taken once the agents opened
/// the store (a process that has not yet opened it could not while it is held).
async fn held_store(
    variant: Variant,
    home: &Home,
    client: &mut Client,
    sibling: Option<&mut Client>,
) -> anyhow::Result<Option<crate::stalls::HeldLock>> {
    if variant != Variant::HeldWithSibling {
        return Ok(None);
    }
    client.store_open().await?;
    if let Some(sibling) = sibling {
        sibling.store_open().await?;
    }
    Ok(crate::stalls::hold_write_lock(&home.sqlite_path()))
}

/// Where the run's fault landed; a killed run's process is made sure gone, a faulted one's
/// ended at end of input.
async fn landing(
    variant: Variant,
    client: &mut Client,
    pass: &Pass,
    trace: &std::path::Path,
    ran: &anyhow::Result<()>,
    problems: &mut Problems,
) -> Landed {
    let passed = |trace: &[String]| trace.iter().filter(|n| **n == pass.name).count() as u64;
    if matches!(variant, Variant::Refuse | Variant::Stall) {
        end_cleanly(client, problems).await;
        return if passed(&read_trace(trace)) >= pass.nth {
            Landed::AtThePoint
        } else {
            Landed::NotReached
        };
    }
    // A point after the answer may still come: a moment for it.
    let died = client
        .agent
        .wait_exit(Duration::from_millis(1500))
        .await
        .is_ok();
    if !died {
        kill(client);
        let _ = client.agent.wait_exit(crate::client::ANSWER_WITHIN).await;
        if let Err(e) = ran {
            problems.say(format!(
                "the operation failed with no crash: {e:#}\n{}",
                tail(&client.agent.stderr())
            ));
        }
        return Landed::NotReached;
    }
    let trace = read_trace(trace);
    if trace.last() == Some(&pass.name) && passed(&trace) == pass.nth {
        return Landed::AtThePoint;
    }
    problems.say(format!(
        "the agent ended before {pass}, after {:?}\n{}",
        trace.last(),
        tail(&client.agent.stderr())
    ));
    Landed::NotReached
}

/// Writes what `client` received (`.jsonl`) or its agent's log beside a kept home.
pub fn keep_messages(home: &Home, name: &str, client: &Client) {
    let text = if name.ends_with(".jsonl") {
        client
            .agent
            .transcript
            .iter()
            .map(|m| format!("{m}\n"))
            .collect()
    } else {
        client.agent.stderr()
    };
    let _ = std::fs::write(home.scratch(name), text);
}

/// Closes the agent's input; it must exit 0 within the stop's budget (2.5 s, some slack).
async fn end_cleanly(client: &mut Client, problems: &mut Problems) {
    client.agent.close_stdin();
    match client.agent.wait_exit(Duration::from_secs(4)).await {
        Ok(status) if status.success() => {}
        Ok(status) => problems.0.push(format!(
            "the agent ended with {status:?} at end of input\n{}",
            tail(&client.agent.stderr())
        )),
        Err(_) => {
            problems.0.push(format!(
                "the agent did not stop within 4 s of end of input\n{}",
                tail(&client.agent.stderr())
            ));
            kill(client);
            let _ = client.agent.wait_exit(crate::client::ANSWER_WITHIN).await;
        }
    }
}

/// The live sibling, once the first process is gone and the store free again: loads the
/// operation's session (what it shows must be whole), answers one more turn in it, and ends.
async fn after_the_crash(
    sibling: &mut Client,
    home: &Home,
    prepared: &crate::operations::Prepared,
    facts: &[crate::ledger::Fact],
    problems: &mut Problems,
) -> (Vec<crate::ledger::Fact>, Vec<Replay>) {
    let mut replays = Vec::new();
    let sessions = crate::invariants::promised_sessions(facts);
    for session in sessions
        .iter()
        .filter(|s| !prepared.bystanders.contains_key(*s))
    {
        let from = sibling.agent.transcript.len();
        match sibling.load(session, &home.workspace()).await {
            Ok(answer) if answer.get("result").is_some() => {
                replays.push(Replay {
                    who: "the live sibling".into(),
                    session: session.clone(),
                    messages: sibling.agent.transcript[from..].to_vec(),
                    promised: facts.to_vec(),
                });
                home.script([talaria_harness::MockReply::text(&[&format!(
                    "the sibling answers in {session}"
                )])]);
                if let Err(e) = sibling.prompt(session, "the sibling's question").await {
                    problems
                        .0
                        .push(format!("the sibling's turn in {session}: {e}"));
                }
            }
            Ok(answer) => problems
                .0
                .push(format!("the sibling cannot load {session}: {answer}")),
            Err(e) => problems.0.push(format!("the sibling: {e}")),
        }
    }
    end_cleanly(sibling, problems).await;
    (sibling.ledger().facts, replays)
}
