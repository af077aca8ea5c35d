//! The crash suite (docs/durability.md, "Proven by crashing").

use talaria_sim::crash::{SuiteOptions, Variant, one_run};
use talaria_sim::operations::Operation;
use talaria_sim::points::Pass;

#[tokio::test]
async fn every_operation_holds_its_promises_when_killed_right_after_it() {
    let options = SuiteOptions::new(Variant::Kill);
    for operation in Operation::ALL {
        let started = std::time::Instant::now();
        let outcome = one_run(
            operation,
            &options,
            Pass {
                name: "no::such::point".into(),
                nth: 1,
            },
        )
        .await;
        eprintln!(
            "{}: {:?} {:.1}s",
            operation.name(),
            outcome.landed,
            started.elapsed().as_secs_f64()
        );
        assert!(
            outcome.problems.is_empty(),
            "{}: {}\nkept {:?}",
            operation.name(),
            outcome.problems,
            outcome.kept
        );
    }
}
