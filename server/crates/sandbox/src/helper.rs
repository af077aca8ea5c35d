//! The helper's entry point: `talaria __sandbox SPEC PROGRAM ARGS…`. It applies the
//! environment rules, enters the sandbox and executes the program in its own place (same pid,
//! process group and descriptors). It must run before the binary starts any thread.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use crate::SandboxError;
use crate::policy::HelperSpec;

/// The first argument that makes the `talaria` binary act as the helper.
pub const HELPER_ARG: &str = "__sandbox";

/// The exit code of a command the helper could not start (the sandbox could not be entered,
/// or the program could not be executed); the reason is on standard error.
pub const HELPER_FAILED: u8 = 125;

/// Runs the helper with the arguments after [`HELPER_ARG`]; returns only on failure.
pub fn helper_main(args: Vec<OsString>) -> ExitCode {
    let why = match run(args) {
        Ok(never) => match never {},
        Err(why) => why,
    };
    eprintln!("talaria sandbox: {why}; the command did not run");
    ExitCode::from(HELPER_FAILED)
}

fn run(args: Vec<OsString>) -> Result<std::convert::Infallible, SandboxError> {
    let mut args = args.into_iter();
    let spec = args
        .next()
        .ok_or_else(|| SandboxError::Arguments("no specification".into()))?;
    let spec: HelperSpec = serde_json::from_str(&spec.to_string_lossy())
        .map_err(|e| SandboxError::Arguments(format!("unreadable specification: {e}")))?;
    let program = args
        .next()
        .ok_or_else(|| SandboxError::Arguments("no program".into()))?;
    let mut command = std::process::Command::new(&program);
    command.args(args);
    if let Some(rules) = &spec.env {
        command.env_clear().envs(rules.apply(std::env::vars_os()));
    }
    if let Some(policy) = &spec.sandbox {
        crate::enter(policy)?;
    }
    let error = command.exec();
    Err(SandboxError::Exec(format!(
        "cannot execute {}: {error}",
        program.to_string_lossy()
    )))
}
