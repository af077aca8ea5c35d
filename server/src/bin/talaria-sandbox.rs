//! `talaria-sandbox`: the sandbox helper alone, a small program Talaria starts for every
//! command (about as cheap to start as `sh`, where re-executing the whole agent costs a
//! millisecond more): `talaria-sandbox __sandbox PROGRAM ARGS…` is the supervisor of one
//! command and `talaria-sandbox __sandbox-init PROGRAM ARGS…` the init of its PID
//! namespace. `talaria __sandbox …` does the same where this program is not installed. In an
//! editor's terminal it is started as `talaria-sandbox WORD…`: the command's own words, which
//! the editor shows as the terminal's title, joined back into `SHELL -c COMMAND`.

use std::io::Write;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os();
    let first = args.nth(1);
    match first.as_deref().map(std::ffi::OsStr::to_str) {
        Some(Some(talaria_sandbox::HELPER_ARG)) => talaria_sandbox::helper_main(args.collect()),
        Some(Some(talaria_sandbox::INIT_ARG)) => talaria_sandbox::init_main(args.collect()),
        Some(Some(talaria_sandbox::FOLLOW_ARG)) => {
            talaria_sandbox::follow_parent_main(args.collect())
        }
        // An editor's terminal: the command's own words, so the editor shows them
        // (`talaria_sandbox::command_words`); the policy is in the environment, as always.
        Some(_) if std::env::var_os(talaria_sandbox::SPEC_ENV).is_some() => {
            talaria_sandbox::helper_main(talaria_sandbox::shell_line(std::env::args_os().skip(1)))
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "talaria-sandbox: the sandbox helper of the talaria agent, started by talaria \
                 for each command; there is nothing to run by hand"
            );
            std::process::ExitCode::from(2)
        }
    }
}
