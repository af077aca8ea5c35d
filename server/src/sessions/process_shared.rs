//! What the connections one process serves share (`talaria serve` runs many; stdio one):
//! model routers, one per configuration, so key cooldowns and pooled HTTP connections are
//! shared; local servers' window probes; and whether a connection opens the store as soon
//! as it is initialized or at its first need.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use talaria_engine::ModelRouter;

use super::server_window::WindowProbes;

/// Handed to every connection of a process; cloning shares it.
#[derive(Clone)]
pub struct ProcessShared {
    routers: Arc<Mutex<HashMap<String, Weak<ModelRouter>>>>,
    pub(super) windows: WindowProbes,
    /// The store (its writer thread and database connection) opens at `initialize`, ready
    /// for the first listing; else at the first request that needs it, so an idle
    /// connection of a server holding thousands costs little.
    pub(super) store_at_initialize: bool,
    /// What the transport offers beyond ACP, advertised in `initialize`'s `_meta` under
    /// `capabilities.transport` (`talaria serve`'s resumable streams).
    pub(super) transport: Option<serde_json::Value>,
}

impl ProcessShared {
    /// For a process serving one client (stdio): the store opens at `initialize`.
    pub fn single_client() -> Self {
        Self::new(true)
    }

    /// For a process serving many connections (`talaria serve`), whose transport offers
    /// `transport` (advertised at `initialize`).
    pub fn many_connections(transport: serde_json::Value) -> Self {
        Self {
            transport: Some(transport),
            ..Self::new(false)
        }
    }

    fn new(store_at_initialize: bool) -> Self {
        Self {
            routers: Arc::default(),
            windows: WindowProbes::default(),
            store_at_initialize,
            transport: None,
        }
    }

    /// The router another connection built for the same configuration, while one holds it.
    pub(super) fn router(&self, fingerprint: &str) -> Option<Arc<ModelRouter>> {
        talaria_util::lock(&self.routers)
            .get(fingerprint)
            .and_then(Weak::upgrade)
    }

    /// Offers a router built for `fingerprint` to the other connections.
    pub(super) fn offer_router(&self, fingerprint: &str, router: &Arc<ModelRouter>) {
        let mut routers = talaria_util::lock(&self.routers);
        routers.retain(|_, held| held.strong_count() > 0);
        routers.insert(fingerprint.to_string(), Arc::downgrade(router));
    }
}
