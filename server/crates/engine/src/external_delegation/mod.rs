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
//! - A steer reaches the agent with its words: its turn is cut ([`Steers`]: what that turn
//!   asked is withdrawn with it) and the words are its next prompt, on the same session.

mod calls;
mod questions;
mod terminals;

use std::sync::Arc;

use talaria_tools::{Progress, ToolContext, ToolOutcome};

use crate::delegation_kit::{Announcement, Running, announce};
use crate::events::{StopReason, SubagentMessage, SubagentStop};
use crate::external_agents::{AgentSet, ExternalReport, ExternalRun, Steers};

pub(crate) use calls::ChildCalls;

/// Runs the delegation for `delegate_task`'s call in `ctx`; its outcome is the call's.
pub(crate) async fn delegate(
    kit: &Arc<crate::delegation_kit::SubagentKit>,
    agents: &AgentSet,
    agent: String,
    task: String,
    ctx: &ToolContext,
) -> ToolOutcome {
    let set = agents;
    let agents = &set.agents;
    if !agents.names().contains(&agent) {
        let names = agents.names().join(", ");
        return ToolOutcome::failed(format!(
            "No agent named {agent:?} is configured (configured: {}).",
            if names.is_empty() { "none" } else { &names }
        ));
    }
    let cancel = ctx.cancel.child_token();
    let steers = Steers::new(&cancel);
    let steerable = set.steerable(&steers);
    let child_session = kit.settings.announce_subagents.then(|| {
        format!(
            "{}-{}-{}",
            kit.settings.id,
            agent.replace(' ', "-"),
            stamp()
        )
    });
    // A client cancels the agent's work on its session without ending the parent's turn.
    let _running = child_session
        .as_deref()
        .map(|id| Running::register(id, cancel.clone()));
    if let Some(session_id) = &child_session {
        announce(kit, announcement(session_id, &agent, &task, None)).await;
        ctx.report_progress(Progress::Session(session_id.clone()));
    }
    let host = Arc::new_cyclic(|me| {
        let mut calls =
            ChildCalls::new(kit.clone(), &agent, ctx, cancel.clone(), &first_line(&task));
        calls.me = me.clone();
        calls.child_session = child_session.clone();
        calls.steers = Some(steers.clone());
        calls
    });
    let run = ExternalRun {
        agent: agent.clone(),
        cwd: kit.settings.cwd.clone(),
        task: task.clone(),
        host: host.clone(),
        cancel: cancel.clone(),
        steers: steers.clone(),
    };
    let ended = agents.run(run).await;
    // What the agent still asks the user is withdrawn with it.
    cancel.cancel();
    host.end().await;
    if let Some(session_id) = &child_session {
        let end = announcement(session_id, &agent, &task, Some(&ended));
        announce(kit, end).await;
    }
    if let Ok(report) = &ended {
        set.add_used(report);
    }
    drop(steerable);
    outcome_of(&agent, ended, steers.steered(), ctx)
}

/// The call's outcome: the agent's report (after the steers that reached it, when they
/// did), or why it has none.
fn outcome_of(
    agent: &str,
    ended: Result<ExternalReport, String>,
    steered: bool,
    ctx: &ToolContext,
) -> ToolOutcome {
    match ended {
        // Cut by a steer, not by a cancel of the whole turn (which says so below).
        Ok(report) if report.cancelled && steered && !ctx.cancel.is_cancelled() => {
            let could_not = report
                .steered
                .as_ref()
                .and_then(|s| s.failed.as_deref())
                .map(|why| format!(" (it could not take the message itself: {why})"))
                .unwrap_or_default();
            ToolOutcome::completed(format!(
                "{agent} was stopped so that you can read the user's new message{could_not}; \
                 what it said before:\n{}",
                answer_of(&report)
            ))
        }
        Ok(report) if report.cancelled => ToolOutcome::failed(format!("{agent} was cancelled.")),
        Ok(report) if report.refused => ToolOutcome::failed(format!("{agent} refused the task.")),
        Ok(report) => {
            if let Some((input, output)) = report.tokens {
                ctx.report_progress(Progress::Output(format!(
                    "{agent} used {input} input and {output} output tokens\n"
                )));
            }
            let (steered, before) = match &report.steered {
                Some(s) if !s.words.is_empty() => {
                    let words: Vec<String> =
                        s.words.iter().map(|w| format!("{:?}", w.trim())).collect();
                    let before = s.before.trim();
                    (
                        format!(
                            " (the user's new message {} reached it while it worked, and it \
                             went on with it)",
                            words.join(" then ")
                        ),
                        if before.is_empty() {
                            String::new()
                        } else {
                            format!("\n\nWhat it had said before the message:\n{before}")
                        },
                    )
                }
                _ => (String::new(), String::new()),
            };
            ToolOutcome::completed(format!(
                "Report from {agent}{steered}:\n{}{before}",
                answer_of(&report)
            ))
        }
        Err(why) => ToolOutcome::failed(format!("{agent} failed: {why}")),
    }
}

fn answer_of(report: &ExternalReport) -> String {
    if report.answer.trim().is_empty() {
        "(it gave no answer)".to_string()
    } else {
        report.answer.trim().to_string()
    }
}

/// Unique across the parent's reloads too (counters restart with the process).
fn stamp() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() % 1_000_000_000)
}

/// The agent's session for a client that shows subagents: running with its task, or ended
/// with its answer.
fn announcement<'a>(
    session_id: &'a str,
    agent: &'a str,
    task: &'a str,
    ended: Option<&Result<ExternalReport, String>>,
) -> Announcement<'a> {
    let (stop, message) = match ended {
        None => (
            None,
            Some(SubagentMessage {
                id: format!("{session_id}:task"),
                to_child: true,
                text: task.to_string(),
            }),
        ),
        Some(Ok(report)) if report.cancelled => {
            (Some(SubagentStop::Finished(StopReason::Cancelled)), None)
        }
        Some(Ok(report)) => (
            Some(SubagentStop::Finished(StopReason::EndTurn)),
            Some(SubagentMessage {
                id: format!("{session_id}:report"),
                to_child: false,
                text: report.answer.trim().to_string(),
            }),
        ),
        Some(Err(why)) => (Some(SubagentStop::Failed(why.clone())), None),
    };
    Announcement {
        session_id,
        name: agent,
        goal: task,
        running: ended.is_none(),
        stop,
        message,
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
