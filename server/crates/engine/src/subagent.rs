//! `delegate_task {goal, context?, toolsets?, max_turns?}`: runs a child turn on its own record
//! (the goal and context as its first message, the parent's system prompt), with the parent's
//! tools narrowed to the requested toolsets — never `delegate_task` itself (depth 1) — and its
//! own turn cap, on `[auxiliary.subagent]` (else the session's model); the child's final
//! answer is the tool's result.
//!
//! Invariants:
//! - At most `max_children` children run at once; more wait for a slot.
//! - The child's tool calls go through its own orchestrator with the parent's mode and
//!   remembered rules: a permission question appears on the parent's session, on a card named
//!   after the child. The parent's card shows the child's steps as progress.
//! - Cancelling the parent's turn cancels the child; a failing child fails only its call.

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use talaria_record::{EntryBody, Transcript};
use talaria_tools::parse_args;
use talaria_tools::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Progress, Registry, Tool, ToolContext,
    ToolDefinition, ToolKind, ToolOutcome,
};
use tokio::sync::mpsc;

use crate::context::ContextState;
use crate::events::{EngineEvent, StopReason};
use crate::model_call::{ModelCaller, SessionUsage};
use crate::settings::{SessionSettings, UserInput};
use crate::turn::{Turn, TurnSpec};

pub(crate) use crate::delegation_kit::SubagentKit;
pub use crate::delegation_kit::cancel_subagent;
use crate::delegation_kit::{Announcement, Running, announce, start_relay};

/// The side task whose model runs subagents.
pub const SUBAGENT_TASK: &str = "subagent";
/// The tool's name.
pub const NAME: &str = "delegate_task";
/// Model requests a child makes unless `max_turns` says otherwise.
const DEFAULT_MAX_TURNS: u32 = 30;
/// The longest report returned to the parent.
const REPORT_CHARS: usize = 6_000;

const CHILD_NOTE: &str = "You are a subagent: another agent delegated one task to you. Work \
    on it with your tools, without asking the user questions, and finish with a concise report \
    of what you did and found (files, commands, results) — the report is all the other agent \
    sees.";

/// The `delegate_task` tool of one session.
pub(crate) struct DelegateTask(pub Arc<SubagentKit>);

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: NAME.into(),
    toolset: "delegation".into(),
    description: "Delegate a self-contained task to a subagent with a fresh context: give the \
        goal and the context it needs (it sees nothing else); optionally narrow its toolsets \
        (file, terminal, …) and cap its model calls with max_turns. Several delegations in one \
        answer run in parallel. Returns the subagent's report."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "context": {"type": "string"},
            "toolsets": {"type": "array", "items": {"type": "string"}},
            "max_turns": {"type": "integer", "minimum": 1, "maximum": 90}
        },
        "required": ["goal"]
    }),
    kind: ToolKind::Think,
    approval: ApprovalNeed::ReadOnly,
    concurrency: Concurrency::ReadOnly,
    max_result_chars: None,
    effects: Effects {
        // A subagent may do what its own tools do: edit and run (each call of it goes
        // through its own orchestrator).
        writes: true,
        runs_commands: true,
        ..Effects::NOTHING
    },
});

/// The definition when other agents are configured: `agent` names one (a session without
/// any offers the tool unchanged).
static WITH_AGENTS: LazyLock<ToolDefinition> = LazyLock::new(|| {
    let mut definition = DEFINITION.clone();
    definition.description = format!(
        "{} With `agent`, the task goes to that configured agent instead (another program with \
         its own model: give it everything it needs); its file and command requests follow this \
         session's rules.",
        definition.description
    )
    .into();
    definition.parameters["properties"]["agent"] = json!({"type": "string",
        "description": "The name of a configured agent to hand the task to (an unknown name is answered with the configured ones)."});
    definition
});

#[derive(Debug, Deserialize)]
struct Args {
    goal: String,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    toolsets: Option<Vec<String>>,
    #[serde(default)]
    max_turns: Option<u32>,
    /// A configured external agent to hand the task to instead of a subagent.
    #[serde(default)]
    agent: Option<String>,
}

impl Tool for DelegateTask {
    fn definition(&self) -> &ToolDefinition {
        if self.0.settings.agents.is_some() {
            &WITH_AGENTS
        } else {
            &DEFINITION
        }
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        let goal: String = args["goal"]
            .as_str()
            .unwrap_or("a task")
            .chars()
            .take(80)
            .collect();
        CallDescription {
            title: format!("Delegate: {goal}"),
            read_only: true,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(NAME, args) {
                Ok(args) => args,
                Err(outcome) => return outcome,
            };
            let permit = tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return ToolOutcome::failed("Cancelled before the subagent started."),
                permit = self.0.slots.clone().acquire_owned() => permit,
            };
            let Ok(_permit) = permit else {
                return ToolOutcome::failed("The subagent could not start.");
            };
            match (args.agent.clone(), &self.0.settings.agents) {
                (Some(agent), Some(agents)) => {
                    let task = task_text(&args);
                    crate::external_delegation::delegate(&self.0, agents, agent, task, ctx).await
                }
                (Some(agent), None) => ToolOutcome::failed(format!(
                    "No agent named {agent:?} is configured (configured: none); leave out \
                     `agent` to delegate to a subagent."
                )),
                (None, _) => run_child(&self.0, args, ctx).await,
            }
        })
    }
}

/// The child is done: how it ended, and its report as a message back (none when cancelled).
async fn announce_end(
    kit: &SubagentKit,
    session_id: &str,
    name: &str,
    goal: &str,
    outcome: &Result<StopReason, crate::events::TurnError>,
    history: &Transcript,
) {
    let reported = matches!(outcome, Ok(reason) if *reason != StopReason::Cancelled);
    let announcement = Announcement {
        session_id,
        name,
        goal,
        running: false,
        stop: Some(stop_of(outcome)),
        message: reported.then(|| crate::events::SubagentMessage {
            id: format!("{session_id}:report"),
            to_child: false,
            text: report_of(history),
        }),
    };
    announce(kit, announcement).await;
}

/// How the child's turn ended, for its parent's client.
fn stop_of(outcome: &Result<StopReason, crate::events::TurnError>) -> crate::events::SubagentStop {
    match outcome {
        Ok(reason) => crate::events::SubagentStop::Finished(*reason),
        Err(error) => crate::events::SubagentStop::Failed(error.to_string()),
    }
}

/// The last answer of the child's record.
fn report_of(history: &Transcript) -> String {
    let text = history
        .entries()
        .iter()
        .rev()
        .find_map(|e| match &e.body {
            EntryBody::Assistant(answer) if !answer.text.trim().is_empty() => {
                Some(answer.text.trim().to_string())
            }
            _ => None,
        })
        .unwrap_or_else(|| "(the subagent gave no report)".into());
    if text.chars().count() > REPORT_CHARS {
        let cut: String = text.chars().take(REPORT_CHARS).collect();
        format!("{cut}\n[report cut to {REPORT_CHARS} characters]")
    } else {
        text
    }
}

async fn run_child(kit: &SubagentKit, args: Args, ctx: &ToolContext) -> ToolOutcome {
    let number = kit.children.fetch_add(1, Ordering::Relaxed) + 1;
    let name = format!("subagent {number}");
    let registry = match &args.toolsets {
        Some(toolsets) => {
            let names: Vec<&str> = toolsets.iter().map(String::as_str).collect();
            kit.registry.with_toolsets(&names)
        }
        None => kit.registry.clone(),
    };
    let settings = child_settings(kit, &name);
    let mut child_journal = child_journal(kit, &settings, &name, &args.goal).await;
    let mut history = Transcript::with_system_and_environment(
        format!("{}\n\n{CHILD_NOTE}", settings.system_prompt),
        settings.environment.clone(),
    );
    let ask = task_text(&args);
    let child_session = kit.settings.announce_subagents.then(|| settings.id.clone());
    // The child's own cancellation: the parent's turn ends it, and so can the client.
    let mut child_ctx = ctx.clone();
    child_ctx.cancel = ctx.cancel.child_token();
    let ctx = &child_ctx;
    let _running = Running::register(&settings.id, ctx.cancel.clone());
    if let Some(session_id) = &child_session {
        let announcement = Announcement {
            session_id,
            name: &name,
            goal: &args.goal,
            running: true,
            stop: None,
            message: Some(crate::events::SubagentMessage {
                id: format!("{session_id}:task"),
                to_child: true,
                text: ask.clone(),
            }),
        };
        announce(kit, announcement).await;
        ctx.report_progress(Progress::Session(session_id.clone()));
    }
    let (child_events, relaying) = start_relay(kit, ctx, child_session.clone(), &name, &args.goal);
    let child = Child {
        settings: &settings,
        registry: &registry,
        max_requests: args.max_turns.unwrap_or(DEFAULT_MAX_TURNS).clamp(1, 90),
        events: &child_events,
    };
    let (outcome, usage) = child
        .run(kit, ctx, &mut history, child_journal.as_mut(), &ask)
        .await;
    drop(child_events);
    if let Some(journal) = child_journal.as_mut() {
        finish_journal(journal, &mut history, &outcome, &usage).await;
    }
    if let Ok(relay) = relaying.await {
        let steps = relay.views.len();
        relay.step(format!("{name} finished after {steps} tool calls"));
    }
    if let Some(session_id) = &child_session {
        announce_end(kit, session_id, &name, &args.goal, &outcome, &history).await;
    }
    // The child's session id stays with the result, so a replay shows the child under the
    // id it had live.
    result_of(&name, outcome, &history)
        .with_raw_output(json!({"subagent": {"sessionId": settings.id, "title": name}}))
}

/// A child's settings: the parent's, on the parent's current model, with an id of its own
/// (unique across the parent's reloads too: the counter restarts with the process) and no
/// title task.
fn child_settings(kit: &SubagentKit, name: &str) -> SessionSettings {
    let mut settings = kit.settings.clone();
    let model = kit.approval.model();
    settings.environment =
        crate::system_prompt::with_model(&settings.environment, &settings.model, &model);
    settings.model = model;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() % 1_000_000_000);
    settings.id = format!("{}-{}-{stamp}", kit.settings.id, name.replace(' ', "-"));
    settings.titles = false;
    // The parent's checkpoint around `delegate_task` sees everything the child changes; the
    // child's own would take its changes into the shared index first, out of the parent's
    // record, so a rewind of the parent could not put them back.
    settings.checkpoints = None;
    settings
}

/// The child's record in the store (its parent recorded), held by this process while it
/// runs; `None` when the parent is not saved.
async fn child_journal(
    kit: &SubagentKit,
    settings: &SessionSettings,
    name: &str,
    goal: &str,
) -> Option<crate::journal::SessionJournal> {
    let journal = kit.journal.as_ref()?;
    let now = talaria_store::now_ms();
    journal.create(talaria_store::SessionMeta {
        id: settings.id.clone(),
        cwd: settings.cwd.display().to_string(),
        title: Some(format!(
            "{name}: {}",
            goal.chars().take(80).collect::<String>()
        )),
        model: settings.model.clone(),
        mode: kit.approval.mode().id().into(),
        created_at: now,
        updated_at: now,
        parent_id: Some(kit.settings.id.clone()),
        ..Default::default()
    });
    journal.claim(&settings.id);
    Some(crate::journal::SessionJournal::new(
        journal.clone(),
        &settings.id,
        0,
    ))
}

/// The task as the child reads it: the goal and the context given.
fn task_text(args: &Args) -> String {
    match &args.context {
        Some(context) if !context.trim().is_empty() => {
            format!("Task: {}\n\nContext:\n{context}", args.goal)
        }
        _ => format!("Task: {}", args.goal),
    }
}

/// What a child's turn runs with.
struct Child<'c> {
    settings: &'c SessionSettings,
    registry: &'c Registry,
    max_requests: u32,
    events: &'c mpsc::Sender<EngineEvent>,
}

impl Child<'_> {
    /// Runs the child's one turn on the `subagent` side chain; returns how it ended and what
    /// it used.
    async fn run(
        self,
        kit: &SubagentKit,
        ctx: &ToolContext,
        history: &mut Transcript,
        journal: Option<&mut crate::journal::SessionJournal>,
        ask: &str,
    ) -> (Result<StopReason, crate::events::TurnError>, SessionUsage) {
        let settings = self.settings;
        let (chain, _) = kit.router.side_chain(SUBAGENT_TASK, &settings.model);
        let mut context = ContextState::new(
            settings.context_window,
            settings.compression,
            settings.tokenizers.clone(),
            &settings.model,
        );
        let mut usage = SessionUsage::default();
        let caller = ModelCaller::new(
            kit.router.as_ref(),
            chain,
            settings.retry,
            &ctx.cancel,
            &mut context,
            &mut usage,
        );
        let spec = TurnSpec {
            max_requests: self.max_requests,
            approval: &kit.approval,
            sink: self.events,
            // A subagent is steered by its parent's task, not by the client.
            session: None,
            journal,
            file_sides: ctx.files.sides(),
        };
        let turn = Turn::new(settings, self.registry, history, caller, spec);
        let outcome = turn.run(UserInput::text(ask)).await.outcome;
        settings
            .hook_scope()
            .run(
                crate::hooks::HookEvent::SubagentStop,
                serde_json::json!({"stop_hook_active": false}),
                self.events,
            )
            .await;
        (outcome, usage)
    }
}

/// Saves the child's record (marked interrupted when it did not finish) and its usage,
/// committed before the parent reads the result, and releases it.
async fn finish_journal(
    journal: &mut crate::journal::SessionJournal,
    history: &mut Transcript,
    outcome: &Result<StopReason, crate::events::TurnError>,
    usage: &SessionUsage,
) {
    if matches!(outcome, Err(_) | Ok(StopReason::Cancelled)) {
        history.interrupt("the subagent did not finish");
    }
    journal.save(history);
    journal.update(talaria_store::MetaUpdate {
        tokens: Some((usage.tokens.input, usage.tokens.output)),
        ..Default::default()
    });
    let _ = journal.committed().await;
    journal.journal.release(&journal.session_id);
}

/// What the parent's `delegate_task` call reads.
fn result_of(
    name: &str,
    outcome: Result<StopReason, crate::events::TurnError>,
    history: &Transcript,
) -> ToolOutcome {
    match outcome {
        Ok(StopReason::Cancelled) => ToolOutcome::failed(format!("{name} was cancelled.")),
        Ok(StopReason::Refusal) => ToolOutcome::failed(format!("{name} refused the task.")),
        Ok(reason) => {
            let note = match reason {
                StopReason::MaxTurnRequests => " (it reached its max_turns before finishing)",
                StopReason::MaxTokens => " (its last answer was cut at the output limit)",
                _ => "",
            };
            ToolOutcome::completed(format!("Report from {name}{note}:\n{}", report_of(history)))
        }
        Err(error) => ToolOutcome::failed(format!("{name} failed: {error}")),
    }
}
