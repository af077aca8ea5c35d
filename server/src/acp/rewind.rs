//! `_session/rewind`: the conversation moved back to a user message, in the contract of the
//! Claude adapter (`docs/session-rewind-extension.md`), so clients written for it work
//! unchanged, plus Talaria's own `restoreFiles` (and `force`).
//!
//! Request `{sessionId, beforeMessage?: {messageId, messageFingerprint, messageOccurrence?},
//! resumeAtMessage?: {…}, interruptIfRunning?, restoreFiles?, force?}`. Answered `{rewound:
//! true, sessionId, files?: {restored, skipped, failed: [{path, error}]}}`, or `{rewound:
//! false, reason}` with nothing changed; a request naming no message of the session rightly
//! is invalid params. Without `beforeMessage`, `resumeAtMessage` alone names the answer whose
//! turn the conversation goes on after (back to a branch an earlier rewind cut).

use super::state::{Agent, Reply};
use futures_util::FutureExt;
use serde::Deserialize;
use serde_json::json;
use talaria_engine::{MessagePoint, RestoreReport, RewindOutcome, RewindRequest};
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;

/// The method's name on the wire.
pub(super) const METHOD: &str = "_session/rewind";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RewindParams {
    session_id: String,
    #[serde(default)]
    before_message: Option<HistoryPoint>,
    #[serde(default)]
    resume_at_message: Option<HistoryPoint>,
    #[serde(default)]
    interrupt_if_running: bool,
    #[serde(default)]
    restore_files: bool,
    #[serde(default)]
    force: bool,
    #[serde(rename = "_meta", default)]
    _meta: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HistoryPoint {
    message_id: String,
    message_fingerprint: String,
    #[serde(default)]
    message_occurrence: Option<u64>,
}

impl HistoryPoint {
    /// The point, checked as the contract says: a non-empty id, a SHA-256 fingerprint, a
    /// positive occurrence when given.
    fn checked(self, name: &str) -> Result<MessagePoint, acp::Error> {
        if self.message_id.trim().is_empty() {
            return Err(invalid(format!(
                "{name}.messageId must be a non-empty string"
            )));
        }
        let hex = self.message_fingerprint.strip_prefix("sha256:");
        let well_formed = hex.is_some_and(|hex| {
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !well_formed {
            return Err(invalid(format!(
                "{name}.messageFingerprint must be a SHA-256 fingerprint (\"sha256:\" and 64 \
                 lowercase hex digits)"
            )));
        }
        if self.message_occurrence == Some(0) {
            return Err(invalid(format!(
                "{name}.messageOccurrence must be positive"
            )));
        }
        Ok(MessagePoint {
            message_id: self.message_id,
            fingerprint: self.message_fingerprint,
        })
    }
}

fn invalid(message: String) -> acp::Error {
    errors::invalid_params(format!("{METHOD}: {message}"))
}

/// The engine's request for these params, or why they are not one.
fn request_of(params: RewindParams) -> Result<RewindRequest, acp::Error> {
    if params.before_message.is_none() && params.resume_at_message.is_none() {
        return Err(invalid(
            "beforeMessage (or resumeAtMessage) is required".into(),
        ));
    }
    Ok(RewindRequest {
        before: params
            .before_message
            .map(|p| p.checked("beforeMessage"))
            .transpose()?,
        resume_at: params
            .resume_at_message
            .map(|p| p.checked("resumeAtMessage"))
            .transpose()?,
        interrupt_if_running: params.interrupt_if_running,
        restore_files: params.restore_files,
        force: params.force,
    })
}

fn files_json(report: &RestoreReport) -> serde_json::Value {
    json!({
        "restored": report.restored,
        "skipped": report.skipped,
        "failed": report.failed.iter().map(|(path, error)| json!({"path": path, "error": error})).collect::<Vec<_>>(),
    })
}

/// `_session/rewind`: checked here; the session's actor rewinds.
pub(super) fn rewind(
    agent: &mut Agent,
    request: RequestId,
    params: &serde_json::value::RawValue,
) -> Option<Reply> {
    let params: RewindParams = match serde_json::from_str(params.get()) {
        Ok(params) => params,
        Err(e) => return Some(Err(invalid(e.to_string()))),
    };
    let session_id = params.session_id.clone();
    let rewind = match request_of(params) {
        Ok(rewind) => rewind,
        Err(e) => return Some(Err(e)),
    };
    let Some(session) = agent.sessions.get(session_id.as_str()) else {
        return Some(Ok(json!({
            "rewound": false,
            "reason": "session_not_found",
            "message": "no session with this id is open in this process (load or resume it \
                        first; a session another process holds cannot be rewound here)",
        })));
    };
    let handle = session.handle.clone();
    let slow = async move { Ok((session_id, handle.rewind(rewind).await)) };
    agent.defer(request, METHOD, slow, |_, (session_id, outcome)| {
        async move {
            match outcome {
                RewindOutcome::Rewound { files } => {
                    let mut answer = json!({"rewound": true, "sessionId": session_id});
                    if let Some(files) = files {
                        answer["files"] = files_json(&files);
                    }
                    Ok(answer)
                }
                RewindOutcome::Refused(reason) => Ok(json!({"rewound": false, "reason": reason})),
                RewindOutcome::Invalid(why) => Err(invalid(why)),
            }
        }
        .boxed_local()
    });
    None
}
