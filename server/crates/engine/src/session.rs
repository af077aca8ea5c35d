//! One actor per session: prompts queue and run one at a time; cancellation is immediate.
//!
//! Invariants:
//! - At most one turn of a session runs at a time; prompts run in arrival order, never
//!   interleaved.
//! - `cancel` ends the running turn and every prompt queued before it; each of them still
//!   finishes with [`EngineEvent::TurnFinished`] (`Cancelled`). Prompts sent after the cancel
//!   run normally.
//! - Every prompt gets exactly one `TurnFinished`, even if the turn panics.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt;
use talaria_record::{InputBlock, Transcript, UserPart};
use talaria_tools::{Registry, SessionToolState};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::{Mode, RuleStore};
use crate::bridge::ClientBridge;
use crate::config::RetryPolicy;
use crate::events::{EngineEvent, StopReason, TurnError, TurnId, TurnUsage};
use crate::router::ModelRouter;
use crate::turn::{SessionUsage, Turn, TurnLimits};

/// What a session needs to know about itself.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub id: String,
    pub cwd: PathBuf,
    pub model: String,
    pub system_prompt: String,
    pub context_window: u64,
    /// Retries and backoff for model calls.
    pub retry: RetryPolicy,
    pub max_turn_requests: u32,
    pub max_output_tokens: Option<u32>,
    /// `TALARIA_HOME`: remembered permissions and stored oversized results live here.
    pub home: PathBuf,
    /// Workspace roots: the cwd plus additional directories. Edits outside them ask.
    pub roots: Vec<PathBuf>,
    /// The approval mode the session starts in.
    pub mode: Mode,
    /// Which reads are of secrets, and how they are treated.
    pub secrets: crate::approval::SecretReads,
}

/// What the user sent: as received (kept in the record) and as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInput {
    pub blocks: Vec<InputBlock>,
    pub model_view: Vec<UserPart>,
}

impl UserInput {
    /// Plain text, as both.
    pub fn text(text: &str) -> Self {
        Self {
            blocks: vec![InputBlock::Text { text: text.into() }],
            model_view: vec![UserPart::text(text)],
        }
    }
}

#[derive(Debug)]
struct Queued {
    turn: TurnId,
    input: UserInput,
    generation: u64,
}

#[derive(Debug, Default)]
struct CancelState {
    /// Bumped by every cancel; prompts queued under an older generation are cancelled.
    generation: u64,
    /// The running turn's token.
    current: Option<CancellationToken>,
}

/// A handle to a running session. Dropping every handle ends the session after its queue.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    queue: mpsc::UnboundedSender<Queued>,
    cancel_state: Arc<Mutex<CancelState>>,
    mode: Arc<Mutex<Mode>>,
    model: Arc<Mutex<String>>,
}

impl SessionHandle {
    /// Queues a prompt; it runs after every prompt queued before it.
    pub fn prompt(&self, turn: TurnId, input: UserInput) -> Result<(), TurnId> {
        let generation = self.lock().generation;
        self.queue
            .send(Queued {
                turn,
                input,
                generation,
            })
            .map_err(|_| turn)
    }

    /// Cancels the running turn and every prompt queued so far.
    pub fn cancel(&self) {
        let mut state = self.lock();
        state.generation += 1;
        if let Some(token) = &state.current {
            token.cancel();
        }
    }

    /// The current approval mode.
    pub fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The model the next turn uses.
    pub fn model(&self) -> String {
        self.model
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Switches the model; it applies from the next turn.
    pub fn set_model(&self, model: &str) {
        *self.model.lock().unwrap_or_else(PoisonError::into_inner) = model.to_string();
    }

    /// Changes the approval mode; it applies to the next decision, also within a running turn.
    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap_or_else(PoisonError::into_inner) = mode;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.cancel_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Starts a session actor on the current runtime.
pub fn spawn_session(
    settings: SessionSettings,
    router: Arc<ModelRouter>,
    registry: Registry,
    bridge: Arc<dyn ClientBridge>,
    events: mpsc::Sender<EngineEvent>,
) -> SessionHandle {
    let (queue, mut receiver) = mpsc::unbounded_channel::<Queued>();
    let cancel_state = Arc::new(Mutex::new(CancelState::default()));
    let mode = Arc::new(Mutex::new(settings.mode));
    let model = Arc::new(Mutex::new(settings.model.clone()));
    let handle = SessionHandle {
        queue,
        cancel_state: cancel_state.clone(),
        mode: mode.clone(),
        model: model.clone(),
    };
    tokio::spawn(async move {
        let rules = Mutex::new(RuleStore::load(&settings.home, &settings.cwd));
        let tool_state = Arc::new(SessionToolState::default());
        let mut history = Transcript::with_system(settings.system_prompt.clone());
        let mut window = settings.context_window;
        let mut session_usage = SessionUsage::default();
        let limits = TurnLimits {
            max_requests: settings.max_turn_requests,
            max_output_tokens: settings.max_output_tokens,
        };
        let mut used_ids = std::collections::HashSet::new();
        while let Some(queued) = receiver.recv().await {
            let token = {
                let mut state = cancel_state.lock().unwrap_or_else(PoisonError::into_inner);
                if queued.generation < state.generation {
                    None
                } else {
                    let token = CancellationToken::new();
                    state.current = Some(token.clone());
                    Some(token)
                }
            };
            let mut turn_usage = TurnUsage::default();
            let outcome = match token {
                None => Ok(StopReason::Cancelled),
                Some(token) => {
                    let turn = Turn {
                        settings: &settings,
                        limits,
                        router: router.as_ref(),
                        model: model.lock().unwrap_or_else(PoisonError::into_inner).clone(),
                        retry: settings.retry,
                        registry: &registry,
                        bridge: bridge.as_ref(),
                        mode: &mode,
                        rules: &rules,
                        tool_state: &tool_state,
                        events: &events,
                        cancel: &token,
                        history: &mut history,
                        used_tool_ids: &mut used_ids,
                        window: &mut window,
                        session_usage: &mut session_usage,
                    };
                    let result = std::panic::AssertUnwindSafe(turn.run(queued.input))
                        .catch_unwind()
                        .await;
                    cancel_state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .current = None;
                    let outcome = match result {
                        Ok((outcome, usage)) => {
                            turn_usage = usage;
                            outcome
                        }
                        Err(panic) => {
                            let what = panic_message(panic.as_ref());
                            tracing::error!(session = %settings.id, "turn panicked: {what}");
                            Err(TurnError::Internal(format!(
                                "the turn failed unexpectedly: {what}"
                            )))
                        }
                    };
                    // A failed turn stays in the record, marked (open calls get failed
                    // results), so the next request is valid for every provider.
                    if let Err(error) = &outcome {
                        history.interrupt(error.to_string());
                    }
                    outcome
                }
            };
            let _ = events
                .send(EngineEvent::TurnFinished {
                    turn: queued.turn,
                    outcome,
                    usage: turn_usage,
                })
                .await;
        }
        tracing::debug!(session = %settings.id, "session ended");
    });
    handle
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_string())
}
