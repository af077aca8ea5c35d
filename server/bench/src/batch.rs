//! `talaria batch`'s figures: 1,000 trivial tasks against the mock with `--parallel 64`
//! (tasks per second, the process's peak memory), and the same spread over two workers on
//! one PostgreSQL queue.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use talaria_harness::{MockLlm, MockReply};

/// Tasks per second and peak resident memory (MB, the largest of the processes).
pub struct BatchFigures {
    pub tasks_per_second: f64,
    pub peak_rss_mb: f64,
}

/// Writes `count` trivial tasks; scripts as many answers.
fn trivial_tasks(dir: &Path, mock: &MockLlm, count: usize) -> anyhow::Result<String> {
    let mut text = String::new();
    for n in 0..count {
        mock.push(MockReply::text(&["ok"]));
        text.push_str(&format!(
            "{{\"id\":\"t{n:04}\",\"prompt\":\"trivial task {n}\"}}\n"
        ));
    }
    let path = dir.join("tasks.jsonl");
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

fn batch_command(
    agent: &Path,
    vars: &[(String, String)],
    args: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(agent);
    command
        .arg("batch")
        .args(args)
        .arg("--quiet")
        .env_clear()
        .envs(vars.iter().cloned())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// Waits for the processes, following their resident memory; the largest peak, in MB.
async fn wait_all(children: &mut [tokio::process::Child]) -> anyhow::Result<f64> {
    let pids: Vec<u32> = children
        .iter()
        .filter_map(tokio::process::Child::id)
        .collect();
    let mut peak_kib = 0;
    loop {
        for pid in &pids {
            if let Some(kib) = crate::peak_rss_kib(*pid) {
                peak_kib = peak_kib.max(kib);
            }
        }
        let mut running = false;
        for child in children.iter_mut() {
            match child.try_wait()? {
                None => running = true,
                Some(status) => anyhow::ensure!(status.success(), "a batch failed: {status}"),
            }
        }
        if !running {
            return Ok(peak_kib as f64 / 1024.0);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `count` tasks in one `talaria batch --parallel 64`.
pub async fn local(
    agent: &Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    count: usize,
) -> anyhow::Result<BatchFigures> {
    let dir = tempfile::tempdir()?;
    let dataset = trivial_tasks(dir.path(), mock, count)?;
    let out = dir.path().join("out");
    let out = out.to_str().context("utf-8")?;
    let started = Instant::now();
    let mut children =
        vec![batch_command(agent, vars, &[&dataset, "--out", out, "--parallel", "64"]).spawn()?];
    let peak_rss_mb = wait_all(&mut children).await?;
    let elapsed = started.elapsed();
    let lines = std::fs::read_to_string(dir.path().join("out/results.jsonl"))?
        .lines()
        .count();
    anyhow::ensure!(lines == count, "{lines} of {count} tasks finished");
    Ok(BatchFigures {
        tasks_per_second: count as f64 / elapsed.as_secs_f64(),
        peak_rss_mb,
    })
}

/// `count` tasks loaded into a PostgreSQL queue at `url`, taken by two workers (`--parallel
/// 32` each); timed from the workers' start.
pub async fn two_workers(
    agent: &Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    url: &str,
    count: usize,
) -> anyhow::Result<BatchFigures> {
    let dir = tempfile::tempdir()?;
    let dataset = trivial_tasks(dir.path(), mock, count)?;
    let queue = ["--queue", url, "--batch", "bench"];
    let mut load = vec![&dataset as &str];
    load.extend(queue);
    let loaded = batch_command(agent, vars, &load).status().await?;
    anyhow::ensure!(loaded.success(), "loading the queue failed");
    let mut work = queue.to_vec();
    work.extend(["--worker", "--parallel", "32"]);
    let started = Instant::now();
    let mut children = vec![
        batch_command(agent, vars, &work).spawn()?,
        batch_command(agent, vars, &work).spawn()?,
    ];
    let peak_rss_mb = wait_all(&mut children).await?;
    Ok(BatchFigures {
        tasks_per_second: count as f64 / started.elapsed().as_secs_f64(),
        peak_rss_mb,
    })
}
