//! How the agent stops: on end of input or on SIGTERM, SIGINT or SIGHUP, every running turn
//! ends as `session/cancel` ends it (the partial answer recorded and marked interrupted, the
//! running commands and what they started killed), what waits for the store is spooled and
//! each session it belongs to named, what the sessions recorded is written within
//! [`SHUTDOWN_BUDGET`] (the rest left in the spool for the next start), and `serve` returns
//! (exit code 0). A second signal exits at once.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::state::LiveSession;

/// The longest a clean stop takes, from the signal (or the end of input) to the last output
/// flushed: sessions, store and output together.
pub(super) const SHUTDOWN_BUDGET: Duration = Duration::from_millis(2500);
/// Of it, what the output is left at the end to flush the last messages.
const OUTPUT_SHARE: Duration = Duration::from_millis(250);
/// Of it, what the store is left at least (the sessions' last commits take the rest).
const STORE_SHARE: Duration = Duration::from_millis(700);

/// The exit code of a second signal (`128 + SIGINT`, as shells report an interrupt).
const EXIT_AT_ONCE: i32 = 130;

/// SIGTERM, SIGINT and SIGHUP, as one stream; or, for one connection of `talaria serve`,
/// the server's word (the process's signals are the server's).
pub(super) struct StopSignals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
    hangup: Option<Signal>,
    /// Set for a connection of `talaria serve`: fires when the server stops or drops it.
    told: Option<ConnectionStop>,
}

/// How a connection of `talaria serve` (or `talaria batch`'s own agent) is told to stop, and
/// why (for the log: a client's DELETE is not the server's stop).
#[derive(Clone, Default)]
pub struct ConnectionStop {
    pub token: tokio_util::sync::CancellationToken,
    /// Set before the token fires; unset, the stop is the server's.
    pub why: std::sync::Arc<std::sync::OnceLock<&'static str>>,
}

impl ConnectionStop {
    /// Told by `token`, for no other reason than the server's stop.
    pub fn by(token: tokio_util::sync::CancellationToken) -> Self {
        Self {
            token,
            why: std::sync::Arc::default(),
        }
    }
}

impl StopSignals {
    /// Takes the three signals over (their default is to end the process at once).
    pub(super) fn install() -> Self {
        let take = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!("{name} cannot be handled: {error}");
                None
            }
        };
        Self {
            terminate: take(SignalKind::terminate(), "SIGTERM"),
            interrupt: take(SignalKind::interrupt(), "SIGINT"),
            hangup: take(SignalKind::hangup(), "SIGHUP"),
            told: None,
        }
    }

    /// No signals: the stop comes when `told` fires (a connection of `talaria serve`).
    pub(super) fn told_by(told: ConnectionStop) -> Self {
        Self {
            terminate: None,
            interrupt: None,
            hangup: None,
            told: Some(told),
        }
    }

    /// The next stop: the signal's name, or why the connection was told to stop.
    pub(super) async fn next(&mut self) -> &'static str {
        async fn on(signal: &mut Option<Signal>) {
            match signal {
                Some(stream) => {
                    stream.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let told = self.told.clone();
        let told = async move {
            match told {
                Some(told) => {
                    told.token.cancelled().await;
                    told.why.get().copied().unwrap_or("the server's stop")
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = on(&mut self.terminate) => "SIGTERM",
            () = on(&mut self.interrupt) => "SIGINT",
            () = on(&mut self.hangup) => "SIGHUP",
            why = told => why,
        }
    }

    /// From now on, another stop signal ends the process at once, whatever is stuck: the
    /// exit happens in the signal handler itself (`_exit`), so a runtime thread held by a
    /// call that does not return (a connection to a frozen database being closed) cannot
    /// delay it. The task logs it first where the runtime is free to.
    fn exit_on_the_next(mut self) {
        if self.told.is_some() {
            // A connection of `talaria serve`: the server handles the process's signals.
            return;
        }
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        for signal in [
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGHUP,
        ] {
            if let Err(error) = signal_hook::flag::register_conditional_shutdown(
                signal,
                EXIT_AT_ONCE,
                armed.clone(),
            ) {
                tracing::warn!("a second stop signal may not end the process at once: {error}");
            }
        }
        tokio::spawn(async move {
            let name = self.next().await;
            tracing::warn!("{name} again: exiting now");
            std::process::exit(EXIT_AT_ONCE);
        });
    }
}

/// A stop under way: one deadline for all of it.
pub(super) struct Stop {
    started: tokio::time::Instant,
}

impl Stop {
    /// From now on the stop has [`SHUTDOWN_BUDGET`], and a second signal ends the process.
    pub(super) fn begin(signals: StopSignals) -> Self {
        signals.exit_on_the_next();
        Self {
            started: tokio::time::Instant::now(),
        }
    }

    /// What the sessions and the store get (the output keeps its share).
    pub(super) fn sessions_and_store(&self) -> Duration {
        SHUTDOWN_BUDGET
            .saturating_sub(OUTPUT_SHARE)
            .saturating_sub(self.started.elapsed())
    }

    /// What is left of the whole budget.
    pub(super) fn left(&self) -> Duration {
        SHUTDOWN_BUDGET.saturating_sub(self.started.elapsed())
    }
}

/// At the start of a stop, and again once the running turns ended: what the store has not
/// taken yet is spooled (the writer may be inside a store call — opening a store another
/// process migrates — and not spooling), then each session it belongs to is named. A second
/// signal ends the process at once (in the signal handler, where nothing can be logged), and
/// what it leaves is then named here already, and in the spool, which the next start writes
/// (where the home can be written). At the start, the sessions whose turns are being ended
/// are named too: a second signal before their end is recorded loses that end.
pub(super) async fn spool_and_name_what_waits(
    sessions: &std::collections::HashMap<String, LiveSession>,
    journal: Option<&talaria_engine::Journal>,
    at_start: bool,
) {
    if at_start && !sessions.is_empty() {
        let ids: Vec<&str> = sessions.keys().map(String::as_str).collect();
        tracing::warn!(
            sessions = ?ids,
            "stopping: running turns are ended and recorded, then spooled; a second signal \
             before that ends the process at once, and what a turn had not recorded then is lost"
        );
    }
    let Some(journal) = journal else {
        return;
    };
    journal.spool_everything().await;
    for id in sessions.keys() {
        let waiting = journal.waiting(id).entries.len();
        if waiting > 0 {
            tracing::warn!(
                session = %id,
                entries = waiting,
                "stopping with entries the store has not taken yet: they are in the spool \
                 for the next start, even if a second signal ends this one at once"
            );
        }
    }
}

/// Ends every session as `session/cancel` would, then writes what they recorded: each actor
/// records its cancelled turn and commits it (its commit is bounded by the journal's
/// deadline), then the store gets what is left of `budget`.
pub(super) async fn close_everything(
    sessions: std::collections::HashMap<String, LiveSession>,
    journal: Option<talaria_engine::Journal>,
    budget: Duration,
) {
    let started = tokio::time::Instant::now();
    for session in sessions.values() {
        session.handle.cancel();
    }
    let closed = join_all(
        sessions
            .values()
            .map(|session| session.handle.close_and_wait()),
    );
    let sessions_budget = budget.saturating_sub(STORE_SHARE);
    if tokio::time::timeout(sessions_budget, closed).await.is_err() {
        tracing::warn!(
            "some sessions did not finish within {:.1} s; what they did not record is lost",
            sessions_budget.as_secs_f64()
        );
    }
    // The ended turns' last entries are spooled, and named, before the store is waited for.
    spool_and_name_what_waits(&sessions, journal.as_ref(), false).await;
    drop(sessions);
    if let Some(journal) = journal {
        let left = budget.saturating_sub(started.elapsed());
        journal.shutdown(left.max(STORE_SHARE.min(budget))).await;
    }
}
