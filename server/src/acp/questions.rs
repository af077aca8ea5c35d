//! A session's questions to its users (a permission, a form) when several clients are
//! attached: each is asked of every attached client that can answer it, and of any that
//! attaches while it is open; the first answer wins, the others' requests are withdrawn
//! (`$/cancel_request`), and every client is told who answered and how (a `tool_call_update`
//! whose `_meta["talaria/permissionResolved"]` says it, in order with the session's updates).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use talaria_protocol::acp;
use talaria_protocol::errors;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::state::{Audience, ClientCaps, EdgePayload, EdgeUpdates, Member};

/// The `_meta` key of the update that says a question was answered.
pub(super) const RESOLVED_KEY: &str = "talaria/permissionResolved";

/// Whom a session's questions go to, and where the outcome is told.
#[derive(Clone)]
pub struct Askers {
    pub audience: Arc<Audience>,
    /// The session's writer (none for a subagent's questions: their outcome is its parent's
    /// card's).
    pub edge: Option<mpsc::UnboundedSender<EdgeUpdates>>,
}

/// One client's answer (or failure) to a question.
type Answered = (Member, Result<Value, acp::Error>);

impl Askers {
    /// Asks `method` of every attached client `can_answer` says can (and of those attaching
    /// while it is open); the first answer and who gave it. Fails when every client asked
    /// failed and none is left to ask; waits (the session waits) while no client is attached.
    pub async fn ask<P: serde::Serialize>(
        &self,
        method: &'static str,
        params: &P,
        cancel: &CancellationToken,
        can_answer: fn(&ClientCaps) -> bool,
    ) -> Result<(Member, Value), acp::Error> {
        let params = serde_json::to_value(params)
            .map_err(|e| errors::internal_error(format!("serializing {method}: {e}")))?;
        let (answers, mut answered) = mpsc::unbounded_channel::<Answered>();
        let withdrawn = cancel.child_token();
        let outstanding = Arc::new(AtomicUsize::new(0));
        let ask_one = {
            let outstanding = outstanding.clone();
            let withdrawn = withdrawn.clone();
            Arc::new(move |member: &Member| {
                if !can_answer(&member.caps) {
                    return;
                }
                outstanding.fetch_add(1, Ordering::SeqCst);
                let (member, params, answers) = (member.clone(), params.clone(), answers.clone());
                let withdrawn = withdrawn.clone();
                tokio::spawn(async move {
                    let answer = member.peer.request(method, &params, &withdrawn).await;
                    let _ = answers.send((member, answer));
                });
            })
        };
        let (open, now) = self.audience.open_question(ask_one.clone());
        for member in now {
            ask_one(&member);
        }
        let members = self.audience.members();
        if outstanding.load(Ordering::SeqCst) == 0 && !members.is_empty() {
            self.audience.close_question(open);
            return Err(errors::unavailable(format!(
                "no attached client can answer {method}"
            )));
        }
        let outcome = loop {
            tokio::select! {
                Some((member, answer)) = answered.recv() => {
                    outstanding.fetch_sub(1, Ordering::SeqCst);
                    match answer {
                        Ok(value) => break Ok((member, value)),
                        Err(error) => {
                            tracing::debug!(client = member.id, method, "a client did not answer: {}", error.message);
                            // Every client asked failed: a client still attached answered
                            // with an error (it cannot ask: the question fails, as with one
                            // client), or none that can answer is left.
                            let members = self.audience.members();
                            let answered_with_error = members.iter().any(|m| m.id == member.id);
                            if outstanding.load(Ordering::SeqCst) == 0
                                && (answered_with_error
                                    || !members.iter().any(|m| can_answer(&m.caps)))
                            {
                                break Err(error);
                            }
                        }
                    }
                }
                () = cancel.cancelled() => break Err(errors::request_cancelled()),
            }
        };
        self.audience.close_question(open);
        // The others' requests are withdrawn.
        withdrawn.cancel();
        outcome
    }

    /// Tells every attached client that `by` answered the question on `tool_call` with
    /// `outcome`, in order with the session's updates.
    pub fn resolved(&self, tool_call: &str, by: &Member, outcome: &Value) {
        let Some(edge) = &self.edge else {
            return;
        };
        let mut meta = acp::Meta::new();
        let mut said = serde_json::json!({"by": by.described(), "outcome": outcome});
        said["at"] = chrono::Utc::now().to_rfc3339().into();
        meta.insert(RESOLVED_KEY.into(), said);
        let update = acp::SessionUpdate::ToolCallUpdate(
            acp::ToolCallUpdate::new(tool_call.to_string(), acp::ToolCallUpdateFields::new())
                .meta(meta),
        );
        let _ = edge.send(EdgeUpdates {
            updates: EdgePayload::Updates(vec![update]),
            written: None,
            outcome: None,
        });
    }
}
