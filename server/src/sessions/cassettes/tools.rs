//! Tool calls on tape: recorded beside the model's calls, or, in a replay, served from the
//! cassette (`--replay-tools`: nothing runs) or run for real and checked against it (a result
//! that differs is reported on the call's card and in the log, never hidden).

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;
use talaria_provider::cassette::{CassetteLog, Normaliser, RecordedTool};
use talaria_tools::{CallDescription, Tool, ToolContext, ToolDefinition, ToolOutcome};

/// What a session's tools do with the tape.
#[derive(Clone)]
pub(super) enum Tape {
    /// Each call's arguments and outcome go to the cassette.
    Record(CassetteLog),
    /// Calls are served from the cassette (`serve`), or run and compared with it.
    Replay {
        recorded: Arc<Mutex<Vec<Option<RecordedTool>>>>,
        serve: bool,
    },
}

impl Tape {
    pub(super) fn replay(tools: Vec<RecordedTool>, serve: bool) -> Self {
        Self::Replay {
            recorded: Arc::new(Mutex::new(tools.into_iter().map(Some).collect())),
            serve,
        }
    }
}

/// A tool between the orchestrator and the tape.
pub(super) struct Taped {
    pub(super) inner: Arc<dyn Tool>,
    pub(super) tape: Tape,
    pub(super) normaliser: Normaliser,
}

impl Taped {
    fn normalised(&self, value: &impl serde::Serialize) -> Value {
        let mut value = serde_json::to_value(value).unwrap_or_default();
        self.normaliser.value(&mut value);
        value
    }

    /// The next recorded call of this tool with these arguments, taken off the tape.
    fn take(&self, arguments: &Value) -> Option<RecordedTool> {
        let Tape::Replay { recorded, .. } = &self.tape else {
            return None;
        };
        let name = self.inner.definition().name.as_ref();
        let mut recorded = talaria_util::lock(recorded);
        recorded
            .iter_mut()
            .find(|slot| {
                slot.as_ref()
                    .is_some_and(|r| r.name == name && r.arguments == *arguments)
            })
            .and_then(Option::take)
    }

    /// A recorded outcome with this run's paths.
    fn restored(&self, outcome: &Value) -> Option<ToolOutcome> {
        let mut outcome = outcome.clone();
        self.normaliser.restore_value(&mut outcome);
        serde_json::from_value(outcome).ok()
    }
}

impl Tool for Taped {
    fn definition(&self) -> &ToolDefinition {
        self.inner.definition()
    }

    fn available(&self) -> bool {
        self.inner.available()
    }

    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription {
        self.inner.describe(args, ctx)
    }

    fn preview<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Vec<talaria_tools::ToolEffect>> {
        self.inner.preview(args, ctx)
    }

    fn check<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Option<ToolOutcome>> {
        self.inner.check(args, ctx)
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let arguments = self.normalised(&args);
            let name = self.inner.definition().name.to_string();
            match &self.tape {
                Tape::Record(log) => {
                    let outcome = self.inner.call(args, ctx).await;
                    log.tool(&name, arguments, self.normalised(&outcome));
                    outcome
                }
                Tape::Replay { serve: true, .. } => {
                    match self
                        .take(&arguments)
                        .and_then(|r| self.restored(&r.outcome))
                    {
                        Some(outcome) => outcome,
                        None => ToolOutcome::failed(format!(
                            "the cassette has no recorded result for this `{name}` call \
                             (arguments {arguments})"
                        )),
                    }
                }
                Tape::Replay { serve: false, .. } => {
                    let outcome = self.inner.call(args, ctx).await;
                    let now = self.normalised(&outcome);
                    let difference = match self.take(&arguments) {
                        Some(recorded) if recorded.outcome != now => Some(format!(
                            "this result differs from the recording: now {}, recorded {}",
                            now["content"], recorded.outcome["content"]
                        )),
                        Some(_) => None,
                        None => Some("this call is not in the recording".to_string()),
                    };
                    if let Some(difference) = difference {
                        // Told on the call's card (the client sees it, the model does not).
                        tracing::warn!(tool = %name, "replay: {difference}");
                        ctx.report_progress(talaria_tools::Progress::Output(format!(
                            "[replay] {difference}\n"
                        )));
                    }
                    outcome
                }
            }
        })
    }
}
