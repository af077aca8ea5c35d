//! What the sandbox helper is asked to run (`PROGRAM ARGS…`, with the policy in
//! [`SPEC_ENV`]) and what it says back on standard error when the command cannot run or
//! leaves processes behind; shared by the supervisor and the init.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::ffi::OsString;
use std::process::ExitCode;

use crate::SandboxError;
use crate::policy::HelperSpec;

/// The first argument that makes the `talaria` binary act as the supervisor.
pub const HELPER_ARG: &str = "__sandbox";

/// The first argument that makes the `talaria` binary act as the sandbox's init.
pub const INIT_ARG: &str = "__sandbox-init";

/// The environment variable that carries the helper's specification (the sandbox policy and
/// the environment rules, as JSON). Not an argument: arguments are what an editor's terminal
/// shows and what every local user reads in `ps`; another user cannot read a process's
/// environment. The helper never passes it on to the command.
pub const SPEC_ENV: &str = "TALARIA_SANDBOX_SPEC";

/// The exit code of a command the helper could not start (the sandbox could not be entered,
/// or the program could not be executed); the reason is on standard error.
pub const HELPER_FAILED: u8 = 125;

/// What the helper was asked to run.
pub(crate) struct Request {
    pub spec: HelperSpec,
    pub program: OsString,
    pub args: Vec<OsString>,
}

/// Reads `PROGRAM ARGS…` and the specification in [`SPEC_ENV`]; without one the helper
/// refuses (a command never runs unconfined because its policy went missing).
pub(crate) fn request(args: Vec<OsString>) -> Result<Request, SandboxError> {
    let spec_text = std::env::var_os(SPEC_ENV).ok_or_else(|| {
        SandboxError::Arguments(format!("no specification ({SPEC_ENV} is not set)"))
    })?;
    let spec: HelperSpec = serde_json::from_str(&spec_text.to_string_lossy())
        .map_err(|e| SandboxError::Arguments(format!("unreadable specification: {e}")))?;
    let mut args = args.into_iter();
    let program = args
        .next()
        .ok_or_else(|| SandboxError::Arguments("no program".into()))?;
    Ok(Request {
        spec,
        program,
        args: args.collect(),
    })
}

/// Says why the command did not run, on standard error, and exits with [`HELPER_FAILED`].
pub(crate) fn give_up(why: &SandboxError) -> ExitCode {
    eprintln!("talaria sandbox: {why}; the command did not run");
    ExitCode::from(HELPER_FAILED)
}

/// Says on standard error what was ended when the command ended; a command that ran into
/// the process limit fails.
pub(crate) fn report_leftovers(left: usize, max_processes: u32, code: u8) -> u8 {
    if left == 0 {
        return code;
    }
    let max = max_processes as usize;
    // Without a user namespace the limit also counts the user's other processes, so a
    // command that ran into it may leave fewer than the limit behind.
    if max > 0 && left + 1 >= max / 2 {
        eprintln!(
            "talaria sandbox: the command reached its process limit ([sandbox] \
             max_processes = {max}); its {left} remaining processes were ended"
        );
        return if code == 0 { 1 } else { code };
    }
    eprintln!(
        "talaria: {left} process{} the command left running {} ended with it (start servers \
         and watchers in the background instead)",
        if left == 1 { "" } else { "es" },
        if left == 1 { "was" } else { "were" }
    );
    code
}
