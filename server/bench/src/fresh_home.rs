//! The first `session/new` of a fresh home against the second: each run starts the agent on
//! an empty `TALARIA_HOME` and a new workspace, sends `initialize`, then two `session/new`s,
//! each as soon as the one before was answered (what an editor does when it opens). The first
//! finds nothing made yet (the store, the checkpoints' folders, the memory folder) and runs
//! while the store is being created; the target is that it is answered within 2 ms of the
//! second.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;
use talaria_harness::{AgentProcess, WireFraming};

use super::{Env, median, ms};

/// The medians (and minimums) over the runs, in ms.
pub struct FreshHomeFigures {
    pub first: (f64, f64),
    pub second: (f64, f64),
    /// The first less the second, run by run.
    pub difference: (f64, f64),
    pub runs: usize,
}

pub async fn measure(agent: &Path, env: &Env, runs: usize) -> anyhow::Result<FreshHomeFigures> {
    let (mut first, mut second, mut difference) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (one, two) = one_run(agent, env).await?;
        first.push(one);
        second.push(two);
        difference.push(one - two);
    }
    Ok(FreshHomeFigures {
        first: median(&mut first),
        second: median(&mut second),
        difference: median(&mut difference),
        runs,
    })
}

/// One fresh home: the two `session/new`s' times, in ms.
async fn one_run(agent: &Path, env: &Env) -> anyhow::Result<(f64, f64)> {
    let home = tempfile::tempdir()?;
    let workspace = tempfile::tempdir()?;
    let vars = env.vars_with_home(&home.path().join("talaria"));
    let mut process =
        AgentProcess::spawn(agent, &["acp"], &vars, WireFraming::NewlineDelimited).await?;
    process
        .call("initialize", json!({"protocolVersion": 1}))
        .await?;
    let mut times = [0.0; 2];
    for time in &mut times {
        let sent = Instant::now();
        let created = process
            .call(
                "session/new",
                json!({"cwd": workspace.path(), "mcpServers": []}),
            )
            .await?;
        *time = ms(sent.elapsed());
        created["sessionId"].as_str().context("a session id")?;
    }
    process.close_stdin();
    process
        .wait_exit(std::time::Duration::from_secs(10))
        .await?;
    Ok((times[0], times[1]))
}
