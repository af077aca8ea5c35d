//! Builds providers, credential pools and the model router a configuration describes.

use std::sync::Arc;
use std::time::Duration;

use talaria_provider::http::Connection;
use talaria_provider::{ChatProvider, ProviderError};

use crate::config::{Config, Endpoint, ProviderKind};
use crate::credentials::CredentialPool;
use crate::router::{ModelRouter, ModelTarget};

/// Creates one provider.
pub fn build_provider(
    config: &Config,
    kind: ProviderKind,
    endpoint: &Endpoint,
) -> Result<Arc<dyn ChatProvider>, ProviderError> {
    let connection = Connection {
        base_url: endpoint.base_url.clone(),
        api_key: endpoint.api_keys.first().cloned(),
        connect_timeout: Duration::from_secs(config.settings.connect_timeout_secs()),
        idle_timeout: Duration::from_secs(config.settings.stream_idle_timeout_secs()),
        headers: endpoint.headers.clone(),
    };
    let options = crate::providers::WireOptions {
        anthropic_max_tokens: config.settings.anthropic_max_tokens(),
        thinking_budget: config.thinking_budget,
        reasoning_summaries: config.settings.reasoning_summaries(),
    };
    (kind.spec().build)(connection, options)
}

fn pool(config: &Config, endpoint: &Endpoint) -> Arc<CredentialPool> {
    Arc::new(CredentialPool::new(
        endpoint.api_keys.clone(),
        config.key_strategy,
        Duration::from_secs(config.settings.key_cooldown_secs()),
    ))
}

/// Builds the router: the configured provider as primary, then the fallback chain.
pub fn build_router(config: &Config) -> Result<ModelRouter, ProviderError> {
    build_router_through(config, &|provider| provider)
}

/// Builds the router with every provider passed through `through` (a recording wraps each
/// one; a replay stands in for all of them).
pub fn build_router_through(
    config: &Config,
    through: &dyn Fn(Arc<dyn ChatProvider>) -> Arc<dyn ChatProvider>,
) -> Result<ModelRouter, ProviderError> {
    let build = |kind, endpoint| build_provider(config, kind, endpoint).map(through);
    let primary = build(config.provider, config.endpoint())?;
    let mut fallbacks = Vec::new();
    for entry in &config.fallback {
        fallbacks.push(ModelTarget {
            limits: config.call_limits(&entry.endpoint.base_url, &entry.model),
            provider: build(entry.provider, &entry.endpoint)?,
            model: entry.model.clone(),
            pool: pool(config, &entry.endpoint),
        });
    }
    let mut router = ModelRouter::new(
        primary,
        pool(config, config.endpoint()),
        fallbacks,
        config.settings.prices(),
    )
    .with_primary_limits(config.call_limits(&config.endpoint().base_url, &config.model));
    for (task, auxiliary) in &config.auxiliary {
        let target = ModelTarget {
            limits: config.call_limits(&auxiliary.endpoint.base_url, &auxiliary.model),
            provider: build(auxiliary.provider, &auxiliary.endpoint)?,
            model: auxiliary.model.clone(),
            pool: pool(config, &auxiliary.endpoint),
        };
        router = router.with_auxiliary(task, target, Duration::from_secs(auxiliary.timeout_secs));
    }
    Ok(router)
}
