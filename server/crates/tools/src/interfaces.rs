//! What a tool's context offers besides files and commands, as interfaces the engine or the
//! edge implements: where progress goes and how the user is asked. Depends on nothing else
//! of the crate but its error type, so every module can use it.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::ToolError;

/// What a running tool reports before it finishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Output as it arrives (e.g. from a command).
    Output(String),
    /// The call now runs in this editor terminal (embed it in the card).
    Terminal(String),
    /// The call's work goes on in this (child) session (reference it from the card).
    Session(String),
}

/// Receives [`Progress`] from a running tool.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// How the user answered a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormAnswer {
    /// The user filled in the form: its content (an object keyed by the schema's properties).
    Accepted(Value),
    /// The user chose not to answer.
    Declined,
    /// The user dismissed the form (or the turn was cancelled).
    Cancelled,
}

/// Asks the user to fill in forms (through the client): a message and a restricted JSON
/// schema, an object of primitive properties (as MCP's and ACP's elicitation define it).
pub trait UserQuestions: Send + Sync {
    fn ask_form<'a>(
        &'a self,
        message: &'a str,
        schema: &'a Value,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<FormAnswer, ToolError>>;
}
