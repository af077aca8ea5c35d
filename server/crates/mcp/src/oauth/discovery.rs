//! Finding where to sign in: the server's 401 challenge (`WWW-Authenticate`), its protected
//! resource metadata (RFC 9728), and its authorization server's metadata (RFC 8414, or
//! OpenID Connect discovery); servers of the first MCP authorization draft, which publish no
//! resource metadata, are their own authorization server.

use reqwest::Url;
use serde::Deserialize;

use super::OAuthError;

/// The largest metadata document read.
const LARGEST_DOCUMENT: usize = 64 * 1024;

/// What a 401 said about signing in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
}

impl Challenge {
    /// Reads a `WWW-Authenticate: Bearer k="v", …` header (other schemes and unknown
    /// parameters are passed over).
    pub fn parse(header: &str) -> Self {
        let mut challenge = Self::default();
        let Some(rest) = header.trim().strip_prefix("Bearer").or_else(|| {
            header
                .trim()
                .get(..6)
                .filter(|s| s.eq_ignore_ascii_case("bearer"))
                .map(|_| &header.trim()[6..])
        }) else {
            return challenge;
        };
        for (name, value) in parameters(rest) {
            match name.to_ascii_lowercase().as_str() {
                "resource_metadata" => challenge.resource_metadata = Some(value),
                "scope" => challenge.scope = Some(value),
                _ => {}
            }
        }
        challenge
    }
}

/// `k=v` and `k="v, w"` pairs separated by commas.
fn parameters(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start_matches([' ', ',']);
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            (
                quoted[..end].to_string(),
                quoted.get(end + 1..).unwrap_or(""),
            )
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        pairs.push((name, value));
        rest = remaining.trim_start_matches([' ', ',']);
    }
    pairs
}

/// A protected resource's metadata (RFC 9728), the parts used.
#[derive(Debug, Clone, Deserialize)]
struct ResourceMetadata {
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

/// An authorization server's metadata (RFC 8414), the parts used.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ServerMetadata {
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub scopes_supported: Vec<String>,
}

/// Where and how to sign in to one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub metadata: ServerMetadata,
    /// The resource tokens are asked for (the server's canonical address).
    pub resource: String,
    /// The scopes to ask for (the challenge's, else those the resource lists).
    pub scope: Option<String>,
}

/// Whether an address may carry secrets: HTTPS, or plain HTTP to this machine.
pub fn safe_for_secrets(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(host)) => host == "localhost",
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

fn parse_safe(address: &str, what: &str) -> Result<Url, OAuthError> {
    let url = Url::parse(address)
        .map_err(|e| OAuthError::Discovery(format!("{what} {address:?} is not an address: {e}")))?;
    if !safe_for_secrets(&url) {
        return Err(OAuthError::Discovery(format!(
            "{what} {address} is plain HTTP to another machine: tokens are only sent over HTTPS"
        )));
    }
    Ok(url)
}

/// GETs a JSON document; `None` when there is none (any status but 200).
async fn document<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &Url,
) -> Result<Option<T>, OAuthError> {
    let response = match http
        .get(url.clone())
        .header("accept", "application/json")
        .send()
        .await
    {
        Ok(response) => response,
        Err(e) => return Err(OAuthError::Discovery(format!("cannot reach {url}: {e}"))),
    };
    if !response.status().is_success() {
        return Ok(None);
    }
    if response
        .content_length()
        .is_some_and(|n| n as usize > LARGEST_DOCUMENT)
    {
        return Err(OAuthError::Discovery(format!(
            "{url} sent a document too large to be metadata"
        )));
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| OAuthError::Discovery(format!("reading {url}: {e}")))?;
    if body.len() > LARGEST_DOCUMENT {
        return Err(OAuthError::Discovery(format!(
            "{url} sent a document too large to be metadata"
        )));
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| OAuthError::Discovery(format!("{url} is not valid metadata: {e}")))
}

/// `origin/.well-known/<name><path>` (the path of `base` after the well-known part, as RFC
/// 8414 and 9728 put it).
fn well_known(base: &Url, name: &str, with_path: bool) -> Url {
    let mut url = base.clone();
    let path = base.path().trim_end_matches('/');
    let suffix = if with_path { path } else { "" };
    url.set_path(&format!("/.well-known/{name}{suffix}"));
    url.set_query(None);
    url.set_fragment(None);
    url
}

/// The candidates for an issuer's metadata, in the order MCP asks clients to try them.
fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let has_path = !issuer.path().trim_matches('/').is_empty();
    let mut urls = vec![well_known(issuer, "oauth-authorization-server", true)];
    if has_path {
        urls.push(well_known(issuer, "openid-configuration", true));
        let mut appended = issuer.clone();
        appended.set_path(&format!(
            "{}/.well-known/openid-configuration",
            issuer.path().trim_end_matches('/')
        ));
        urls.push(appended);
    } else {
        urls.push(well_known(issuer, "openid-configuration", false));
    }
    urls
}

/// Finds where to sign in to the server at `server_url`, from its 401 `challenge`.
pub async fn discover(
    http: &reqwest::Client,
    server_url: &str,
    challenge: &Challenge,
) -> Result<Discovered, OAuthError> {
    let server = parse_safe(server_url, "the MCP server")?;
    let mut candidates = Vec::new();
    if let Some(named) = &challenge.resource_metadata {
        candidates.push(parse_safe(named, "its resource metadata")?);
    }
    candidates.push(well_known(&server, "oauth-protected-resource", true));
    candidates.push(well_known(&server, "oauth-protected-resource", false));
    let mut resource_metadata = None;
    for url in candidates {
        if let Some(found) = document::<ResourceMetadata>(http, &url).await? {
            resource_metadata = Some(found);
            break;
        }
    }
    let (issuer, resource, listed_scopes) = match resource_metadata {
        Some(found) => {
            let resource = found.resource.unwrap_or_else(|| server_url.to_string());
            if resource.trim_end_matches('/') != server_url.trim_end_matches('/') {
                return Err(OAuthError::Discovery(format!(
                    "its metadata describes another resource ({resource}), not {server_url}"
                )));
            }
            let Some(issuer) = found.authorization_servers.first() else {
                return Err(OAuthError::Discovery(
                    "its metadata names no authorization server".into(),
                ));
            };
            (
                parse_safe(issuer, "its authorization server")?,
                resource,
                found.scopes_supported,
            )
        }
        None => {
            let mut origin = server.clone();
            origin.set_path("/");
            (origin, server_url.to_string(), Vec::new())
        }
    };
    let metadata = server_metadata(http, &issuer).await?;
    let scope = challenge
        .scope
        .clone()
        .or_else(|| (!listed_scopes.is_empty()).then(|| listed_scopes.join(" ")));
    Ok(Discovered {
        metadata,
        resource,
        scope,
    })
}

/// The authorization server's metadata, checked: PKCE with S256, endpoints that may carry
/// secrets.
async fn server_metadata(
    http: &reqwest::Client,
    issuer: &Url,
) -> Result<ServerMetadata, OAuthError> {
    let mut found = None;
    for url in server_metadata_urls(issuer) {
        if let Some(metadata) = document::<ServerMetadata>(http, &url).await? {
            found = Some(metadata);
            break;
        }
    }
    let Some(metadata) = found else {
        return Err(OAuthError::Discovery(format!(
            "the authorization server {issuer} publishes no metadata"
        )));
    };
    let s256 = metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|methods| methods.iter().any(|m| m == "S256"));
    if !s256 {
        return Err(OAuthError::Discovery(format!(
            "the authorization server {issuer} does not say it supports PKCE with S256, which sign-in requires"
        )));
    }
    parse_safe(
        &metadata.authorization_endpoint,
        "its authorization endpoint",
    )?;
    parse_safe(&metadata.token_endpoint, "its token endpoint")?;
    if let Some(registration) = &metadata.registration_endpoint {
        parse_safe(registration, "its registration endpoint")?;
    }
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_names_its_metadata_and_scope() {
        let c = Challenge::parse(
            r#"Bearer error="invalid_token", resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp", scope="read write""#,
        );
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://a.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.scope.as_deref(), Some("read write"));
        assert_eq!(Challenge::parse("Basic realm=\"x\""), Challenge::default());
        assert_eq!(
            Challenge::parse("bearer scope=a").scope.as_deref(),
            Some("a")
        );
        assert_eq!(Challenge::parse("Bearer"), Challenge::default());
        assert_eq!(
            Challenge::parse("Bearer scope=\"unterminated")
                .scope
                .as_deref(),
            Some("unterminated")
        );
    }

    #[test]
    fn issuer_metadata_is_looked_for_where_the_rfcs_put_it() {
        let with_path = Url::parse("https://as.example/tenant1").expect("url");
        let urls: Vec<String> = server_metadata_urls(&with_path)
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            urls,
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration",
            ]
        );
        let bare = Url::parse("https://as.example/").expect("url");
        let urls: Vec<String> = server_metadata_urls(&bare)
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            urls,
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn secrets_go_only_over_https_or_to_this_machine() {
        for (address, safe) in [
            ("https://a.example/x", true),
            ("http://127.0.0.1:9/x", true),
            ("http://localhost/x", true),
            ("http://[::1]:8/x", true),
            ("http://a.example/x", false),
            ("http://10.0.0.1/x", false),
            ("ftp://a.example/x", false),
        ] {
            let url = Url::parse(address).expect("url");
            assert_eq!(safe_for_secrets(&url), safe, "{address}");
        }
    }
}
