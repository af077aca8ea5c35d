//! Benchmark: `search_files` over a generated tree of 100,000 files against ripgrep (`rg`,
//! when installed) on the same tree. Prints times and the ratio; not a timed test.
//!
//! Run: `cargo bench -p talaria-tools --bench search` (`-- --files N` for another size).

/// Writes one line of the report to this program's standard output (a report, not a
/// protocol stream: the agent it measures is another process).
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_tools::{Tool, ToolContext, ToolStatus};
use tokio_util::sync::CancellationToken;

fn generate(root: &Path, files: usize) -> std::io::Result<()> {
    let per_dir = 100;
    for index in 0..files {
        let dir = root.join(format!(
            "pkg{:04}/mod{:02}",
            index / per_dir / 10,
            (index / per_dir) % 10
        ));
        if index % per_dir == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let mut body = String::with_capacity(600);
        for line in 0..12 {
            body.push_str(&format!(
                "fn item_{index}_{line}(value: u64) -> u64 {{ value * {line} + {index} }}\n"
            ));
        }
        if index % 997 == 0 {
            body.push_str("// NEEDLE: the thing we are looking for\n");
        }
        std::fs::write(dir.join(format!("file{index:06}.rs")), body)?;
    }
    Ok(())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let files = args
        .iter()
        .position(|a| a == "--files")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    generate(dir.path(), files)?;
    report!(
        "generated {files} files in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ctx = ToolContext::local(
        dir.path().to_path_buf(),
        CancellationToken::new(),
        Default::default(),
    );
    let tool = talaria_tools::SearchFiles;
    let query = json!({"pattern": "NEEDLE: the thing", "limit": 1000});
    let mut ours = Vec::new();
    let mut matches = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let outcome = runtime.block_on(tool.call(query.clone(), &ctx));
        ours.push(started.elapsed());
        assert_eq!(outcome.status, ToolStatus::Completed, "{}", outcome.content);
        matches = outcome
            .content
            .lines()
            .filter(|l| l.contains(":NEEDLE") || l.contains(": NEEDLE") || l.contains("NEEDLE:"))
            .count();
    }
    let ours = median(ours);
    report!(
        "search_files: {:8.1} ms  ({matches} matching lines)",
        ours.as_secs_f64() * 1000.0
    );
    let rg_available = std::process::Command::new("rg")
        .arg("--version")
        .output()
        .is_ok();
    if !rg_available {
        report!("rg not installed (Debian package `ripgrep`): no comparison");
        return Ok(());
    }
    let mut theirs = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let output = std::process::Command::new("rg")
            .args(["--line-number", "--no-heading", "NEEDLE: the thing", "."])
            .current_dir(dir.path())
            .output()?;
        theirs.push(started.elapsed());
        assert!(output.status.success());
    }
    let theirs = median(theirs);
    report!("rg:           {:8.1} ms", theirs.as_secs_f64() * 1000.0);
    report!(
        "ratio search_files / rg: {:.2} (target <= 1.5)",
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
    Ok(())
}
