//! The OS sandbox's cost per command: `sh -c true` started directly and through the sandbox
//! helper (`talaria __sandbox /bin/sh -c true`, the policy in its environment) with a
//! session's policy on a home like a developer's, with each layer: inside the namespaces,
//! and without them (Landlock, filters and limits only).

use std::path::Path;
use std::time::Instant;

use serde_json::json;

/// Median spawn-to-exit times in milliseconds (and the minima): without the sandbox, in it
/// with namespaces, in it without them.
pub struct SandboxCost {
    pub direct: (f64, f64),
    pub sandboxed: (f64, f64),
    pub without_namespaces: (f64, f64),
    /// A command that creates [`WRITES`] files, directly and in the sandbox with namespaces
    /// (each create passes the watcher, which logs refused writes).
    pub writes_direct: (f64, f64),
    pub writes_sandboxed: (f64, f64),
}

/// How many files the write-heavy command creates.
pub const WRITES: usize = 200;

fn write_heavy() -> String {
    format!("i=0; while [ $i -lt {WRITES} ]; do : > w$i; i=$((i+1)); done")
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

fn policy(home: &Path, workspace: &Path, namespaces: bool) -> String {
    json!({
        "sandbox": {
            "writable": [workspace],
            // Talaria's home, and the user's home whose stores and keys the helper finds
            // itself, as a session's policy names them.
            "hidden": [home.join(".talaria")],
            "readable": [home.join(".talaria/skills")],
            "homes": [home],
            "network": true,
            "namespaces": namespaces,
        },
        // As Talaria runs a command: with a refusal log, so the watcher also looks at writes.
        "refusals": home.join("bench-refusals.log"),
        "env": null,
    })
    .to_string()
}

/// Fills `home` as a developer's is: some credential stores (one a link into `~/dotfiles`,
/// as dotfiles managers make them), tokens of CLIs, and the many other entries at its top,
/// in `~/.config` and in `~/.cache` that Landlock grants one by one around them.
fn real_home(home: &Path) {
    let write = |path: &str| {
        let path = home.join(path);
        if let Some(folder) = path.parent() {
            let _ = std::fs::create_dir_all(folder);
        }
        let _ = std::fs::write(path, "x");
    };
    for store in [
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".config/gh/hosts.yml",
        ".codex/auth.json",
        ".claude/.credentials.json",
        ".git-credentials",
        ".talaria/config.toml",
        ".talaria/skills/demo/SKILL.md",
        "dotfiles/kube/config",
    ] {
        write(store);
    }
    let _ = std::os::unix::fs::symlink(home.join("dotfiles/kube"), home.join(".kube"));
    for i in 0..60 {
        write(&format!("project-{i}/README"));
    }
    for i in 0..30 {
        write(&format!(".config/app-{i}/settings"));
        write(&format!(".cache/tool-{i}/data"));
    }
}

/// Measures each, `runs` times.
pub fn measure(agent: &Path, home: &Path, workspace: &Path, runs: usize) -> SandboxCost {
    // A home of its own, so the other benches' sessions see theirs unchanged.
    let home = &home.join("sandbox-user");
    real_home(home);
    let _ = std::fs::write(home.join("bench-refusals.log"), "");
    let shell = |script: &str| {
        let mut command = std::process::Command::new("/bin/sh");
        command.args(["-c", script]).current_dir(workspace);
        command
    };
    let direct = time_runs(runs, || shell("true"));
    let writes_direct = time_runs(runs / 5, || shell(&write_heavy()));
    // The helper the agent starts: `talaria-sandbox` beside it, else the agent itself.
    let helper = agent
        .parent()
        .map(|dir| dir.join("talaria-sandbox"))
        .filter(|beside| beside.exists())
        .unwrap_or_else(|| agent.to_path_buf());
    let through = |namespaces: bool, script: &str, runs: usize| {
        let spec = policy(home, workspace, namespaces);
        time_runs(runs, || {
            let mut command = std::process::Command::new(&helper);
            command
                .args(["__sandbox", "/bin/sh", "-c", script])
                .current_dir(workspace)
                .env("TALARIA_SANDBOX_SPEC", &spec);
            command
        })
    };
    SandboxCost {
        direct,
        sandboxed: through(true, "true", runs),
        without_namespaces: through(false, "true", runs),
        writes_direct,
        writes_sandboxed: through(true, &write_heavy(), runs / 5),
    }
}
