//! Builds the provider a configuration selects.

use std::sync::Arc;
use std::time::Duration;

use talaria_provider::ChatProvider;
use talaria_provider::openai::{OpenAiConfig, OpenAiProvider};

use crate::config::{Config, ProviderKind};

/// Creates the configured provider, or says why it cannot.
pub fn build_provider(config: &Config) -> Result<Arc<dyn ChatProvider>, String> {
    match config.provider {
        ProviderKind::OpenAi => OpenAiProvider::new(OpenAiConfig {
            base_url: config.openai.base_url.clone(),
            api_key: config.openai.api_key.clone(),
            connect_timeout: Duration::from_secs(config.connect_timeout_secs),
            idle_timeout: Duration::from_secs(config.stream_idle_timeout_secs),
        })
        .map(|p| Arc::new(p) as Arc<dyn ChatProvider>)
        .map_err(|e| e.to_string()),
        ProviderKind::Anthropic => Err(
            "the anthropic provider is not available in this build yet; set TALARIA_PROVIDER=openai"
                .to_string(),
        ),
    }
}
