//! The OS sandbox for every command Talaria runs on this machine, the clean environment those
//! commands start with, and the explanation of a denial.
//!
//! A command is started through the helper, Talaria's own binary re-executed: the
//! supervisor (`talaria __sandbox PROGRAM ARGS…`, [`helper_main`]) puts it in a session
//! of its own and ends everything it starts when it ends; the sandbox's init
//! (`talaria __sandbox-init …`, [`init_main`]) enters the sandbox and runs it. The layers a
//! command runs under, outermost first:
//!
//! 1. **Namespaces** (where unprivileged user namespaces exist and `[sandbox] namespaces` is
//!    on): user, mount, PID and IPC namespaces of its own; everything read-only but the
//!    writable places; a fresh `/dev` and `/proc`; the UNIX sockets it may not reach masked,
//!    and every `connect` judged by device and inode at the gate (`connect_gate.rs`).
//! 2. **Landlock**: reads everywhere except the hidden places (credential stores, private
//!    keys, `TALARIA_HOME`), writes only in the writable places, no signals to processes
//!    outside the sandbox, no abstract UNIX sockets outside it.
//! 3. **Filters** (seccomp): no pushing input into terminals, no changing other processes'
//!    limits or priorities; without namespaces, no new sessions or process groups and no
//!    UNIX sockets; with the network off, no network sockets.
//! 4. **Limits**: at most `max_processes` processes.
//!
//! Landlock grants whole hierarchies, so hidden places are carved out by granting their
//! siblings one by one (`plan.rs`); the kernel applies the rules to the real file behind any
//! link.

mod aliases;
pub mod credentials;
pub mod denial;
pub mod endpoints;
pub mod env;
#[cfg(target_os = "linux")]
mod follow;
pub mod home;
pub mod layers;
mod mount_changes;
mod mountinfo_path;
mod overlays;
pub mod policy;

#[cfg(target_os = "linux")]
mod connect_gate;
mod helper;
#[cfg(target_os = "linux")]
mod init;
#[cfg(target_os = "linux")]
mod ipc;
#[cfg(target_os = "linux")]
mod let_out;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod masks;
#[cfg(target_os = "linux")]
mod memory;
#[cfg(target_os = "linux")]
mod mount_watch;
#[cfg(target_os = "linux")]
mod mounts;
#[cfg(target_os = "linux")]
mod namespace;
mod plan;
#[cfg(target_os = "linux")]
mod procs;
#[cfg(target_os = "linux")]
mod recorder;
#[cfg(unix)]
pub mod refusals;
mod request;
#[cfg(target_os = "linux")]
mod seccomp;
mod secret_forms;
pub mod secret_shapes;
#[cfg(target_os = "linux")]
mod signals;
#[cfg(target_os = "linux")]
mod sockets;
#[cfg(target_os = "linux")]
mod supervisor;
#[cfg(target_os = "linux")]
mod watcher;

use std::sync::OnceLock;

pub use env::EnvRules;
#[cfg(target_os = "linux")]
pub use follow::{FOLLOW_ARG, follow_parent_main};
pub use helper::{helper_main, init_main};
pub use layers::{Layers, namespace_support, namespace_support_known, namespace_support_now};
pub use mount_changes::MountChanges;
pub use policy::{DEFAULT_MAX_PROCESSES, HelperSpec, PathAccess, SandboxPolicy};
pub use request::{
    HELPER_ARG, HELPER_FAILED, INIT_ARG, SPEC_ENV, command_words, shell_line, shell_program,
};

/// Why the sandbox could not be entered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error("no OS sandbox: {0}")]
    Unsupported(String),
    #[error("Landlock refused the rules: {0}")]
    Landlock(String),
    #[error("the seccomp filter could not be applied: {0}")]
    Seccomp(String),
    #[error("no namespaces here ({0})")]
    NoNamespaces(String),
    #[error("the sandbox's namespaces could not be set up: {0}")]
    Namespaces(String),
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

/// Enters the sandbox as a command without namespaces does: the calling thread and whatever
/// it executes are restricted to `policy` (Landlock, and the filters that keep it in its
/// process group and away from UNIX sockets).
pub fn enter(policy: &SandboxPolicy) -> Result<(), SandboxError> {
    enter_layer(&policy.resolved(), false)
}

/// Enters the sandbox under `policy` (resolved: [`SandboxPolicy::resolved`]);
/// `in_namespaces` when the caller runs in the sandbox's namespaces.
#[cfg(target_os = "linux")]
pub(crate) fn enter_layer(policy: &SandboxPolicy, in_namespaces: bool) -> Result<(), SandboxError> {
    linux::enter(policy, in_namespaces, None, false).map(|_| ())
}

/// Enters the sandbox (`policy` resolved) as the process that stays in it with the command
/// and watches over it (the supervisor without namespaces, the init with them): the filters
/// also keep the
/// command from signalling or tracing the caller alone, and the watcher (`watcher.rs`)
/// judges its sockets and logs its refusals to `log`.
#[cfg(target_os = "linux")]
pub(crate) fn enter_as_watcher(
    policy: &SandboxPolicy,
    in_namespaces: bool,
    log: Option<std::fs::File>,
) -> Result<(), SandboxError> {
    let protected = Some(std::process::id() as i32);
    let entered = linux::enter(policy, in_namespaces, protected, true)?;
    if !watcher::start(policy, entered.writable, in_namespaces, log)? {
        seccomp::refuse_sockets(linux::filter_options(
            policy,
            in_namespaces,
            protected,
            false,
        ))?;
    }
    Ok(())
}

/// Enters the sandbox: on this platform there is none, so this always fails (closed).
#[cfg(not(target_os = "linux"))]
pub(crate) fn enter_layer(
    _policy: &SandboxPolicy,
    _in_namespaces: bool,
) -> Result<(), SandboxError> {
    Err(SandboxError::Unsupported(format!(
        "no OS sandbox on {} yet",
        std::env::consts::OS
    )))
}

/// Keeps this process's memory out of reach of the commands it runs and of core files: not
/// dumpable (so `/proc/<pid>/mem` and ptrace need privileges) and no core file. For the
/// agent itself, whose memory holds keys.
pub fn protect_this_process() {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_dumpable(false);
        let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    }
}
