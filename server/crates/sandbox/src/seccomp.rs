//! The syscall filters a sandboxed command runs under (seccomp, built with `seccompiler`): a
//! second line behind the layers that do the real work, and the only line for what no other
//! layer sees.
//!
//! - **Terminals**: `TIOCSTI` and `TIOCLINUX` (pushing input into a terminal) are refused.
//! - **Other processes**: changing the limits (`prlimit64` with a new limit), priority (`setpriority`), I/O
//!   class (`ioprio_set`), CPU affinity or scheduling (`sched_set*`) or memory placement
//!   (`migrate_pages`, `move_pages`) of any process but the caller is refused (the pid
//!   argument must be 0; `PRIO_USER`/`IOPRIO_WHO_USER`, which reach every process of the
//!   user, are refused whatever the id). `io_uring` is refused (it can act around filters),
//!   and so is TCP Fast Open (`MSG_FASTOPEN`, a connection made by `sendto` or `sendmsg`
//!   around the connect gate).
//! - **Without namespaces**: `setsid` and `setpgid` are refused, so everything a command
//!   starts stays in its process group and dies with it; creating a UNIX socket is refused
//!   (pathname sockets cannot be told apart by a filter; `socketpair` still works).
//! - **Network off**: every socket but `AF_UNIX` is refused.
//!
//! The socket rules are left to the watcher (`watcher.rs`) where it runs: it refuses the
//! same calls (and UNIX datagram sockets) and logs each refusal.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

/// The terminal requests that push input (`TIOCSTI`) or act on the console (`TIOCLINUX`).
/// (`Ioctl` is not 64 bits on every target.)
#[allow(clippy::unnecessary_cast)]
const TERMINAL_INPUT: [u64; 2] = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// What the filters refuse beyond the rules every command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterOptions {
    /// Whether the command may open network sockets.
    pub network: bool,
    /// Whether the command may create UNIX sockets (with namespaces, the sockets it must not
    /// reach are masked in its mount namespace).
    pub unix_sockets: bool,
    /// Whether the command may leave its session and process group.
    pub new_groups: bool,
    /// A process in the same sandbox that commands may not signal, trace or touch by its pid
    /// (the supervisor, when it runs inside the sandbox with them).
    pub protected: Option<i32>,
    /// Whether the watcher refuses (and logs) the socket calls instead of a filter here.
    pub sockets_watched: bool,
}

fn seccomp(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Seccomp(e.to_string())
}

/// `arg` (32 bits) compared with `value`.
fn arg(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(seccomp)
}

/// A rule matching when every condition holds.
fn when(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conditions).map_err(seccomp)
}

/// Refused when the pid in argument 0 is not 0 (the caller).
fn other_pid() -> Result<Vec<SeccompRule>, SandboxError> {
    Ok(vec![when(vec![arg(0, SeccompCmpOp::Ne, 0)?])?])
}

/// `prlimit64` on another process is refused when it sets a limit (reading one is harmless).
fn other_pid_setting_limits() -> Result<Vec<SeccompRule>, SandboxError> {
    let sets =
        SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0).map_err(seccomp)?;
    Ok(vec![when(vec![arg(0, SeccompCmpOp::Ne, 0)?, sets])?])
}

/// The rules of the process filter (refused with `EPERM`).
fn process_rules(options: FilterOptions) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    const PRIO_USER: u64 = 2;
    const IOPRIO_WHO_USER: u64 = 3;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(
        libc::SYS_ioctl,
        TERMINAL_INPUT
            .iter()
            .map(|&request| when(vec![arg(1, SeccompCmpOp::Eq, request)?]))
            .collect::<Result<_, _>>()?,
    );
    rules.insert(libc::SYS_prlimit64, other_pid_setting_limits()?);
    for pid_first in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
        libc::SYS_migrate_pages,
        libc::SYS_move_pages,
    ] {
        rules.insert(pid_first, other_pid()?);
    }
    rules.insert(
        libc::SYS_setpriority,
        vec![
            when(vec![arg(1, SeccompCmpOp::Ne, 0)?])?,
            when(vec![arg(0, SeccompCmpOp::Eq, PRIO_USER)?])?,
        ],
    );
    rules.insert(
        libc::SYS_ioprio_set,
        vec![
            when(vec![arg(1, SeccompCmpOp::Ne, 0)?])?,
            when(vec![arg(0, SeccompCmpOp::Eq, IOPRIO_WHO_USER)?])?,
        ],
    );
    // TCP Fast Open connects inside `sendto` and `sendmsg`, around the connect gate.
    let fast_open = libc::MSG_FASTOPEN as u64;
    for (syscall, flags) in [
        (libc::SYS_sendto, 3),
        (libc::SYS_sendmsg, 2),
        (libc::SYS_sendmmsg, 3),
    ] {
        rules.insert(
            syscall,
            vec![when(vec![arg(
                flags,
                SeccompCmpOp::MaskedEq(fast_open),
                fast_open,
            )?])?],
        );
    }
    for always in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        rules.insert(always, Vec::new());
    }
    if !options.new_groups {
        rules.insert(libc::SYS_setsid, Vec::new());
        rules.insert(libc::SYS_setpgid, Vec::new());
    }
    if let Some(pid) = options.protected {
        protect(&mut rules, pid)?;
    }
    Ok(rules)
}

/// Refuses signalling `pid` alone (a signal to the whole group ends every command too, so
/// nothing survives it), opening a descriptor on it, tracing it or touching its memory.
fn protect(rules: &mut BTreeMap<i64, Vec<SeccompRule>>, pid: i32) -> Result<(), SandboxError> {
    let pid = u64::from(pid.unsigned_abs());
    for (syscall, index) in [
        (libc::SYS_kill, 0),
        (libc::SYS_tkill, 0),
        (libc::SYS_tgkill, 0),
        (libc::SYS_rt_sigqueueinfo, 0),
        (libc::SYS_rt_tgsigqueueinfo, 0),
        (libc::SYS_pidfd_open, 0),
        (libc::SYS_process_vm_readv, 0),
        (libc::SYS_process_vm_writev, 0),
        (libc::SYS_ptrace, 1),
    ] {
        rules
            .entry(syscall)
            .or_default()
            .push(when(vec![arg(index, SeccompCmpOp::Eq, pid)?])?);
    }
    Ok(())
}

/// The rules of the socket filter (refused with `EACCES`, as a firewall would), if any.
fn socket_rules(options: FilterOptions) -> Result<Option<Vec<SeccompRule>>, SandboxError> {
    let unix = libc::AF_UNIX as u64;
    Ok(match (options.network, options.unix_sockets) {
        (true, true) => None,
        (false, false) => Some(Vec::new()),
        (false, true) => Some(vec![when(vec![arg(0, SeccompCmpOp::Ne, unix)?])?]),
        (true, false) => Some(vec![when(vec![arg(0, SeccompCmpOp::Eq, unix)?])?]),
    })
}

fn install(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<(), SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(seccomp)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(seccomp)?;
    let program: BpfProgram = filter.try_into().map_err(seccomp)?;
    seccompiler::apply_filter(&program).map_err(seccomp)
}

/// Installs the filters on the calling thread (and what it executes).
pub fn apply(options: FilterOptions) -> Result<(), SandboxError> {
    install(process_rules(options)?, libc::EPERM)?;
    if !options.sockets_watched {
        refuse_sockets(options)?;
    }
    Ok(())
}

/// Installs the socket rules alone (where the watcher could not be installed).
pub fn refuse_sockets(options: FilterOptions) -> Result<(), SandboxError> {
    if let Some(socket) = socket_rules(options)? {
        install(BTreeMap::from([(libc::SYS_socket, socket)]), libc::EACCES)?;
    }
    Ok(())
}
