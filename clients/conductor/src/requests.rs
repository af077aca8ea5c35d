//! The child's side of the conversation: its notifications passed to the host in order, its
//! requests answered by the host each in a task of its own, and what the handle needs to
//! know of it (when it last spoke, whether it waits on the host, what it answered so far).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;
use talaria_protocol::{IncomingMessage, IncomingRequest, Peer, acp, errors};
use tokio::sync::mpsc;

use crate::host::ChildHost;

/// What the child did lately, shared by the reader and the handle.
#[derive(Debug)]
pub(crate) struct Activity {
    last_heard: Mutex<Instant>,
    /// Requests of the child the host has not answered yet.
    waiting_on_host: AtomicUsize,
    /// Each session's answer text streamed so far in the current prompt.
    answers: Mutex<HashMap<String, String>>,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            last_heard: Mutex::new(Instant::now()),
            waiting_on_host: AtomicUsize::new(0),
            answers: Mutex::default(),
        }
    }

    fn heard(&self) {
        *self.last_heard.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// How long ago the child last spoke or the host last answered it.
    pub(crate) fn quiet_for(&self) -> std::time::Duration {
        self.last_heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    pub(crate) fn waits_on_host(&self) -> bool {
        self.waiting_on_host.load(Ordering::SeqCst) > 0
    }

    /// Starts collecting `session`'s answer afresh.
    pub(crate) fn begin_answer(&self, session: &str) {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers.insert(session.to_string(), String::new());
    }

    /// The answer `session` streamed since [`Activity::begin_answer`].
    pub(crate) fn take_answer(&self, session: &str) -> String {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers.remove(session).unwrap_or_default()
    }

    fn note_update(&self, notification: &acp::SessionNotification) {
        if let acp::SessionUpdate::AgentMessageChunk(chunk) = &notification.update
            && let acp::ContentBlock::Text(text) = &chunk.content
        {
            let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(answer) = answers.get_mut(&*notification.session_id.0) {
                answer.push_str(&text.text);
            }
        }
    }
}

/// Reads the child's messages until its output ends.
pub(crate) async fn answer_child(
    mut incoming: mpsc::Receiver<IncomingMessage>,
    peer: Peer,
    host: Arc<dyn ChildHost>,
    activity: Arc<Activity>,
) {
    while let Some(message) = incoming.recv().await {
        activity.heard();
        match message {
            IncomingMessage::Notification { method, params } if method == "session/update" => {
                match serde_json::from_value::<acp::SessionNotification>(params) {
                    Ok(notification) => {
                        activity.note_update(&notification);
                        host.update(notification).await;
                    }
                    Err(e) => tracing::debug!("a child's session/update not understood: {e}"),
                }
            }
            IncomingMessage::Notification { method, .. } => {
                tracing::debug!(method, "a child's notification ignored");
            }
            IncomingMessage::Request(request) => {
                let peer = peer.clone();
                let host = host.clone();
                let activity = activity.clone();
                activity.waiting_on_host.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    answer_request(&peer, host.as_ref(), request).await;
                    activity.heard();
                    activity.waiting_on_host.fetch_sub(1, Ordering::SeqCst);
                });
            }
        }
    }
}

async fn answer_request(peer: &Peer, host: &dyn ChildHost, request: IncomingRequest) {
    let IncomingRequest {
        id,
        method,
        params,
        cancel,
    } = request;
    let answer = async {
        match method.as_str() {
            "fs/read_text_file" => by(params, |r| host.read_text_file(r)).await,
            "fs/write_text_file" => by(params, |r| host.write_text_file(r)).await,
            "session/request_permission" => by(params, |r| host.request_permission(r)).await,
            "terminal/create" => by(params, |r| host.create_terminal(r)).await,
            "terminal/output" => by(params, |r| host.terminal_output(r)).await,
            "terminal/wait_for_exit" => by(params, |r| host.wait_for_terminal_exit(r)).await,
            "terminal/kill" => by(params, |r| host.kill_terminal(r)).await,
            "terminal/release" => by(params, |r| host.release_terminal(r)).await,
            other => Err(errors::method_not_found(other)),
        }
    };
    let answer = tokio::select! {
        answer = answer => answer,
        () = cancel.cancelled() => Err(errors::request_cancelled()),
    };
    peer.respond(&id, answer).await;
}

/// Parses the request's parameters, asks the host, and gives its answer as JSON.
async fn by<Req, Resp, F, Fut>(
    params: serde_json::Value,
    ask: F,
) -> Result<serde_json::Value, acp::Error>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Resp, acp::Error>>,
{
    let request: Req = serde_json::from_value(params).map_err(errors::invalid_params)?;
    let answer = ask(request).await?;
    serde_json::to_value(answer).map_err(errors::internal_error)
}
