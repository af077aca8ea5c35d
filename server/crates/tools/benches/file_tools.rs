//! Benchmark: the cost of one `read_file`, `write_file` and `patch` call with the local files
//! opened through the one way (`talaria-files` via `fs::pinned`: resolved once, `openat2`
//! beneath a held folder without following links, written to an exclusive temporary renamed
//! in the folder's descriptor) against the same calls with files opened by name (`tokio::fs`
//! read and write), on the same machine in the same run. Each write's content differs from
//! the file's (a write of the same content writes nothing). Prints the median per call and
//! the difference; not a timed test.
//!
//! Run: `cargo bench -p talaria-tools --bench file_tools` (`-- --calls N`).

/// Writes one line of the report to this program's standard output (a report, not a
/// protocol stream).
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use talaria_tools::{FileAccess, FileError, LocalFiles};
use talaria_tools::{Tool, ToolContext, ToolStatus};
use tokio_util::sync::CancellationToken;

/// Files opened by name, as the local files were before they were pinned.
struct ByName;

impl FileAccess for ByName {
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, FileError>> {
        Box::pin(async move {
            tokio::fs::read_to_string(path)
                .await
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => FileError::NotFound(path.to_path_buf()),
                    _ => FileError::Other(e.to_string()),
                })
        })
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move {
            tokio::fs::write(path, text)
                .await
                .map_err(|e| FileError::Other(e.to_string()))
        })
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn per_call(tool: &dyn Tool, args: &[Value], ctx: &ToolContext, calls: usize) -> Duration {
    let mut samples = Vec::with_capacity(calls);
    for call in 0..calls {
        let args = &args[call % args.len()];
        let started = Instant::now();
        let outcome = tool.call(args.clone(), ctx).await;
        samples.push(started.elapsed());
        assert_eq!(outcome.status, ToolStatus::Completed, "{}", outcome.content);
    }
    median(samples)
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let calls = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(500);
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    let text: String = (0..400)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    std::fs::create_dir_all(root.join("src/nested"))?;
    std::fs::write(root.join("src/nested/file.rs"), &text)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let read = [json!({"path": "src/nested/file.rs"})];
        let write = [
            json!({"path": "src/nested/out.rs", "content": text}),
            json!({"path": "src/nested/out.rs", "content": format!("{text}one more\n")}),
        ];
        let patch = [json!({"path": "src/nested/file.rs", "old_string": "line 7 of", "new_string": "line 7 of"})];
        let tools: [(&str, &dyn Tool, &[Value]); 3] = [
            ("read_file", &talaria_tools::ReadFile, &read),
            ("write_file", &talaria_tools::WriteFile, &write),
            ("patch", &talaria_tools::Patch, &patch),
        ];
        report!("{calls} calls each, median per call:");
        for (name, tool, args) in tools {
            let mut ctx = ToolContext::local(root.clone(), CancellationToken::new(), Default::default());
            ctx.files = Arc::new(ByName);
            let before = per_call(tool, args, &ctx, calls).await;
            ctx.files = Arc::new(LocalFiles::default());
            let after = per_call(tool, args, &ctx, calls).await;
            let delta = after.as_secs_f64() - before.as_secs_f64();
            report!(
                "{name:<11} by name {:>8.1} µs   pinned {:>8.1} µs   difference {:+.1} µs",
                before.as_secs_f64() * 1e6,
                after.as_secs_f64() * 1e6,
                delta * 1e6
            );
        }
    });
    Ok(())
}
