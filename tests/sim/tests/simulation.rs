//! The seeded simulation in CI (docs/durability.md, "Proven by crashing"): seeds 1, 2, 3, …
//! two at a time, each a plan of 60 steps, until the time budget is spent
//! (`TALARIA_SIM_BUDGET_S`, 60 s by default; `TALARIA_SIM_FROM` moves the first seed). A
//! failing seed is shrunk and reported with the plan that replays it
//! (`cargo run -p talaria-sim -- --plan '…'`); `cargo run -p talaria-sim -- --seeds N` runs
//! as many as asked.

use std::time::{Duration, Instant};

use talaria_sim::sim;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_hold_every_invariant_for_the_time_budget() {
    let budget = Duration::from_secs(env_number("TALARIA_SIM_BUDGET_S", 60));
    let mut seed = env_number("TALARIA_SIM_FROM", 1);
    let started = Instant::now();
    let mut ran = Vec::new();
    while started.elapsed() < budget {
        let (a, b) = tokio::join!(sim::run_seed(seed, 60), sim::run_seed(seed + 1, 60));
        for (n, outcome) in [(seed, a), (seed + 1, b)] {
            if outcome.failed() {
                let shrunk = sim::shrink(outcome, Duration::from_secs(180)).await;
                panic!(
                    "after {} seeds: {}",
                    ran.len(),
                    sim::report(Some(n), &shrunk)
                );
            }
            ran.push((n, outcome.took));
        }
        seed += 2;
    }
    let steps: usize = ran.len() * 60;
    eprintln!(
        "{} seeds ({steps} steps) in {:.0} s, every invariant held",
        ran.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(ran.len() >= 2, "no seed ran within the budget");
}

/// Plans that once found a loss path, replayed as they are (each failed before its fix).
const FOUND: [(&str, &str); 2] = [
    (
        "#62 F1: a spool adopted on a full disk, the adopter killed",
        "new(0) prompt(0,0,text) hold(5) prompt(0,0,text) stop(0) \
         refuse(1,spool::write::before,1,9) kill(1) hold(0) prompt(1,0,text)",
    ),
    (
        // Process 2 dies after its backlog was written, before its spool said so; process 3
        // adopts the spool, its writes refused twice, and deletes the session: the adopted
        // creation written later brought the answered delete back.
        "#62 F2: a delete after adopting a spool whose backlog was written",
        "new(0) stop(0) hold(3) crash(0,spool::drain::before,1) new(0) prompt(0,1,text) hold(0) \
         refuse(1,journal::backlog::before,1,2) delete(1,1)",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plans_that_found_a_loss_path_hold() {
    for (what, text) in FOUND {
        let steps = sim::plan::from_text(text).expect("the plan reads");
        let outcome = sim::run_plan_checking(&steps, true).await;
        assert!(!outcome.failed(), "{what}: {}", sim::report(None, &outcome));
    }
}
