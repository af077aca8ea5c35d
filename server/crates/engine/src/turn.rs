//! One turn: model call → tool calls → tool results → model call, until the model stops.
//! Model calls go through the one model-call path ([`crate::model_call`]) with a sink that
//! streams to the chat; tool calls through the orchestrator.
//!
//! Invariants:
//! - Every await is raced against the turn's cancellation token.
//! - The record stays valid for the next call: an assistant entry with tool calls is always
//!   followed by one result per call; a failed model call leaves no assistant entry (a
//!   cancelled one keeps the text already shown).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use talaria_provider::{FinishReason, ToolCallRequest, ToolSpec};
use talaria_record::{AssistantEntry, EntryBody, Reasoning, Transcript};
use talaria_tools::{Registry, SessionToolState, ToolContext};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::budget::ResultBudget;
use crate::events::{EngineEvent, StopReason, TurnError, TurnUsage};
use crate::model_call::sink::unique_id;
use crate::model_call::{Answer, CallResult, ChatSink, ModelCaller, TextHold};
use crate::orchestrator::Orchestrator;
use crate::settings::SessionSettings;

mod spec;
pub(crate) use spec::{SessionParts, TurnSpec};

/// The tools offered to the model, as the provider API describes them.
pub(crate) fn tool_specs(registry: &Registry) -> Vec<ToolSpec> {
    registry
        .definitions()
        .map(|d| ToolSpec {
            name: d.name.to_string(),
            description: d.description.to_string(),
            parameters: d.parameters.clone(),
        })
        .collect()
}

/// How a turn ended: its outcome, its usage, and what its calls wrote that outlasts the
/// session (by the results' unique ids).
pub(crate) struct TurnEnd {
    pub outcome: Result<StopReason, TurnError>,
    pub usage: TurnUsage,
    pub kept: Vec<(String, talaria_tools::Kept)>,
}

/// Moves the steers waiting in `steering` into `history`, in order, and shows each to the
/// client; `None` when there were none, else the answers due once the record is saved
/// ([`answer_steers`]; a steer recorded as waiting was answered then).
pub(crate) async fn record_steers(
    steering: &crate::steering::SteerInbox,
    history: &mut Transcript,
    events: &mpsc::Sender<EngineEvent>,
) -> Option<Vec<SteerReply>> {
    let mut any = None;
    loop {
        let steers = steering.take();
        if steers.is_empty() {
            return any;
        }
        let replies = any.get_or_insert_with(Vec::new);
        for steer in steers {
            let shown = steer.input.blocks.clone();
            talaria_util::failpoint::step("steer::append::before");
            let entry = history.push(EntryBody::User {
                input: steer.input.blocks,
                model_view: steer.input.model_view,
            });
            if let Some(marker) = steer.marker {
                history.steer_entered(marker, entry);
            }
            talaria_util::failpoint::step("steer::append::after");
            replies.extend(steer.reply);
            let _ = events.send(EngineEvent::Steered(entry, shown)).await;
        }
    }
}

/// A steer's words as the user wrote them (its text blocks), for another agent's prompt.
fn words_of(input: &crate::settings::UserInput) -> String {
    input
        .blocks
        .iter()
        .filter_map(|block| match block {
            talaria_record::InputBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a steer's outcome is sent.
pub(crate) type SteerReply = tokio::sync::oneshot::Sender<crate::steering::SteerOutcome>;

/// Answers steers `injected` once what the session sent to its journal so far is committed
/// or spooled (at most the answer deadline), from a task of its own: the turn never waits
/// on the store for them. Without a journal (the session is not saved) at once.
pub(crate) fn answer_steers(
    journal: Option<&crate::journal::SessionJournal>,
    replies: Vec<SteerReply>,
) {
    if replies.is_empty() {
        return;
    }
    let saved = journal.map(crate::journal::SessionJournal::committed_later);
    tokio::spawn(async move {
        if let Some(saved) = saved {
            saved.await;
        }
        for reply in replies {
            let _ = reply.send(crate::steering::SteerOutcome::Injected);
        }
    });
}

/// An answer's calls once the calls it wrote as text are taken out.
/// One model call of the turn, as the loop goes on with it.
struct Called {
    result: Result<CallResult, crate::model_call::CallError>,
    /// The cards opened for the calls the answer makes (model id, unique id).
    announced: Vec<(String, String)>,
    /// How much of the streamed answer the chat has seen, when text was held back while
    /// it might be a call written as text (the held copy itself is gone by then).
    shown: Option<usize>,
    /// The id of the message the answer is (`EngineEvent::MessageStarts`).
    message_id: String,
}

/// How a batch of calls left the turn.
enum BatchEnd {
    /// The model reads the results.
    Go,
    Cancelled,
    /// The client stopped the work at a checkpoint it intercepts.
    Stopped,
}

impl BatchEnd {
    fn of(report: &crate::orchestrator::BatchReport) -> Self {
        if report.cancelled {
            Self::Cancelled
        } else if report.stopped.is_some() {
            Self::Stopped
        } else {
            Self::Go
        }
    }
}

/// What follows a recorded answer.
enum Next {
    /// The model was sent back to act.
    Nudged,
    /// The turn ends.
    Stop(StopReason),
    /// These calls run (with what the model reads after the one that ran, when it wrote more).
    Tools {
        calls: Vec<ToolCallRequest>,
        unrun: Option<String>,
    },
}

struct FromText {
    text: String,
    /// How many bytes at the start of `text` are the streamed answer's own.
    same_prefix: usize,
    tool_calls: Vec<ToolCallRequest>,
    /// What the model is told, and the user, when a call in the text was not run.
    nudge: Option<(String, String)>,
    /// What the model reads after the result of the one call that ran, when it wrote more.
    unrun: Option<String>,
}

impl FromText {
    /// The answer as it came: no call was found in its text.
    fn untouched(text: String, tool_calls: Vec<ToolCallRequest>) -> Self {
        Self {
            same_prefix: text.len(),
            text,
            tool_calls,
            nudge: None,
            unrun: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct TurnLimits {
    max_requests: u32,
    max_output_tokens: Option<u32>,
}

/// A running turn; built by [`Turn::new`] from a [`TurnSpec`], the one way to build it.
pub(crate) struct Turn<'a> {
    settings: &'a SessionSettings,
    limits: TurnLimits,
    registry: &'a Registry,
    /// The session's mode and remembered rules, as its actor publishes them.
    approval: &'a crate::session_state::ApprovalState,
    tool_state: Arc<SessionToolState>,
    events: &'a mpsc::Sender<EngineEvent>,
    cancel: &'a CancellationToken,
    history: &'a mut Transcript,
    /// Where the record is saved as it grows (none: the session is not saved).
    journal: Option<&'a mut crate::journal::SessionJournal>,
    used_tool_ids: spec::Part<&'a mut HashSet<String>, HashSet<String>>,
    /// What the turn's calls wrote that outlasts the session (filled as they finish).
    kept: Vec<(String, talaria_tools::Kept)>,
    /// The model-call path for this turn (its chain and the fallback held for the turn).
    caller: ModelCaller<'a>,
    /// The messages the client steers into this turn ([`crate::steering`]).
    steering: spec::Part<&'a crate::steering::SteerInbox, crate::steering::SteerInbox>,
    /// The call the turn opens with instead of a model request (`/agent`).
    opening: Option<ToolCallRequest>,
    /// Which side answered this turn's delegated file requests (`ClientFiles`): its own,
    /// or its parent's for a subagent.
    file_sides: talaria_tools::FileSides,
}

impl Turn<'_> {
    /// Sends what the record gained to the store (off the runtime thread).
    fn save(&mut self) {
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.save(&mut *self.history);
        }
    }

    /// What other agents used in the calls just run, added to the turn's and the session's.
    fn take_agents_usage(&mut self) {
        let Some(agents) = &self.settings.agents else {
            return;
        };
        let used = agents.take_used();
        self.caller.usage.merge(&used.tokens);
        let session = &mut *self.caller.session_usage;
        session.tokens.merge(&used.tokens);
        if let Some(cost) = used.cost {
            session.cost += cost;
            session.priced = true;
        }
    }

    /// Opens the turn with `call` instead of a model request (`/agent`): it runs as the
    /// model's call would (the same orchestrator, checkpoint and card), and its result is the
    /// turn's answer.
    pub(crate) fn opening_with(mut self, call: Option<ToolCallRequest>) -> Self {
        self.opening = call;
        self
    }

    pub(crate) async fn run(mut self, input: crate::settings::UserInput) -> TurnEnd {
        let outcome = self.run_loop(input).await;
        TurnEnd {
            outcome,
            usage: self.caller.usage,
            kept: self.kept,
        }
    }

    async fn run_loop(
        &mut self,
        input: crate::settings::UserInput,
    ) -> Result<StopReason, TurnError> {
        let prompt = self.history.push(EntryBody::User {
            input: input.blocks,
            model_view: input.model_view,
        });
        self.save();
        let _ = self.events.send(EngineEvent::PromptRecorded(prompt)).await;
        let tools = tool_specs(self.registry);
        let results_dir = self
            .settings
            .home
            .join("tool-results")
            .join(&self.settings.id);
        // Results too large for the window are stored beside the others.
        self.caller.spill_dir = Some(results_dir.clone());
        let mut budget = ResultBudget::new(self.caller.context.window, results_dir);
        let mut failures: HashMap<(String, String), u32> = HashMap::new();
        if let Some(ended) = self.run_opening(&mut budget, &mut failures).await {
            return Ok(ended);
        }
        let mut nudged = false;
        let mut handed_over = false;
        let mut last_message = String::new();
        for _ in 0..self.limits.max_requests {
            // A turn never runs far ahead of the disk.
            if let Some(journal) = self.journal.as_deref() {
                journal.room().await;
            }
            self.take_steers().await;
            let called = self.model_call(&tools, &mut last_message).await;
            let seen = (called.shown, called.message_id);
            let answer = match called.result.map_err(TurnError::Model)? {
                CallResult::Cancelled { text } if self.cancel.is_cancelled() => {
                    self.keep_cancelled(seen, text).await;
                    return Ok(StopReason::Cancelled);
                }
                CallResult::Cancelled { text } => {
                    // A steer ended the request: what streamed stays, and the next request
                    // carries the steer.
                    self.keep_cancelled(seen, text).await;
                    self.save();
                    continue;
                }
                CallResult::Finished(answer) => answer,
            };
            let nudge_allowed = !nudged && !tools.is_empty();
            let next = self
                .record_answer(answer, seen, &tools, nudge_allowed)
                .await;
            let (tool_calls, unrun) = match next {
                Next::Nudged => {
                    nudged = true;
                    continue;
                }
                // A steer that came while the model answered gets its own request.
                Next::Stop(_) if self.steering.has_pending() => continue,
                Next::Stop(StopReason::EndTurn)
                    if !handed_over && self.approval.mode() == crate::approval::Mode::Plan =>
                {
                    handed_over = true;
                    if self.hand_over_plan().await {
                        continue;
                    }
                    return Ok(StopReason::EndTurn);
                }
                Next::Stop(reason) => return Ok(reason),
                Next::Tools { calls, unrun } => (calls, unrun),
            };
            let end = self
                .run_tools(
                    tool_calls,
                    called.announced,
                    &mut budget,
                    &mut failures,
                    unrun,
                )
                .await;
            match end {
                BatchEnd::Go => {}
                BatchEnd::Cancelled => return Ok(StopReason::Cancelled),
                // The client stopped the work (tool interception): the results are recorded,
                // the model is not called again.
                BatchEnd::Stopped => return Ok(StopReason::EndTurn),
            }
        }
        Ok(StopReason::MaxTurnRequests)
    }

    /// The opening call, if any: recorded as the assistant's, run, and its result recorded
    /// and shown as the assistant's answer. How the turn ended, or `None` when it goes on
    /// (no opening call, or a steer came meanwhile: it gets a model request of the turn).
    async fn run_opening(
        &mut self,
        budget: &mut ResultBudget,
        failures: &mut HashMap<(String, String), u32>,
    ) -> Option<StopReason> {
        let call = self.opening.take()?;
        self.history.push(EntryBody::Assistant(AssistantEntry {
            text: String::new(),
            reasoning: None,
            tool_calls: vec![call.clone()],
            model: None,
            message_id: None,
        }));
        self.save();
        match self
            .run_tools(vec![call], Vec::new(), budget, failures, None)
            .await
        {
            BatchEnd::Go => {}
            BatchEnd::Cancelled => return Some(StopReason::Cancelled),
            BatchEnd::Stopped => return Some(StopReason::EndTurn),
        }
        let answer = self
            .history
            .entries()
            .iter()
            .rev()
            .find_map(|e| match &e.body {
                EntryBody::ToolResult(result) => Some(result.model_text.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let message_id = format!("agent-{}", self.history.last_id() + 1);
        let _ = self
            .events
            .send(EngineEvent::MessageStarts(message_id.clone()))
            .await;
        let _ = self
            .events
            .send(EngineEvent::AgentText(answer.clone()))
            .await;
        self.history.push(EntryBody::Assistant(AssistantEntry {
            text: answer,
            reasoning: None,
            tool_calls: Vec::new(),
            model: None,
            message_id: Some(message_id),
        }));
        self.save();
        (!self.steering.has_pending()).then_some(StopReason::EndTurn)
    }

    /// One model call of the turn: its notices are recorded, and the cards of calls the
    /// final answer does not make (an abandoned or failed answer) are closed, so none stays
    /// pending.
    async fn model_call(&mut self, tools: &[ToolSpec], last_message: &mut String) -> Called {
        let message_id = self.message_id(last_message);
        let _ = self
            .events
            .send(EngineEvent::MessageStarts(message_id.clone()))
            .await;
        let mut sink = ChatSink {
            events: self.events,
            session_id: &self.settings.id,
            registry: self.registry,
            used_ids: &mut self.used_tool_ids,
            announced: Vec::new(),
            notices: Vec::new(),
            hold: (!tools.is_empty())
                .then(|| TextHold::new(tools.iter().map(|t| t.name.clone()).collect())),
        };
        // A steer may end the request: armed for this call only.
        self.caller.steer_cut = Some(self.steering.arm(self.cancel));
        let result = self
            .caller
            .call(
                self.history,
                tools,
                self.limits.max_output_tokens,
                &mut sink,
            )
            .await;
        self.steering.disarm();
        self.caller.steer_cut = None;
        let (mut announced, shown) = (sink.announced, sink.hold.map(|hold| hold.shown()));
        for (level, text) in sink.notices {
            self.history.push(EntryBody::Notice {
                level: match level {
                    crate::events::NoticeLevel::Error => talaria_record::NoticeLevel::Error,
                    _ => talaria_record::NoticeLevel::Warning,
                },
                text,
            });
        }
        let made: Vec<&str> = match &result {
            Ok(CallResult::Finished(Answer { tool_calls, .. })) => {
                tool_calls.iter().map(|c| c.id.as_str()).collect()
            }
            _ => Vec::new(),
        };
        let abandoned: Vec<String> = announced
            .iter()
            .filter(|(model_id, _)| !made.contains(&model_id.as_str()))
            .map(|(_, unique)| unique.clone())
            .collect();
        announced.retain(|(model_id, _)| made.contains(&model_id.as_str()));
        for id in abandoned {
            self.close_abandoned_card(id).await;
        }
        Called {
            result,
            announced,
            shown,
            message_id,
        }
    }

    /// The id of the message the next model call answers with: named after the record entry
    /// it will be (so a recording replayed, or a record loaded, names it the same), and told
    /// apart from the previous call's when that call recorded nothing.
    fn message_id(&self, last_message: &mut String) -> String {
        let mut id = format!("agent-{}", self.history.last_id() + 1);
        if id == *last_message || last_message.starts_with(&format!("{id}.")) {
            let again = last_message
                .rsplit_once('.')
                .and_then(|(_, n)| n.parse::<u32>().ok())
                .map_or(2, |n| n + 1);
            id = format!("{id}.{again}");
        }
        last_message.clone_from(&id);
        id
    }

    /// The plan the model gave in plan mode, handed to the user; `true` when the user chose
    /// to implement it (the mode switched and the model told, so the turn goes on).
    async fn hand_over_plan(&mut self) -> bool {
        let plan = self
            .history
            .entries()
            .iter()
            .rev()
            .find_map(|e| match &e.body {
                EntryBody::Assistant(answer) if !answer.text.trim().is_empty() => {
                    Some(answer.text.clone())
                }
                _ => None,
            })
            .unwrap_or_default();
        let id = format!("plan-{}", self.history.entries().len());
        self.used_tool_ids.insert(id.clone());
        let handover = crate::plan_handover::Handover {
            events: self.events,
            cancel: self.cancel,
            approval: self.approval,
            id,
        };
        let Some(mode) = handover.ask(&plan).await else {
            return false;
        };
        if let Some(note) = crate::approval::mode_note(crate::approval::Mode::Plan, mode) {
            self.history.push(EntryBody::Nudge { text: note });
            self.save();
        }
        true
    }

    /// Puts the steers waiting into the record, where they enter the turn, and shows each
    /// to the client.
    async fn take_steers(&mut self) {
        if let Some(replies) = record_steers(&self.steering, self.history, self.events).await {
            self.save();
            answer_steers(self.journal.as_deref(), replies);
        }
    }

    /// A cancelled answer keeps the text already shown.
    async fn keep_cancelled(&mut self, seen: (Option<usize>, String), mut text: String) {
        let (shown, message_id) = seen;
        text.shrink_to_fit();
        self.show_held(shown, &text, text.len()).await;
        if !text.is_empty() {
            self.history.push(EntryBody::Assistant(AssistantEntry {
                text,
                message_id: Some(message_id),
                ..AssistantEntry::default()
            }));
        }
    }

    /// Records a finished answer (calls written as text read out of it) and says what comes
    /// next: a nudge back to the model, the end of the turn, or tool calls to run.
    async fn record_answer(
        &mut self,
        answer: Answer,
        (shown, message_id): (Option<usize>, String),
        tools: &[ToolSpec],
        nudge_allowed: bool,
    ) -> Next {
        let from_text = self
            .calls_written_as_text(answer.text, answer.tool_calls, tools)
            .await;
        let (mut text, tool_calls) = (from_text.text, from_text.tool_calls);
        // The streamed text grew by doubling: what the record keeps is exactly its size.
        text.shrink_to_fit();
        self.show_held(shown, &text, from_text.same_prefix).await;
        let nudge = if tool_calls.is_empty() && nudge_allowed {
            match from_text.nudge {
                Some(nudge) => Some(nudge),
                None => self.nudge_for(&text).await,
            }
        } else {
            None
        };
        self.history.push(EntryBody::Assistant(AssistantEntry {
            text,
            reasoning: (!answer.reasoning.is_empty()).then_some(Reasoning {
                text: answer.reasoning,
                signature: answer.signature,
            }),
            tool_calls: tool_calls.clone(),
            model: Some(answer.model),
            message_id: Some(message_id),
        }));
        self.save();
        if let Some((instruction, message)) = nudge {
            self.history.push(EntryBody::Nudge { text: instruction });
            self.save();
            self.tell(crate::events::NoticeLevel::Info, message).await;
            return Next::Nudged;
        }
        if tool_calls.is_empty() {
            return Next::Stop(match answer.reason {
                FinishReason::Length => StopReason::MaxTokens,
                FinishReason::ContentFilter => StopReason::Refusal,
                _ => StopReason::EndTurn,
            });
        }
        Next::Tools {
            calls: tool_calls,
            unrun: from_text.unrun,
        }
    }

    /// Whether a final answer (tools offered, none called, no nudge yet this turn) should be
    /// sent back once: it tells the user how to do the work, announces an action, or
    /// describes a project file the session never read. Returns the instruction for the model and the notice for the user.
    async fn nudge_for(&self, answer: &str) -> Option<(String, String)> {
        if !self.settings.nudges {
            return None;
        }
        if crate::intent::instructs_user(answer) {
            return Some((
                crate::intent::DO_IT_NUDGE.into(),
                "The model told you how to do the work instead of doing it; Talaria asked it to use its tools.".into(),
            ));
        }
        if crate::intent::announces_action(answer) {
            return Some((
                crate::intent::NUDGE.into(),
                "The model announced an action without taking it; Talaria asked it to act.".into(),
            ));
        }
        let work = crate::verify::turn_work(self.history);
        if answer.trim().is_empty() && work.used_tools {
            return Some((
                crate::verify::EMPTY_ANSWER_NUDGE.into(),
                "The model ended with an empty answer; Talaria asked it to say what it did.".into(),
            ));
        }
        if self.settings.verify_after_edits
            && !work.edited.is_empty()
            && !work.ran_after_edit
            && let Some(check) = crate::verify::obvious_check(
                &self.settings.cwd,
                &work.edited,
                self.settings.shell.places(),
            )
            .await
        {
            return Some((
                crate::verify::verify_nudge(&work.edited, &check),
                format!(
                    "The model changed files without checking them; Talaria asked it to run `{check}`."
                ),
            ));
        }
        let file = crate::intent::unread_file(answer, self.history, &self.settings.cwd).await?;
        Some((
            crate::intent::unread_nudge(&file),
            format!(
                "The model described {file} without reading it; Talaria asked it to read it first."
            ),
        ))
    }

    /// An answer with no tool call whose text holds calls (a small model's fenced JSON, or
    /// any answer when the tools are described in the prompt): the first that names an
    /// offered tool with arguments that validate runs, telling the user, and the model is told
    /// of the others; a call whose arguments do not fit, or of a tool that is not offered,
    /// runs nothing and gives what the model is told about it.
    async fn calls_written_as_text(
        &self,
        text: String,
        tool_calls: Vec<ToolCallRequest>,
        tools: &[ToolSpec],
    ) -> FromText {
        let untouched = FromText::untouched;
        if !tool_calls.is_empty()
            || tools.is_empty()
            || !(text.contains('{') || text.contains("```"))
        {
            return untouched(text, tool_calls);
        }
        let offered: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let Some(found) = crate::text_calls::find(&text, self.registry, &offered) else {
            return untouched(text, tool_calls);
        };
        let definitions: Vec<&talaria_tools::ToolDefinition> = offered
            .iter()
            .filter_map(|name| self.registry.definition(name))
            .collect();
        let (level, message, from_text) = from_text_call(found, text, tool_calls, &definitions);
        self.tell(level, message).await;
        from_text
    }

    /// Tells the user something about the turn (logged too).
    async fn tell(&self, level: crate::events::NoticeLevel, message: String) {
        tracing::info!(session = %self.settings.id, "{message}");
        let _ = self
            .events
            .send(EngineEvent::Notice { level, message })
            .await;
    }

    /// Shows what of the final answer the chat has not seen: the chat saw the first `shown`
    /// bytes of the streamed answer, and the answer's first `same_prefix` bytes are the
    /// streamed answer's (a call taken out of the text changes what follows).
    async fn show_held(&self, shown: Option<usize>, answer: &str, same_prefix: usize) {
        let Some(shown) = shown else {
            return;
        };
        let seen = shown.min(same_prefix);
        if let Some(unshown) = answer.get(seen..).filter(|rest| !rest.is_empty()) {
            let _ = self
                .events
                .send(EngineEvent::AgentText(unshown.to_string()))
                .await;
        }
    }

    /// Closes the card of a call the model started but its final answer does not make.
    async fn close_abandoned_card(&self, id: String) {
        let display = talaria_record::ToolDisplay {
            title: "Abandoned tool call".into(),
            content: vec![talaria_record::DisplayContent::Text {
                text: "The model's answer was abandoned before this call ran.".into(),
            }],
            ..talaria_record::ToolDisplay::default()
        };
        let _ = self
            .events
            .send(EngineEvent::ToolCallFinished {
                id,
                status: talaria_tools::ToolStatus::Failed,
                display,
                raw_output: None,
                skills_changed: false,
            })
            .await;
    }

    /// Runs the calls through the orchestrator and records one result per call. Returns how
    /// the batch ended the turn, if it did.
    async fn run_tools(
        &mut self,
        calls: Vec<ToolCallRequest>,
        announced: Vec<(String, String)>,
        budget: &mut ResultBudget,
        failures: &mut HashMap<(String, String), u32>,
        unrun: Option<String>,
    ) -> BatchEnd {
        let calls = self.identify_calls(calls, announced);
        let ctx = self.tool_context();
        let mut orchestrator = Orchestrator {
            registry: self.registry,
            approval: self.approval,
            roots: &self.settings.roots,
            secrets: &self.settings.secrets,
            events: self.events,
            cancel: self.cancel,
            ctx,
            budget,
            failures,
            images: self.settings.images,
            checkpoints: self
                .settings
                .checkpoints
                .as_ref()
                .map(|c| (c, self.settings.id.as_str())),
            changes: std::sync::Mutex::default(),
            hooks: crate::orchestrator::ToolHooks::of(self.settings),
            hook_notes: std::sync::Mutex::default(),
            hook_context: std::sync::Mutex::default(),
            stopped: std::sync::Mutex::default(),
        };
        let report = {
            let batch = orchestrator.run_batch(calls);
            tokio::pin!(batch);
            // Steers that arrive while the calls run (a command, a permission question) are
            // recorded as waiting at once, so their answer is a saved promise; they enter after
            // the calls.
            loop {
                tokio::select! {
                        report = &mut batch => break report,
                    () = self.steering.arrived() => {
                        let history = &mut *self.history;
                        let mut words = Vec::new();
                        let replies = self.steering.mark(|input| {
                            words.push(words_of(input));
                            talaria_util::failpoint::step("steer::wait::before");
                            let marker = history.push(EntryBody::SteerWaiting {
                                input: input.blocks.clone(),
                                model_view: input.model_view.clone(),
                                entered: None,
                            });
                            talaria_util::failpoint::step("steer::wait::after");
                            marker
                        });
                        if let Some(journal) = self.journal.as_deref_mut() {
                            journal.save(history);
                        }
                        answer_steers(self.journal.as_deref(), replies);
                        // Another agent's turn is interrupted for it (as a model request is),
                        // and the words are its next prompt.
                        if let Some(agents) = &self.settings.agents {
                            agents.steer(&words.join("\n\n"));
                        }
                    }
                }
            }
        };
        let end = BatchEnd::of(&report);
        self.take_agents_usage();
        self.kept.extend(report.kept);
        self.record_plans(report.plans);
        self.count_failures(&report.results, &report.repeated, failures)
            .await;
        let mut results = report.results;
        if let (Some(note), Some(first)) = (unrun, results.first_mut()) {
            first.model_text.push_str(&note);
        }
        for entry in results {
            self.history.push(EntryBody::ToolResult(Box::new(entry)));
        }
        self.save();
        end
    }

    /// Pairs each call with its session-unique id: the id its card was announced with while
    /// it streamed, else a new one (and whether it was announced).
    fn identify_calls(
        &mut self,
        calls: Vec<ToolCallRequest>,
        mut announced: Vec<(String, String)>,
    ) -> Vec<(String, ToolCallRequest, bool)> {
        calls
            .into_iter()
            .map(|call| {
                match announced
                    .iter()
                    .position(|(model_id, _)| *model_id == call.id)
                {
                    Some(position) => (announced.remove(position).1, call, true),
                    None => (unique_id(&mut self.used_tool_ids, &call.id), call, false),
                }
            })
            .collect()
    }

    /// What the session's tools work with during this turn: the client for files, commands
    /// and questions, the turn's cancel token, the session's tool state and shell.
    fn tool_context(&self) -> ToolContext {
        ToolContext {
            cwd: self.settings.cwd.clone(),
            cancel: self.cancel.clone(),
            files: Arc::new(crate::client_access::ClientFiles {
                events: self.events.clone(),
                delegation: self.settings.delegation,
                cancel: self.cancel.clone(),
                local: talaria_tools::LocalFiles::new(talaria_tools::LinkRules {
                    sensitive: self.settings.secrets.paths.clone(),
                    places: self.settings.shell.places(),
                }),
                sides: self.file_sides.clone(),
            }),
            commands: Arc::new(crate::client_access::ClientCommands {
                events: self.events.clone(),
                delegation: self.settings.delegation,
            }),
            state: self.tool_state.clone(),
            sensitive: self.settings.secrets.paths.clone(),
            progress: None,
            questions: Some(Arc::new(crate::client_access::ClientQuestions {
                events: self.events.clone(),
            })),
            shell: self.settings.shell.clone(),
            unconfined: false,
            result_chars: None,
        }
    }

    /// The plans the batch's calls set, in order, for the record.
    fn record_plans(&mut self, plans: Vec<Vec<talaria_tools::TodoItem>>) {
        for items in plans {
            self.history.push(EntryBody::Plan {
                items: items
                    .into_iter()
                    .map(|item| talaria_record::PlanItem {
                        id: item.id,
                        content: item.content,
                        status: item.status,
                    })
                    .collect(),
            });
        }
    }

    /// Counts each failed call toward the repeated-failure guardrail; a call the guardrail
    /// stopped is told to the user instead.
    async fn count_failures(
        &mut self,
        results: &[talaria_record::ToolResultEntry],
        repeated: &[String],
        failures: &mut HashMap<(String, String), u32>,
    ) {
        for entry in results {
            if entry.status == talaria_record::ResultStatus::Failed
                && repeated.contains(&entry.client_id)
            {
                let message = format!(
                    "The model repeated a failing `{}` call; Talaria stopped it and told the model to change course.",
                    entry.tool
                );
                self.tell(crate::events::NoticeLevel::Warning, message)
                    .await;
            }
        }
        crate::orchestrator::count_failures(results, repeated, failures);
    }
}

/// How many bytes `a` and `b` share at their start, ending on a character boundary.
fn same_prefix_len(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .last()
        .map_or(0, |((index, c), _)| index + c.len_utf8())
}

/// What a call found in an answer's text makes of the answer, and what the user is told.
fn from_text_call(
    found: crate::text_calls::TextCall,
    text: String,
    tool_calls: Vec<ToolCallRequest>,
    offered: &[&talaria_tools::ToolDefinition],
) -> (crate::events::NoticeLevel, String, FromText) {
    use crate::text_calls::{
        TextCall, misfit_instruction, unknown_tool_instruction, unreadable_instruction,
    };
    let untouched = FromText::untouched;
    match found {
        TextCall::Call { call, rest, unrun } => (
            crate::events::NoticeLevel::Info,
            format!(
                "The model wrote its `{}` call as text; Talaria runs it as a tool call.",
                call.name
            ),
            FromText {
                same_prefix: same_prefix_len(&text, &rest),
                text: rest,
                tool_calls: vec![call],
                nudge: None,
                unrun: (!unrun.is_empty()).then(|| crate::text_calls::unrun_note(&unrun)),
            },
        ),
        TextCall::Invalid { tool, why } => (
            crate::events::NoticeLevel::Warning,
            format!(
                "The model wrote a `{tool}` call as text, but its arguments do not fit ({why}); it was not run."
            ),
            FromText {
                nudge: Some((
                    misfit_instruction(&tool, &why.0),
                    "Talaria told the model why its call was not run.".to_string(),
                )),
                ..untouched(text, tool_calls)
            },
        ),
        TextCall::Unknown { tool } => (
            crate::events::NoticeLevel::Warning,
            format!("The model called `{tool}`, which is not one of its tools; nothing was run."),
            FromText {
                nudge: Some((
                    unknown_tool_instruction(&tool, offered),
                    "Talaria told the model which tools it has.".to_string(),
                )),
                ..untouched(text, tool_calls)
            },
        ),
        TextCall::Unreadable { tool, why } => (
            crate::events::NoticeLevel::Warning,
            format!("The model wrote a `{tool}` call Talaria cannot read ({why}); it was not run."),
            FromText {
                nudge: Some((
                    unreadable_instruction(&tool, &why),
                    "Talaria asked the model to write the call again.".to_string(),
                )),
                ..untouched(text, tool_calls)
            },
        ),
    }
}

/// One call outside a model's batch — a request of an agent a task was delegated to — run
/// through the same orchestrator as every turn's calls (built only in this file).
pub(crate) struct LoneCall<'a> {
    pub settings: &'a SessionSettings,
    pub registry: &'a Registry,
    pub approval: &'a crate::session_state::ApprovalState,
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub cancel: &'a CancellationToken,
    pub ctx: ToolContext,
}

impl LoneCall<'_> {
    /// The call's record entry (none only if the orchestrator gave no result).
    pub(crate) async fn run(
        self,
        id: String,
        call: ToolCallRequest,
    ) -> Option<talaria_record::ToolResultEntry> {
        let settings = self.settings;
        let results = settings.home.join("tool-results").join(&settings.id);
        let mut budget = ResultBudget::new(settings.context_window, results);
        let failures = HashMap::new();
        let mut orchestrator = Orchestrator {
            registry: self.registry,
            approval: self.approval,
            roots: &settings.roots,
            secrets: &settings.secrets,
            events: self.events,
            cancel: self.cancel,
            ctx: self.ctx,
            budget: &mut budget,
            failures: &failures,
            images: false,
            // The delegating call keeps the workspace around the whole delegation.
            checkpoints: None,
            changes: std::sync::Mutex::default(),
            // The user's hooks gate another agent's calls as they gate the session's own.
            // And the client's interception: a stop ends this one call.
            hooks: crate::orchestrator::ToolHooks::of(settings),
            hook_notes: std::sync::Mutex::default(),
            hook_context: std::sync::Mutex::default(),
            stopped: std::sync::Mutex::default(),
        };
        let report = orchestrator.run_batch(vec![(id, call, false)]).await;
        report.results.into_iter().next()
    }
}
