//! The seeded simulation: random interleavings of client operations over several sessions
//! and two agent processes on one home, with the scripted provider's faults (errors, cut
//! streams), a held store, refused steps (a full disk) and kills at random failpoints.
//! After each step the invariants are checked while the processes run (the store's records
//! whole and valid; every answer in a session no process holds shown by a fresh process's
//! load); at the end every process stops and the full check runs ([`crate::invariants`]).
//!
//! One seed decides the whole plan before it runs; a failing plan is shrunk (delta
//! debugging: parts of it left out while it still fails) and printed as text that
//! `talaria-sim --plan` replays.

pub mod known_points;
pub mod plan;
mod steps;
mod world;

use std::time::{Duration, Instant};

use serde_json::json;

use crate::home::{Faults, Home, StoreKind};
use crate::invariants::{Expected, Problems, Replay, Snapshot, check_after_restart};
use crate::ledger::Fact;
use crate::operations::CONFIG;
use plan::Step;
use world::World;

/// How a simulation's run ended.
#[derive(Debug)]
pub struct Outcome {
    pub plan: Vec<Step>,
    /// The step after which a problem was found (`plan.len()`: the final check).
    pub failed_after: Option<usize>,
    pub problems: Problems,
    /// What happened, step by step.
    pub log: Vec<String>,
    pub took: Duration,
}

impl Outcome {
    pub fn failed(&self) -> bool {
        !self.problems.is_empty()
    }
}

/// Runs `plan` on a fresh home, checking after each step and at the end.
pub async fn run_plan(plan: &[Step]) -> Outcome {
    run_plan_checking(plan, true).await
}

/// Runs `plan`; with `while_running` false only the final check runs (to see what a
/// failure found while running leaves in the record in the end).
pub async fn run_plan_checking(plan: &[Step], while_running: bool) -> Outcome {
    let started = Instant::now();
    let home = match Home::new(StoreKind::Sqlite, CONFIG).await {
        Ok(home) => home,
        Err(e) => {
            return Outcome {
                plan: plan.to_vec(),
                failed_after: Some(0),
                problems: Problems(vec![format!("no home: {e}")]),
                log: Vec::new(),
                took: started.elapsed(),
            };
        }
    };
    let mut world = World::new(home);
    let mut problems = Problems::default();
    let mut failed_after = None;
    for (n, step) in plan.iter().enumerate() {
        world.log.push(format!(
            "{n}: {step} (at {:.1} s)",
            started.elapsed().as_secs_f64()
        ));
        if let Some(problem) = steps::run(&mut world, n, *step).await {
            problems.say(problem);
        }
        world.settle().await;
        world.count_held_step();
        if while_running {
            check_while_running(&mut world, &mut problems).await;
        }
        if !problems.is_empty() {
            failed_after = Some(n);
            break;
        }
    }
    if problems.is_empty() {
        final_check(&mut world, &mut problems).await;
        if !problems.is_empty() {
            failed_after = Some(plan.len());
        }
    }
    let mut log = std::mem::take(&mut world.log);
    if !problems.is_empty() {
        world.keep_logs();
        let World { home, .. } = world;
        log.push(format!("home kept at {}", home.keep().display()));
    }
    Outcome {
        plan: plan.to_vec(),
        failed_after,
        problems,
        log,
        took: started.elapsed(),
    }
}

/// How long a fresh process's load may miss answers a live process still holds (a spool it
/// adopted, not yet written): its next try at the store (2 s), then its store's reopening
/// (at most 15 s apart). Past these, a miss is a problem.
const HELD_ELSEWHERE: [Duration; 2] = [Duration::from_millis(2500), Duration::from_secs(16)];

/// The checks that need no process stopped: every session in the store whole and valid, and
/// (the store not held) every answer in the sessions no process holds shown by a fresh
/// process's load — at once, or once the live processes had the time to write what they
/// adopted (the window is logged).
async fn check_while_running(world: &mut World, problems: &mut Problems) {
    // While the store is held, neither a reader of this test's nor a fresh process gets in.
    if world.held.is_some() {
        return;
    }
    problems
        .0
        .extend(crate::invariants::store_whole(&world.home).await.0);
    let mut missed = fresh_loads(world).await;
    for wait in HELD_ELSEWHERE {
        if missed.is_empty() {
            return;
        }
        world.log.push(format!(
            "  (a fresh load misses what a live process holds: {}; again in {wait:?})",
            missed.0.join("; ")
        ));
        tokio::time::sleep(wait).await;
        missed = fresh_loads(world).await;
    }
    problems.0.extend(missed.0);
}

/// A fresh process loads every session no process holds (its last process gone): what
/// it misses of the answers promised there.
async fn fresh_loads(world: &World) -> Problems {
    let mut problems = Problems::default();
    let idle: Vec<(String, std::path::PathBuf)> = world
        .sessions
        .iter()
        // Open nowhere, and its last process gone: what it wrote or left waiting is the
        // store's or a spool's, which a fresh process must show.
        .filter(|s| !s.deleted && s.holder.is_none() && !world.alive(s.last_process))
        .filter(|s| world.facts.iter().any(|f| f.session() == s.id))
        .map(|s| (s.id.clone(), s.cwd.clone()))
        .collect();
    if idle.is_empty() {
        return problems;
    }
    let mut agent = match world.home.initialized(&Faults::default()).await {
        Ok(agent) => agent,
        Err(e) => {
            problems.say(format!("a checking process did not start: {e}"));
            return problems;
        }
    };
    let mut replays = Vec::new();
    for (id, cwd) in &idle {
        let from = agent.transcript.len();
        let params = json!({"sessionId": id, "cwd": cwd, "mcpServers": []});
        match agent.request("session/load", params).await {
            Ok(answer) if answer.get("result").is_some() => replays.push(Replay {
                who: "a checking process".into(),
                session: id.clone(),
                messages: agent.transcript[from..].to_vec(),
                promised: world.facts.clone(),
            }),
            // A close keeps the session's claim while its entries wait for the store.
            Ok(answer)
                if answer
                    .to_string()
                    .contains("open in another Talaria process") => {}
            Ok(answer) => problems.say(format!(
                "{id} does not load in a checking process: {answer}"
            )),
            Err(e) => problems.say(format!("a checking process: {e}")),
        }
        let _ = agent
            .request("session/close", json!({"sessionId": id}))
            .await;
    }
    agent.close_stdin();
    let _ = agent.wait_exit(Duration::from_secs(5)).await;
    // An answer a rewind took off the path before a crash (the rewind unanswered) is in the
    // record behind its marker: judged against the stored record.
    let stored = crate::invariants::stored(
        &world.home,
        &idle.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
    )
    .await;
    for replay in &replays {
        problems.0.extend(crate::invariants::replay_problems(
            replay,
            stored.get(&replay.session),
        ));
    }
    problems
}

/// Every process stops (end of input), the store is let go, and the full check runs.
async fn final_check(world: &mut World, problems: &mut Problems) {
    world.held = None;
    for slot in 0..plan::SLOTS {
        if let Some(problem) = world.stop(slot).await {
            problems.say(problem);
        }
    }
    world.home.mock.take_scripts();
    let facts: Vec<Fact> = world.facts.clone();
    let bystanders = Snapshot::new();
    let expected = Expected {
        facts,
        bystanders: &bystanders,
        replays: Vec::new(),
    };
    problems
        .0
        .extend(check_after_restart(&mut world.home, &expected).await.0);
}

/// Runs seed `seed`'s plan of `steps` steps.
pub async fn run_seed(seed: u64, steps: usize) -> Outcome {
    run_plan(&plan::plan(seed, steps)).await
}

/// Shrinks a failing plan: leaves out parts of it (halves, then quarters, …) while it still
/// fails, within `budget`; the shortest failing plan found and its outcome.
pub async fn shrink(failing: Outcome, budget: Duration) -> Outcome {
    shrink_with(failing, budget, |plan| {
        let plan = plan.to_vec();
        async move { run_plan(&plan).await }
    })
    .await
}

/// [`shrink`] with the plans run by `run` (delta debugging over the steps: a part is left
/// out for good when the plan still fails without it; a failure found after step N cuts the
/// plan there).
pub async fn shrink_with<F, Fut>(failing: Outcome, budget: Duration, run: F) -> Outcome
where
    F: Fn(&[Step]) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let started = Instant::now();
    let mut best = failing;
    cut_after_failure(&mut best);
    let mut parts = 2;
    while best.plan.len() > 1 && started.elapsed() < budget {
        let size = best.plan.len().div_ceil(parts).max(1);
        let mut shrunk = false;
        for start in (0..best.plan.len()).step_by(size) {
            if started.elapsed() >= budget {
                break;
            }
            let mut candidate = best.plan.clone();
            candidate.drain(start..(start + size).min(candidate.len()));
            if candidate.is_empty() {
                continue;
            }
            let outcome = run(&candidate).await;
            if outcome.failed() {
                best = outcome;
                cut_after_failure(&mut best);
                parts = (parts - 1).max(2);
                shrunk = true;
                break;
            }
        }
        if !shrunk {
            if size == 1 {
                break;
            }
            parts = (parts * 2).min(best.plan.len());
        }
    }
    best
}

/// Steps after the one a failure was found after are not needed to fail.
fn cut_after_failure(outcome: &mut Outcome) {
    if let Some(after) = outcome.failed_after {
        outcome.plan.truncate(after + 1);
    }
}

/// A failure's report: the plan (replayable), where it failed, what, and the log.
pub fn report(seed: Option<u64>, outcome: &Outcome) -> String {
    let mut text = String::new();
    if let Some(seed) = seed {
        text.push_str(&format!("seed {seed}: "));
    }
    text.push_str(&format!(
        "failed after step {:?} of {}\nreplay: cargo run -p talaria-sim -- --plan '{}'\n{}",
        outcome.failed_after,
        outcome.plan.len(),
        plan::to_text(&outcome.plan),
        outcome.problems
    ));
    text.push_str(&outcome.log.join("\n"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use plan::TurnKind;

    /// A stand-in for a run: fails after the step that completes "a kill of slot 1, later a
    /// text prompt in slot 0" (the failure two steps make together).
    fn judged(plan: &[Step]) -> Outcome {
        let killed = plan.iter().position(|s| *s == Step::Kill { slot: 1 });
        let failed_after = killed.and_then(|k| {
            plan.iter()
                .skip(k)
                .position(|s| {
                    matches!(
                        s,
                        Step::Prompt {
                            slot: 0,
                            turn: TurnKind::Text,
                            ..
                        }
                    )
                })
                .map(|p| k + p)
        });
        Outcome {
            plan: plan.to_vec(),
            failed_after,
            problems: Problems(
                failed_after
                    .map(|_| "lost".to_string())
                    .into_iter()
                    .collect(),
            ),
            log: Vec::new(),
            took: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn a_failing_plan_shrinks_to_the_steps_that_make_it_fail() {
        let seed = (1..500)
            .find(|&seed| judged(&plan::plan(seed, 40)).failed())
            .expect("a failing seed");
        let failing = judged(&plan::plan(seed, 40));
        let shrunk = shrink_with(failing, Duration::from_secs(60), |p| {
            let outcome = judged(p);
            async move { outcome }
        })
        .await;
        assert!(shrunk.failed());
        assert_eq!(shrunk.plan.len(), 2, "{}", plan::to_text(&shrunk.plan));
        assert_eq!(shrunk.plan[0], Step::Kill { slot: 1 });
    }
}
