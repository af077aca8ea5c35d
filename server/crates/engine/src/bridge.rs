//! What the engine needs from the client, without knowing the protocol: permission prompts,
//! and (when the editor offers them) its file buffers and terminals.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use talaria_tools::fs::{FileAccess, LocalFiles};
use talaria_tools::shell::{CommandRunner, LocalRunner};
use tokio_util::sync::CancellationToken;

/// An answer the user can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionChoice {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

/// A question for the user about one tool call (already shown as a card).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRequest {
    /// The card's id.
    pub tool_call_id: String,
    pub title: String,
    /// Why the policy asks (e.g. "outside the workspace"), if there is a special reason.
    pub reason: Option<String>,
    pub choices: Vec<PermissionChoice>,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionAnswer {
    Chosen(PermissionChoice),
    /// The client cancelled the prompt (the turn is being cancelled).
    Cancelled,
    /// The prompt could not be shown; the call does not run.
    Failed(String),
}

/// The client as the engine sees it.
pub trait ClientBridge: Send + Sync {
    /// Asks the user. Must end promptly when `cancel` fires.
    fn request_permission<'a>(
        &'a self,
        request: PermissionRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, PermissionAnswer>;

    /// Where file tools read and write (the editor's buffers when it offers them).
    fn files(&self) -> Arc<dyn FileAccess> {
        Arc::new(LocalFiles)
    }

    /// Where foreground commands run (an editor terminal when it offers one).
    fn commands(&self) -> Arc<dyn CommandRunner> {
        Arc::new(LocalRunner)
    }
}
