//! The agent under test: a `talaria` built with failpoints (and the PostgreSQL store), named
//! by `TALARIA_BIN` (tests/run-all.sh builds every suite's agent so), else built here once per
//! test process and copied beside the usual binary as `talaria-failpoints`. A build without
//! failpoints passes no point: the suite says so and fails.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The failpoints build's path (built on first use when `TALARIA_BIN` is unset).
pub fn failpoints_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("TALARIA_BIN") {
        Some(path) => PathBuf::from(path),
        None => build(),
    })
    .clone()
}

fn build() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "talaria-server",
            "--bins",
            "--features",
            "talaria-server/failpoints,talaria-server/postgres",
        ])
        .current_dir(&workspace)
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => panic!("building talaria with failpoints failed: {other:?}"),
    }
    // Copied under its own name (a file put in place by a rename, so a process still running
    // an older copy keeps it), beside the sandbox helper it runs commands through.
    let built = target.join("debug").join("talaria");
    let named = target.join("debug").join("talaria-failpoints");
    let copying = target
        .join("debug")
        .join(format!(".talaria-failpoints.{}", std::process::id()));
    std::fs::copy(&built, &copying)
        .and_then(|_| std::fs::rename(&copying, &named))
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", built.display(), named.display()));
    named
}
