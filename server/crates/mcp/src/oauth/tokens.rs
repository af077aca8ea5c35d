//! The token endpoint: a code exchanged for tokens (with its PKCE verifier), and tokens
//! refreshed; a refusal for good (`invalid_grant`, `invalid_client`) told apart from a
//! failure that may pass.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::OAuthError;
use super::store::Stored;

/// The largest token response read.
const LARGEST_RESPONSE: usize = 64 * 1024;

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    refresh_token: Option<String>,
}

#[derive(Deserialize)]
struct TokenError {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Posts a token request; the tokens granted, kept with `base`'s client and endpoint.
pub(crate) async fn request(
    http: &reqwest::Client,
    base: &Stored,
    form: &[(&str, &str)],
) -> Result<Stored, OAuthError> {
    let mut form: Vec<(&str, &str)> = form.to_vec();
    form.push(("client_id", &base.client_id));
    if let Some(secret) = &base.client_secret {
        form.push(("client_secret", secret));
    }
    if let Some(resource) = &base.resource {
        form.push(("resource", resource));
    }
    let response = http
        .post(&base.token_endpoint)
        .header("accept", "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|e| OAuthError::Token(format!("cannot reach the token endpoint: {e}")))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| OAuthError::Token(format!("reading the token response: {e}")))?;
    if body.len() > LARGEST_RESPONSE {
        return Err(OAuthError::Token("the token response is too large".into()));
    }
    if !status.is_success() {
        return Err(match serde_json::from_slice::<TokenError>(&body) {
            Ok(error) if matches!(error.error.as_str(), "invalid_grant" | "invalid_client") => {
                OAuthError::Refused(describe(&error))
            }
            Ok(error) => OAuthError::Token(describe(&error)),
            Err(_) => OAuthError::Token(format!("the token endpoint answered {status}")),
        });
    }
    let granted: TokenResponse = serde_json::from_slice(&body)
        .map_err(|e| OAuthError::Token(format!("the token response is not valid: {e}")))?;
    if granted
        .token_type
        .as_deref()
        .is_some_and(|kind| !kind.eq_ignore_ascii_case("bearer"))
    {
        return Err(OAuthError::Token(
            "the token endpoint granted a token that is not a bearer token".into(),
        ));
    }
    Ok(Stored {
        access_token: granted.access_token,
        // A refresh that grants no new refresh token keeps the old one.
        refresh_token: granted.refresh_token.or_else(|| base.refresh_token.clone()),
        expires_at: granted.expires_in.map(|s| now().saturating_add(s)),
        lifetime: granted.expires_in,
        ..base.clone()
    })
}

fn describe(error: &TokenError) -> String {
    match &error.error_description {
        Some(description) => format!("{}: {description}", error.error),
        None => error.error.clone(),
    }
}

/// New tokens for old, with the refresh token.
pub(crate) async fn refresh(http: &reqwest::Client, stored: &Stored) -> Result<Stored, OAuthError> {
    let Some(refresh_token) = stored.refresh_token.clone() else {
        return Err(OAuthError::Refused("no refresh token was granted".into()));
    };
    request(
        http,
        stored,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh_token),
        ],
    )
    .await
}

/// Whether the access token is expired or about to be (within a fifth of its lifetime, at
/// most a minute).
pub(crate) fn due(stored: &Stored, at: u64) -> bool {
    let Some(expires_at) = stored.expires_at else {
        return false;
    };
    let margin = stored.lifetime.map_or(60, |l| (l / 5).min(60));
    at.saturating_add(margin) >= expires_at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_refreshed_before_it_expires() {
        let stored = |expires_at, lifetime| Stored {
            expires_at,
            lifetime,
            ..Stored::default()
        };
        assert!(!due(&stored(None, None), 1_000));
        assert!(!due(&stored(Some(2_000), Some(3_600)), 1_000));
        assert!(due(&stored(Some(1_050), Some(3_600)), 1_000));
        assert!(due(&stored(Some(1_000), Some(10)), 1_000));
        assert!(!due(&stored(Some(1_010), Some(10)), 1_000));
        assert!(due(&stored(Some(1_002), Some(10)), 1_000));
    }
}
