//! `talaria batch --queue`: a batch spread over worker processes through a real PostgreSQL
//! server started by the test. Three workers with one killed mid-task finish every task
//! exactly once; a worker started before the queue exists waits for it; a database
//! restarted mid-batch loses nothing. The export writes the files a local run writes.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::MockReply;
use talaria_harness::binary::talaria_bin;

use crate::support::*;

/// The rows of the batch: (id, state, worker, attempts).
async fn rows(url: &str, batch: &str) -> Vec<(String, String, Option<String>, i32)> {
    let (url, batch) = (url.to_string(), batch.to_string());
    tokio::task::spawn_blocking(move || {
        let Ok(mut client) = talaria_store::PgStore::client(&url) else {
            return Vec::new();
        };
        client
            .query(
                "SELECT id, state, worker, attempts FROM talaria_batch_tasks WHERE batch = $1",
                &[&batch],
            )
            .map(|rows| {
                rows.iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                    .collect()
            })
            .unwrap_or_default()
    })
    .await
    .expect("joined")
}

fn batch_command(env: &TestEnv, url: &str, home: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(talaria_bin());
    command
        .arg("batch")
        .args(["--queue", url])
        .args(args)
        .env_clear()
        .envs(env.env())
        // Another machine: a home of its own; its sessions land in the same database.
        .env("TALARIA_HOME", home)
        .env("TALARIA_STORE_URL", url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

/// `count` tasks, each answered after `delay_ms`; scripted twice (a task taken over after a
/// worker died is asked again).
fn slow_tasks(env: &TestEnv, dir: &Path, prefix: &str, count: usize, delay_ms: u64) -> String {
    let mut text = String::new();
    for n in 0..count {
        let marker = format!("[task {prefix}{n:02}]");
        let slow = || MockReply::Delayed {
            delay_ms,
            reply: Box::new(MockReply::text(&["done ", &n.to_string()])),
        };
        env.mock.script_for_prompt(&marker, vec![slow(), slow()]);
        let task = json!({"id": format!("{prefix}{n:02}"), "prompt": format!("{marker} go"),
                          "check": "true"});
        text.push_str(&format!("{task}\n"));
    }
    let path = dir.join(format!("{prefix}.jsonl"));
    std::fs::write(&path, text).expect("dataset");
    path.display().to_string()
}

async fn load(env: &TestEnv, url: &str, home: &Path, dataset: &str, batch: &str) {
    let output = batch_command(env, url, home, &[dataset, "--batch", batch])
        .output()
        .await
        .expect("load");
    assert!(output.status.success(), "{output:?}");
}

async fn exported(env: &TestEnv, url: &str, home: &Path, batch: &str, dir: &Path) -> Vec<Value> {
    let out = dir.join(format!("export-{batch}"));
    let output = batch_command(env, url, home, &["--batch", batch, "--export"])
        .arg(&out)
        .output()
        .await
        .expect("export");
    assert!(output.status.success(), "{output:?}");
    assert!(out.join("summary.md").exists());
    std::fs::read_to_string(out.join("results.jsonl"))
        .expect("results")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

fn assert_each_once(results: &[Value], count: usize) {
    let ids: HashSet<&str> = results.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(results.len(), count, "{results:?}");
    assert_eq!(ids.len(), count, "no task twice");
    assert!(
        results.iter().all(|r| r["verdict"] == "pass"),
        "{results:?}"
    );
}

async fn wait_exit(child: &mut tokio::process::Child, within: Duration) -> i32 {
    let status = tokio::time::timeout(within, child.wait())
        .await
        .expect("the worker ends once the batch is done")
        .expect("status");
    status.code().unwrap_or(-1)
}

#[tokio::test]
async fn three_workers_one_killed_mid_task_finish_every_task_exactly_once() {
    let (_cluster, url) = throwaway_database().await;
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let dataset = slow_tasks(&env, dir.path(), "q", 12, 400);
    load(&env, &url, &dir.path().join("loader"), &dataset, "three").await;
    let worker_args = [
        "--worker",
        "--batch",
        "three",
        "--lease",
        "2",
        "--parallel",
        "2",
    ];
    let mut workers: Vec<tokio::process::Child> = (0..3)
        .map(|n| {
            batch_command(
                &env,
                &url,
                &dir.path().join(format!("host{n}")),
                &worker_args,
            )
            .spawn()
            .expect("worker")
        })
        .collect();
    // The first worker dies holding a task.
    let doomed = format!("pid {}", workers[0].id().expect("pid"));
    let deadline = Instant::now() + WAIT;
    let held = loop {
        let running = rows(&url, "three").await;
        if let Some(row) = running
            .iter()
            .find(|r| r.1 == "running" && r.2.as_deref().is_some_and(|w| w.ends_with(&doomed)))
        {
            break row.0.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the first worker took no task: {running:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    workers[0].start_kill().expect("kill -9");
    let _ = workers[0].wait().await;
    for worker in &mut workers[1..] {
        assert_eq!(wait_exit(worker, Duration::from_secs(90)).await, 0);
    }
    let finished = rows(&url, "three").await;
    assert!(finished.iter().all(|r| r.1 == "done"), "{finished:?}");
    let taken_over = finished
        .iter()
        .find(|r| r.0 == held)
        .expect("the held task");
    assert!(
        taken_over.3 >= 2,
        "taken again after the lease: {taken_over:?}"
    );
    assert!(
        !taken_over
            .2
            .as_deref()
            .is_some_and(|w| w.ends_with(&doomed))
    );
    let results = exported(&env, &url, &dir.path().join("loader"), "three", dir.path()).await;
    assert_each_once(&results, 12);
    // The trajectories and the sessions' records landed in the database too.
    let out = dir.path().join("export-three");
    assert!(out.join(format!("trajectories/{held}.json")).exists());
    let session = results
        .iter()
        .find(|r| r["id"] == held.as_str())
        .and_then(|r| r["session_id"].as_str())
        .expect("its session")
        .to_string();
    let url_for_load = url.clone();
    let answer = tokio::task::spawn_blocking(move || {
        use talaria_store::SessionStore;
        let store = talaria_store::PgStore::connect(&url_for_load).expect("store");
        let (_, transcript) = store.load(&session).expect("the task's record");
        format!("{:?}", transcript)
    })
    .await
    .expect("joined");
    assert!(answer.contains("done "), "the record holds the answer");
}

#[tokio::test]
async fn a_worker_started_before_the_queue_exists_waits_for_it() {
    let (_cluster, url) = throwaway_database().await;
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut worker = batch_command(
        &env,
        &url,
        &dir.path().join("host"),
        &["--worker", "--batch", "early"],
    )
    .spawn()
    .expect("worker");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        worker.try_wait().expect("status").is_none(),
        "still waiting"
    );
    let dataset = slow_tasks(&env, dir.path(), "e", 4, 10);
    load(&env, &url, &dir.path().join("loader"), &dataset, "early").await;
    assert_eq!(wait_exit(&mut worker, Duration::from_secs(60)).await, 0);
    let results = exported(&env, &url, &dir.path().join("loader"), "early", dir.path()).await;
    assert_each_once(&results, 4);
}

#[tokio::test]
async fn a_database_restarted_mid_batch_loses_nothing() {
    let (cluster, url) = throwaway_database().await;
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let dataset = slow_tasks(&env, dir.path(), "d", 10, 300);
    load(&env, &url, &dir.path().join("loader"), &dataset, "restart").await;
    let mut worker = batch_command(
        &env,
        &url,
        &dir.path().join("host"),
        &["--worker", "--batch", "restart", "--parallel", "2"],
    )
    .spawn()
    .expect("worker");
    let deadline = Instant::now() + WAIT;
    while rows(&url, "restart")
        .await
        .iter()
        .filter(|r| r.1 == "done")
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.stop();
        std::thread::sleep(Duration::from_secs(2));
        cluster.start_again();
        cluster
    })
    .await
    .expect("restarted");
    assert_eq!(wait_exit(&mut worker, Duration::from_secs(120)).await, 0);
    let results = exported(
        &env,
        &url,
        &dir.path().join("loader"),
        "restart",
        dir.path(),
    )
    .await;
    assert_each_once(&results, 10);
    drop(cluster);
}
