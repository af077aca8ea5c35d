//! The helper's entry points, run by `talaria-sandbox` (or Talaria's own binary) before it
//! starts any thread: `__sandbox SPEC PROGRAM ARGS…` is the supervisor of one command
//! (`supervisor.rs`), and `__sandbox-init SPEC PROGRAM ARGS…` the init of its PID namespace,
//! which the supervisor starts (`init.rs`).

use std::ffi::OsString;
use std::process::ExitCode;

use crate::SandboxError;
use crate::policy::HelperSpec;

/// The first argument that makes the `talaria` binary act as the supervisor.
pub const HELPER_ARG: &str = "__sandbox";

/// The first argument that makes the `talaria` binary act as the sandbox's init.
pub const INIT_ARG: &str = "__sandbox-init";

/// The exit code of a command the helper could not start (the sandbox could not be entered,
/// or the program could not be executed); the reason is on standard error.
pub const HELPER_FAILED: u8 = 125;

/// What the helper was asked to run.
pub(crate) struct Request {
    pub spec: HelperSpec,
    /// The specification as received (handed on to the init).
    pub spec_text: OsString,
    pub program: OsString,
    pub args: Vec<OsString>,
}

/// Reads `SPEC PROGRAM ARGS…`.
pub(crate) fn request(args: Vec<OsString>) -> Result<Request, SandboxError> {
    let mut args = args.into_iter();
    let spec_text = args
        .next()
        .ok_or_else(|| SandboxError::Arguments("no specification".into()))?;
    let spec: HelperSpec = serde_json::from_str(&spec_text.to_string_lossy())
        .map_err(|e| SandboxError::Arguments(format!("unreadable specification: {e}")))?;
    let program = args
        .next()
        .ok_or_else(|| SandboxError::Arguments("no program".into()))?;
    Ok(Request {
        spec,
        spec_text,
        program,
        args: args.collect(),
    })
}

/// Says why the command did not run, on standard error, and exits with [`HELPER_FAILED`].
pub(crate) fn give_up(why: &SandboxError) -> ExitCode {
    eprintln!("talaria sandbox: {why}; the command did not run");
    ExitCode::from(HELPER_FAILED)
}

/// Runs the supervisor with the arguments after [`HELPER_ARG`].
#[cfg(target_os = "linux")]
pub fn helper_main(args: Vec<OsString>) -> ExitCode {
    match request(args) {
        Ok(request) => crate::supervisor::run(request),
        Err(why) => give_up(&why),
    }
}

/// Runs the sandbox's init with the arguments after [`INIT_ARG`].
#[cfg(target_os = "linux")]
pub fn init_main(args: Vec<OsString>) -> ExitCode {
    match request(args) {
        Ok(request) => crate::init::run(request),
        Err(why) => give_up(&why),
    }
}

/// Without an OS sandbox on this platform, the helper refuses (closed).
#[cfg(not(target_os = "linux"))]
pub fn helper_main(_args: Vec<OsString>) -> ExitCode {
    give_up(&SandboxError::Unsupported(format!(
        "no OS sandbox on {} yet",
        std::env::consts::OS
    )))
}

/// Without an OS sandbox on this platform, the init refuses (closed).
#[cfg(not(target_os = "linux"))]
pub fn init_main(args: Vec<OsString>) -> ExitCode {
    helper_main(args)
}
