//! The signals a supervisor or init waits on, read from a `signalfd` (blocked, so nothing
//! runs in a handler), and the exit code a process ended with.

use std::process::ExitCode;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::WaitStatus;

use crate::SandboxError;

/// A blocked set of signals and the descriptor they are read from (closed on exec, so no
/// command inherits it; a child's signal mask is reset when it is started).
pub struct Signals {
    fd: SignalFd,
}

/// What a supervisor or init was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A child ended (or several).
    Child,
    /// The parent died (the parent-death signal), or its thread did.
    ParentDeath,
    /// Asked to stop (`SIGTERM`, `SIGINT`, `SIGHUP`, `SIGQUIT`).
    Stop(i32),
}

/// The signal that tells a supervisor its parent died.
pub const PARENT_DEATH: Signal = Signal::SIGUSR1;

const STOPS: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

impl Signals {
    /// Blocks every signal that can be blocked (none may end the supervisor by surprise;
    /// the others stay pending) and opens the descriptor of those a supervisor acts on.
    pub fn block() -> Result<Self, SandboxError> {
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        mask.add(PARENT_DEATH);
        for signal in STOPS {
            mask.add(signal);
        }
        let fail = |e: nix::Error| SandboxError::Exec(format!("cannot watch signals: {e}"));
        SigSet::all().thread_block().map_err(fail)?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC).map_err(fail)?;
        Ok(Self { fd })
    }

    /// Waits for the next signal.
    pub fn next(&mut self) -> Event {
        loop {
            let info = match self.fd.read_signal() {
                Ok(Some(info)) => info,
                Ok(None) | Err(nix::Error::EINTR) => continue,
                // The descriptor is unusable: stop rather than spin.
                Err(_) => return Event::Stop(Signal::SIGTERM as i32),
            };
            let signo = info.ssi_signo as i32;
            match Signal::try_from(signo) {
                Ok(Signal::SIGCHLD) => return Event::Child,
                Ok(signal) if signal == PARENT_DEATH => return Event::ParentDeath,
                Ok(signal) if STOPS.contains(&signal) => return Event::Stop(signo),
                _ => {}
            }
        }
    }
}

/// The exit code of a process that ended with `status` (128 + the signal when killed, as
/// shells report it).
pub fn exit_code(status: WaitStatus) -> u8 {
    match status {
        WaitStatus::Exited(_, code) => u8::try_from(code).unwrap_or(1),
        WaitStatus::Signaled(_, signal, _) => 128u8.saturating_add(signal as u8),
        _ => 1,
    }
}

/// Exits the way a process killed by `signal` would be reported (128 + the signal).
pub fn stopped_by(signal: i32) -> ExitCode {
    ExitCode::from(128u8.saturating_add(u8::try_from(signal).unwrap_or(0)))
}
