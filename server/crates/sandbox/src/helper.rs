//! The helper's entry points, run by `talaria-sandbox` (or Talaria's own binary) before it
//! starts any thread: `__sandbox PROGRAM ARGS…` is the supervisor of one command
//! (`supervisor.rs`), and `__sandbox-init PROGRAM ARGS…` the init of its PID namespace,
//! which the supervisor starts (`init.rs`).

use std::ffi::OsString;
use std::process::ExitCode;

#[cfg(not(target_os = "linux"))]
use crate::SandboxError;
use crate::request::give_up;

/// Runs the supervisor with the arguments after [`crate::HELPER_ARG`].
#[cfg(target_os = "linux")]
pub fn helper_main(args: Vec<OsString>) -> ExitCode {
    match crate::request::request(args) {
        Ok(request) => crate::supervisor::run(request),
        Err(why) => give_up(&why),
    }
}

/// Runs the sandbox's init with the arguments after [`crate::INIT_ARG`].
#[cfg(target_os = "linux")]
pub fn init_main(args: Vec<OsString>) -> ExitCode {
    match crate::request::request(args) {
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
