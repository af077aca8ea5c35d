//! The wire APIs Talaria speaks, registered by kind, and the services they reach.
//!
//! A new wire API is a provider file in `talaria-provider` (its `ChatProvider` and its
//! model-list request) plus one entry in [`PROVIDERS`] (and a variant of [`ProviderKind`]).
//! Kinds that reach one service share its [`Service`]: where its address and keys are
//! configured. Configuration, the router and `talaria doctor` read this table; nothing else
//! matches on a kind.

use std::sync::Arc;

use talaria_provider::anthropic::{AnthropicOptions, AnthropicProvider};
use talaria_provider::demo::DemoProvider;
use talaria_provider::http::Connection;
use talaria_provider::openai::OpenAiProvider;
use talaria_provider::responses::ResponsesProvider;
use talaria_provider::{ChatProvider, ProviderError};

/// Which model API a session talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI Chat Completions and compatible servers.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// The OpenAI Responses API.
    OpenAiResponses,
    /// The built-in demo model: a script inside Talaria, no server, no key.
    Demo,
}

/// A service providers reach: where its address and keys are configured.
#[derive(Debug)]
pub struct Service {
    /// The `config.toml` table of its address and keys.
    pub table: &'static str,
    /// The environment variable of its address.
    pub url_variable: &'static str,
    /// The environment variable of its keys.
    pub key_variable: &'static str,
    /// Its address when none is configured.
    pub default_url: &'static str,
}

impl Service {
    /// The variable over a key of its table (`base_url`, `api_key`, `api_keys`), and the
    /// key's default when the service has one (its address).
    pub fn setting(&self, key: &str) -> (Option<&'static str>, Option<&'static str>) {
        match key {
            "base_url" => (Some(self.url_variable), Some(self.default_url)),
            "api_key" | "api_keys" => (Some(self.key_variable), None),
            _ => (None, None),
        }
    }
}

/// What the wire APIs' own settings are (from the configuration).
#[derive(Debug, Clone, Copy)]
pub struct WireOptions {
    /// Anthropic's `max_tokens` when none is asked for.
    pub anthropic_max_tokens: u32,
    /// Anthropic's extended-thinking budget.
    pub thinking_budget: Option<u32>,
    /// The Responses API returns reasoning summaries.
    pub reasoning_summaries: bool,
}

/// One registered wire API.
pub struct ProviderSpec {
    pub kind: ProviderKind,
    /// Its name in configuration.
    pub name: &'static str,
    /// What people call it (`talaria setup`'s menu).
    pub title: &'static str,
    /// Other names it answers to.
    pub aliases: &'static [&'static str],
    pub service: &'static Service,
    /// The model used when none is configured.
    pub default_model: &'static str,
    /// Builds its client.
    pub build: fn(Connection, WireOptions) -> Result<Arc<dyn ChatProvider>, ProviderError>,
    /// The request for its model list (`talaria doctor`).
    pub models_request:
        fn(&reqwest::Client, base_url: &str, key: Option<&str>) -> reqwest::RequestBuilder,
    /// It runs inside Talaria (the demo): no server to reach, no key, one model.
    pub built_in: bool,
}

/// OpenAI and every server compatible with it.
pub static OPENAI: Service = Service {
    table: "openai",
    url_variable: "OPENAI_BASE_URL",
    key_variable: "OPENAI_API_KEY",
    default_url: "https://api.openai.com/v1",
};

/// Anthropic.
pub static ANTHROPIC: Service = Service {
    table: "anthropic",
    url_variable: "ANTHROPIC_BASE_URL",
    key_variable: "ANTHROPIC_API_KEY",
    default_url: "https://api.anthropic.com",
};

/// What the built-in demo has in place of a service: nothing to configure.
pub static BUILT_IN: Service = Service {
    table: "",
    url_variable: "",
    key_variable: "",
    default_url: "",
};

/// A model server people run on their own machine, speaking a service's API at a known
/// address (`talaria setup` looks for them).
#[derive(Debug)]
pub struct LocalServer {
    pub name: &'static str,
    pub service: &'static Service,
    pub base_url: &'static str,
}

/// The local servers `talaria setup` looks for and `talaria doctor` suggests.
pub static LOCAL_SERVERS: [LocalServer; 3] = [
    LocalServer {
        name: "llama.cpp",
        service: &OPENAI,
        base_url: "http://127.0.0.1:8080/v1",
    },
    LocalServer {
        name: "Ollama",
        service: &OPENAI,
        base_url: "http://127.0.0.1:11434/v1",
    },
    LocalServer {
        name: "LM Studio",
        service: &OPENAI,
        base_url: "http://127.0.0.1:1234/v1",
    },
];

/// Every service, in the order configuration lists them.
pub static SERVICES: [&Service; 2] = [&OPENAI, &ANTHROPIC];

/// Every wire API.
pub static PROVIDERS: [ProviderSpec; 4] = [
    ProviderSpec {
        kind: ProviderKind::OpenAi,
        name: "openai",
        title: "OpenAI",
        aliases: &["openai-chat", "openai-compatible"],
        service: &OPENAI,
        default_model: "gpt-4.1-mini",
        build: |connection, _| Ok(Arc::new(OpenAiProvider::new(connection)?)),
        models_request: talaria_provider::openai::models_request,
        built_in: false,
    },
    ProviderSpec {
        kind: ProviderKind::Anthropic,
        name: "anthropic",
        title: "Anthropic",
        aliases: &[],
        service: &ANTHROPIC,
        default_model: "claude-sonnet-4-5",
        build: |connection, options| {
            Ok(Arc::new(AnthropicProvider::new(
                connection,
                AnthropicOptions {
                    default_max_tokens: options.anthropic_max_tokens,
                    thinking_budget: options.thinking_budget,
                },
            )?))
        },
        models_request: talaria_provider::anthropic::models_request,
        built_in: false,
    },
    ProviderSpec {
        kind: ProviderKind::OpenAiResponses,
        name: "openai-responses",
        title: "OpenAI (Responses API)",
        aliases: &["responses"],
        service: &OPENAI,
        default_model: "gpt-4.1-mini",
        build: |connection, options| {
            Ok(Arc::new(ResponsesProvider::new(
                connection,
                options.reasoning_summaries,
            )?))
        },
        models_request: talaria_provider::openai::models_request,
        built_in: false,
    },
    ProviderSpec {
        kind: ProviderKind::Demo,
        name: "demo",
        title: "the built-in demo",
        aliases: &["talaria-demo"],
        service: &BUILT_IN,
        default_model: talaria_provider::demo::DEMO_MODEL,
        build: |_, _| Ok(Arc::new(DemoProvider::default())),
        // Never sent: `talaria doctor` reaches no server for a built-in provider.
        models_request: |client, _, _| client.get("http://127.0.0.1:9/"),
        built_in: true,
    },
];

impl ProviderKind {
    /// Its registration.
    pub fn spec(self) -> &'static ProviderSpec {
        PROVIDERS
            .iter()
            .find(|spec| spec.kind == self)
            .unwrap_or(&PROVIDERS[0])
    }

    /// The kind a configured name means.
    pub fn named(name: &str) -> Option<Self> {
        let name = name.trim().to_ascii_lowercase();
        PROVIDERS
            .iter()
            .find(|spec| spec.name == name || spec.aliases.contains(&name.as_str()))
            .map(|spec| spec.kind)
    }

    /// The name used in configuration.
    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The service it reaches.
    pub fn service(self) -> &'static Service {
        self.spec().service
    }

    /// The environment variable that holds this provider's key.
    pub fn key_variable(self) -> &'static str {
        self.service().key_variable
    }

    /// The environment variable that holds this provider's address.
    pub fn url_variable(self) -> &'static str {
        self.service().url_variable
    }

    /// The table of `config.toml` this provider's address and keys are in (empty for the
    /// built-in demo).
    pub fn table(self) -> &'static str {
        self.service().table
    }

    /// Whether it runs inside Talaria (the demo): no server, no key, one model.
    pub fn is_built_in(self) -> bool {
        self.spec().built_in
    }
}

/// The `config.toml` tables that hold services' keys (`api_key`, `api_keys`).
pub fn key_tables() -> impl Iterator<Item = &'static str> {
    SERVICES.iter().map(|service| service.table)
}

/// The service a `config.toml` table configures.
pub fn service_of_table(table: &str) -> Option<&'static Service> {
    SERVICES
        .iter()
        .copied()
        .find(|service| service.table == table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_registered_once_and_every_name_is_its_own() {
        for kind in [
            ProviderKind::OpenAi,
            ProviderKind::Anthropic,
            ProviderKind::OpenAiResponses,
            ProviderKind::Demo,
        ] {
            assert_eq!(PROVIDERS.iter().filter(|s| s.kind == kind).count(), 1);
            assert_eq!(ProviderKind::named(kind.as_str()), Some(kind));
            assert_eq!(
                SERVICES.iter().any(|s| std::ptr::eq(*s, kind.service())),
                !kind.is_built_in()
            );
        }
        assert_eq!(
            ProviderKind::named(" Responses "),
            Some(ProviderKind::OpenAiResponses)
        );
        assert_eq!(ProviderKind::named("palm"), None);
    }
}
