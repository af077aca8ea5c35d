//! Finds (and if needed builds) this workspace's binaries for tests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The path of binary `bin` of package `package`, built once per test process with cargo
/// (a no-op when up to date), under `$CARGO_TARGET_DIR` or this workspace's `target/`.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = talaria_util::lock(built);
    if let Some(path) = built.get(bin) {
        return path.clone();
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
