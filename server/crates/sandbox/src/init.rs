//! The sandbox's init: `talaria __sandbox-init MODE SPEC PROGRAM ARGS…`, started by the
//! supervisor. It dies with the supervisor (parent-death signal), enters the sandbox and
//! starts the command.
//!
//! - `ns`: it is the first process of the command's PID namespace. It mounts a `/proc` of its
//!   own, drops its capability, enters Landlock and the filters, starts the command, reaps
//!   whatever is reparented to it, and when the command ends, ends every other process in
//!   the namespace (the kernel would too, when it exits) and says so.
//! - `plain` (no namespaces): it enters Landlock and the filters and executes the command in
//!   its own place; the supervisor, outside the sandbox, is the subreaper.

use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::SandboxError;
use crate::helper::{Request, give_up};
use crate::procs;
use crate::signals::{Event, Signals, exit_code, stopped_by};

/// Runs the init; returns only when the command could not be started, or (in namespaces)
/// with the command's exit code.
pub fn run(request: Request, in_namespaces: bool) -> ExitCode {
    match start(request, in_namespaces) {
        Ok(code) => code,
        Err(why) => give_up(&why),
    }
}

fn start(request: Request, in_namespaces: bool) -> Result<ExitCode, SandboxError> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| SandboxError::Exec(format!("cannot follow the supervisor: {e}")))?;
    let policy = request
        .spec
        .sandbox
        .as_ref()
        .ok_or_else(|| SandboxError::Arguments("an init without a sandbox".into()))?;
    let mut command = std::process::Command::new(&request.program);
    command.args(&request.args);
    if !in_namespaces {
        crate::enter_layer(policy, false)?;
        let error = command.exec();
        return Err(SandboxError::Exec(format!(
            "cannot execute {}: {error}",
            request.program.to_string_lossy()
        )));
    }
    crate::namespace::finish_in_init()?;
    let mut signals = Signals::block()?;
    crate::enter_layer(&policy.with_hidden_masked(), true)?;
    let child = command.spawn().map_err(|e| {
        SandboxError::Exec(format!(
            "cannot execute {}: {e}",
            request.program.to_string_lossy()
        ))
    })?;
    let main = Pid::from_raw(child.id() as i32);
    drop(child);
    Ok(reap_until_done(main, &mut signals, policy.max_processes))
}

fn reap_until_done(main: Pid, signals: &mut Signals, max_processes: u32) -> ExitCode {
    loop {
        match signals.next() {
            Event::Child => {
                if let Some((_, status)) = procs::reap_ended().into_iter().find(|(p, _)| *p == main)
                {
                    let mut code = exit_code(status);
                    if procs::has_children() {
                        let left = procs::end_all(procs::namespace_members);
                        code = crate::supervisor::report_leftovers(left, max_processes, code);
                    }
                    return ExitCode::from(code);
                }
            }
            Event::ParentDeath => {}
            Event::Stop(signal) => {
                procs::end_all(procs::namespace_members);
                return stopped_by(signal);
            }
        }
    }
}
