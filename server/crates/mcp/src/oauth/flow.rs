//! One sign-in, as MCP's authorization spec lays it out: discovery, the client registered
//! (dynamically where the server offers it, else the configured client id), PKCE with S256,
//! the user sent to the authorization address, the code taken on the loopback redirect, and
//! exchanged for tokens.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Url;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::discovery::{Challenge, Discovered, discover};
use super::redirect::{Callback, Redirect};
use super::store::Stored;
use super::{AuthSettings, OAuthError, SignInPrompt, tokens};

/// `n` random bytes, URL-safe base64.
fn random(n: usize) -> Result<String, OAuthError> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes)
        .map_err(|e| OAuthError::Redirect(format!("no randomness for the sign-in: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// The PKCE pair: the verifier kept, its S256 challenge sent.
fn pkce() -> Result<(String, String), OAuthError> {
    let verifier = random(32)?;
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    Ok((verifier, challenge))
}

#[derive(Deserialize)]
struct Registered {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
}

/// The client to sign in as: the configured one, else one registered for this redirect.
async fn client_for(
    http: &reqwest::Client,
    discovered: &Discovered,
    settings: &AuthSettings,
    redirect_uri: &str,
) -> Result<(String, Option<String>), OAuthError> {
    if let Some(id) = &settings.client_id {
        return Ok((id.clone(), settings.client_secret.clone()));
    }
    let Some(endpoint) = &discovered.metadata.registration_endpoint else {
        return Err(OAuthError::NoClient(
            "its authorization server offers no client registration: set `oauth_client_id` \
             for this server in config.toml"
                .into(),
        ));
    };
    let body = serde_json::json!({
        "client_name": "Talaria",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let response = http
        .post(endpoint)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| OAuthError::Registration(format!("cannot reach {endpoint}: {e}")))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| OAuthError::Registration(e.to_string()))?;
    if !status.is_success() {
        return Err(OAuthError::Registration(format!(
            "{endpoint} answered {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
        )));
    }
    let registered: Registered = serde_json::from_slice(&bytes)
        .map_err(|e| OAuthError::Registration(format!("its answer is not valid: {e}")))?;
    Ok((registered.client_id, registered.client_secret))
}

/// The address the user signs in at.
fn authorization_url(
    discovered: &Discovered,
    client_id: &str,
    redirect_uri: &str,
    challenge: &str,
    state: &str,
) -> Result<Url, OAuthError> {
    let mut url = Url::parse(&discovered.metadata.authorization_endpoint)
        .map_err(|e| OAuthError::Discovery(format!("its authorization endpoint: {e}")))?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_challenge", challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", state)
            .append_pair("resource", &discovered.resource);
        if let Some(scope) = &discovered.scope {
            query.append_pair("scope", scope);
        }
    }
    Ok(url)
}

/// Signs in to the server at `server_url` (named `server` to the user), from its 401
/// `challenge`: the tokens granted, not yet kept.
pub(crate) async fn sign_in(
    http: &reqwest::Client,
    (server, server_url): (&str, &str),
    challenge: &Challenge,
    settings: &AuthSettings,
    prompt: &dyn SignInPrompt,
    cancel: &CancellationToken,
) -> Result<Stored, OAuthError> {
    let mut discovered = discover(http, server_url, challenge).await?;
    if let Some(scope) = &settings.scope {
        discovered.scope = Some(scope.clone());
    }
    let state = random(16)?;
    let redirect = Redirect::listen(state.clone()).await?;
    let (client_id, client_secret) = client_for(http, &discovered, settings, &redirect.uri).await?;
    let (verifier, code_challenge) = pkce()?;
    let url = authorization_url(
        &discovered,
        &client_id,
        &redirect.uri,
        &code_challenge,
        &state,
    )?;
    let redirect_uri = redirect.uri.clone();
    if !prompt.show(server, url.as_str()).await {
        return Err(OAuthError::Declined);
    }
    let callback = tokio::select! {
        answer = redirect.wait() => answer?,
        () = tokio::time::sleep(settings.timeout) => {
            return Err(OAuthError::TimedOut(settings.timeout.as_secs()));
        }
        () = cancel.cancelled() => return Err(OAuthError::Cancelled),
    };
    let code = match callback {
        Callback::Code(code) => code,
        Callback::Refused(why) => return Err(OAuthError::Refused(why)),
    };
    let base = Stored {
        server_url: server_url.to_string(),
        token_endpoint: discovered.metadata.token_endpoint.clone(),
        client_id,
        client_secret,
        resource: Some(discovered.resource.clone()),
        ..Stored::default()
    };
    tokens::request(
        http,
        &base,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", &redirect_uri),
            ("code_verifier", &verifier),
        ],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_the_verifiers_s256() {
        let (verifier, challenge) = pkce().expect("pkce");
        assert_eq!(verifier.len(), 43);
        assert_eq!(
            challenge,
            URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
        );
        let (other, _) = pkce().expect("pkce");
        assert_ne!(verifier, other);
    }

    #[test]
    fn the_authorization_address_carries_pkce_state_and_resource() {
        let discovered = Discovered {
            metadata: super::super::discovery::ServerMetadata {
                authorization_endpoint: "https://as.example/authorize?tenant=a".into(),
                token_endpoint: "https://as.example/token".into(),
                registration_endpoint: None,
                code_challenge_methods_supported: Some(vec!["S256".into()]),
                scopes_supported: Vec::new(),
            },
            resource: "https://mcp.example/mcp".into(),
            scope: Some("read write".into()),
        };
        let url = authorization_url(&discovered, "c1", "http://127.0.0.1:5/callback", "ch", "st")
            .expect("url");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("tenant"), Some("a"));
        assert_eq!(get("code_challenge_method"), Some("S256"));
        assert_eq!(get("state"), Some("st"));
        assert_eq!(get("resource"), Some("https://mcp.example/mcp"));
        assert_eq!(get("scope"), Some("read write"));
        assert_eq!(get("redirect_uri"), Some("http://127.0.0.1:5/callback"));
    }
}
