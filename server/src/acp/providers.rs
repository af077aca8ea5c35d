//! Client-managed providers (`providers/list`, `providers/set`, `providers/disable`, the
//! unstable contract behind `agentCapabilities.providers`): a client hands Talaria an
//! endpoint for one of the services it speaks (`openai`: Chat Completions or Responses, as
//! configured; `anthropic`: Messages), which then replaces that service's configured one for
//! sessions started afterwards — its key from the `Authorization: Bearer` (OpenAI) or
//! `x-api-key` (Anthropic) header as the key pool, any other header sent with every request,
//! the configured fallbacks still behind it.
//!
//! Secrets: header values are never logged (a connection shows header names only), never
//! written to records or cassettes (which hold bodies, not headers); a base URL is logged
//! without its user and password.

use super::session_errors::config_error;
use super::state::{Agent, Reply, to_value};
use crate::sessions::{ClientEndpoint, SERVICES, ServiceProtocol, load_config};
use futures_util::FutureExt;
use talaria_engine::Config;
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;

/// The protocol a service speaks, as ACP names it.
fn wire(protocol: ServiceProtocol) -> acp::LlmProtocol {
    match protocol {
        ServiceProtocol::OpenAi => acp::LlmProtocol::OpenAi,
        ServiceProtocol::Anthropic => acp::LlmProtocol::Anthropic,
    }
}

/// The provider id's service, or the error that lists the ids there are.
fn service(id: &str) -> Result<ServiceProtocol, acp::Error> {
    SERVICES
        .iter()
        .find(|(s, _)| *s == id)
        .map(|(_, protocol)| *protocol)
        .ok_or_else(|| {
            errors::invalid_params(format!(
                "unknown provider {id:?}; this agent manages \"openai\" and \"anthropic\""
            ))
        })
}

/// The endpoint a `providers/set` describes, checked: an http(s) URL, the protocol the
/// service speaks, headers HTTP can carry.
fn endpoint_of(
    request: &acp::SetProviderRequest,
    protocol: ServiceProtocol,
) -> Result<ClientEndpoint, acp::Error> {
    if request.api_type != wire(protocol) {
        return Err(errors::invalid_params(format!(
            "provider {:?} speaks {:?}, not {:?}",
            request.provider_id.0,
            wire(protocol),
            request.api_type
        )));
    }
    let url = reqwest::Url::parse(&request.base_url)
        .map_err(|e| errors::invalid_params(format!("baseUrl is not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(errors::invalid_params(
            "baseUrl must be an http or https URL with a host",
        ));
    }
    let mut api_keys = Vec::new();
    let mut headers = Vec::new();
    for (name, value) in &request.headers {
        let valid = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
            && reqwest::header::HeaderValue::from_str(value).is_ok();
        if !valid {
            // The value is not named: it may be a secret.
            return Err(errors::invalid_params(format!(
                "header {name:?} is not a valid HTTP header (name or value)"
            )));
        }
        if name.eq_ignore_ascii_case(protocol.key_header()) {
            let key = value.strip_prefix("Bearer ").unwrap_or(value).trim();
            api_keys.push(key.to_string());
        } else {
            headers.push((name.clone(), value.clone()));
        }
    }
    if api_keys.is_empty() {
        // The client's endpoint replaces the configured one whole: no configured key goes
        // to an address the client chose.
        api_keys.push(String::new());
    }
    Ok(ClientEndpoint {
        base_url: request.base_url.trim_end_matches('/').to_string(),
        api_keys,
        headers,
    })
}

/// A URL for the log: no user or password.
fn loggable(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Err(_) => "(not a URL)".into(),
    }
}

/// What `providers/list` says of each service under `config` (the client's endpoints applied).
fn listing(
    config: &Config,
    providers: &crate::sessions::ClientProviders,
) -> Vec<acp::ProviderInfo> {
    let mut config = config.clone();
    providers.apply(&mut config);
    SERVICES
        .iter()
        .map(|(id, protocol)| {
            let required = config.provider.table() == *id;
            let endpoint = config.endpoints.get(id);
            let set_by_client = providers.set_by_client(id);
            let enabled =
                endpoint.is_some_and(|e| required || set_by_client || !e.api_keys.is_empty());
            let current = endpoint
                .filter(|_| enabled)
                .map(|e| acp::ProviderCurrentConfig::new(wire(*protocol), e.base_url.clone()));
            acp::ProviderInfo::new(*id, vec![wire(*protocol)], required, current)
        })
        .collect()
}

/// `providers/list`: the services, which one sessions use (required), and each one's
/// current address (none: disabled or not configured).
pub(super) fn list_providers(agent: &mut Agent, request: RequestId) -> Option<Reply> {
    let providers = agent.room.providers().clone();
    let slow = async move {
        let config = load_config().await.map_err(config_error)?;
        Ok(listing(&config, &providers))
    };
    agent.defer(request, "providers/list", slow, |_, providers| {
        async move { to_value(acp::ListProvidersResponse::new(providers)) }.boxed_local()
    });
    None
}

/// `providers/set`: the service's endpoint for sessions started from now on.
pub(super) fn set_provider(agent: &mut Agent, request: &acp::SetProviderRequest) -> Reply {
    let protocol = service(&request.provider_id.0)?;
    let endpoint = endpoint_of(request, protocol)?;
    tracing::info!(
        provider = %request.provider_id.0,
        base_url = %loggable(&endpoint.base_url),
        headers = endpoint.headers.len(),
        "a client set the provider's endpoint (for sessions started from now on)"
    );
    // The shared router is built again, with the client's endpoint, for the next session.
    agent
        .room
        .set_endpoint(&request.provider_id.0, Some(endpoint));
    to_value(acp::SetProviderResponse::new())
}

/// `providers/disable`: a service sessions do not use (not the one they need).
pub(super) fn disable_provider(
    agent: &mut Agent,
    request: RequestId,
    params: acp::DisableProviderRequest,
) -> Option<Reply> {
    if let Err(error) = service(&params.provider_id.0) {
        return Some(Err(error));
    }
    let slow = async move {
        let config = load_config().await.map_err(config_error)?;
        Ok((
            config.provider.table() == params.provider_id.0.as_ref(),
            params,
        ))
    };
    agent.defer(
        request,
        "providers/disable",
        slow,
        |agent, (required, params)| {
            async move {
                if required {
                    return Err(errors::invalid_params(format!(
                        "provider {:?} is the one sessions use (required): it cannot be disabled",
                        params.provider_id.0
                    )));
                }
                tracing::info!(provider = %params.provider_id.0, "a client disabled the provider");
                agent.room.set_endpoint(&params.provider_id.0, None);
                to_value(acp::DisableProviderResponse::new())
            }
            .boxed_local()
        },
    );
    None
}
