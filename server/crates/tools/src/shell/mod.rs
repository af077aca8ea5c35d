//! Shell commands: parsing and classification, bounded output, and runners (local here; the
//! editor's terminals are a runner implemented at the protocol edge).

use crate::error::ToolError;

pub mod launch;
pub mod local;
pub mod missing_command;
pub mod output;
pub mod safety;

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use launch::{Launch, Sandboxing, Shell, ShellSettings, sweep_private_tmps};
pub use local::LocalRunner;

use crate::interfaces::ProgressSink;

/// A foreground command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// Shell source, run with `bash -c` (or `sh -c`).
    pub command: String,
    pub cwd: PathBuf,
    pub timeout: Duration,
    /// Output beyond this is elided from the middle.
    pub max_output_bytes: usize,
    /// How to start it on this machine (through the sandbox helper, clean environment).
    pub local: Launch,
    /// How another process (an editor terminal) starts it; `None` when only this process
    /// may (see [`Shell::elsewhere`]).
    pub elsewhere: Option<Launch>,
}

/// How a command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandResult {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// Combined stdout and stderr, head and tail kept.
    pub output: String,
    pub elided_bytes: usize,
    pub timed_out: bool,
    pub cancelled: bool,
    /// The editor terminal it ran in, if any.
    pub terminal_id: Option<String>,
}

/// Runs foreground commands to completion (or timeout or cancellation, which kill them).
pub trait CommandRunner: Send + Sync {
    fn run<'a>(
        &'a self,
        spec: CommandSpec,
        cancel: &'a CancellationToken,
        progress: Option<ProgressSink>,
    ) -> BoxFuture<'a, Result<CommandResult, ToolError>>;
}

/// The shell used to run commands.
pub fn shell_program() -> &'static str {
    talaria_sandbox::shell_program()
}

/// Kills a whole process group; a group that is already gone is fine.
pub fn kill_group(pgid: u32) {
    if let Ok(pid) = i32::try_from(pgid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
