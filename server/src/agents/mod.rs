//! The other ACP agents of `[agents.<name>]`: started and spoken to through
//! `talaria-conductor` for `delegate_task {agent}` (the engine's [`ExternalAgents`]), and
//! listed by `talaria agents`. What a child asks of its client is translated here into the
//! engine's terms (`host`), where the session's own tools and rules serve it.

mod host;
mod launch;
mod list;
mod pool;
mod registry;
mod routes;
mod steps;

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use talaria_conductor::{AgentCommand, Timings};
use talaria_engine::{AgentEntry, ExternalAgents, ExternalReport, ExternalRun, SteeredReport};
use talaria_protocol::acp;
use talaria_provider::trajectory::{AgentTurn, TrajectoryLog};

pub use list::list_agents;

/// The configured agents of a session, the MCP servers its client gave it (handed on to
/// each agent's sessions), and the agents it runs.
pub struct ConfiguredAgents {
    entries: Vec<AgentEntry>,
    mcp_servers: Vec<acp::McpServer>,
    pool: pool::Pool,
    /// The session's trajectory, when one is kept (a batch task's): each delegation's
    /// steps become it.
    trajectory: Option<TrajectoryLog>,
}

impl ConfiguredAgents {
    /// `None` when none is configured.
    pub fn of(
        entries: &[AgentEntry],
        mcp_servers: &[acp::McpServer],
        trajectory: Option<TrajectoryLog>,
    ) -> Option<talaria_engine::AgentSet> {
        (!entries.is_empty()).then(|| {
            talaria_engine::AgentSet::new(Arc::new(Self {
                entries: entries.to_vec(),
                mcp_servers: mcp_servers.to_vec(),
                pool: pool::Pool::default(),
                trajectory,
            }))
        })
    }
}

/// How `entry` is started (a registry id resolved to what is installed: the error says what
/// to install or set), and for an id, what it resolved to.
pub(crate) async fn command_of(
    entry: &AgentEntry,
    cwd: Option<&std::path::Path>,
) -> Result<(AgentCommand, Option<String>), launch::LaunchError> {
    let name = entry.name.clone();
    let (entry, cwd) = (entry.clone(), cwd.map(std::path::Path::to_path_buf));
    // It reads the registry copy and looks on PATH: off the runtime thread.
    let launch = tokio::task::spawn_blocking(move || launch::launch_of(&entry, cwd.as_deref()))
        .await
        .map_err(|e| launch::LaunchError::Stopped(e.to_string()))??;
    let command = AgentCommand {
        name,
        program: launch.program,
        args: launch.args,
        env: launch.env.into_iter().collect(),
        launcher: follow_parent(),
    };
    Ok((command, launch.how))
}

/// Talaria's helper, run before an agent's program so the agent dies with this process
/// (`__follow-parent`: the parent-death signal); none where it cannot be found.
fn follow_parent() -> Vec<std::ffi::OsString> {
    talaria_engine::SandboxHelper::this_binary()
        .map(|helper| {
            vec![
                helper.local.into_os_string(),
                talaria_sandbox::FOLLOW_ARG.into(),
                std::process::id().to_string().into(),
            ]
        })
        .unwrap_or_default()
}

/// How long `entry` is given.
pub(crate) fn timings_of(entry: &AgentEntry) -> Timings {
    let mut timings = Timings::default();
    if let Some(idle) = entry.idle_timeout_secs {
        timings.idle = Duration::from_secs(idle.max(1));
    }
    timings
}

impl ExternalAgents for ConfiguredAgents {
    fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    fn run<'a>(&'a self, run: ExternalRun) -> BoxFuture<'a, Result<ExternalReport, String>> {
        async move {
            let entry = self
                .entries
                .iter()
                .find(|e| e.name == run.agent)
                .ok_or_else(|| format!("no agent named {:?} is configured", run.agent))?;
            let kept = self
                .pool
                .take(entry, &run.cwd)
                .await
                .map_err(|e| e.to_string())?;
            let host = Arc::new(host::HostOnAcp::new(&entry.name, run.host.clone()));
            let ended = self.prompt(&kept, &host, &run).await;
            host.flush();
            self.keep_trajectory(&entry.name, &run.task, &host, ended.as_ref().ok())
                .await;
            let idle = timings_of(entry).idle;
            self.pool
                .give_back(&entry.name, kept, ended.is_ok(), idle)
                .await;
            ended.map_err(|e| e.to_string())
        }
        .boxed()
    }
}

impl ConfiguredAgents {
    /// The delegation's steps as the session's trajectory, when one is kept.
    async fn keep_trajectory(
        &self,
        name: &str,
        task: &str,
        host: &host::HostOnAcp,
        report: Option<&ExternalReport>,
    ) {
        let Some(log) = &self.trajectory else {
            return;
        };
        let (messages, answer, tool_calls) = host.take_steps().finish(task);
        let (input_tokens, output_tokens) = report.and_then(|r| r.tokens).unwrap_or_default();
        let turn = AgentTurn {
            model: format!("agent:{name}"),
            messages,
            answer,
            tool_calls,
            input_tokens,
            output_tokens,
        };
        log.another_agents_turn(turn).await;
    }

    /// One delegation on a session of `kept`: the task as its prompt, then, for each steer
    /// that cut its turn, the steer's words as the next prompt on the same session; its last
    /// answer, and what it used.
    async fn prompt(
        &self,
        kept: &pool::Kept,
        host: &Arc<host::HostOnAcp>,
        run: &ExternalRun,
    ) -> Result<ExternalReport, talaria_conductor::ChildError> {
        let session = kept.session(&run.cwd, &self.mcp_servers).await?;
        let cost_before = kept.routes.open(&session, host.clone());
        let outcome = self.turns(kept, &session, run).await;
        let cost_after = kept.routes.cost(&session);
        kept.routes.close(&session);
        let (outcome, tokens, steered) = outcome?;
        Ok(ExternalReport {
            answer: outcome.answer,
            cancelled: outcome.stop_reason == acp::StopReason::Cancelled,
            refused: outcome.stop_reason == acp::StopReason::Refusal,
            tokens,
            cost: (cost_after > cost_before).then_some(cost_after - cost_before),
            steered,
        })
    }

    /// The task's turn and the steers' turns after it: the last one's outcome, the tokens of
    /// all, and what became of the steers. A steer's prompt the agent refuses or fails ends
    /// the delegation with the cut turn (the parent's turn still reads the steer).
    async fn turns(
        &self,
        kept: &pool::Kept,
        session: &str,
        run: &ExternalRun,
    ) -> Result<
        (
            talaria_conductor::PromptOutcome,
            Option<(u64, u64)>,
            Option<SteeredReport>,
        ),
        talaria_conductor::ChildError,
    > {
        let turn = run.steers.turn();
        let mut outcome = kept.child.prompt(session, text(&run.task), &turn).await?;
        let mut tokens = tokens_of(&outcome);
        let mut steered: Option<SteeredReport> = None;
        while outcome.stop_reason == acp::StopReason::Cancelled {
            let Some(words) = run.steers.next_turn() else {
                break;
            };
            let report = steered.get_or_insert_with(|| SteeredReport {
                before: outcome.answer.clone(),
                ..SteeredReport::default()
            });
            let turn = run.steers.turn();
            match kept.child.prompt(session, text(&words), &turn).await {
                Ok(next) => {
                    report.words.push(words);
                    tokens = add_tokens(tokens, tokens_of(&next));
                    outcome = next;
                }
                Err(error) => {
                    tracing::info!(agent = %run.agent, %error, "a steer's prompt was not taken");
                    report.failed = Some(error.to_string());
                    break;
                }
            }
        }
        Ok((outcome, tokens, steered))
    }
}

fn text(words: &str) -> Vec<acp::ContentBlock> {
    vec![acp::ContentBlock::Text(acp::TextContent::new(
        words.to_string(),
    ))]
}

fn tokens_of(outcome: &talaria_conductor::PromptOutcome) -> Option<(u64, u64)> {
    outcome
        .usage
        .as_ref()
        .map(|u| (u.input_tokens, u.output_tokens))
}

fn add_tokens(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some((i, o)), Some((j, p))) => Some((i + j, o + p)),
        (one, other) => one.or(other),
    }
}
