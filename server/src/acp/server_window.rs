//! Sizes sessions for the context window a local model server reports, when the user has
//! not set one: probed once per server and model, started at `initialize` so `session/new`
//! rarely waits for it. A server that reports a small window (a small local model) gets the
//! core toolsets unless `toolsets` is configured: fewer tools to confuse it, a shorter prompt.

use std::collections::HashMap;

use talaria_engine::config::{Config, is_local};
use talaria_provider::server_window::{ServerWindow, probe};
use tokio::task::JoinHandle;

enum Probe {
    Running(JoinHandle<Option<ServerWindow>>),
    Done(Option<ServerWindow>),
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

/// Whether the configuration leaves the window to the server.
fn wants_probe(config: &Config) -> bool {
    !config.context_window_set && is_local(&config.endpoint().base_url)
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
                let client =
                    talaria_provider::http::client("probe", std::time::Duration::from_millis(500))
                        .ok()?;
                probe(&client, &base_url, &model).await
            }))
        });
    }

    /// Replaces a defaulted window with the server's figure, waiting for the probe if it
    /// is still running.
    pub(super) async fn apply(&mut self, config: &mut Config) {
        if !wants_probe(config) {
            return;
        }
        self.start(config);
        let Some(probe) = self.probes.get_mut(&key(config)) else {
            return;
        };
        if let Probe::Running(handle) = probe {
            let found = handle.await.ok().flatten();
            match found {
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
        if let Probe::Done(Some(window)) = probe {
            config.context_window = window.tokens.max(1024);
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
}
