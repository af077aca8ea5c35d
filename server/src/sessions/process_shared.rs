//! What the connections one process serves share (`talaria serve` runs many; stdio one):
//! model routers, one per configuration, so key cooldowns and pooled HTTP connections are
//! shared; local servers' window probes; whether a connection opens the store as soon
//! as it is initialized or at its first need; and the live sessions any connection may
//! attach to (`LiveSessions`).

use std::any::Any;
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
    /// The sessions running in this process, by id, that another connection may attach to.
    pub(super) live: LiveSessions,
}

/// The sessions running in a process, by id, as the transport's edge shares them between
/// its connections: each value is what the edge keeps of a session (its type is the edge's;
/// this room does not know the wire), found again by that type.
#[derive(Clone, Default)]
pub struct LiveSessions {
    by_id: Arc<Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>>,
    /// How many clients of this process hold each session without its audience showing
    /// them (a delete counts them as attached): following it where another process runs
    /// it, attaching, taking it over, or being handed it.
    marked: Arc<Mutex<HashMap<String, usize>>>,
    /// Whether the process watches the store for its sessions being asked for (started
    /// once, by the first session of a process serving many connections).
    watched: Arc<std::sync::atomic::AtomicBool>,
}

impl LiveSessions {
    /// Offers session `id` to the process's other connections.
    pub fn publish<T: Any + Send + Sync>(&self, id: &str, session: Arc<T>) {
        talaria_util::lock(&self.by_id).insert(id.to_string(), session);
    }

    /// Session `id`, when it runs here and was published as a `T`.
    pub fn find<T: Any + Send + Sync>(&self, id: &str) -> Option<Arc<T>> {
        let found = talaria_util::lock(&self.by_id).get(id).cloned()?;
        found.downcast::<T>().ok()
    }

    /// Every session running here that was published as a `T`, with its id.
    pub fn all<T: Any + Send + Sync>(&self) -> Vec<(String, Arc<T>)> {
        talaria_util::lock(&self.by_id)
            .iter()
            .filter_map(|(id, found)| Some((id.clone(), found.clone().downcast::<T>().ok()?)))
            .collect()
    }

    /// `true` the first time only: the caller starts the process's one watcher.
    pub fn first_watch(&self) -> bool {
        !self.watched.swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// A client of this process holds session `id` (follows it elsewhere, attaches, takes
    /// it over, hands it over) until the returned mark drops.
    pub fn mark_client(&self, id: &str) -> ClientMark {
        *talaria_util::lock(&self.marked)
            .entry(id.to_string())
            .or_default() += 1;
        ClientMark {
            marked: self.marked.clone(),
            id: id.to_string(),
        }
    }

    /// How many clients of this process hold session `id` (`mark_client`).
    pub fn marked_clients(&self, id: &str) -> usize {
        talaria_util::lock(&self.marked)
            .get(id)
            .copied()
            .unwrap_or(0)
    }

    /// Session `id` ended: no one attaches to it any more.
    pub fn withdraw(&self, id: &str) {
        talaria_util::lock(&self.by_id).remove(id);
    }
}

/// One client holding a session (`LiveSessions::mark_client`): dropped, it is no longer
/// counted.
pub struct ClientMark {
    marked: Arc<Mutex<HashMap<String, usize>>>,
    id: String,
}

impl Drop for ClientMark {
    fn drop(&mut self) {
        let mut marked = talaria_util::lock(&self.marked);
        if let Some(count) = marked.get_mut(&self.id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                marked.remove(&self.id);
            }
        }
    }
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
            live: LiveSessions::default(),
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
