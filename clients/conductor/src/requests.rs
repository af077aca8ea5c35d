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
    /// Asks the reader to answer once it has handled everything the child sent so far.
    settle: mpsc::UnboundedSender<tokio::sync::oneshot::Sender<()>>,
}

impl Activity {
    /// The activity, and what the reader takes its settle requests from.
    pub(crate) fn new() -> (Self, Settles) {
        // Unbounded: one settle request per caller waiting in `settled`, answered in order.
        let (settle, settles) = mpsc::unbounded_channel();
        let activity = Self {
            last_heard: Mutex::new(Instant::now()),
            waiting_on_host: AtomicUsize::new(0),
            answers: Mutex::default(),
            settle,
        };
        (activity, settles)
    }

    /// Waits until every message the child sent before now has been handled (a prompt's
    /// answer comes on its own path, past the updates the child sent before it).
    pub(crate) async fn settled(&self) {
        let (done, handled) = tokio::sync::oneshot::channel();
        if self.settle.send(done).is_ok() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), handled).await;
        }
    }

    /// The child spoke (or a prompt began: a kept child's silence between prompts is no
    /// hang).
    pub(crate) fn heard(&self) {
        *talaria_util::lock(&self.last_heard) = Instant::now();
    }

    /// How long ago the child last spoke or the host last answered it.
    pub(crate) fn quiet_for(&self) -> std::time::Duration {
        talaria_util::lock(&self.last_heard).elapsed()
    }

    pub(crate) fn waits_on_host(&self) -> bool {
        self.waiting_on_host.load(Ordering::SeqCst) > 0
    }

    /// Starts collecting `session`'s answer afresh.
    pub(crate) fn begin_answer(&self, session: &str) {
        let mut answers = talaria_util::lock(&self.answers);
        answers.insert(session.to_string(), String::new());
    }

    /// The answer `session` streamed since [`Activity::begin_answer`].
    pub(crate) fn take_answer(&self, session: &str) -> String {
        let mut answers = talaria_util::lock(&self.answers);
        answers.remove(session).unwrap_or_default()
    }

    fn note_update(&self, notification: &acp::SessionNotification) {
        if let acp::SessionUpdate::AgentMessageChunk(chunk) = &notification.update
            && let acp::ContentBlock::Text(text) = &chunk.content
        {
            let mut answers = talaria_util::lock(&self.answers);
            if let Some(answer) = answers.get_mut(&*notification.session_id.0) {
                keep_within(answer, &text.text);
            }
        }
    }
}

/// The most of a child's answer kept (what the caller reads as its result).
pub(crate) const ANSWER_BYTES: usize = 1 << 20;
const ANSWER_CUT: &str = "\n[the agent's answer was cut here: it was longer than 1 MiB]";

/// Adds `more` to `answer` while it stays within [`ANSWER_BYTES`]; past that, says once
/// where it was cut.
fn keep_within(answer: &mut String, more: &str) {
    if answer.ends_with(ANSWER_CUT) {
        return;
    }
    if answer.len() + more.len() <= ANSWER_BYTES {
        answer.push_str(more);
        return;
    }
    let mut room = ANSWER_BYTES.saturating_sub(answer.len());
    while !more.is_char_boundary(room) {
        room -= 1;
    }
    answer.push_str(&more[..room]);
    answer.push_str(ANSWER_CUT);
}

/// Where the reader takes its settle requests from.
pub(crate) type Settles = mpsc::UnboundedReceiver<tokio::sync::oneshot::Sender<()>>;

/// Reads the child's messages until its output ends; a settle request is answered only
/// when no message the child sent waits (the peer's reader queues each before the next).
pub(crate) async fn answer_child(
    mut incoming: mpsc::Receiver<IncomingMessage>,
    mut settles: Settles,
    peer: Peer,
    host: Arc<dyn ChildHost>,
    activity: Arc<Activity>,
) {
    loop {
        let message = tokio::select! {
            biased;
            message = incoming.recv() => message,
            Some(done) = settles.recv() => {
                let _ = done.send(());
                continue;
            }
        };
        let Some(message) = message else { break };
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
            "elicitation/create" => by(params, |r| host.create_elicitation(r)).await,
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

#[cfg(test)]
mod tests {
    #[test]
    fn an_answer_is_kept_up_to_its_limit_then_marked_cut_once() {
        let mut answer = String::new();
        let piece = "é".repeat(1000);
        for _ in 0..1000 {
            super::keep_within(&mut answer, &piece);
        }
        assert!(answer.len() <= super::ANSWER_BYTES + super::ANSWER_CUT.len());
        assert!(answer.ends_with(super::ANSWER_CUT));
        assert_eq!(answer.matches("was cut here").count(), 1);
    }
}
