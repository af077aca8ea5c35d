//! `talaria-sandbox`: the sandbox helper alone, a small program Talaria starts for every
//! command (about as cheap to start as `sh`, where re-executing the whole agent costs a
//! millisecond more): `talaria-sandbox __sandbox PROGRAM ARGS…` is the supervisor of one
//! command and `talaria-sandbox __sandbox-init PROGRAM ARGS…` the init of its PID
//! namespace. `talaria __sandbox …` does the same where this program is not installed.

use std::io::Write;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os();
    match args.nth(1).as_deref().and_then(std::ffi::OsStr::to_str) {
        Some(talaria_sandbox::HELPER_ARG) => talaria_sandbox::helper_main(args.collect()),
        Some(talaria_sandbox::INIT_ARG) => talaria_sandbox::init_main(args.collect()),
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
