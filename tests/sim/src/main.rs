//! `talaria-sim`: runs the seeded simulation of durability as long as asked.
//!
//! ```text
//! talaria-sim --seeds 1000 [--from 1] [--steps 24] [--jobs 2] [--shrink-secs 300]
//! talaria-sim --seed 42 [--steps 24]        # one seed, its log printed
//! talaria-sim --plan 'new(0) prompt(0,0,tools) kill(0) …'   # a (shrunk) plan again
//! talaria-sim --plan '…' --final-only       # only the final check (what stays in the end)
//! talaria-sim --plan '…' --shrink           # a failing plan shrunk further
//! ```
//!
//! The agent is `TALARIA_BIN` (built with `--features talaria-server/failpoints`), else
//! built with failpoints on first use. Exit code 1 when a seed failed; each failure is
//! printed with its shrunk plan.

use std::time::Duration;

use futures_util::StreamExt;
use talaria_sim::sim::{self, plan};

struct Args {
    seeds: u64,
    from: u64,
    steps: usize,
    jobs: usize,
    shrink_secs: u64,
    plan: Option<String>,
    verbose: bool,
    final_only: bool,
    shrink_plan: bool,
}

/// Why the command line does not read.
#[derive(Debug, thiserror::Error)]
enum BadArgs {
    #[error("{0} needs a value")]
    Missing(String),
    #[error("{0}: not a number")]
    NotANumber(String),
    #[error("unknown argument {0}")]
    Unknown(String),
}

fn args() -> Result<Args, BadArgs> {
    let mut args = Args {
        seeds: 1,
        from: 1,
        steps: 24,
        jobs: 2,
        shrink_secs: 300,
        plan: None,
        verbose: false,
        final_only: false,
        shrink_plan: false,
    };
    let mut words = std::env::args().skip(1);
    while let Some(word) = words.next() {
        let mut value = || words.next().ok_or(BadArgs::Missing(word.clone()));
        let number = |text: String| text.parse::<u64>().map_err(|_| BadArgs::NotANumber(text));
        match word.as_str() {
            "--seeds" => args.seeds = number(value()?)?,
            "--from" => args.from = number(value()?)?,
            "--seed" => {
                args.from = number(value()?)?;
                args.seeds = 1;
                args.verbose = true;
            }
            "--steps" => args.steps = usize::try_from(number(value()?)?).unwrap_or(24),
            "--jobs" => args.jobs = usize::try_from(number(value()?)?).unwrap_or(2),
            "--shrink-secs" => args.shrink_secs = number(value()?)?,
            "--plan" => args.plan = Some(value()?),
            "--verbose" => args.verbose = true,
            "--final-only" => args.final_only = true,
            "--shrink" => args.shrink_plan = true,
            other => return Err(BadArgs::Unknown(other.to_string())),
        }
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("talaria-sim: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(text) = &args.plan {
        let steps = match plan::from_text(text) {
            Ok(steps) => steps,
            Err(e) => {
                eprintln!("talaria-sim: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        let mut outcome = sim::run_plan_checking(&steps, !args.final_only).await;
        eprintln!("{}", sim::report(None, &outcome));
        if outcome.failed() && args.shrink_secs > 0 && args.shrink_plan {
            outcome = sim::shrink(outcome, Duration::from_secs(args.shrink_secs)).await;
            eprintln!("shrunk:\n{}", sim::report(None, &outcome));
        }
        return if outcome.failed() {
            std::process::ExitCode::FAILURE
        } else {
            std::process::ExitCode::SUCCESS
        };
    }
    let seeds = args.from..args.from + args.seeds;
    let steps = args.steps;
    let mut outcomes = futures_util::stream::iter(seeds)
        .map(|seed| async move { (seed, sim::run_seed(seed, steps).await) })
        .buffer_unordered(args.jobs.max(1));
    let mut failed = 0;
    while let Some((seed, outcome)) = outcomes.next().await {
        if !outcome.failed() {
            eprintln!("seed {seed}: ok ({:.1} s)", outcome.took.as_secs_f64());
            if args.verbose {
                eprintln!("{}", outcome.log.join("\n"));
            }
            continue;
        }
        failed += 1;
        eprintln!("{}", sim::report(Some(seed), &outcome));
        let shrunk = sim::shrink(outcome, Duration::from_secs(args.shrink_secs)).await;
        eprintln!("seed {seed} shrunk:\n{}", sim::report(Some(seed), &shrunk));
    }
    eprintln!("{failed} of {} seeds failed", args.seeds);
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
