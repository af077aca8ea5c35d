//! Signing in to a server that asked for it: at most one sign-in per server at a time, run
//! in the background (the session goes on meanwhile), the server connected again when it
//! passes; declining is remembered until the user asks again (`/mcp reconnect`).

use std::sync::Arc;

use talaria_util::lock;

use crate::oauth::SignInPrompt;
use crate::server::{McpCallError, Server};

impl Server {
    pub(crate) fn note_needs_sign_in(&self) {
        self.note_error("it needs sign-in", false);
        let mut status = lock(self.status_cell());
        status.needs_sign_in = true;
    }

    /// The error of a call while the server waits for sign-in, saying what comes next.
    pub(crate) fn sign_in_needed(&self) -> McpCallError {
        let state = lock(&self.sign_in);
        let name = &self.config.name;
        let next = if state.running {
            "the address to sign in at was sent to the user; try again once they have signed in"
                .to_string()
        } else if self.credentials.is_none() || state.prompt.is_none() {
            "this session cannot show the user where to sign in".to_string()
        } else {
            format!("the user can run `/mcp reconnect {name}` to sign in")
        };
        McpCallError::NeedsSignIn {
            server: name.clone(),
            next,
        }
    }

    /// Gives the server who shows sign-in addresses to the user.
    pub(crate) fn set_sign_in_prompt(&self, prompt: Arc<dyn SignInPrompt>) {
        lock(&self.sign_in).prompt = Some(prompt);
    }

    /// Starts a sign-in when the server needs one and none runs (`asked`: the user asked for
    /// it, so an earlier refusal does not hold). Whether one runs now.
    pub fn begin_sign_in(self: &Arc<Self>, asked: bool) -> bool {
        let Some(credentials) = self.credentials.clone() else {
            return false;
        };
        if !self.status().needs_sign_in {
            return false;
        }
        let prompt = {
            let mut state = lock(&self.sign_in);
            if asked {
                state.declined = false;
            }
            if state.running {
                return true;
            }
            let Some(prompt) = state.prompt.clone().filter(|_| !state.declined) else {
                return false;
            };
            state.running = true;
            prompt
        };
        lock(self.status_cell()).signing_in = true;
        let server = self.clone();
        tokio::spawn(async move {
            let name = server.config.name.clone();
            let signed = credentials
                .sign_in(&name, prompt.as_ref(), &server.cancel)
                .await;
            let declined = matches!(signed, Err(crate::oauth::OAuthError::Declined));
            let outcome = match signed {
                Ok(()) => server.restart().await.map_err(|e| e.to_string()),
                Err(e) => Err(format!("sign-in failed: {e}")),
            };
            {
                let mut state = lock(&server.sign_in);
                state.running = false;
                state.declined = declined;
            }
            {
                let mut status = lock(server.status_cell());
                status.signing_in = false;
                if let Err(why) = &outcome {
                    status.last_error = Some(why.clone());
                }
            }
            match &outcome {
                Ok(()) => tracing::info!(server = %name, "signed in to the MCP server"),
                Err(why) => tracing::warn!(server = %name, "{why}"),
            }
            prompt.finished(&name, outcome).await;
        });
        true
    }
}
