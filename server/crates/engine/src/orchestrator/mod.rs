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

mod approve;
mod hooked;
mod intercepted;
mod plan;
mod report;
mod run;

pub(crate) use hooked::ToolHooks;
use plan::plan_groups;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use talaria_provider::ToolCallRequest;
use talaria_tools::Sandboxing;
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
    DisplayContent, ResultStatus, ToolDisplay, ToolLocation as RecordLocation, ToolResultEntry,
    UserPart,
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
    /// How often each (tool, arguments) has failed in this turn.
    pub failures: &'a HashMap<(String, String), u32>,
    /// The model takes images: results keep theirs.
    pub images: bool,
    /// What calls keep of the files they change, and the session that holds it.
    pub checkpoints: Option<(&'a Arc<crate::checkpointing::Checkpoints>, &'a str)>,
    /// The files each call changed, by its unique id (for its record entry).
    pub changes: std::sync::Mutex<HashMap<String, Vec<talaria_record::FileChange>>>,
    /// The session's hooks.
    pub hooks: ToolHooks<'a>,
    /// What each call's hooks decided, for its card, by its unique id.
    pub hook_notes: std::sync::Mutex<HashMap<String, Vec<String>>>,
    /// What each call's hooks add for the model after its result, by its unique id.
    pub hook_context: std::sync::Mutex<HashMap<String, Vec<String>>>,
    /// The client stopped the turn during this batch, and why.
    pub stopped: std::sync::Mutex<Option<String>>,
}

/// What a batch did: one record entry per call in the model's order, and what the turn
/// keeps of it.
#[derive(Debug, Default)]
pub(crate) struct BatchReport {
    pub results: Vec<ToolResultEntry>,
    /// The turn was cancelled during the batch.
    pub cancelled: bool,
    /// Plans the batch's calls set, in order (for the record).
    pub plans: Vec<Vec<talaria_tools::TodoItem>>,
    /// What calls of this batch wrote that outlasts the session, by the call's unique id.
    pub kept: Vec<(String, talaria_tools::Kept)>,
    /// Calls refused because the same call failed too often (their unique ids).
    pub repeated: Vec<String>,
    /// The client stopped the turn during the batch (why): no more model calls.
    pub stopped: Option<String>,
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
    /// What the tool declared it does (unknown for a tool not in the registry).
    effects: talaria_tools::Effects,
}

impl Orchestrator<'_> {
    async fn emit(&self, event: EngineEvent) {
        let _ = self.events.send(event).await;
    }

    /// Runs a batch. `calls` pairs each model call with its session-unique id. Returns one
    /// record entry per call, in order (what the client was shown and the text the model
    /// reads, fitted to the budgets), whether the turn was cancelled, and what the turn keeps
    /// of the calls (plans, what outlasts the session, calls refused as repeated).
    pub(crate) async fn run_batch(
        &mut self,
        calls: Vec<(String, ToolCallRequest, bool)>,
    ) -> BatchReport {
        let mut prepared = Vec::with_capacity(calls.len());
        for (id, call, announced) in calls {
            prepared.push(self.prepare(id, call, announced).await);
        }
        let outcomes = self.run_groups(&mut prepared).await;
        let mut report = BatchReport {
            cancelled: self.cancel.is_cancelled(),
            stopped: self.stopped(),
            repeated: prepared
                .iter()
                .filter(|call| self.is_repeated(call))
                .map(|call| call.id.clone())
                .collect(),
            ..BatchReport::default()
        };
        for (call, outcome) in prepared.into_iter().zip(outcomes) {
            let (outcome, display) = match outcome {
                Some(done) => done,
                None => {
                    let outcome = ToolOutcome::failed(match &report.stopped {
                        Some(_) => intercepted::STOPPED_RESULT,
                        None => CANCELLED_RESULT,
                    });
                    let display = self.finish(&call, &outcome).await;
                    (outcome, display)
                }
            };
            for effect in &outcome.effects {
                match effect {
                    ToolEffect::Plan(items) => report.plans.push(items.clone()),
                    ToolEffect::Kept(kept) => report.kept.push((call.id.clone(), *kept)),
                    _ => {}
                }
            }
            report
                .results
                .push(self.result_entry(call, outcome, display).await);
        }
        report
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
            effects: definition.map_or(talaria_tools::Effects::UNKNOWN, |d| d.effects.clone()),
        }
    }

    /// Decides and runs the calls group by group (a group's approved calls at once; a call
    /// whose input a hook or the client replaced alone after them, since its paths were not
    /// the ones the group was planned on); a call left `None` never ran because the turn was
    /// cancelled or the client stopped it.
    async fn run_groups(
        &self,
        prepared: &mut [Prepared],
    ) -> Vec<Option<(ToolOutcome, ToolDisplay)>> {
        let mut outcomes: Vec<Option<(ToolOutcome, ToolDisplay)>> = vec![None; prepared.len()];
        for group in plan_groups(prepared) {
            let (mut approved, mut alone) = (Vec::new(), Vec::new());
            for &index in &group {
                if self.cancel.is_cancelled() {
                    break;
                }
                if self.stopped().is_some() {
                    break;
                }
                let decided = match self.pre_tool_hooks(&mut prepared[index]).await {
                    Ok(stance) => self.intercept_before(&mut prepared[index], stance).await,
                    Err(blocked) => Err(blocked),
                };
                let decided = match decided {
                    Ok(stance) => self
                        .approve(&prepared[index], stance)
                        .await
                        .map(|()| stance.rewritten),
                    Err(blocked) => Err(blocked),
                };
                match decided {
                    Ok(false) => approved.push(index),
                    Ok(true) => alone.push(index),
                    Err(outcome) => {
                        let display = self.finish(&prepared[index], &outcome).await;
                        outcomes[index] = Some((outcome, display));
                    }
                }
            }
            if self.cancel.is_cancelled() || self.stopped().is_some() {
                break;
            }
            let runs = approved.iter().map(|&index| self.execute(&prepared[index]));
            let results = futures_util::future::join_all(runs).await;
            for (index, outcome) in approved.into_iter().zip(results) {
                outcomes[index] = Some(outcome);
            }
            for index in alone {
                if self.cancel.is_cancelled() || self.stopped().is_some() {
                    break;
                }
                outcomes[index] = Some(self.execute(&prepared[index]).await);
            }
        }
        outcomes
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
            effects: talaria_tools::Effects::UNKNOWN,
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
