//! Sends a session's engine events to the client in order, serves the session's requests to
//! the client (permission, files, terminals) where they fall in that order, and answers each
//! prompt after its turn's last update.

use std::sync::Arc;

use talaria_engine::{EngineEvent, NoticeLevel, TurnUsage};
use talaria_protocol::Peer;
use talaria_protocol::acp::{self, SessionNotification};
use tokio::sync::mpsc;

use super::client_bridge::AcpBridge;
use super::updates;

fn prompt_usage(usage: &TurnUsage) -> Option<acp::Usage> {
    if usage.input == 0 && usage.output == 0 {
        return None;
    }
    Some(
        acp::Usage::new(usage.input + usage.output, usage.input, usage.output)
            .thought_tokens((usage.reasoning > 0).then_some(usage.reasoning))
            .cached_read_tokens((usage.cached_read > 0).then_some(usage.cached_read))
            .cached_write_tokens((usage.cached_write > 0).then_some(usage.cached_write)),
    )
}

/// A notice as the client can show it: an ACP `notice` when it advertised notices, otherwise a
/// thought (info, warnings) or an agent message (errors).
pub fn notice_update(level: NoticeLevel, message: String, notices: bool) -> acp::SessionUpdate {
    if notices {
        let severity = match level {
            NoticeLevel::Info => acp::NoticeSeverity::Info,
            NoticeLevel::Warning => acp::NoticeSeverity::Warning,
            NoticeLevel::Error => acp::NoticeSeverity::Error,
        };
        return acp::SessionUpdate::Notice(acp::Notice::new(severity, message));
    }
    let text = acp::ContentBlock::Text(acp::TextContent::new(format!(
        "\n[{}] {message}\n",
        match level {
            NoticeLevel::Info => "info",
            NoticeLevel::Warning => "warning",
            NoticeLevel::Error => "error",
        }
    )));
    match level {
        NoticeLevel::Error => acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(text)),
        _ => acp::SessionUpdate::AgentThoughtChunk(acp::ContentChunk::new(text)),
    }
}

/// The session's slash commands as they are now (the skill folders are read off the runtime
/// thread).
async fn list_commands(
    commands: &Arc<dyn Fn() -> acp::SessionUpdate + Send + Sync>,
) -> Option<acp::SessionUpdate> {
    let commands = commands.clone();
    tokio::task::spawn_blocking(move || commands()).await.ok()
}

/// A subagent's session as its parent's client is told about it.
fn subagent_update(view: talaria_engine::SubagentView) -> acp::SessionUpdate {
    let state = if view.running {
        acp::StateUpdate::Running(acp::RunningStateUpdate::new())
    } else {
        acp::StateUpdate::Idle(acp::IdleStateUpdate::new())
    };
    acp::SessionUpdate::SubagentUpdate(
        acp::SubagentUpdate::new(view.session_id)
            .title(view.title)
            .description(view.description)
            .state(state),
    )
}

/// An event of a subagent's own session: updates on its session id, requests to the client
/// carrying it.
async fn child_event(peer: &Peer, client: &Arc<AcpBridge>, session_id: String, event: EngineEvent) {
    let child = acp::SessionId::new(session_id);
    let update = match event {
        EngineEvent::ClientRequest(request) => {
            let bridge = Arc::new(AcpBridge::new(peer.clone(), child, client.caps()));
            bridge.serve(request);
            return;
        }
        EngineEvent::Notice { level, message } => {
            Some(notice_update(level, message, client.caps().notices))
        }
        other => updates::session_update(other),
    };
    if let Some(update) = update {
        peer.notify("session/update", &SessionNotification::new(child, update))
            .await;
    }
}

/// Runs until the session's event stream ends.
pub async fn forward_events(
    peer: Peer,
    session_id: acp::SessionId,
    mut events: mpsc::Receiver<EngineEvent>,
    client: Arc<AcpBridge>,
    commands: Arc<dyn Fn() -> acp::SessionUpdate + Send + Sync>,
) {
    let notices = client.caps().notices;
    while let Some(event) = events.recv().await {
        let update = match event {
            EngineEvent::TurnFinished {
                turn,
                outcome,
                usage,
            } => {
                let Some(request) = super::request_of(&turn) else {
                    tracing::warn!(?turn, "turn finished with no request to answer");
                    continue;
                };
                match outcome {
                    Ok(reason) => {
                        let response = acp::PromptResponse::new(updates::stop_reason(reason))
                            .usage(prompt_usage(&usage));
                        peer.respond(&request, Ok(response)).await;
                    }
                    Err(error) => {
                        peer.respond::<()>(&request, Err(turn_error(&error))).await;
                    }
                }
                continue;
            }
            EngineEvent::ClientRequest(request) => {
                // Every earlier update is already in the writer's queue: the request cannot
                // overtake its card. It is served in the background so updates keep flowing.
                client.serve(request);
                continue;
            }
            // A failure ends the prompt with an error that says the same: a client without
            // notices is told once, by that error.
            EngineEvent::Notice {
                level: NoticeLevel::Error,
                ..
            } if !notices => None,
            EngineEvent::Notice { level, message } => Some(notice_update(level, message, notices)),
            EngineEvent::Compaction(view) => {
                super::compaction::update(view, client.caps().compaction, notices)
            }
            EngineEvent::CommandsChanged => list_commands(&commands).await,
            EngineEvent::Subagent(view) if client.caps().subagents => Some(subagent_update(view)),
            EngineEvent::Subagent(_) => None,
            EngineEvent::ChildEvent { session_id, event } => {
                child_event(&peer, &client, session_id, *event).await;
                None
            }
            EngineEvent::Delivered(signal) => {
                signal.fire();
                None
            }
            finished @ EngineEvent::ToolCallFinished { .. } => {
                let changed = matches!(
                    &finished,
                    EngineEvent::ToolCallFinished {
                        skills_changed: true,
                        ..
                    }
                );
                let card = updates::session_update(finished);
                if let Some(card) = card {
                    let notification = SessionNotification::new(session_id.clone(), card);
                    peer.notify("session/update", &notification).await;
                }
                if changed {
                    list_commands(&commands).await
                } else {
                    None
                }
            }
            other => updates::session_update(other),
        };
        if let Some(update) = update {
            let notification = SessionNotification::new(session_id.clone(), update);
            peer.notify("session/update", &notification).await;
        }
    }
}

/// A failed turn as the prompt's JSON-RPC error: the message says what happened; `data`
/// says what kind of failure it was, for frontends that act on it (`{"talaria": {"kind":
/// "model" | "command" | "internal", "class": "auth" | "rate_limit" | …, "status": 401}}`).
fn turn_error(error: &talaria_engine::TurnError) -> acp::Error {
    use talaria_engine::TurnError;
    let mut data = serde_json::Map::new();
    match error {
        TurnError::Model(failed) => {
            data.insert("kind".into(), "model".into());
            if let Some(class) = failed.class() {
                data.insert("class".into(), class.id().into());
            }
            if let Some(talaria_provider::ProviderError::Http { status, .. }) =
                failed.provider_error()
            {
                data.insert("status".into(), (*status).into());
            }
        }
        TurnError::Command(_) => {
            data.insert("kind".into(), "command".into());
        }
        TurnError::Internal(_) => {
            data.insert("kind".into(), "internal".into());
        }
    }
    acp::Error::new(acp::ErrorCode::InternalError.into(), error.to_string())
        .data(serde_json::json!({ "talaria": data }))
}
