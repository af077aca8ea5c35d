//! Running an approved call: its card marked running, its progress streamed, and one run
//! outside the sandbox when the sandbox refused something and the user agreed.

use super::report::trim_front;
use super::*;

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

    /// Dispatches one call in `ctx`, streaming its progress to the card.
    pub(super) async fn run_streaming(&self, call: &Prepared, mut ctx: ToolContext) -> ToolOutcome {
        let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
        ctx.progress = Some(Arc::new(move |p| {
            let _ = tx.send(p);
        }));
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
        };
        // Output the tool reported just before it returned is shown too, before its result.
        while let Ok(progress) = rx.try_recv() {
            if let Progress::Output(text) = progress {
                output.push_str(&text);
                trim_front(&mut output, PROGRESS_TAIL_CHARS);
                dirty = true;
            }
        }
        if dirty {
            self.emit(EngineEvent::ToolCallProgress {
                id: call.id.clone(),
                output,
            })
            .await;
        }
        outcome
    }
}

/// What the OS sandbox refused during a call, if anything.
pub(super) fn sandbox_denial(outcome: &ToolOutcome) -> Option<String> {
    outcome.effects.iter().find_map(|effect| match effect {
        ToolEffect::SandboxDenied { what } => Some(what.clone()),
        _ => None,
    })
}
