//! The other ACP agents of `[agents.<name>]`: started and spoken to through
//! `talaria-conductor` for `delegate_task {agent}` (the engine's [`ExternalAgents`]), and
//! listed by `talaria agents`. What a child asks of its client is translated here into the
//! engine's terms (`host`), where the session's own tools and rules serve it.

mod host;
mod list;

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use talaria_conductor::{AgentCommand, ChildAgent, Timings};
use talaria_engine::{AgentEntry, ExternalAgents, ExternalReport, ExternalRun};
use talaria_protocol::acp;

pub use list::list_agents;

/// The configured agents of a session.
pub struct ConfiguredAgents {
    entries: Vec<AgentEntry>,
}

impl ConfiguredAgents {
    /// `None` when none is configured.
    pub fn of(entries: &[AgentEntry]) -> Option<talaria_engine::AgentSet> {
        (!entries.is_empty()).then(|| {
            talaria_engine::AgentSet(Arc::new(Self {
                entries: entries.to_vec(),
            }))
        })
    }
}

/// How `entry` is started.
pub(crate) fn command_of(entry: &AgentEntry) -> AgentCommand {
    AgentCommand {
        name: entry.name.clone(),
        program: entry.command.clone().into(),
        args: entry.args.clone(),
        env: entry.env.clone().into_iter().collect(),
    }
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
            let host = Arc::new(host::HostOnAcp::new(&entry.name, run.host.clone()));
            let child = ChildAgent::start(
                &command_of(entry),
                &run.cwd,
                host.clone(),
                timings_of(entry),
            )
            .await
            .map_err(|e| e.to_string())?;
            let ended = prompt(&child, &run).await.map_err(|e| e.to_string());
            host.flush();
            child.stop().await;
            ended
        }
        .boxed()
    }
}

async fn prompt(
    child: &ChildAgent,
    run: &ExternalRun,
) -> Result<ExternalReport, talaria_conductor::ChildError> {
    let session = child.new_session(&run.cwd, Vec::new()).await?;
    let prompt = vec![acp::ContentBlock::Text(acp::TextContent::new(
        run.task.clone(),
    ))];
    let outcome = child.prompt(&session, prompt, &run.cancel).await?;
    Ok(ExternalReport {
        answer: outcome.answer,
        cancelled: outcome.stop_reason == acp::StopReason::Cancelled,
        refused: outcome.stop_reason == acp::StopReason::Refusal,
        tokens: outcome.usage.map(|u| (u.input_tokens, u.output_tokens)),
    })
}
