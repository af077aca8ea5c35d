//! `talaria-sandbox __follow-parent PID PROGRAM ARGS…`: starts another agent's program
//! (`[agents.<name>]`) so that it dies with the Talaria process that started it — the
//! parent-death signal (SIGKILL) set here, then the program executed in this process's place
//! — even when it is killed with no chance to stop its children. The signal follows the
//! thread that started the helper: Talaria starts agents from the thread that runs their
//! session. No sandbox: the agent runs its own tools (see `talaria agents`).

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

/// The first argument that makes the helper start another agent's program this way.
pub const FOLLOW_ARG: &str = "__follow-parent";

/// Runs `PID PROGRAM ARGS…`; returns only when the program could not start.
pub fn follow_parent_main(args: Vec<OsString>) -> ExitCode {
    let mut args = args.into_iter();
    let parent = args
        .next()
        .and_then(|pid| pid.to_str().and_then(|pid| pid.parse::<i32>().ok()));
    let (Some(parent), Some(program)) = (parent, args.next()) else {
        return refuse("usage: __follow-parent PID PROGRAM ARGS…");
    };
    if nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_err() {
        return refuse("the parent-death signal could not be set");
    }
    // The parent may have died before the signal was set: then nothing would follow it.
    if nix::unistd::getppid().as_raw() != parent {
        return refuse("the process that started it is gone");
    }
    let error = std::process::Command::new(&program).args(args).exec();
    refuse(&format!(
        "cannot execute {}: {error}",
        program.to_string_lossy()
    ))
}

fn refuse(why: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "talaria-sandbox: {why}");
    ExitCode::from(127)
}
