//! `delegate_task {goal, context?, agent}`: the task handed to another agent the user
//! configured (`[agents.NAME]`), inside Talaria's walls. The engine knows no protocol: the
//! edge starts and speaks to the agent ([`ExternalAgents`]); what the agent asks of its
//! client is served here ([`ExternalHost`], implemented by `ChildCalls`) by the session's own
//! tools through its own orchestrator, so the same rules hold as for Talaria's calls.
//!
//! Invariants:
//! - Every file the agent reads or writes through its client, and every command it runs in
//!   a client terminal, is a call of the session's `read_file`, `write_file` or `terminal`
//!   tool, decided by the session's mode and rules, on a card named after the agent; the
//!   parent's `delegate_task` call checkpoints the workspace around the whole delegation,
//!   so a rewind takes back what the agent changed by any route.
//! - The agent's permission questions are answered by the session's mode and remembered
//!   rules where they decide, else asked of the user with the agent's name on them.
//! - A delegation ends: with the agent's answer, or a failed call naming why (its crash,
//!   its silence, the user's cancel) — never a stuck turn.

mod calls;
mod questions;
mod terminals;

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use talaria_tools::{Progress, ToolContext, ToolOutcome};
use tokio_util::sync::CancellationToken;

pub use calls::ChildCalls;
pub use questions::{ChildAnswer, ChildCallKind, ChildOption, ChildOptionKind, ChildQuestion};
pub use terminals::{ChildCommand, ChildExit, ChildOutput};

/// The agents the user configured, started and spoken to by the edge.
pub trait ExternalAgents: Send + Sync {
    /// The configured names.
    fn names(&self) -> Vec<String>;
    /// Runs `run.task` on agent `run.agent` to its end.
    fn run<'a>(&'a self, run: ExternalRun) -> BoxFuture<'a, Result<ExternalReport, String>>;
}

/// The configured agents as a session holds them.
#[derive(Clone)]
pub struct AgentSet(pub Arc<dyn ExternalAgents>);

impl std::fmt::Debug for AgentSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AgentSet").field(&self.0.names()).finish()
    }
}

/// One delegation.
pub struct ExternalRun {
    pub agent: String,
    pub cwd: PathBuf,
    pub task: String,
    /// Serves what the agent asks of its client.
    pub host: Arc<dyn ExternalHost>,
    pub cancel: CancellationToken,
}

/// How a delegation ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExternalReport {
    pub answer: String,
    pub cancelled: bool,
    pub refused: bool,
    /// The agent's tokens (input, output), when it reported them.
    pub tokens: Option<(u64, u64)>,
}

/// What the agent may ask of its client, in the engine's terms.
pub trait ExternalHost: Send + Sync {
    /// A line of the agent's progress for the card (its words, its own tool calls).
    fn step(&self, line: String);
    fn read_text<'a>(
        &'a self,
        path: PathBuf,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> BoxFuture<'a, Result<String, String>>;
    fn write_text<'a>(&'a self, path: PathBuf, text: String) -> BoxFuture<'a, Result<(), String>>;
    fn ask<'a>(&'a self, question: ChildQuestion) -> BoxFuture<'a, ChildAnswer>;
    fn start_command<'a>(&'a self, command: ChildCommand) -> BoxFuture<'a, Result<String, String>>;
    fn command_output(&self, terminal: &str) -> Result<ChildOutput, String>;
    fn wait_command<'a>(&'a self, terminal: &'a str) -> BoxFuture<'a, Result<ChildExit, String>>;
    fn kill_command(&self, terminal: &str) -> Result<(), String>;
    fn release_command(&self, terminal: &str) -> Result<(), String>;
}

/// Runs the delegation for `delegate_task`'s call in `ctx`; its outcome is the call's.
pub(crate) async fn delegate(
    kit: &Arc<crate::subagent::SubagentKit>,
    agents: &AgentSet,
    agent: String,
    task: String,
    ctx: &ToolContext,
) -> ToolOutcome {
    let agents = &agents.0;
    if !agents.names().contains(&agent) {
        let names = agents.names().join(", ");
        return ToolOutcome::failed(format!(
            "No agent named {agent:?} is configured (configured: {}).",
            if names.is_empty() { "none" } else { &names }
        ));
    }
    let cancel = ctx.cancel.child_token();
    let host = Arc::new_cyclic(|me| {
        let mut calls =
            ChildCalls::new(kit.clone(), &agent, ctx, cancel.clone(), &first_line(&task));
        calls.me = me.clone();
        calls
    });
    let run = ExternalRun {
        agent: agent.clone(),
        cwd: kit.settings.cwd.clone(),
        task,
        host: host.clone(),
        cancel,
    };
    let ended = agents.run(run).await;
    host.end().await;
    match ended {
        Ok(report) if report.cancelled => ToolOutcome::failed(format!("{agent} was cancelled.")),
        Ok(report) if report.refused => ToolOutcome::failed(format!("{agent} refused the task.")),
        Ok(report) => {
            if let Some((input, output)) = report.tokens {
                ctx.report_progress(Progress::Output(format!(
                    "{agent} used {input} input and {output} output tokens\n"
                )));
            }
            let answer = if report.answer.trim().is_empty() {
                "(it gave no answer)".to_string()
            } else {
                report.answer.trim().to_string()
            };
            ToolOutcome::completed(format!("Report from {agent}:\n{answer}"))
        }
        Err(why) => ToolOutcome::failed(format!("{agent} failed: {why}")),
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(120)
        .collect()
}
