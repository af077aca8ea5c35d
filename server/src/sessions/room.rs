//! One connection's session room: what its sessions are assembled from and kept with — the
//! model router it shares (with the process's other connections, `ProcessShared`), the
//! built-in tools, the store's journal, the cassettes, the endpoints its client set.

use std::sync::Arc;

use talaria_engine::{Config, Journal, ModelRouter};

use super::cassettes::{CassetteOptions, Cassettes};
use super::client_providers::{ClientEndpoint, ClientProviders};
use super::error::SessionError;
use super::process_shared::ProcessShared;
use super::server_window;

/// The model router (providers, key pools, fallbacks) and the configuration it was built
/// from; rebuilt when the configuration changes, shared by sessions otherwise (so key
/// cooldowns apply across sessions).
struct RouterCache {
    fingerprint: String,
    router: Arc<ModelRouter>,
}

/// What one connection's sessions are made from and kept with.
pub struct SessionRoom {
    /// What this connection shares with the process's others (routers, window probes).
    pub(super) shared: ProcessShared,
    router: Option<RouterCache>,
    pub(super) registry: talaria_tools::Registry,
    /// The session store's journal, started by `initialize` (or the first session that needs
    /// it); it opens the store in the background, again and again until it opens.
    pub(super) store: Option<Journal>,
    /// `--record` / `--replay`: sessions' model calls recorded or served from cassettes.
    pub(super) cassettes: Cassettes,
    /// Configuration warnings were shown (once per process).
    pub(super) config_warned: bool,
    /// `logout` was answered and no `authenticate` since: sessions do not start.
    pub logged_out: bool,
    /// Endpoints the client set or disabled (`providers/*`), for sessions started after.
    providers: ClientProviders,
}

impl SessionRoom {
    /// A connection's room; a replay's cassettes are read now (off the runtime thread).
    pub async fn open(shared: ProcessShared, cassettes: CassetteOptions) -> anyhow::Result<Self> {
        Ok(Self {
            shared,
            router: None,
            registry: talaria_tools::builtin_registry(),
            store: None,
            cassettes: Cassettes::open(cassettes).await?,
            config_warned: false,
            logged_out: false,
            providers: ClientProviders::default(),
        })
    }

    /// The store's journal, when one is open (or opening).
    pub fn store(&self) -> Option<&Journal> {
        self.store.as_ref()
    }

    /// The journal, for the last writes at shutdown.
    pub fn into_store(self) -> Option<Journal> {
        self.store
    }

    /// The sessions running in this process, which any of its connections may attach to.
    pub fn live(&self) -> &super::process_shared::LiveSessions {
        &self.shared.live
    }

    /// What the transport offers beyond ACP (advertised at `initialize`).
    pub fn transport(&self) -> Option<serde_json::Value> {
        self.shared.transport.clone()
    }

    /// Once the client is initialized with `config`: the store (for a process serving one
    /// client), the local server's probe and the router start.
    pub fn initialized(&mut self, config: &Config) {
        if self.shared.store_at_initialize {
            self.journal(config);
        }
        self.shared.windows.start(config);
        let _ = self.router_for(config);
    }

    /// The shared router for `config`: this connection's, another connection's, or built now.
    pub(super) fn router_for(&mut self, config: &Config) -> Result<Arc<ModelRouter>, SessionError> {
        let fingerprint = format!("{config:?}");
        if let Some(cache) = &self.router
            && cache.fingerprint == fingerprint
        {
            return Ok(cache.router.clone());
        }
        let router = match self.shared.router(&fingerprint) {
            Some(router) => router,
            None => {
                let router = Arc::new(
                    talaria_engine::build_router(config)
                        .map_err(|e| SessionError::Internal(e.to_string()))?,
                );
                self.shared.offer_router(&fingerprint, &router);
                router
            }
        };
        self.router = Some(RouterCache {
            fingerprint,
            router: router.clone(),
        });
        Ok(router)
    }

    /// The store's journal, started (and the store opened in the background, again until it
    /// opens) on first use.
    pub fn journal(&mut self, config: &Config) -> Journal {
        let journal = journal_or_open(self.store.clone(), config);
        self.adopt_store(&journal);
        journal
    }

    /// Keeps a journal a request opened off the loop, unless the room has one already.
    pub fn adopt_store(&mut self, journal: &Journal) {
        if self.store.is_none() {
            self.store = Some(journal.clone());
        }
    }

    /// What a session's slow start needs, cloned for a task of its own; `forms`: the client
    /// shows forms.
    pub fn start_context(&self, forms: bool) -> StartContext {
        StartContext {
            windows: self.shared.windows.clone(),
            forms,
            logged_out: self.logged_out,
            providers: self.providers.clone(),
            trust: None,
        }
    }

    /// The endpoints the client set or disabled.
    pub fn providers(&self) -> &ClientProviders {
        &self.providers
    }

    /// Service `id`'s endpoint, set by the client (`None`: disabled) for sessions started
    /// from now on; the shared router is built again for the next session.
    pub fn set_endpoint(&mut self, id: &str, endpoint: Option<ClientEndpoint>) {
        self.providers = self.providers.with(id, endpoint);
        self.router = None;
    }
}

/// What the slow part of starting a session needs from the room (cloned off the loop).
#[derive(Clone)]
pub struct StartContext {
    pub(super) windows: server_window::WindowProbes,
    /// The client shows forms (an MCP server's questions).
    pub(super) forms: bool,
    /// `logout` was answered and no `authenticate` since.
    pub(super) logged_out: bool,
    /// The endpoints the client set (`providers/set`).
    pub(super) providers: ClientProviders,
    /// Who is asked about the folder's trust (nobody unless the wire room ties a question to
    /// the request being answered).
    pub trust: Option<std::sync::Arc<dyn super::TrustQuestion>>,
}

/// The journal known when a request came, or one opening for `config` (which the room
/// adopts when the request finishes).
pub(super) fn journal_or_open(known: Option<Journal>, config: &Config) -> Journal {
    known.unwrap_or_else(|| {
        let config = config.clone();
        let spool = config.home.join("spool");
        Journal::opening_spooled(Box::new(move || crate::store::open(&config)), spool)
    })
}
