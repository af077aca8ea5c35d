//! The crash suite (docs/durability.md, "Proven by crashing").

use talaria_sim::crash::{SuiteOptions, Target, Variant};
use talaria_sim::operations::Operation;

async fn suite(operation: Operation, variant: Variant) {
    let report = talaria_sim::crash::run_suite(Target::Acp(operation), &SuiteOptions::new(variant))
        .await
        .unwrap_or_else(|e| panic!("{}: {e:#}", operation.name()));
    eprintln!(
        "{}\n  points: {}",
        report.summary(),
        report.points.join(" ")
    );
    assert!(report.failures().is_empty(), "{}", report.details());
}

#[tokio::test]
async fn a_prompt_with_tool_calls_killed_at_every_point() {
    suite(Operation::PromptWithTools, Variant::Kill).await;
}

#[tokio::test]
async fn a_steer_killed_at_every_point() {
    suite(Operation::Steer, Variant::Kill).await;
}

#[tokio::test]
async fn a_cancel_killed_at_every_point() {
    suite(Operation::Cancel, Variant::Kill).await;
}

#[tokio::test]
async fn a_fork_killed_at_every_point() {
    suite(Operation::Fork, Variant::Kill).await;
}

#[tokio::test]
async fn a_close_killed_at_every_point() {
    suite(Operation::Close, Variant::Kill).await;
}

#[tokio::test]
async fn a_delete_killed_at_every_point() {
    suite(Operation::Delete, Variant::Kill).await;
}

#[tokio::test]
async fn a_rewind_killed_at_every_point() {
    suite(Operation::Rewind, Variant::Kill).await;
}

#[tokio::test]
async fn a_rewind_with_files_killed_at_every_point() {
    suite(Operation::RewindFiles, Variant::Kill).await;
}

#[tokio::test]
async fn a_compaction_killed_at_every_point() {
    suite(Operation::Compaction, Variant::Kill).await;
}

#[tokio::test]
async fn a_plan_handover_killed_at_every_point() {
    suite(Operation::PlanHandover, Variant::Kill).await;
}

#[tokio::test]
async fn a_prompt_with_tool_calls_refused_at_every_point_as_a_full_disk_would() {
    suite(Operation::PromptWithTools, Variant::Refuse).await;
}

#[tokio::test]
async fn a_prompt_with_tool_calls_stalled_at_every_point() {
    suite(Operation::PromptWithTools, Variant::Stall).await;
}

#[tokio::test]
async fn a_prompt_on_a_held_store_killed_at_every_point_beside_a_live_sibling() {
    suite(Operation::PromptWithTools, Variant::HeldWithSibling).await;
}

/// The operations the PostgreSQL build stores, against a real server (one cluster, a
/// database per run).
#[tokio::test]
async fn session_operations_on_postgresql_killed_at_every_point() {
    let cluster = tokio::task::spawn_blocking(talaria_store::test_cluster::TestCluster::start)
        .await
        .expect("a PostgreSQL cluster");
    let mut options = SuiteOptions::new(Variant::Kill);
    options.postgres = Some(std::sync::Arc::new(cluster));
    let mut failed = Vec::new();
    // A compaction's and a close's writes on PostgreSQL are the journal's and the claims'
    // steps these pass too (kept to the SQLite suite for CI's time).
    for operation in [
        Operation::PromptWithTools,
        Operation::Fork,
        Operation::Delete,
        Operation::RewindFiles,
    ] {
        let report = talaria_sim::crash::run_suite(Target::Acp(operation), &options)
            .await
            .unwrap_or_else(|e| panic!("{}: {e:#}", operation.name()));
        eprintln!(
            "{}\n  points: {}",
            report.summary(),
            report.points.join(" ")
        );
        if !report.failures().is_empty() {
            failed.push(report.details());
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[tokio::test]
async fn a_batch_task_killed_at_every_point_and_resumed() {
    let report =
        talaria_sim::crash::run_suite(Target::BatchTask, &SuiteOptions::new(Variant::Kill))
            .await
            .unwrap_or_else(|e| panic!("batch: {e:#}"));
    eprintln!(
        "{}\n  points: {}",
        report.summary(),
        report.points.join(" ")
    );
    assert!(report.failures().is_empty(), "{}", report.details());
}

#[tokio::test]
async fn a_serve_reconnection_killed_at_every_point() {
    let report =
        talaria_sim::crash::run_suite(Target::ServeReconnect, &SuiteOptions::new(Variant::Kill))
            .await
            .unwrap_or_else(|e| panic!("serve: {e:#}"));
    eprintln!(
        "{}\n  points: {}",
        report.summary(),
        report.points.join(" ")
    );
    assert!(report.failures().is_empty(), "{}", report.details());
}

/// The steps a full disk can refuse in the other operations that write (a fork's copy, a
/// delete, a rewind's marker and files, a steer), refused at every point each passes.
#[tokio::test]
async fn other_writes_refused_at_every_point_as_a_full_disk_would() {
    let options = SuiteOptions::new(Variant::Refuse);
    let mut failed = Vec::new();
    for operation in [
        Operation::Fork,
        Operation::Delete,
        Operation::RewindFiles,
        Operation::Steer,
    ] {
        let report = talaria_sim::crash::run_suite(Target::Acp(operation), &options)
            .await
            .unwrap_or_else(|e| panic!("{}: {e:#}", operation.name()));
        eprintln!("{}", report.summary());
        if !report.failures().is_empty() {
            failed.push(report.details());
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
