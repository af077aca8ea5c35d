//! The OS sandbox for every command Talaria runs on this machine, the clean environment those
//! commands start with, and the explanation of a denial.
//!
//! A sandboxed command is started through the helper: Talaria's own binary re-executed as
//! `talaria __sandbox SPEC PROGRAM ARGS…` ([`HELPER_ARG`], [`helper_main`]). The helper,
//! single-threaded, applies the environment rules, enters the sandbox (Landlock for the file
//! system and signals, a seccomp filter when the network is off) and executes the program, so
//! the restriction covers the command and everything it starts, and never Talaria itself.
//!
//! What the sandbox allows ([`SandboxPolicy`]): reads everywhere except the hidden places
//! (credential stores, private keys, `TALARIA_HOME`), writes only in the writable hierarchies,
//! no signals to processes outside it, and optionally no network. Landlock grants whole
//! hierarchies, so hidden places are carved out by granting their siblings one by one
//! (`plan.rs`); the kernel applies the rules to the real file behind any link.

pub mod denial;
pub mod env;
pub mod policy;

mod helper;
#[cfg(target_os = "linux")]
mod linux;
mod plan;

use std::sync::OnceLock;

pub use env::EnvRules;
pub use helper::{HELPER_ARG, HELPER_FAILED, helper_main};
pub use policy::{HelperSpec, PathAccess, SandboxPolicy};

/// Why the sandbox could not be entered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error("no OS sandbox: {0}")]
    Unsupported(String),
    #[error("Landlock refused the rules: {0}")]
    Landlock(String),
    #[error("the seccomp network filter could not be applied: {0}")]
    Seccomp(String),
    #[error("bad helper arguments: {0}")]
    Arguments(String),
    #[error("{0}")]
    Exec(String),
}

/// Whether commands can be sandboxed on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// The kernel enforces the sandbox.
    Enforced {
        /// The Landlock ABI in effect.
        abi: i32,
        /// Every right Talaria restricts is enforced (an older kernel enforces a subset).
        full: bool,
    },
    /// No sandbox here, and why.
    Unavailable(String),
}

impl Availability {
    /// Whether commands run sandboxed.
    pub fn is_enforced(&self) -> bool {
        matches!(self, Availability::Enforced { .. })
    }

    /// One line for logs, notices and `talaria doctor`.
    pub fn describe(&self) -> String {
        match self {
            Availability::Enforced { abi, full: true } => {
                let newer = if *abi >= 6 { " or newer" } else { "" };
                format!("Landlock (ABI {abi}{newer}) and seccomp are enforced")
            }
            Availability::Enforced { abi, full: false } => format!(
                "Landlock (ABI {abi}) is enforced, without the newest rights (an older kernel)"
            ),
            Availability::Unavailable(why) => why.clone(),
        }
    }
}

/// Whether this machine can sandbox commands, probed in this process once (a few rulesets
/// created and closed; nothing is restricted).
pub fn availability() -> &'static Availability {
    static AVAILABILITY: OnceLock<Availability> = OnceLock::new();
    AVAILABILITY.get_or_init(probe)
}

#[cfg(target_os = "linux")]
fn probe() -> Availability {
    match linux::probe() {
        Ok(enforcement) => Availability::Enforced {
            abi: enforcement.abi,
            full: enforcement.full,
        },
        Err(e) => Availability::Unavailable(e.to_string()),
    }
}

#[cfg(not(target_os = "linux"))]
fn probe() -> Availability {
    Availability::Unavailable(format!(
        "no OS sandbox on {} yet (Linux only)",
        std::env::consts::OS
    ))
}

/// Enters the sandbox: the calling thread and whatever it executes are restricted to `policy`.
#[cfg(target_os = "linux")]
pub fn enter(policy: &SandboxPolicy) -> Result<(), SandboxError> {
    linux::enter(policy).map(|_| ())
}

/// Enters the sandbox: on this platform there is none, so this always fails (closed).
#[cfg(not(target_os = "linux"))]
pub fn enter(_policy: &SandboxPolicy) -> Result<(), SandboxError> {
    Err(SandboxError::Unsupported(format!(
        "no OS sandbox on {} yet",
        std::env::consts::OS
    )))
}
