//! Showing the user where to sign in to an MCP server: a URL elicitation when the client
//! takes them (answered when the user agreed to go; `elicitation/complete` when the sign-in
//! is over), else a notice with the address; and a notice of how it ended.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;
use talaria_engine::NoticeLevel;
use talaria_protocol::Peer;
use talaria_protocol::acp;

use super::updates;

/// One session's way of showing sign-in addresses.
pub struct ClientSignIn {
    pub peer: Peer,
    pub session_id: acp::SessionId,
    /// The client takes URL elicitations.
    pub url_elicitation: bool,
    /// The client shows `notice` updates.
    pub notices: bool,
    next: AtomicU64,
    /// The elicitation shown for each server, until its sign-in ends.
    shown: Mutex<HashMap<String, String>>,
}

impl ClientSignIn {
    pub fn new(
        peer: Peer,
        session_id: acp::SessionId,
        url_elicitation: bool,
        notices: bool,
    ) -> Self {
        Self {
            peer,
            session_id,
            url_elicitation,
            notices,
            next: AtomicU64::new(1),
            shown: Mutex::new(HashMap::new()),
        }
    }

    async fn notice(&self, level: NoticeLevel, text: String) {
        let update = updates::notice_update(level, text, self.notices);
        let notification = acp::SessionNotification::new(self.session_id.clone(), update);
        self.peer.notify("session/update", &notification).await;
    }

    /// Asks the client to send the user to `url`: `Some(agreed)`, or `None` when it failed.
    async fn elicit(&self, server: &str, url: &str) -> Option<bool> {
        let id = format!(
            "mcp-sign-in-{}-{}",
            self.session_id.0,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let scope = acp::ElicitationSessionScope::new(self.session_id.clone());
        let params = acp::CreateElicitationRequest::new(
            acp::ElicitationUrlMode::new(scope, id.clone(), url),
            format!("Sign in to the MCP server {server} to use its tools."),
        );
        let cancel = self.peer.closed();
        let answer: Result<acp::CreateElicitationResponse, _> =
            self.peer.call("elicitation/create", &params, &cancel).await;
        match answer {
            Ok(response) => {
                let agreed = matches!(response.action, acp::ElicitationAction::Accept(_));
                if agreed {
                    talaria_util::lock(&self.shown).insert(server.to_string(), id);
                }
                Some(agreed)
            }
            Err(error) => {
                tracing::warn!(
                    server,
                    "the client did not take the sign-in address: {}",
                    error.message
                );
                None
            }
        }
    }
}

impl crate::sessions::SignInPrompt for ClientSignIn {
    fn show<'a>(&'a self, server: &'a str, url: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            if self.url_elicitation
                && let Some(agreed) = self.elicit(server, url).await
            {
                return agreed;
            }
            self.notice(
                NoticeLevel::Warning,
                format!(
                    "The MCP server {server} needs sign-in. Open this address to sign in: {url}"
                ),
            )
            .await;
            true
        })
    }

    fn finished<'a>(&'a self, server: &'a str, outcome: Result<(), String>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let shown = talaria_util::lock(&self.shown).remove(server);
            if let Some(id) = shown {
                let done = acp::CompleteElicitationNotification::new(id);
                self.peer.notify("elicitation/complete", &done).await;
            }
            match outcome {
                Ok(()) => {
                    self.notice(
                        NoticeLevel::Info,
                        format!("Signed in to the MCP server {server}: its tools are offered from the next prompt."),
                    )
                    .await;
                }
                Err(why) => {
                    self.notice(
                        NoticeLevel::Warning,
                        format!("The MCP server {server}: {why}"),
                    )
                    .await
                }
            }
        })
    }
}
