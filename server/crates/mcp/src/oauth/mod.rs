//! Sign-in for remote MCP servers (MCP's authorization spec, OAuth 2.1): a server that
//! answers 401 is signed in to through its authorization server, with the address sent to
//! the user; the tokens are kept per server in the user's own folder, put on every request,
//! refreshed before they expire and once more when the server refuses them.
//!
//! Written on the workspace's HTTP client: `rmcp`'s `auth` feature needs a second major
//! version of `reqwest`, and the flow is small (discovery, registration, PKCE, exchange,
//! refresh).
//!
//! Invariants: tokens are never logged, recorded or shown (`Stored`'s `Debug` hides them);
//! they are only sent over HTTPS or to this machine; the redirect takes only the answer whose
//! `state` is the one sent.

mod discovery;
mod flow;
mod redirect;
mod store;
mod tokens;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use talaria_util::lock;
use tokio_util::sync::CancellationToken;

pub use discovery::{Challenge, safe_for_secrets};
pub use store::{StoreError, Stored, TokenStore};

/// How a session signs in to its servers.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Where sign-ins are kept (`$TALARIA_HOME/mcp-auth`).
    pub store: TokenStore,
    /// A client registered beforehand (for servers that offer no dynamic registration).
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// The scopes to ask for, instead of those the server names.
    pub scope: Option<String>,
    /// How long the user has to sign in.
    pub timeout: Duration,
}

impl PartialEq for AuthSettings {
    fn eq(&self, other: &Self) -> bool {
        self.client_id == other.client_id && self.scope == other.scope
    }
}

impl Eq for AuthSettings {}

/// Who shows the user where to sign in (the edge: a URL elicitation, or a notice).
pub trait SignInPrompt: Send + Sync {
    /// Shows `url`, where the user signs in to `server`; `false` when the user declined.
    fn show<'a>(&'a self, server: &'a str, url: &'a str) -> BoxFuture<'a, bool>;
    /// The sign-in shown last for `server` ended (`Err`: why it failed).
    fn finished<'a>(&'a self, server: &'a str, outcome: Result<(), String>) -> BoxFuture<'a, ()>;
}

/// Where a server's sign-in stands.
#[derive(Default)]
pub(crate) struct SignInState {
    /// Who shows the user where to sign in (set once the session can talk to its client).
    pub(crate) prompt: Option<Arc<dyn SignInPrompt>>,
    pub(crate) running: bool,
    /// The user declined; not asked again until they ask.
    pub(crate) declined: bool,
}

/// Why a sign-in failed.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("cannot find where to sign in: {0}")]
    Discovery(String),
    #[error("cannot register Talaria with the authorization server: {0}")]
    Registration(String),
    #[error("{0}")]
    NoClient(String),
    #[error("the redirect listener failed: {0}")]
    Redirect(String),
    #[error("the user declined to sign in")]
    Declined,
    #[error("nobody signed in within {0} s")]
    TimedOut(u64),
    #[error("the sign-in was cancelled")]
    Cancelled,
    #[error("the authorization server refused: {0}")]
    Refused(String),
    #[error("the token request failed: {0}")]
    Token(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The tokens of one server: loaded from the store when first needed, refreshed when due.
pub struct Credentials {
    server_url: String,
    pub settings: AuthSettings,
    http: reqwest::Client,
    current: tokio::sync::Mutex<Option<Stored>>,
    loaded: std::sync::atomic::AtomicBool,
    /// The server's last 401 challenge.
    challenge: Mutex<Option<Challenge>>,
}

impl Credentials {
    pub fn new(server_url: &str, settings: AuthSettings) -> Self {
        Self {
            server_url: server_url.to_string(),
            settings,
            http: reqwest::Client::new(),
            current: tokio::sync::Mutex::new(None),
            loaded: std::sync::atomic::AtomicBool::new(false),
            challenge: Mutex::new(None),
        }
    }

    /// The access token to send, refreshed first when it is due; `None` when not signed in.
    pub async fn bearer(&self) -> Option<String> {
        let mut current = self.current.lock().await;
        if !self.loaded.swap(true, std::sync::atomic::Ordering::SeqCst) {
            match self.settings.store.load(&self.server_url) {
                Ok(found) => *current = found,
                Err(e) => tracing::warn!("MCP sign-in not used: {e}"),
            }
        }
        let due = current
            .as_ref()
            .is_some_and(|s| tokens::due(s, tokens::now()));
        if due && let Some(stored) = current.clone() {
            self.refresh_into(&mut current, &stored).await;
        }
        current.as_ref().map(|s| s.access_token.clone())
    }

    async fn refresh_into(&self, current: &mut Option<Stored>, stored: &Stored) {
        match tokens::refresh(&self.http, stored).await {
            Ok(fresh) => {
                if let Err(e) = self.settings.store.save(&fresh) {
                    tracing::warn!("the refreshed MCP sign-in is not kept: {e}");
                }
                *current = Some(fresh);
            }
            Err(OAuthError::Refused(why)) => {
                tracing::info!(server = %self.server_url, "the MCP sign-in was refused ({why}): signing in again");
                self.settings.store.forget(&self.server_url);
                *current = None;
            }
            Err(e) => {
                tracing::warn!(server = %self.server_url, "refreshing the MCP sign-in failed: {e}")
            }
        }
    }

    /// The server refused `sent` (401 with `challenge`): a token to try once more (refreshed),
    /// or `None` when the user must sign in again.
    pub async fn refused(&self, sent: Option<&str>, challenge: Challenge) -> Option<String> {
        *lock(&self.challenge) = Some(challenge);
        let mut current = self.current.lock().await;
        let stored = current.clone()?;
        if sent != Some(stored.access_token.as_str()) {
            // Refreshed meanwhile by another request.
            return Some(stored.access_token);
        }
        if stored.refresh_token.is_none() {
            self.settings.store.forget(&self.server_url);
            *current = None;
            return None;
        }
        self.refresh_into(&mut current, &stored).await;
        current
            .as_ref()
            .filter(|fresh| fresh.access_token != stored.access_token)
            .map(|fresh| fresh.access_token.clone())
    }

    /// The server's last challenge (what to sign in with).
    pub fn challenge(&self) -> Challenge {
        lock(&self.challenge).clone().unwrap_or_default()
    }

    /// Signs in (the user sent to `prompt`'s address) and keeps the tokens.
    pub async fn sign_in(
        &self,
        server: &str,
        prompt: &dyn SignInPrompt,
        cancel: &CancellationToken,
    ) -> Result<(), OAuthError> {
        let challenge = self.challenge();
        let stored = flow::sign_in(
            &self.http,
            (server, &self.server_url),
            &challenge,
            &self.settings,
            prompt,
            cancel,
        )
        .await?;
        self.settings.store.save(&stored)?;
        *self.current.lock().await = Some(stored);
        self.loaded.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}
