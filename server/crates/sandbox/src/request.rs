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

/// The shell commands run in: bash where there is one.
pub fn shell_program() -> &'static str {
    if std::path::Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// A command as the arguments of `talaria-sandbox` in an editor's terminal: the command split
/// at each space, so that a client that shows `PROGRAM ARGS…` (its card's title) shows the
/// user's words, and [`shell_line`] joins them back byte for byte. `None` when the first
/// word would read as one of the helper's own arguments (or is empty): such a command goes
/// as `__sandbox SHELL -c COMMAND`.
pub fn command_words(command: &str) -> Option<Vec<OsString>> {
    let first = command.split(' ').next().unwrap_or_default();
    if first.is_empty() || first == HELPER_ARG || first == INIT_ARG {
        return None;
    }
    Some(command.split(' ').map(OsString::from).collect())
}

/// The helper's `SHELL -c COMMAND` for [`command_words`]' words.
pub fn shell_line(words: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut command = OsString::new();
    for (index, word) in words.enumerate() {
        if index > 0 {
            command.push(" ");
        }
        command.push(word);
    }
    vec![shell_program().into(), "-c".into(), command]
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_split_into_words_is_joined_back_byte_for_byte() {
        for command in [
            "cargo test",
            "grep -rn 'foo  bar' src | head -3",
            "echo \"$HOME\"\nls  -la ",
            "x",
        ] {
            let words = command_words(command).expect("words");
            let line = shell_line(words.into_iter());
            assert_eq!(line[1], "-c");
            assert_eq!(line[2], command);
        }
        for helper_own in ["__sandbox /bin/sh -c x", "__sandbox-init x", " leading", ""] {
            assert_eq!(command_words(helper_own), None, "{helper_own:?}");
        }
    }
}
