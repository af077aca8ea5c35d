//! Sizes sessions for a local model server: the context window it reports (when the user has
//! not set one) and how many requests it serves at once, probed once per server and model,
//! started at `initialize`; `session/new` never waits for it (a session that starts before the
//! server answered is sized when it does, before its first prompt runs). A local model with a small
//! window (set or reported) gets the core toolsets unless `toolsets` is configured: fewer
//! tools to confuse it, a shorter prompt.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use talaria_engine::{Config, is_local};
use talaria_provider::server_window::{ServerReport, report};

/// A probe running in the background (or done), awaitable by every session that needs it,
/// and whether its result was logged.
#[derive(Clone)]
struct Probe {
    report: Shared<BoxFuture<'static, ServerReport>>,
    logged: Arc<AtomicBool>,
}

/// The probes of this process, by base URL and model; cloned into the tasks that start
/// sessions (each waits only for its own server's probe).
#[derive(Default, Clone)]
pub(super) struct WindowProbes {
    probes: Arc<Mutex<HashMap<String, Probe>>>,
}

/// The toolsets a session gets when its local server reports a small window and no
/// `toolsets` are configured.
pub(super) const CORE_TOOLSETS: [&str; 4] = ["file", "terminal", "todo", "clarify"];
/// Windows up to this many tokens are small.
pub(super) const SMALL_WINDOW: u64 = 32_768;

/// Whether the server is asked (a local one: its window, its slots).
fn wants_probe(config: &Config) -> bool {
    is_local(&config.endpoint().base_url)
}

/// What the configured model server says about itself, when it is on this machine or a
/// private network (nothing is asked of any other); `purpose` names the asker in its logs.
pub async fn local_server_report(config: &Config, purpose: &str) -> ServerReport {
    if !wants_probe(config) {
        return ServerReport::default();
    }
    ask(&config.endpoint().base_url, &config.model, purpose).await
}

async fn ask(base_url: &str, model: &str, purpose: &str) -> ServerReport {
    let timeout = std::time::Duration::from_millis(500);
    match talaria_provider::http::client_for(purpose, timeout, base_url) {
        Ok(client) => report(&client, base_url, model).await,
        Err(_) => ServerReport::default(),
    }
}

fn key(config: &Config) -> String {
    format!("{} {}", config.endpoint().base_url, config.model)
}

impl WindowProbes {
    /// Starts asking the server in the background, if the configuration calls for it.
    pub(super) fn start(&self, config: &Config) {
        let _ = self.probe(config);
    }

    /// The server's probe (started now if it was not), when the configuration calls for one.
    fn probe(&self, config: &Config) -> Option<Probe> {
        if !wants_probe(config) {
            return None;
        }
        let base_url = config.endpoint().base_url.clone();
        let model = config.model.clone();
        let mut probes = talaria_util::lock(&self.probes);
        let probe = probes.entry(key(config)).or_insert_with(|| {
            let running = tokio::spawn(async move { ask(&base_url, &model, "probe").await });
            Probe {
                report: async move { running.await.unwrap_or_default() }
                    .boxed()
                    .shared(),
                logged: Arc::default(),
            }
        });
        Some(probe.clone())
    }

    /// Sizes `config` for its server now when the server has answered (or needs no asking);
    /// else returns the probe still running, for [`PendingWindow::apply`] later.
    pub(super) fn apply_if_known(&self, config: &mut Config) -> Option<PendingWindow> {
        let probe = self.probe(config)?;
        match probe.report.peek().copied() {
            Some(found) => {
                settle(&probe, found, config);
                None
            }
            None => Some(PendingWindow(probe)),
        }
    }
}

/// A server's probe that had not answered when its session started.
pub(super) struct PendingWindow(Probe);

impl PendingWindow {
    /// Waits for the server's answer and sizes `config` by it.
    pub(super) async fn apply(self, config: &mut Config) {
        let found = self.0.report.clone().await;
        settle(&self.0, found, config);
    }
}

/// Replaces a defaulted window with the server's figure and records its slots; gives a small
/// local model the core toolsets. Logs the server's answer once per server.
fn settle(probe: &Probe, found: ServerReport, config: &mut Config) {
    if !probe.logged.swap(true, Ordering::Relaxed) {
        match found.window {
            Some(window) => tracing::info!(
                tokens = window.tokens,
                source = window.source,
                "context window reported by the model server"
            ),
            None => tracing::info!(
                tokens = config.context_window,
                "the model server reports no context window; using the default \
                 (set context_window in config.toml or TALARIA_CONTEXT_WINDOW)"
            ),
        }
    }
    if let Some(window) = found.window
        && !config.context_window_set
    {
        config.context_window = window.tokens.max(1024);
    }
    config.server_slots = found.slots;
    // The lean default is about the window, whether it was set or reported.
    if config.toolsets.is_none() && config.context_window <= SMALL_WINDOW {
        tracing::info!(
            tokens = config.context_window,
            "a small window: the session gets the core toolsets (set toolsets in \
             config.toml to choose)"
        );
        config.toolsets = Some(CORE_TOOLSETS.iter().map(|s| s.to_string()).collect());
    }
}
