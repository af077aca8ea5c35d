//! Finds (and if needed builds) this workspace's binaries for tests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The path of binary `bin` of package `package`: the one beside `$TALARIA_BIN` when that is
/// set and it is there (the caller built the workspace's binaries with the agent, as
/// `tests/run-all.sh` does: building it again here, alone, would resolve other features and
/// compile its crates a second time), else built once per test process with cargo (a no-op
/// when up to date), under `$CARGO_TARGET_DIR` or this workspace's `target/`.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = talaria_util::lock(built);
    if let Some(path) = built.get(bin) {
        return path.clone();
    }
    if let Some(beside) = beside_the_agent(bin) {
        built.insert(bin.to_string(), beside.clone());
        return beside;
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", package, "--bin", bin])
        .current_dir(&workspace)
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => panic!("building {bin} failed: {other:?}"),
    }
    let path = target.join("debug").join(bin);
    built.insert(bin.to_string(), path.clone());
    path
}

/// Binary `bin` in the folder of `$TALARIA_BIN`, if both are there.
fn beside_the_agent(bin: &str) -> Option<PathBuf> {
    let agent = PathBuf::from(std::env::var_os("TALARIA_BIN")?);
    let beside = agent.parent()?.join(bin);
    beside.is_file().then_some(beside)
}

/// The `talaria` binary under test: `$TALARIA_BIN`, else this workspace's debug build (with
/// its sandbox helper, `talaria-sandbox`, beside it).
pub fn talaria_bin() -> PathBuf {
    match std::env::var_os("TALARIA_BIN") {
        Some(path) => PathBuf::from(path),
        None => {
            workspace_bin("talaria-server", "talaria-sandbox");
            workspace_bin("talaria-server", "talaria")
        }
    }
}
