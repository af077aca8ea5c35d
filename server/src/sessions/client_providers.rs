//! The endpoints a client set or disabled (`providers/set`, `providers/disable`, handled in
//! `acp/providers.rs`), applied to every session's configuration as it starts.

use std::collections::BTreeMap;
use std::sync::Arc;

use talaria_engine::Config;

/// The services a client may manage, by provider id, and the protocol each speaks.
pub const SERVICES: [(&str, ServiceProtocol); 2] = [
    ("openai", ServiceProtocol::OpenAi),
    ("anthropic", ServiceProtocol::Anthropic),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceProtocol {
    OpenAi,
    Anthropic,
}

impl ServiceProtocol {
    /// The header that carries the key (taken into the key pool, not sent as it is).
    pub fn key_header(self) -> &'static str {
        match self {
            ServiceProtocol::OpenAi => "authorization",
            ServiceProtocol::Anthropic => "x-api-key",
        }
    }
}

/// One endpoint a client set.
#[derive(Clone)]
pub struct ClientEndpoint {
    pub base_url: String,
    /// The key pool (`[""]`: none needed).
    pub api_keys: Vec<String>,
    pub headers: Vec<(String, String)>,
}

/// What the client set or disabled, by provider id; applied to every session's
/// configuration as it starts.
#[derive(Clone, Default)]
pub struct ClientProviders(Arc<BTreeMap<String, Option<ClientEndpoint>>>);

impl ClientProviders {
    /// `config` with the client's endpoints in place of the configured ones (and a disabled
    /// service's fallbacks gone).
    pub fn apply(&self, config: &mut Config) {
        for (id, endpoint) in self.0.iter() {
            let Some(table) = SERVICES.iter().find(|(s, _)| s == id).map(|(s, _)| *s) else {
                continue;
            };
            match endpoint {
                Some(endpoint) => {
                    config.endpoints.insert(
                        table,
                        talaria_engine::Endpoint {
                            base_url: endpoint.base_url.clone(),
                            api_keys: endpoint.api_keys.clone(),
                            headers: talaria_provider::http::ExtraHeaders(endpoint.headers.clone()),
                        },
                    );
                }
                None => {
                    config.endpoints.remove(table);
                    config.fallback.retain(|f| f.provider.table() != table);
                }
            }
        }
    }

    pub(super) fn with(&self, id: &str, endpoint: Option<ClientEndpoint>) -> Self {
        let mut set = (*self.0).clone();
        set.insert(id.to_string(), endpoint);
        Self(Arc::new(set))
    }

    /// Whether the client set an endpoint for service `id` (not disabled it).
    pub fn set_by_client(&self, id: &str) -> bool {
        self.0.get(id).is_some_and(Option::is_some)
    }
}
