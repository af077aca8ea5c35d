//! Sizes sessions for a local model server: the context window it reports (when the user has
//! not set one) and how many requests it serves at once, probed once per server and model,
//! started at `initialize` so `session/new` rarely waits for it. A local model with a small
//! window (set or reported) gets the core toolsets unless `toolsets` is configured: fewer
//! tools to confuse it, a shorter prompt.

use std::collections::HashMap;

use talaria_engine::config::{Config, is_local};
use talaria_provider::server_window::{ServerReport, report};
use tokio::task::JoinHandle;

enum Probe {
    Running(JoinHandle<ServerReport>),
    Done(ServerReport),
}

/// The probes of this process, by base URL and model.
#[derive(Default)]
pub(super) struct WindowProbes {
    probes: HashMap<String, Probe>,
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

fn key(config: &Config) -> String {
    format!("{} {}", config.endpoint().base_url, config.model)
}

impl WindowProbes {
    /// Starts asking the server in the background, if the configuration calls for it.
    pub(super) fn start(&mut self, config: &Config) {
        if !wants_probe(config) {
            return;
        }
        let base_url = config.endpoint().base_url.clone();
        let model = config.model.clone();
        self.probes.entry(key(config)).or_insert_with(|| {
            Probe::Running(tokio::spawn(async move {
                match talaria_provider::http::client_for(
                    "probe",
                    std::time::Duration::from_millis(500),
                    &base_url,
                ) {
                    Ok(client) => report(&client, &base_url, &model).await,
                    Err(_) => ServerReport::default(),
                }
            }))
        });
    }

    /// Replaces a defaulted window with the server's figure and records its slots (waiting
    /// for the probe if it is still running); gives a small local model the core toolsets.
    pub(super) async fn apply(&mut self, config: &mut Config) {
        if !wants_probe(config) {
            return;
        }
        self.start(config);
        let Some(probe) = self.probes.get_mut(&key(config)) else {
            return;
        };
        if let Probe::Running(handle) = probe {
            let found = handle.await.unwrap_or_default();
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
            *probe = Probe::Done(found);
        }
        if let Probe::Done(found) = probe {
            if let Some(window) = found.window
                && !config.context_window_set
            {
                config.context_window = window.tokens.max(1024);
            }
            config.server_slots = found.slots;
        }
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
}
