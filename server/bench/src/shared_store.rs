//! The PostgreSQL store's figures, beside the embedded store's: append per entry, loading a
//! 2,000-message session and listing 1,000 sessions through the agent over stdio. Against
//! `--postgres URL`, else a throwaway local cluster (`initdb` from Debian's `postgresql`),
//! else skipped with a note.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use talaria_store::PgStore;
use talaria_store::test_cluster::TestCluster;

use crate::sessions::{agent, list_time, load_time, percentile, timed_appends, to_load_and_list};

/// What was measured.
pub struct SharedFigures {
    pub append_p50: Duration,
    pub append_p99: Duration,
    pub load_2k: Duration,
    pub list_1k: Duration,
}

/// Whether a local cluster can be started here.
pub fn local_server_available() -> bool {
    std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.flatten().any(|d| d.path().join("bin/initdb").exists()))
        .unwrap_or(false)
}

/// A throwaway cluster and a database on it.
pub async fn local_server() -> anyhow::Result<(TestCluster, String)> {
    tokio::task::spawn_blocking(|| {
        let cluster = TestCluster::start();
        let url = cluster.database();
        (cluster, url)
    })
    .await
    .context("starting a local PostgreSQL")
}

/// Fills the database: 2,000 single-entry appends (timed), a 2,000-message session, and
/// 1,000 sessions to list.
fn fill(url: &str, workspace: &Path) -> anyhow::Result<Vec<Duration>> {
    let store = PgStore::connect(url)?;
    let appends = timed_appends(&store, workspace)?;
    to_load_and_list(&store, workspace)?;
    Ok(appends)
}

/// Measures against the database at `url` with the agent at `bin`.
pub async fn measure(
    bin: &Path,
    vars: &[(String, String)],
    url: &str,
    workspace: &Path,
) -> anyhow::Result<SharedFigures> {
    let (filled_url, filled_workspace) = (url.to_string(), workspace.to_path_buf());
    let appends = tokio::task::spawn_blocking(move || fill(&filled_url, &filled_workspace))
        .await
        .context("filling the database")??;
    let mut vars = vars.to_vec();
    vars.push(("TALARIA_STORE_URL".into(), url.to_string()));
    let mut client = agent(bin, &vars).await?;
    let list_1k = list_time(&mut client).await?;
    let load_2k = load_time(&mut client, "two-k", workspace).await?;
    client.close_stdin();
    let _ = client.wait_exit(Duration::from_secs(10)).await;
    Ok(SharedFigures {
        append_p50: percentile(&appends, 0.5),
        append_p99: percentile(&appends, 0.99),
        load_2k,
        list_1k,
    })
}
