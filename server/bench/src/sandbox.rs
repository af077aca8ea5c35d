//! The OS sandbox's cost per command: `sh -c true` started directly and through the sandbox
//! helper (`talaria __sandbox SPEC /bin/sh -c true`) with a session-like policy.

use std::path::Path;
use std::time::Instant;

use serde_json::json;

/// Median spawn-to-exit times in milliseconds: (without, with) the sandbox, and the minima.
pub struct SandboxCost {
    pub direct: (f64, f64),
    pub sandboxed: (f64, f64),
}

fn time_runs(runs: usize, mut start: impl FnMut() -> std::process::Command) -> (f64, f64) {
    let mut times: Vec<f64> = (0..runs)
        .filter_map(|_| {
            let began = Instant::now();
            let status = start().status().ok()?;
            status
                .success()
                .then(|| began.elapsed().as_secs_f64() * 1000.0)
        })
        .collect();
    super::median(&mut times)
}

/// Measures both, `runs` times each, interleaved so machine noise hits both alike.
pub fn measure(agent: &Path, home: &Path, workspace: &Path, runs: usize) -> SandboxCost {
    let policy = json!({
        "sandbox": {
            "writable": [workspace],
            "hidden": [home.join(".ssh"), home.join(".aws"), home.join(".netrc"), home.join("t")],
            "readable": [home.join("t/skills")],
            "network": true,
        },
        "env": null,
    })
    .to_string();
    let direct = time_runs(runs, || {
        let mut command = std::process::Command::new("/bin/sh");
        command.args(["-c", "true"]);
        command
    });
    let sandboxed = time_runs(runs, || {
        let mut command = std::process::Command::new(agent);
        command.args(["__sandbox", &policy, "/bin/sh", "-c", "true"]);
        command
    });
    SandboxCost { direct, sandboxed }
}
