//! Sends a session's engine events to the client in order, serves the session's requests to
//! the client (permission, files, terminals) where they fall in that order, and answers each
//! prompt after its turn's last update. It writes to every client attached to the session
//! (`Audience`), each message to each in the same order; a client attaching is shown the
//! session so far first (`audience.rs`'s replay: the record up to the running turn's prompt,
//! then what the turn has shown), at a point between two messages.

use std::sync::Arc;

use talaria_engine::{EngineEvent, NoticeLevel, TurnUsage};
use talaria_protocol::acp::{self, SessionNotification};
use talaria_protocol::{NotificationTemplate, SerializedNotification};
use tokio::sync::mpsc;

use super::client_bridge::AcpBridge;
use super::delivery;
use super::state::{Audience, EdgePayload, EdgeUpdates};
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

/// The session's slash commands as they are now (the skill folders are read off the runtime
/// thread).
async fn list_commands(
    commands: &Arc<dyn Fn() -> acp::SessionUpdate + Send + Sync>,
) -> Option<acp::SessionUpdate> {
    let commands = commands.clone();
    tokio::task::spawn_blocking(move || commands()).await.ok()
}

/// A subagent's session as its parent's client is told about it (the 1.20 shape): the child
/// announced with what the client may do with it (cancel its work), its state — running, or
/// idle with how it ended — and the messages between parent and child on the parent's
/// transcript (the task sent, the report back).
fn subagent_updates(
    parent: &acp::SessionId,
    view: talaria_engine::SubagentView,
) -> Vec<acp::SessionUpdate> {
    let state = if view.running {
        acp::StateUpdate::Running(acp::RunningStateUpdate::new())
    } else {
        let mut idle = acp::IdleStateUpdate::new();
        if let Some(stop) = &view.stop {
            idle = idle.stop_reason(idle_stop_reason(stop));
        }
        acp::StateUpdate::Idle(idle)
    };
    let child = acp::SessionId::new(view.session_id.clone());
    let mut announced = acp::SubagentUpdate::new(child.clone())
        .title(view.title)
        .description(view.description)
        .state(state);
    if view.running {
        announced = announced.capabilities(
            acp::SubagentSessionCapabilities::new().cancel(acp::SessionCancelCapabilities::new()),
        );
    }
    let mut updates = vec![acp::SessionUpdate::SubagentUpdate(announced)];
    if let Some(message) = view.message {
        let (sender, recipient) = if message.to_child {
            (parent.clone(), child)
        } else {
            (child, parent.clone())
        };
        updates.push(acp::SessionUpdate::SessionMessage(
            acp::SessionMessage::new(message.id)
                .sender_session_id(sender)
                .recipient_session_id(recipient)
                .content(vec![acp::ContentBlock::from(message.text)]),
        ));
    }
    updates
}

fn idle_stop_reason(stop: &talaria_engine::SubagentStop) -> acp::IdleStopReason {
    use talaria_engine::{StopReason, SubagentStop};
    match stop {
        SubagentStop::Finished(StopReason::EndTurn) => acp::IdleStopReason::EndTurn,
        SubagentStop::Finished(StopReason::MaxTokens) => acp::IdleStopReason::MaxTokens,
        SubagentStop::Finished(StopReason::MaxTurnRequests) => acp::IdleStopReason::MaxTurnRequests,
        SubagentStop::Finished(StopReason::Refusal) => acp::IdleStopReason::Refusal,
        SubagentStop::Finished(StopReason::Cancelled) => acp::IdleStopReason::Cancelled,
        SubagentStop::Failed(why) => acp::IdleStopReason::Error(
            acp::ErrorStopReason::new()
                .error(talaria_protocol::errors::internal_error(why.clone())),
        ),
    }
}

/// An event of a subagent's own session: updates on its session id, requests to the client
/// carrying it.
async fn child_event(
    audience: &Audience,
    client: &Arc<AcpBridge>,
    session_id: String,
    event: EngineEvent,
) {
    let child = acp::SessionId::new(session_id);
    let update = match event {
        EngineEvent::ClientRequest(request) => {
            let questions = super::questions::Askers {
                edge: None,
                ..client.questions.clone()
            };
            let bridge = Arc::new(client.for_child(child, questions));
            bridge.serve(request);
            return;
        }
        EngineEvent::Notice { level, message } => Some(updates::notice_update(
            level,
            message,
            client.caps().notices,
        )),
        other => updates::session_update(other),
    };
    if let Some(message) = update.and_then(|update| delivery::serialized(&child, update)) {
        for member in audience.members() {
            delivery::deliver(audience, &member, &message).await;
        }
    }
}

/// A session's answer and thought chunks, serialized once with a hole for the text: a
/// streamed delta then costs escaping its text (see `NotificationTemplate`).
pub struct ChunkTemplates {
    /// The message the chunks belong to (`messageId`).
    message_id: Option<String>,
    message: Option<NotificationTemplate>,
    thought: Option<NotificationTemplate>,
}

impl ChunkTemplates {
    /// The marker that stands for the text while the templates are made.
    const HOLE: &str = "talaria-chunk-text-5c0e91";

    /// Templates made from the very updates `updates::agent_chunk` builds, for the chunks
    /// of message `message_id`.
    pub fn new(session_id: &acp::SessionId, message_id: Option<String>) -> Self {
        let template = |event: EngineEvent| {
            let update = updates::agent_chunk(event, message_id.as_deref())?;
            let notification = SessionNotification::new(session_id.clone(), update);
            NotificationTemplate::new("session/update", &notification, Self::HOLE)
        };
        Self {
            message: template(EngineEvent::AgentText(Self::HOLE.into())),
            thought: template(EngineEvent::AgentThought(Self::HOLE.into())),
            message_id,
        }
    }
}

/// One session's writer of `session/update`s: the engine's events and the edge's own
/// updates, each written whole and in the order they came.
pub struct Forwarder {
    /// The clients attached to the session: every message goes to each of them.
    pub audience: Arc<Audience>,
    /// The store's journal, for the record a client attaching is shown.
    pub journal: Option<talaria_engine::Journal>,
    /// What the running turn has shown so far, for a client attaching during it.
    pub turn: super::audience::TurnSoFar,
    pub session_id: acp::SessionId,
    pub client: Arc<AcpBridge>,
    pub commands: Arc<dyn Fn() -> acp::SessionUpdate + Send + Sync>,
    pub chunks: ChunkTemplates,
    /// The `messageId` of the running turn's prompt, told in its answer's `_meta`.
    pub prompt_message: Option<String>,
    /// The session's rate limits, as its model calls reported them.
    pub quota: super::quota::SessionQuota,
}

impl Forwarder {
    /// Runs until the session's event stream ends (the edge's updates waiting then are
    /// written first).
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<EngineEvent>,
        mut edge: mpsc::UnboundedReceiver<EdgeUpdates>,
    ) {
        let mut edge_open = true;
        loop {
            tokio::select! {
                biased;
                batch = edge.recv(), if edge_open => match batch {
                    Some(batch) => self.write_edge(batch).await,
                    None => edge_open = false,
                },
                event = events.recv() => match event {
                    Some(event) => self.event(event).await,
                    None => break,
                },
            }
            self.tell_the_lagging().await;
        }
        while let Ok(batch) = edge.try_recv() {
            self.write_edge(batch).await;
            self.tell_the_lagging().await;
        }
        self.quota.close();
    }

    async fn write_edge(&self, batch: EdgeUpdates) {
        match batch.updates {
            EdgePayload::Updates(updates) => {
                for update in updates {
                    self.write(update).await;
                }
            }
            EdgePayload::Replay(replay) => {
                // To the client that loaded it alone: the others saw it (not kept for a
                // client attaching either: it is in the record).
                let to = match replay.to {
                    Some(id) => self.audience.member(id).into_iter().collect(),
                    None => self.audience.members(),
                };
                for updates in replay.entries() {
                    for update in updates {
                        for member in &to {
                            self.write_to(member, update.clone()).await;
                        }
                    }
                }
            }
            EdgePayload::WhenIdle(waiter) => self.turn.when_idle(waiter),
            EdgePayload::ToOthers { except, updates } => {
                for update in updates {
                    self.tell_others(except, update).await;
                }
            }
            EdgePayload::Attach(attaching) => self.attach(*attaching, batch.outcome).await,
        }
        if let Some(written) = batch.written {
            let _ = written.send(());
        }
    }

    /// Writes `update` to every attached client (as each takes plans), and keeps it for a
    /// client attaching during the turn.
    pub(super) async fn write(&self, update: acp::SessionUpdate) {
        self.turn.keep(&update);
        let members = self.audience.members();
        if let [member] = members.as_slice() {
            return self.write_to(member, update).await;
        }
        // Serialized once for the clients that take plans and once for the others.
        let mut made: [Option<SerializedNotification>; 2] = [None, None];
        for member in members {
            let slot = &mut made[usize::from(member.caps.plans)];
            if slot.is_none() {
                let update = super::plan_updates::for_client(update.clone(), member.caps.plans);
                let notification = SessionNotification::new(self.session_id.clone(), update);
                *slot = SerializedNotification::new("session/update", &notification);
            }
            if let Some(serialized) = slot {
                delivery::deliver(&self.audience, &member, serialized).await;
            }
        }
    }

    /// A streamed answer or thought delta, through its template when there is one; a
    /// message that did not say its id (a command's reply) gets one of its own.
    async fn chunk(&mut self, event: EngineEvent) {
        if self.chunks.message_id.is_none() {
            self.start_message(uuid::Uuid::new_v4().to_string());
        }
        let (template, text) = match &event {
            EngineEvent::AgentText(text) => (&self.chunks.message, text),
            EngineEvent::AgentThought(text) => (&self.chunks.thought, text),
            _ => (&None, &String::new()),
        };
        match template {
            Some(template) => {
                // (A chunk written whole below is kept by `write`.)
                if self.turn.keeps()
                    && let Some(kept) =
                        updates::agent_chunk(event.clone(), self.chunks.message_id.as_deref())
                {
                    self.turn.keep(&kept);
                }
                let members = self.audience.members();
                if let [member] = members.as_slice()
                    && self.audience.delivery(member.id) == super::state::Delivery::Wait
                {
                    member.peer.notify_filled(template, text).await;
                    return;
                }
                let filled = template.filled(text);
                for member in members {
                    delivery::deliver(&self.audience, &member, &filled).await;
                }
            }
            None => {
                if let Some(update) = updates::agent_chunk(event, self.chunks.message_id.as_deref())
                {
                    self.write(update).await;
                }
            }
        }
    }

    /// The chunks from now on belong to message `id`.
    fn start_message(&mut self, id: String) {
        self.chunks = ChunkTemplates::new(&self.session_id, Some(id));
    }

    /// One engine event: an update, a request to the client, or a prompt's answer.
    async fn event(&mut self, event: EngineEvent) {
        let notices = self.client.caps().notices;
        let update = match event {
            EngineEvent::MessageStarts(id) => {
                self.start_message(id);
                None
            }
            chunk @ (EngineEvent::AgentText(_) | EngineEvent::AgentThought(_)) => {
                self.chunk(chunk).await;
                None
            }
            EngineEvent::TurnFinished {
                turn,
                outcome,
                usage,
            } => {
                let prompt_message = self.prompt_message.take();
                self.answer(&turn, outcome, &usage, prompt_message).await;
                self.turn.ended();
                // What the next turn streams before its first model call is another message.
                self.chunks = ChunkTemplates::new(&self.session_id, None);
                None
            }
            EngineEvent::Steered(entry, blocks) => {
                self.steered(entry, &blocks).await;
                None
            }
            EngineEvent::PromptRecorded(entry) => {
                self.prompt_message = Some(super::replay::user_message_id(entry));
                self.turn.started(entry);
                None
            }
            EngineEvent::ClientRequest(request) => {
                // Every earlier update is already in the writer's queue: the request cannot
                // overtake its card. It is served in the background so updates keep flowing.
                self.client.serve(request);
                None
            }
            // A failure ends the prompt with an error that says the same: a client without
            // notices is told once, by that error.
            EngineEvent::Notice {
                level: NoticeLevel::Error,
                ..
            } if !notices => None,
            EngineEvent::Notice { level, message } => {
                Some(updates::notice_update(level, message, notices))
            }
            EngineEvent::Compaction(view) => {
                super::compaction::update(view, self.client.caps().compaction, notices)
            }
            EngineEvent::RateLimits(view) => {
                self.rate_limits(view).await;
                None
            }
            EngineEvent::Usage { used, size, cost } => Some(self.usage_update(used, size, cost)),
            EngineEvent::CommandsChanged => list_commands(&self.commands).await,
            EngineEvent::Subagent(view) if self.client.caps().subagents => {
                let mut updates = subagent_updates(&self.session_id, view);
                let last = updates.pop();
                for update in updates {
                    self.write(update).await;
                }
                last
            }
            EngineEvent::Subagent(_) => None,
            EngineEvent::ModeSwitched(mode) => Some(acp::SessionUpdate::CurrentModeUpdate(
                acp::CurrentModeUpdate::new(mode),
            )),
            EngineEvent::ChildEvent { session_id, event } => {
                child_event(&self.audience, &self.client, session_id, *event).await;
                None
            }
            EngineEvent::Delivered(signal) => {
                signal.fire();
                None
            }
            finished @ EngineEvent::ToolCallFinished { .. } => {
                self.tool_call_finished(finished).await
            }
            other => updates::session_update(other),
        };
        if let Some(update) = update {
            self.write(update).await;
        }
    }

    /// A `usage_update`, carrying the windows of the session's rate limits in its `_meta`.
    fn usage_update(&self, used: u64, size: u64, cost: Option<f64>) -> acp::SessionUpdate {
        let update = acp::UsageUpdate::new(used, size)
            .cost(cost.map(|amount| acp::Cost::new(amount, "USD")))
            .meta(self.quota.usage_meta());
        acp::SessionUpdate::UsageUpdate(update)
    }

    /// A model call's rate limits: the full snapshot to a client that opted in, when it
    /// changed; and when a limit refused the call (no usage follows), a `usage_update` with
    /// the windows now.
    async fn rate_limits(&mut self, view: talaria_engine::LimitsView) {
        let refused = view.refused;
        let changed = self.quota.observe(view);
        if let Some(mut snapshot) = changed {
            snapshot["sessionUpdate"] = "quota_update".into();
            let notification =
                serde_json::json!({"sessionId": self.session_id, "update": snapshot});
            let message = SerializedNotification::new("session/update", &notification);
            for member in self.audience.members() {
                if member.caps.quota
                    && let Some(message) = &message
                {
                    delivery::deliver(&self.audience, &member, message).await;
                }
            }
        }
        if let Some(context) = refused {
            self.write(self.usage_update(context.used, context.size, None))
                .await;
        }
    }

    /// A message steered into the turn, shown where it entered: the user's message chunks,
    /// marked `_meta.talaria.steered`.
    async fn steered(&self, entry: talaria_record::EntryId, blocks: &[talaria_record::InputBlock]) {
        let id = super::replay::user_message_id(entry);
        for block in blocks.iter().filter_map(super::replay::content_block) {
            let mut meta = acp::Meta::new();
            meta.insert("talaria".into(), serde_json::json!({"steered": true}));
            let chunk = acp::ContentChunk::new(block)
                .message_id(acp::MessageId::new(id.clone()))
                .meta(meta);
            self.write(acp::SessionUpdate::UserMessageChunk(chunk))
                .await;
        }
    }

    /// A finished card; the slash commands again when the call changed the skills.
    async fn tool_call_finished(&self, finished: EngineEvent) -> Option<acp::SessionUpdate> {
        let changed = matches!(
            &finished,
            EngineEvent::ToolCallFinished {
                skills_changed: true,
                ..
            }
        );
        if let Some(card) = updates::session_update(finished) {
            self.write(card).await;
        }
        if changed {
            list_commands(&self.commands).await
        } else {
            None
        }
    }

    /// Answers the prompt a turn was for.
    async fn answer(
        &self,
        turn: &talaria_engine::TurnId,
        outcome: Result<talaria_engine::StopReason, talaria_engine::TurnError>,
        usage: &TurnUsage,
        prompt_message: Option<String>,
    ) {
        let Some((asker, request)) = super::prompt::request_of(turn) else {
            if turn.0.starts_with(super::steering::STEERED_TURN_PREFIX) {
                // A steer started it and was answered then; its end is only logged.
                tracing::debug!(?turn, ?outcome, "a turn a steer started ended");
            } else {
                tracing::warn!(?turn, "turn finished with no request to answer");
            }
            return;
        };
        // The others attached are told how the turn ended (they get no answer).
        let ended = match &outcome {
            Ok(reason) => {
                serde_json::json!({"state": "idle", "stopReason": updates::stop_reason(*reason)})
            }
            Err(error) => serde_json::json!({"state": "idle", "error": error.to_string()}),
        };
        self.tell_others(asker, super::audience::turn_update(asker, ended))
            .await;
        // The client that prompted, attached or not: every request is answered.
        let Some(peer) = self.audience.take_asker(asker) else {
            tracing::warn!(?turn, "no connection to answer the prompt on");
            return;
        };
        let asker = (asker, peer);
        match outcome {
            Ok(reason) => {
                let mut response = acp::PromptResponse::new(updates::stop_reason(reason))
                    .usage(prompt_usage(usage));
                // The id of the prompt's message, for a client to name it in a rewind.
                if let Some(id) = prompt_message {
                    let mut meta = acp::Meta::new();
                    meta.insert("userMessageId".into(), serde_json::Value::String(id));
                    response = response.meta(meta);
                }
                delivery::answer(&self.audience, asker, request, Ok(response)).await;
            }
            Err(error) => {
                let error = Err::<(), _>(turn_error(&error));
                delivery::answer(&self.audience, asker, request, error).await;
            }
        }
    }

    /// A client attaches: the session so far is read for it, it joins the others as
    /// catching up, and is shown it at its own pace (`catching_up.rs`); the attach is
    /// answered (`told`) then.
    async fn attach(
        &self,
        attaching: super::state::Attaching,
        told: Option<tokio::sync::oneshot::Sender<super::state::Reply>>,
    ) {
        let shown = super::audience::so_far(
            &self.session_id,
            self.journal.clone(),
            &self.turn,
            &attaching,
        )
        .await;
        let member = attaching.member.clone();
        let joined = shown.and_then(|replay| {
            super::audience::join(&self.audience, attaching)
                .map(|roster| (replay, roster))
                .ok_or_else(|| {
                    talaria_protocol::errors::invalid_params(
                        "this client is attaching to the session already: wait for that \
                         attach's answer",
                    )
                })
        });
        let (replay, roster) = match joined {
            Ok(joined) => joined,
            Err(why) => {
                tracing::warn!(session = %self.session_id, "an attach failed: {}", why.message);
                if let Some(told) = told {
                    let _ = told.send(Err(why));
                }
                return;
            }
        };
        self.write(super::audience::roster_update(roster.clone()))
            .await;
        // Another client's turn runs: the one attaching is told whose.
        if let Some(asker) = self.audience.prompted_by()
            && self.turn.is_running()
            && asker != member.id
        {
            let running = serde_json::json!({"state": "running"});
            let update = super::audience::turn_update(asker, running);
            self.write_to(&member, update).await;
        }
        let audience = self.audience.clone();
        super::catching_up::show(audience, member, replay, (roster, told));
    }

    /// Writes `update` to one attached client (as it takes plans).
    async fn write_to(&self, member: &super::state::Member, update: acp::SessionUpdate) {
        let update = super::plan_updates::for_client(update, member.caps.plans);
        if let Some(message) = delivery::serialized(&self.session_id, update) {
            delivery::deliver(&self.audience, member, &message).await;
        }
    }

    /// Tells the clients detached for falling behind, and the others who is attached now
    /// (which may find more behind).
    async fn tell_the_lagging(&self) {
        while delivery::tell_the_lagging(&self.audience, &self.session_id) > 0 {
            self.write(super::audience::roster_update(self.audience.roster()))
                .await;
        }
    }

    /// Writes `update` to every attached client but `except` (not kept for a client
    /// attaching: what the record shows).
    pub(super) async fn tell_others(
        &self,
        except: super::state::MemberId,
        update: acp::SessionUpdate,
    ) {
        for member in self.audience.members() {
            if member.id == except {
                continue;
            }
            let update = super::plan_updates::for_client(update.clone(), member.caps.plans);
            if let Some(message) = delivery::serialized(&self.session_id, update) {
                delivery::deliver(&self.audience, &member, &message).await;
            }
        }
    }
}

/// A failed turn as the prompt's JSON-RPC error: the message says what happened; `data`
/// says what kind of failure it was, for frontends that act on it (`{"talaria": {"kind":
/// "model" | "command" | "internal", "class": "auth" | "rate_limit" | …, "status": 401}}`);
/// a limit's refusal is `quotaExceeded` (see `quota::quota_exceeded`).
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
    // A limit that refused the call: the quotas draft's `quotaExceeded`, naming the limit and
    // when it resets.
    if let TurnError::Model(failed) = error
        && let Some(exceeded) = super::quota::quota_exceeded(failed, data.clone())
    {
        return exceeded;
    }
    // A key the provider refused (401, 403) is the client's to fix: `auth_required`, with
    // the ways to authenticate, so an editor offers its sign-in.
    if let TurnError::Model(failed) = error
        && failed.class() == Some(talaria_provider::ErrorClass::Auth)
    {
        let mut refused = super::capabilities::auth_required(
            "refused",
            "the model provider refused the key",
            &format!("{error}. The model provider refused the credentials"),
        );
        // The turn's own account (its kind, class, status) beside the detail.
        if let Some(talaria) = refused
            .data
            .as_mut()
            .and_then(|d| d.get_mut("talaria"))
            .and_then(serde_json::Value::as_object_mut)
        {
            talaria.extend(data);
        }
        return refused;
    }
    acp::Error::new(acp::ErrorCode::InternalError.into(), error.to_string())
        .data(serde_json::json!({ "talaria": data }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk sent through its template is byte for byte the notification built whole.
    #[test]
    fn a_templated_chunk_is_the_whole_notification() {
        let session = acp::SessionId::new("3f2a-session");
        let templates = ChunkTemplates::new(&session, Some("5e1f-message".into()));
        let texts = [
            "",
            "tok1 ",
            "quote \" back \\ nl \n tab \t nul \u{0} é ✓ 😀",
            "\u{7f}\u{1f}",
        ];
        for text in texts {
            for (template, event) in [
                (&templates.message, EngineEvent::AgentText(text.into())),
                (&templates.thought, EngineEvent::AgentThought(text.into())),
            ] {
                let update = updates::agent_chunk(event, Some("5e1f-message"))
                    .expect("a chunk is an update");
                let whole = serde_json::to_string(&serde_json::json!({
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": SessionNotification::new(session.clone(), update),
                }))
                .expect("serializes");
                let filled = template.as_ref().expect("a template").fill(text);
                let parsed: serde_json::Value = serde_json::from_str(&filled).expect("valid JSON");
                let expected: serde_json::Value = serde_json::from_str(&whole).expect("valid JSON");
                assert_eq!(parsed, expected);
            }
        }
    }

    #[test]
    fn a_session_id_holding_the_marker_falls_back_to_whole_messages() {
        let templates = ChunkTemplates::new(&acp::SessionId::new(ChunkTemplates::HOLE), None);
        assert!(templates.message.is_none() && templates.thought.is_none());
    }
}
