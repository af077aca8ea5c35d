//! Logging to stderr (never stdout), and panics routed into the log.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the stderr subscriber (level from `TALARIA_LOG`, else `RUST_LOG`, else `info`)
/// and a panic hook that logs instead of printing.
pub fn init() {
    let filter = std::env::var("TALARIA_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        tracing::error!(%location, "panic: {message}");
    }));
}
