//! The one tool-call orchestrator: policy → approval → execute → record → report.
//!
//! For a batch of calls from one model message:
//! 1. every call is announced at once as a pending card (with a diff preview for edits);
//! 2. the batch is split into groups that may run together: read-only calls together,
//!    path-scoped calls together when their paths do not overlap, anything else alone;
//! 3. in each group, each call is decided (allow, ask the user, refuse), then the allowed calls
//!    run concurrently; each call reports `running` when it starts and its result as soon as
//!    it finishes;
//! 4. results go back to the model in the model's order, fitted to the size budgets.
//!
//! Invariant: every call of the batch gets exactly one result, so history stays valid, even
//! when the turn is cancelled part-way (the rest get a "cancelled" result).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use std::time::Duration;
use talaria_util::lock;

use serde_json::Value;
use talaria_provider::ToolCallRequest;
use talaria_tools::shell::{Sandboxing, safety};
use talaria_tools::{
    ApprovalNeed, CallDescription, Concurrency, ParsedArgs, Progress, Registry, ToolContext,
    ToolEffect, ToolKind, ToolOutcome, ToolStatus,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::{self, CallFacts, CommandWall, Mode, Scope, SecretReads, Verdict};
use crate::budget::ResultBudget;
use crate::client::{
    ClientAnswer, ClientAsk, PermissionAnswer, PermissionChoice, PermissionRequest,
};
use crate::events::{EngineEvent, ToolCallView};
use talaria_record::{
    DisplayContent, DisplayKind, ResultStatus, ToolDisplay, ToolLocation as RecordLocation,
    ToolResultEntry, UserPart,
};

/// The most calls that run at once in one group.
pub const MAX_PARALLEL: usize = 8;
/// How often a running command's output is reported.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// The tail of output shown in a running card.
const PROGRESS_TAIL_CHARS: usize = 4000;

/// The result text for a call that never ran because the turn was cancelled.
pub const CANCELLED_RESULT: &str = "The user cancelled this tool call before it finished.";

/// Everything the orchestrator works with during one turn.
pub(crate) struct Orchestrator<'a> {
    pub registry: &'a Registry,
    /// The session's mode and remembered rules (read at each decision).
    pub approval: &'a crate::session_state::ApprovalState,
    pub roots: &'a [PathBuf],
    pub secrets: &'a SecretReads,
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub cancel: &'a CancellationToken,
    pub ctx: ToolContext,
    pub budget: &'a mut ResultBudget,
    /// Plans the batch's calls set, in order (for the record).
    pub plans: Mutex<Vec<Vec<talaria_tools::TodoItem>>>,
    /// What calls of this batch wrote that outlasts the session, by the call's unique id.
    pub kept: Mutex<Vec<(String, talaria_tools::Kept)>>,
    /// Calls refused because the same call failed too often (their unique ids).
    pub repeated: Mutex<Vec<String>>,
    /// How often each (tool, arguments) has failed in this turn.
    pub failures: &'a HashMap<(String, String), u32>,
    /// The model takes images: results keep theirs.
    pub images: bool,
}

/// Identical failing calls allowed in one turn before the guardrail stops them.
pub const MAX_IDENTICAL_FAILURES: u32 = 2;

/// What the model reads when it repeats a call that keeps failing.
const REPEATED_FAILURE: &str = "Not run: this exact call (same tool, same arguments) has \
    already failed twice in this turn. Do not repeat it. Read the earlier error, then change the \
    arguments, try another approach, or ask the user.";

/// Counts a batch's failures for the repeated-failure guardrail (calls it refused as repeated,
/// by unique id, are not counted again).
pub(crate) fn count_failures(
    results: &[ToolResultEntry],
    repeated: &[String],
    failures: &mut HashMap<(String, String), u32>,
) {
    for entry in results {
        if entry.status == talaria_record::ResultStatus::Failed
            && !repeated.contains(&entry.client_id)
        {
            *failures
                .entry(failure_key(&entry.tool, &entry.raw_input))
                .or_default() += 1;
        }
    }
}

/// The key of a call for the repeated-failure guardrail.
pub(crate) fn failure_key(tool: &str, arguments: &Value) -> (String, String) {
    (tool.to_string(), arguments.to_string())
}

/// One call, prepared.
struct Prepared {
    model_id: String,
    id: String,
    name: String,
    args: ParsedArgs,
    description: CallDescription,
    kind: ToolKind,
    raw_input: Value,
    need: ApprovalNeed,
    concurrency: Concurrency,
    max_result_chars: Option<usize>,
}

fn overlaps(a: &[PathBuf], b: &[PathBuf]) -> bool {
    a.iter()
        .any(|x| b.iter().any(|y| x.starts_with(y) || y.starts_with(x)))
}

/// Splits a batch into groups that may run together, preserving order.
fn plan_groups(calls: &[Prepared]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut read_paths: Vec<PathBuf> = Vec::new();
    let mut write_paths: Vec<PathBuf> = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let concurrency = if call.args.is_ok() {
            call.concurrency
        } else {
            Concurrency::Exclusive
        };
        let paths = &call.description.paths;
        let fits = current.len() < MAX_PARALLEL
            && match concurrency {
                Concurrency::ReadOnly => !overlaps(paths, &write_paths),
                Concurrency::PathScoped => {
                    !paths.is_empty()
                        && !overlaps(paths, &write_paths)
                        && !overlaps(paths, &read_paths)
                }
                Concurrency::Exclusive => false,
            };
        if !fits && !current.is_empty() {
            groups.push(std::mem::take(&mut current));
            read_paths.clear();
            write_paths.clear();
        }
        if concurrency == Concurrency::Exclusive {
            groups.push(vec![index]);
            continue;
        }
        match concurrency {
            Concurrency::PathScoped => write_paths.extend(paths.iter().cloned()),
            _ => read_paths.extend(paths.iter().cloned()),
        }
        current.push(index);
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

fn declined(name: &str) -> String {
    format!(
        "The user declined this {name} call. Do not retry the same call; continue without it or ask the user how to proceed."
    )
}

impl Orchestrator<'_> {
    async fn emit(&self, event: EngineEvent) {
        let _ = self.events.send(event).await;
    }

    /// Runs a batch. `calls` pairs each model call with its session-unique id. Returns one
    /// record entry per call, in order (what the client was shown and the text the model
    /// reads, fitted to the budgets), and whether the turn was cancelled.
    pub(crate) async fn run_batch(
        &mut self,
        calls: Vec<(String, ToolCallRequest, bool)>,
    ) -> (Vec<ToolResultEntry>, bool) {
        let mut prepared = Vec::with_capacity(calls.len());
        for (id, call, announced) in calls {
            prepared.push(self.prepare(id, call, announced).await);
        }
        let outcomes = self.run_groups(&prepared).await;
        let cancelled = self.cancel.is_cancelled();
        let mut results = Vec::with_capacity(prepared.len());
        for (call, outcome) in prepared.into_iter().zip(outcomes) {
            let (outcome, display) = match outcome {
                Some(done) => done,
                None => {
                    let outcome = ToolOutcome::failed(CANCELLED_RESULT);
                    let display = self.finish(&call, &outcome).await;
                    (outcome, display)
                }
            };
            results.push(self.result_entry(call, outcome, display).await);
        }
        (results, cancelled)
    }

    /// Parses and describes a call and shows its pending card (with a diff preview for an
    /// edit that touches nothing protected).
    async fn prepare(&self, id: String, call: ToolCallRequest, announced: bool) -> Prepared {
        let args = self.registry.parse_args(&call.name, &call.arguments);
        let description = self.registry.describe(&call.name, &args, &self.ctx);
        let definition = self.registry.definition(&call.name);
        let kind = definition.map_or(ToolKind::Other, |d| d.kind);
        let preview = if matches!(kind, ToolKind::Edit | ToolKind::Delete | ToolKind::Move)
            && !self.touches_protected(&description.writes).await
        {
            self.registry.preview(&call.name, &args, &self.ctx).await
        } else {
            Vec::new()
        };
        let raw_input = match &args {
            Ok(value) => value.clone(),
            Err(_) => serde_json::from_str(&call.arguments)
                .unwrap_or(Value::String(call.arguments.clone())),
        };
        self.emit(EngineEvent::ToolCallPending(ToolCallView {
            announced,
            id: id.clone(),
            name: call.name.clone(),
            title: description.title.clone(),
            kind,
            locations: description
                .locations
                .iter()
                .map(|l| (l.path.clone(), l.line))
                .collect(),
            raw_input: raw_input.clone(),
            preview,
        }))
        .await;
        Prepared {
            model_id: call.id,
            id,
            name: call.name,
            args,
            description,
            kind,
            raw_input,
            need: definition.map_or(ApprovalNeed::Unknown, |d| d.approval),
            concurrency: definition.map_or(Concurrency::Exclusive, |d| d.concurrency),
            max_result_chars: definition.and_then(|d| d.max_result_chars),
        }
    }

    /// Decides and runs the calls group by group (a group's approved calls at once); a call
    /// left `None` never ran because the turn was cancelled.
    async fn run_groups(&self, prepared: &[Prepared]) -> Vec<Option<(ToolOutcome, ToolDisplay)>> {
        let mut outcomes: Vec<Option<(ToolOutcome, ToolDisplay)>> = vec![None; prepared.len()];
        for group in plan_groups(prepared) {
            let mut approved = Vec::new();
            for &index in &group {
                if self.cancel.is_cancelled() {
                    break;
                }
                match self.approve(&prepared[index]).await {
                    Ok(()) => approved.push(index),
                    Err(outcome) => {
                        let display = self.finish(&prepared[index], &outcome).await;
                        outcomes[index] = Some((outcome, display));
                    }
                }
            }
            if self.cancel.is_cancelled() {
                break;
            }
            let runs = approved.iter().map(|&index| self.execute(&prepared[index]));
            let results = futures_util::future::join_all(runs).await;
            for (index, outcome) in approved.into_iter().zip(results) {
                outcomes[index] = Some(outcome);
            }
        }
        outcomes
    }

    /// A call's entry in the record: the text the model reads fitted to the budget, its
    /// images when the model takes them.
    async fn result_entry(
        &mut self,
        call: Prepared,
        outcome: ToolOutcome,
        display: ToolDisplay,
    ) -> ToolResultEntry {
        let text = match outcome.status {
            ToolStatus::Completed => outcome.content,
            ToolStatus::Failed => format!("Error: {}", outcome.content),
        };
        let model_text = self
            .budget
            .apply(call.max_result_chars, &call.id, text)
            .await;
        let images = if self.images {
            outcome
                .images
                .into_iter()
                .map(|image| UserPart::Image {
                    mime_type: image.mime_type,
                    data: image.data,
                })
                .collect()
        } else {
            Vec::new()
        };
        ToolResultEntry {
            call_id: call.model_id,
            client_id: call.id,
            tool: call.name,
            status: result_status(outcome.status),
            display,
            raw_input: call.raw_input,
            raw_output: outcome.raw_output,
            model_text,
            images,
        }
    }

    /// Decides a call; `Err` carries the result of a call that must not run.
    async fn approve(&self, call: &Prepared) -> Result<(), ToolOutcome> {
        let key = failure_key(&call.name, &call.raw_input);
        if self
            .failures
            .get(&key)
            .is_some_and(|n| *n >= MAX_IDENTICAL_FAILURES)
        {
            lock(&self.repeated).push(call.id.clone());
            return Err(ToolOutcome::failed(REPEATED_FAILURE));
        }
        // Refused before anyone is asked: a whitelist is not the user's call to make.
        if let Some(why) = self.registry.refusal(&call.name) {
            return Err(ToolOutcome::failed(why));
        }
        let Ok(_) = &call.args else { return Ok(()) };
        if self.registry.definition(&call.name).is_none() {
            return Ok(());
        }
        let facts = self.facts(call).await;
        let mode = self.approval.mode();
        let wall = self.wall();
        let verdict = self.approval.with_rules(|rules| {
            approval::decide(mode, &facts, rules, self.roots, self.secrets, wall)
        });
        match verdict {
            Verdict::Allow => Ok(()),
            Verdict::Deny(why) => Err(ToolOutcome::failed(why)),
            Verdict::Ask {
                reason,
                always_possible,
            } => {
                // Nobody is asked about a call that cannot succeed (an edit whose old text
                // is not in the file): it fails at once, saying why. Checked now, after the
                // batch's earlier groups ran, so a file made by one of them counts.
                if let Some(failed) = self.registry.check(&call.name, &call.args, &self.ctx).await {
                    return Err(failed);
                }
                self.ask(call, &facts, reason, always_possible).await
            }
        }
    }

    /// Asks the user about a call, and carries out the answer (an "always" is remembered
    /// through the session's actor before the next decision).
    async fn ask(
        &self,
        call: &Prepared,
        facts: &CallFacts,
        reason: Option<String>,
        always_possible: bool,
    ) -> Result<(), ToolOutcome> {
        let mut choices = vec![PermissionChoice::AllowOnce];
        if always_possible {
            choices.push(PermissionChoice::AllowAlways);
            if facts.server.is_some() {
                choices.push(PermissionChoice::AllowAlwaysServer);
            }
        }
        choices.push(PermissionChoice::RejectOnce);
        if always_possible {
            choices.push(PermissionChoice::RejectAlways);
        }
        let request = PermissionRequest {
            tool_call_id: call.id.clone(),
            title: call.description.title.clone(),
            reason,
            choices,
            server: facts.server.clone(),
        };
        // The request follows the call's card in the one event stream: it cannot overtake it.
        let asked = crate::client_access::ask(
            self.events,
            ClientAsk::Permission(request),
            self.cancel.clone(),
            None,
        )
        .await;
        let answer = match asked {
            Some(ClientAnswer::Permission(answer)) => answer,
            Some(_) => PermissionAnswer::Failed("the client gave an unrelated answer".into()),
            None => PermissionAnswer::Failed("the client did not answer".into()),
        };
        match answer {
            PermissionAnswer::Chosen(
                PermissionChoice::AllowOnce | PermissionChoice::RunUnsandboxedOnce,
            ) => Ok(()),
            PermissionAnswer::Chosen(PermissionChoice::AllowAlways) => {
                self.approval
                    .remember(approval::scopes_of(facts), true)
                    .await;
                Ok(())
            }
            PermissionAnswer::Chosen(PermissionChoice::AllowAlwaysServer) => {
                let Some(server) = facts.server.clone() else {
                    return Ok(());
                };
                self.approval
                    .remember(vec![Scope::Server(server)], true)
                    .await;
                Ok(())
            }
            PermissionAnswer::Chosen(PermissionChoice::RejectOnce) => {
                Err(ToolOutcome::failed(declined(&call.name)))
            }
            PermissionAnswer::Chosen(PermissionChoice::RejectAlways) => {
                self.approval
                    .remember(approval::scopes_of(facts), false)
                    .await;
                Err(ToolOutcome::failed(declined(&call.name)))
            }
            PermissionAnswer::Cancelled => {
                self.cancel.cancel();
                Err(ToolOutcome::failed(CANCELLED_RESULT))
            }
            PermissionAnswer::Failed(why) => Err(ToolOutcome::failed(format!(
                "Permission could not be asked ({why}); the call did not run."
            ))),
        }
    }

    /// What stands between this session's commands and the machine.
    fn wall(&self) -> CommandWall {
        match self.ctx.shell.sandboxing() {
            Sandboxing::Enforced(_) => CommandWall::Sandbox,
            Sandboxing::Off => CommandWall::Off,
            Sandboxing::Unavailable(_) => CommandWall::Missing,
        }
    }

    /// Whether an edit of `writes` touches a credential or Talaria's own files (as named or
    /// behind a link): its current text is never previewed.
    async fn touches_protected(&self, writes: &[PathBuf]) -> bool {
        let grounded = crate::grounding::ground(writes.to_vec()).await;
        grounded.paths.iter().any(|path| {
            self.secrets.paths.classify(path) == talaria_tools::PathSecrecy::Credential
                || self.secrets.paths.in_agent_home(path)
        })
    }

    /// What the policy needs to know about a call: the command classified where it starts;
    /// its named paths as reads; every path as named and as the real file behind it.
    async fn facts(&self, call: &Prepared) -> CallFacts {
        let command = call.description.command.as_deref().map(|text| {
            safety::classify_in(
                text,
                &safety::ShellEnv::from_process().starting(call.description.command_start.clone()),
            )
        });
        let mut reads = call.description.reads.clone();
        if let Some(class) = &command {
            let workdir = call
                .description
                .locations
                .first()
                .map_or(self.ctx.cwd.as_path(), |l| l.path.as_path());
            reads.extend(
                class
                    .paths
                    .iter()
                    .map(|p| talaria_tools::tool::resolve_in(workdir, p)),
            );
        }
        let reads = crate::grounding::ground(reads).await;
        let writes = crate::grounding::ground(call.description.writes.clone()).await;
        let mut linked = reads.linked;
        linked.extend(writes.linked);
        CallFacts {
            tool: call.name.clone(),
            need: call.need,
            writes: writes.paths,
            reads: reads.paths,
            command,
            read_only: call.description.read_only,
            server: self
                .registry
                .definition(&call.name)
                .and_then(|d| d.toolset.strip_prefix(talaria_tools::MCP_TOOLSET_PREFIX))
                .map(str::to_string),
            linked,
            own_store: call.description.own_store,
        }
    }

    /// Reports a finished call (its plan, then its card) and returns what the card shows.
    async fn finish(&self, call: &Prepared, outcome: &ToolOutcome) -> ToolDisplay {
        if let Some(items) = outcome.effects.iter().find_map(|e| match e {
            ToolEffect::Plan(items) => Some(items.clone()),
            _ => None,
        }) {
            lock(&self.plans).push(items.clone());
            self.emit(EngineEvent::Plan(items)).await;
        }
        let mut skills_changed = false;
        for effect in &outcome.effects {
            if let ToolEffect::Kept(kept) = effect {
                skills_changed |= matches!(kept, talaria_tools::Kept::Skill { live: true });
                lock(&self.kept).push((call.id.clone(), *kept));
            }
        }
        let display = display_of(call, outcome);
        self.emit(EngineEvent::ToolCallFinished {
            id: call.id.clone(),
            status: outcome.status,
            display: display.clone(),
            raw_output: outcome.raw_output.clone(),
            skills_changed,
        })
        .await;
        display
    }

    /// Runs one approved call, streaming its progress, and reports its result. When the OS
    /// sandbox refused something and the mode lets the user decide, the user may run this
    /// one call again outside the sandbox (never remembered; the model cannot ask for it).
    async fn execute(&self, call: &Prepared) -> (ToolOutcome, ToolDisplay) {
        self.emit(EngineEvent::ToolCallRunning {
            id: call.id.clone(),
        })
        .await;
        let mut ctx = self.ctx.clone();
        ctx.result_chars = Some(self.budget.room());
        let mut outcome = self.run_streaming(call, ctx.clone()).await;
        if let Some(what) = sandbox_denial(&outcome)
            && self.may_escalate()
            && self.escalation_agreed(call, &what).await
        {
            ctx.unconfined = true;
            outcome = self.run_streaming(call, ctx).await;
        }
        let display = self.finish(call, &outcome).await;
        (outcome, display)
    }

    /// Whether the session's mode lets the user take a command out of the sandbox.
    fn may_escalate(&self) -> bool {
        !self.cancel.is_cancelled() && matches!(self.approval.mode(), Mode::Ask | Mode::AcceptEdits)
    }

    /// Asks, on the call's own card, whether to run it once outside the sandbox.
    async fn escalation_agreed(&self, call: &Prepared, what: &str) -> bool {
        let request = PermissionRequest {
            tool_call_id: call.id.clone(),
            title: call.description.title.clone(),
            reason: Some(format!(
                "the OS sandbox refused {what}. Run this one command again outside the sandbox?"
            )),
            choices: vec![
                PermissionChoice::RunUnsandboxedOnce,
                PermissionChoice::RejectOnce,
            ],
            server: None,
        };
        let asked = crate::client_access::ask(
            self.events,
            ClientAsk::Permission(request),
            self.cancel.clone(),
            None,
        )
        .await;
        match asked {
            Some(ClientAnswer::Permission(PermissionAnswer::Chosen(
                PermissionChoice::RunUnsandboxedOnce,
            ))) => true,
            Some(ClientAnswer::Permission(PermissionAnswer::Cancelled)) => {
                self.cancel.cancel();
                false
            }
            _ => false,
        }
    }

    /// Dispatches one call in `ctx`, streaming its progress to the card.
    async fn run_streaming(&self, call: &Prepared, mut ctx: ToolContext) -> ToolOutcome {
        let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
        ctx.progress = Some(Arc::new(move |p| {
            let _ = tx.send(p);
        }));
        let run = self.registry.dispatch(&call.name, call.args.clone(), &ctx);
        tokio::pin!(run);
        let mut output = String::new();
        let mut dirty = false;
        let mut next_report = tokio::time::Instant::now();
        loop {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    // Give the tool a moment to stop its own work (kill its processes).
                    let stopped = tokio::time::timeout(Duration::from_secs(2), &mut run).await;
                    break stopped.map_or_else(|_| ToolOutcome::failed(CANCELLED_RESULT), |mut outcome| {
                        outcome.status = ToolStatus::Failed;
                        outcome
                    });
                }
                outcome = &mut run => break outcome,
                Some(progress) = rx.recv() => match progress {
                    Progress::Terminal(terminal_id) => {
                        self.emit(EngineEvent::ToolCallTerminal { id: call.id.clone(), terminal_id }).await;
                    }
                    Progress::Session(session_id) => {
                        self.emit(EngineEvent::ToolCallSession { id: call.id.clone(), session_id }).await;
                    }
                    Progress::Output(text) => {
                        output.push_str(&text);
                        trim_front(&mut output, PROGRESS_TAIL_CHARS);
                        dirty = true;
                    }
                },
                () = tokio::time::sleep_until(next_report), if dirty => {
                    self.emit(EngineEvent::ToolCallProgress { id: call.id.clone(), output: output.clone() }).await;
                    dirty = false;
                    next_report = tokio::time::Instant::now() + PROGRESS_INTERVAL;
                }
            }
        }
    }
}

/// What the OS sandbox refused during a call, if anything.
fn sandbox_denial(outcome: &ToolOutcome) -> Option<String> {
    outcome.effects.iter().find_map(|effect| match effect {
        ToolEffect::SandboxDenied { what } => Some(what.clone()),
        _ => None,
    })
}

fn result_status(status: ToolStatus) -> ResultStatus {
    match status {
        ToolStatus::Completed => ResultStatus::Completed,
        ToolStatus::Failed => ResultStatus::Failed,
    }
}

/// The record's kind for a tool's display kind.
pub(crate) fn display_kind(kind: ToolKind) -> DisplayKind {
    match kind {
        ToolKind::Read => DisplayKind::Read,
        ToolKind::Edit => DisplayKind::Edit,
        ToolKind::Delete => DisplayKind::Delete,
        ToolKind::Move => DisplayKind::Move,
        ToolKind::Search => DisplayKind::Search,
        ToolKind::Execute => DisplayKind::Execute,
        ToolKind::Think => DisplayKind::Think,
        ToolKind::Fetch => DisplayKind::Fetch,
        ToolKind::Other => DisplayKind::Other,
    }
}

/// What the client's card shows for a finished call: the call's diffs and terminal, then the
/// result text (unless the output lives in a terminal and the call succeeded); the places it
/// acted (the outcome's, else the description's).
fn display_of(call: &Prepared, outcome: &ToolOutcome) -> ToolDisplay {
    let mut content: Vec<DisplayContent> = outcome
        .effects
        .iter()
        .filter_map(|effect| match effect {
            ToolEffect::Diff {
                path,
                old_text,
                new_text,
            } => Some(DisplayContent::Diff {
                path: path.display().to_string(),
                old_text: old_text.clone(),
                new_text: new_text.clone(),
            }),
            ToolEffect::Terminal { terminal_id } => Some(DisplayContent::Terminal {
                terminal_id: terminal_id.clone(),
            }),
            ToolEffect::Plan(_) | ToolEffect::SandboxDenied { .. } | ToolEffect::Kept(_) => None,
        })
        .collect();
    let in_terminal = content
        .iter()
        .any(|c| matches!(c, DisplayContent::Terminal { .. }));
    if !in_terminal || outcome.status == ToolStatus::Failed {
        content.push(DisplayContent::Text {
            text: outcome.content.clone(),
        });
    }
    let locations = if outcome.locations.is_empty() {
        &call.description.locations
    } else {
        &outcome.locations
    };
    ToolDisplay {
        title: call.description.title.clone(),
        kind: display_kind(call.kind),
        locations: locations
            .iter()
            .map(|l| RecordLocation {
                path: l.path.display().to_string(),
                line: l.line,
            })
            .collect(),
        content,
    }
}

fn trim_front(text: &mut String, max_chars: usize) {
    let count = text.chars().count();
    if count > max_chars {
        let cut = text
            .char_indices()
            .nth(count - max_chars)
            .map_or(0, |(i, _)| i);
        text.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(name: &str, concurrency: Concurrency, paths: &[&str]) -> Prepared {
        Prepared {
            model_id: name.into(),
            id: name.into(),
            name: name.into(),
            args: Ok(Value::Null),
            description: CallDescription {
                paths: paths.iter().map(PathBuf::from).collect(),
                ..CallDescription::default()
            },
            kind: ToolKind::Other,
            raw_input: Value::Null,
            need: ApprovalNeed::Unknown,
            concurrency,
            max_result_chars: None,
        }
    }

    #[test]
    fn groups_respect_concurrency_and_overlap() {
        use Concurrency::*;
        let calls = vec![
            prepared("r1", ReadOnly, &["/p/a"]),
            prepared("r2", ReadOnly, &["/p/b"]),
            prepared("w1", PathScoped, &["/p/c"]),
            prepared("w2", PathScoped, &["/p/c/d"]),
            prepared("r3", ReadOnly, &["/p/x"]),
            prepared("t", Exclusive, &[]),
            prepared("r4", ReadOnly, &["/p"]),
        ];
        assert_eq!(
            plan_groups(&calls),
            vec![vec![0, 1, 2], vec![3, 4], vec![5], vec![6]]
        );
    }
}
