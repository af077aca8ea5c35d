//! Finds (and if needed builds) the `talaria` binary under test.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The path of the `talaria` binary: `$TALARIA_BIN`, else `<target>/debug/talaria` of this
/// workspace, built once with cargo if it is missing.
pub fn talaria_bin() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("TALARIA_BIN") {
            return PathBuf::from(path);
        }
        let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join("target"));
        let path = target.join("debug").join("talaria");
        let status = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "-p",
                "talaria-server",
                "--bin",
                "talaria",
            ])
            .current_dir(&workspace)
            .status();
        match status {
            Ok(s) if s.success() => {}
            other => panic!("building talaria failed: {other:?}"),
        }
        path
    })
    .clone()
}
