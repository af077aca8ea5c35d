//! The fixture's authorization server (`--http --oauth`): the MCP endpoint refuses requests
//! without a valid bearer token (401 naming its resource metadata), and the same process
//! serves the metadata (RFC 9728, RFC 8414 under the issuer path `/auth`), dynamic client
//! registration, an authorization endpoint that grants at once (redirecting to the client's
//! registered loopback address with a code), and a token endpoint that checks PKCE (S256),
//! the redirect and the client, and refreshes with rotation. Tokens live
//! `MCP_FIXTURE_TOKEN_TTL` seconds (default 3600); the `revoke` tool revokes every token.
//! Each step is logged (`oauth …`) to `MCP_FIXTURE_LOG`.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What the server knows of its clients and grants.
#[derive(Default)]
struct Grants {
    clients: HashMap<String, Vec<String>>,
    /// code → (client, redirect, challenge)
    codes: HashMap<String, (String, String, String)>,
    access: HashMap<String, Instant>,
    refresh: HashSet<String>,
    next: u64,
}

static GRANTS: OnceLock<Mutex<Grants>> = OnceLock::new();
/// `http://127.0.0.1:PORT`, set when the fixture listens.
pub static ORIGIN: OnceLock<String> = OnceLock::new();

fn grants() -> std::sync::MutexGuard<'static, Grants> {
    GRANTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn origin() -> String {
    ORIGIN.get().cloned().unwrap_or_default()
}

fn ttl() -> Duration {
    Duration::from_secs(
        std::env::var("MCP_FIXTURE_TOKEN_TTL")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3600),
    )
}

/// An HTTP answer: status, headers, body.
pub type Answer = (u16, Vec<(&'static str, String)>, String);

fn json_answer(status: u16, body: Value) -> Answer {
    (
        status,
        vec![("content-type", "application/json".into())],
        body.to_string(),
    )
}

fn form(text: &str) -> HashMap<String, String> {
    url::form_urlencoded::parse(text.as_bytes())
        .into_owned()
        .collect()
}

/// Whether a request to the MCP endpoint carries a live token; otherwise its 401.
pub fn check(authorization: Option<&str>) -> Result<(), Answer> {
    let token = authorization.and_then(|h| h.strip_prefix("Bearer "));
    let live = token.is_some_and(|t| {
        grants()
            .access
            .get(t)
            .is_some_and(|until| Instant::now() < *until)
    });
    if live {
        return Ok(());
    }
    super::log(&format!(
        "oauth refused {}",
        if token.is_some() {
            "a stale token"
        } else {
            "no token"
        }
    ));
    Err((
        401,
        vec![(
            "www-authenticate",
            format!(
                "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
                origin()
            ),
        )],
        String::new(),
    ))
}

/// The `revoke` tool: every token is void.
pub fn revoke_all() -> Value {
    let mut grants = grants();
    grants.access.clear();
    grants.refresh.clear();
    super::log("oauth revoked every token");
    json!({"content": [{"type": "text", "text": "revoked"}]})
}

/// The authorization server's own paths; `None` for the MCP endpoint.
pub fn route(method: &str, path_and_query: &str, body: &str) -> Option<Answer> {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let o = origin();
    Some(match (method, path) {
        ("GET", "/.well-known/oauth-protected-resource/mcp") => json_answer(
            200,
            json!({"resource": format!("{o}/mcp"), "authorization_servers": [format!("{o}/auth")], "scopes_supported": ["tools"]}),
        ),
        ("GET", "/.well-known/oauth-authorization-server/auth") => json_answer(
            200,
            json!({
                "issuer": format!("{o}/auth"),
                "authorization_endpoint": format!("{o}/auth/authorize"),
                "token_endpoint": format!("{o}/auth/token"),
                "registration_endpoint": format!("{o}/auth/register"),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
            }),
        ),
        ("POST", "/auth/register") => register(body),
        ("GET", "/auth/authorize") => authorize(&form(query)),
        ("POST", "/auth/token") => token(&form(body)),
        (_, "/mcp") => return None,
        _ => (404, Vec::new(), String::new()),
    })
}

fn register(body: &str) -> Answer {
    let Ok(request) = serde_json::from_str::<Value>(body) else {
        return json_answer(400, json!({"error": "invalid_client_metadata"}));
    };
    let redirects: Vec<String> = request["redirect_uris"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if redirects.is_empty() || request["token_endpoint_auth_method"] != "none" {
        return json_answer(400, json!({"error": "invalid_client_metadata"}));
    }
    let mut grants = grants();
    grants.next += 1;
    let id = format!("client-{}", grants.next);
    grants.clients.insert(id.clone(), redirects.clone());
    super::log(&format!("oauth registered {id}"));
    json_answer(201, json!({"client_id": id, "redirect_uris": redirects}))
}

fn authorize(query: &HashMap<String, String>) -> Answer {
    let get = |k: &str| query.get(k).cloned().unwrap_or_default();
    let (client, redirect) = (get("client_id"), get("redirect_uri"));
    let mut grants = grants();
    let known = grants
        .clients
        .get(&client)
        .is_some_and(|r| r.contains(&redirect));
    if !known
        || get("code_challenge_method") != "S256"
        || get("response_type") != "code"
        || get("resource") != format!("{}/mcp", origin())
    {
        super::log("oauth authorize refused");
        return (400, Vec::new(), "bad authorization request".into());
    }
    grants.next += 1;
    let code = format!("code-{}", grants.next);
    grants.codes.insert(
        code.clone(),
        (client, redirect.clone(), get("code_challenge")),
    );
    super::log("oauth authorized");
    let state = url::form_urlencoded::byte_serialize(get("state").as_bytes()).collect::<String>();
    (
        302,
        vec![("location", format!("{redirect}?code={code}&state={state}"))],
        String::new(),
    )
}

fn issue(grants: &mut Grants) -> Value {
    grants.next += 1;
    let access = format!("access-{}-{}", grants.next, std::process::id());
    let refresh = format!("refresh-{}-{}", grants.next, std::process::id());
    grants.access.insert(access.clone(), Instant::now() + ttl());
    grants.refresh.insert(refresh.clone());
    json!({"access_token": access, "token_type": "Bearer", "expires_in": ttl().as_secs(), "refresh_token": refresh})
}

fn token(form: &HashMap<String, String>) -> Answer {
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    let mut grants = grants();
    match get("grant_type").as_str() {
        "authorization_code" => {
            let Some((client, redirect, challenge)) = grants.codes.remove(&get("code")) else {
                return json_answer(400, json!({"error": "invalid_grant"}));
            };
            let verified = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(Sha256::digest(get("code_verifier").as_bytes()));
            if client != get("client_id")
                || redirect != get("redirect_uri")
                || verified != challenge
            {
                super::log("oauth token refused (pkce, client or redirect)");
                return json_answer(400, json!({"error": "invalid_grant"}));
            }
            super::log("oauth granted authorization_code");
            json_answer(200, issue(&mut grants))
        }
        "refresh_token" => {
            if !grants.refresh.remove(&get("refresh_token")) {
                super::log("oauth refresh refused");
                return json_answer(
                    400,
                    json!({"error": "invalid_grant", "error_description": "revoked"}),
                );
            }
            super::log("oauth granted refresh_token");
            json_answer(200, issue(&mut grants))
        }
        _ => json_answer(400, json!({"error": "unsupported_grant_type"})),
    }
}
