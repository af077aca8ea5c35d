//! The sandbox's init: `talaria-sandbox __sandbox-init PROGRAM ARGS…`, started by the
//! supervisor as the first process of the command's PID namespace. It dies with the
//! supervisor (parent-death signal), mounts a `/proc` of its own, drops its capabilities
//! (its watcher's thread keeps `CAP_SYS_PTRACE` in the sandbox's user namespace), enters
//! Landlock and the filters, starts the command, reaps whatever is reparented to it,
//! and when the command ends, ends every other process in the namespace (the kernel would
//! too, when it exits) and says so.

use std::process::ExitCode;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::SandboxError;
use crate::procs;
use crate::request::{Request, give_up, report_leftovers};
use crate::signals::{Event, Signals, exit_code, stopped_by};

/// Runs the init; returns the command's exit code.
pub fn run(request: Request) -> ExitCode {
    match start(request) {
        Ok(code) => code,
        Err(why) => give_up(&why),
    }
}

fn start(request: Request) -> Result<ExitCode, SandboxError> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| SandboxError::Exec(format!("cannot follow the supervisor: {e}")))?;
    // Its memory and environment (the specification it was handed) are not the command's
    // to read; the programs it starts are dumpable again.
    let _ = nix::sys::prctl::set_dumpable(false);
    let policy = request
        .spec
        .sandbox
        .as_ref()
        .ok_or_else(|| SandboxError::Arguments("an init without a sandbox".into()))?;
    let mut command = std::process::Command::new(&request.program);
    command.args(&request.args).env_remove(crate::SPEC_ENV);
    crate::namespace::finish_in_init()?;
    let log = request
        .spec
        .refusals_fd
        .and_then(|fd| talaria_unotify::claim_inherited(fd).ok())
        .map(std::fs::File::from);
    let mut signals = Signals::block()?;
    // The supervisor handed over the policy left once the masks were in place. The watcher
    // (installed last: its thread shares the command's Landlock domain and the filters, not
    // its own) keeps the one capability this thread still holds, then this thread drops it.
    crate::enter_as_watcher(policy, true, log)?;
    crate::namespace::drop_capabilities()?;
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
                        code = report_leftovers(left, max_processes, code);
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
