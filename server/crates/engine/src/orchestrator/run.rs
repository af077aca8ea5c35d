//! Running an approved call: its card marked running, its progress streamed, and one run
//! outside the sandbox when the sandbox refused something and the user agreed.

use super::report::trim_front;
use super::{
    Arc, CANCELLED_RESULT, Duration, EngineEvent, Orchestrator, PROGRESS_INTERVAL,
    PROGRESS_TAIL_CHARS, Prepared, Progress, ToolContext, ToolDisplay, ToolEffect, ToolOutcome,
    ToolStatus, mpsc,
};

impl Orchestrator<'_> {
    /// Runs one approved call, streaming its progress, and reports its result. When the OS
    /// sandbox refused something and the mode lets the user decide, the user may run this
    /// one call again outside the sandbox (never remembered; the model cannot ask for it).
    pub(super) async fn execute(&self, call: &Prepared) -> (ToolOutcome, ToolDisplay) {
        self.emit(EngineEvent::ToolCallRunning {
            id: call.id.clone(),
        })
        .await;
        let mut ctx = self.ctx.clone();
        ctx.result_chars = Some(self.budget.room());
        let before = self.checkpoint_before(call).await;
        let mut outcome = self.run_streaming(call, ctx.clone()).await;
        if let Some(what) = sandbox_denial(&outcome)
            && self.may_escalate()
            && self.escalation_agreed(call, &what).await
        {
            ctx.unconfined = true;
            outcome = self.run_streaming(call, ctx).await;
        }
        // Before the checkpoint: what a hook changes (a formatter) is the call's change.
        self.post_tool_hooks(call, &mut outcome).await;
        self.checkpoint_after(call, before).await;
        self.intercept_after(call, &mut outcome).await;
        let display = self.finish(call, &outcome).await;
        (outcome, display)
    }

    /// Reads what the call may change: the files a file tool names, or the whole workspace's
    /// index before a command or a call that says nothing of what it does.
    async fn checkpoint_before(&self, call: &Prepared) -> Option<crate::checkpointing::Before> {
        let (checkpoints, _) = self.checkpoints?;
        let effects = &call.effects;
        let walk = effects.runs_commands || !effects.declared;
        let writes: &[std::path::PathBuf] = if effects.writes {
            &call.description.writes
        } else {
            &[]
        };
        Some(checkpoints.before(writes, walk).await)
    }

    /// Keeps what the call changed for its record entry; what could not be kept is told.
    async fn checkpoint_after(
        &self,
        call: &Prepared,
        before: Option<crate::checkpointing::Before>,
    ) {
        let (Some((checkpoints, session)), Some(before)) = (self.checkpoints, before) else {
            return;
        };
        let capture = checkpoints.after(session, before).await;
        for note in capture.notes {
            self.emit(EngineEvent::Notice {
                level: crate::events::NoticeLevel::Warning,
                message: note,
            })
            .await;
        }
        if !capture.changes.is_empty() {
            talaria_util::lock(&self.changes).insert(call.id.clone(), capture.changes);
        }
    }

    /// Dispatches one call in `ctx`, streaming its progress to the card.
    pub(super) async fn run_streaming(&self, call: &Prepared, mut ctx: ToolContext) -> ToolOutcome {
        // Unbounded: a call's terminal or child session, a few per call; its output goes to
        // the bounded `OutputTail` instead (`a_tool_printing_while_nobody_reads_*`).
        let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
        let tail = Arc::new(OutputTail::default());
        ctx.progress = Some(progress_sink(tail.clone(), tx));
        let run = self.registry.dispatch(&call.name, call.args.clone(), &ctx);
        tokio::pin!(run);
        let mut output = String::new();
        let mut dirty = false;
        let mut next_report = tokio::time::Instant::now();
        let outcome = loop {
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
                Some(progress) = rx.recv() => dirty |= self.relay(call, progress, &mut output).await,
                () = tail.wake.notified() => dirty |= tail.take(&mut output),
                () = tokio::time::sleep_until(next_report), if dirty => {
                    self.emit(EngineEvent::ToolCallProgress { id: call.id.clone(), output: output.clone() }).await;
                    dirty = false;
                    next_report = tokio::time::Instant::now() + PROGRESS_INTERVAL;
                }
            }
        };
        // What the tool reported just before it returned is shown too, before its result.
        while let Ok(progress) = rx.try_recv() {
            dirty |= self.relay(call, progress, &mut output).await;
        }
        dirty |= tail.take(&mut output);
        if dirty {
            self.emit(EngineEvent::ToolCallProgress {
                id: call.id.clone(),
                output,
            })
            .await;
        }
        outcome
    }

    /// Passes a terminal or a child session on to the card at once; output is kept in
    /// `output` (its tail) for the next report, and `true` says there is some to report.
    async fn relay(&self, call: &Prepared, progress: Progress, output: &mut String) -> bool {
        match progress {
            Progress::Terminal(terminal_id) => {
                let id = call.id.clone();
                self.emit(EngineEvent::ToolCallTerminal { id, terminal_id })
                    .await;
                false
            }
            Progress::Session(session_id) => {
                let id = call.id.clone();
                self.emit(EngineEvent::ToolCallSession { id, session_id })
                    .await;
                false
            }
            Progress::Output(text) => {
                output.push_str(&text);
                trim_front(output, PROGRESS_TAIL_CHARS);
                true
            }
        }
    }
}

/// A running call's output as its card shows it: only the tail is kept, however much the
/// tool prints while the client is slow to read, and the card's loop is woken to show it.
#[derive(Default)]
struct OutputTail {
    /// The tail, and whether it changed since the loop last took it.
    text: std::sync::Mutex<(String, bool)>,
    wake: tokio::sync::Notify,
}

impl OutputTail {
    fn push(&self, text: &str) {
        {
            let mut tail = talaria_util::lock(&self.text);
            tail.0.push_str(text);
            trim_front(&mut tail.0, PROGRESS_TAIL_CHARS);
            tail.1 = true;
        }
        self.wake.notify_one();
    }

    /// Copies a changed tail into `output`; whether it changed.
    fn take(&self, output: &mut String) -> bool {
        let mut tail = talaria_util::lock(&self.text);
        if !tail.1 {
            return false;
        }
        output.clone_from(&tail.0);
        tail.1 = false;
        true
    }
}

/// Where a running tool reports: output into its bounded tail, the rare terminal and session
/// references (one or two a call) through `others`.
fn progress_sink(
    tail: Arc<OutputTail>,
    others: mpsc::UnboundedSender<Progress>,
) -> talaria_tools::ProgressSink {
    Arc::new(move |progress| match progress {
        Progress::Output(text) => tail.push(&text),
        other => {
            let _ = others.send(other);
        }
    })
}

/// What the OS sandbox refused during a call, if anything.
pub(super) fn sandbox_denial(outcome: &ToolOutcome) -> Option<String> {
    outcome.effects.iter().find_map(|effect| match effect {
        ToolEffect::SandboxDenied { what } => Some(what.clone()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_printing_while_nobody_reads_holds_only_the_tail() {
        let tail = Arc::new(OutputTail::default());
        let (others, _kept) = mpsc::unbounded_channel();
        let sink = progress_sink(tail.clone(), others);
        let line = "x".repeat(1023) + "\n";
        for _ in 0..10_000 {
            sink(Progress::Output(line.clone()));
        }
        sink(Progress::Output("the end\n".into()));
        let held = talaria_util::lock(&tail.text).0.chars().count();
        assert!(held <= PROGRESS_TAIL_CHARS, "{held} characters held");
        let mut output = String::new();
        assert!(tail.take(&mut output));
        assert!(output.ends_with("the end\n"));
        assert!(!tail.take(&mut output), "nothing new since");
    }
}
