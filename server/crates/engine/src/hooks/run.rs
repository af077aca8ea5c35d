//! Running one hook: `bash -c COMMAND` in the session's folder, the event as JSON on stdin,
//! with Talaria's settings, credential stores and keys hidden and the clean environment (no
//! provider key, nothing that looks secret). The user's own hooks start like a command the
//! user let out of the sandbox (the user's rights) in a trusted folder; a project's hooks,
//! the user's in a folder that is not trusted, and those that ask (`sandbox = true`) run
//! inside the session's sandbox like the agent's commands, since what they run (a script in
//! the workspace, a formatter's configuration) may be the folder's or the agent's. At its timeout, or when the caller
//! stops waiting, its whole process group is ended.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Hook;

/// The most bytes of each output stream kept.
const MAX_OUTPUT: u64 = 1 << 20;
/// How long output may still arrive once the hook ended.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// How a hook ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookRun {
    /// Its exit code (`None`: killed by a signal, timed out, or never started).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// Why it could not be started.
    pub start_error: Option<String>,
}

impl HookRun {
    /// Whether the hook never ran its own code: it could not be started, or the shell could
    /// not find or execute its command (exit 127, 126) — missing, not executable or hidden.
    pub fn never_ran(&self) -> bool {
        self.start_error.is_some() || matches!(self.exit_code, Some(126 | 127))
    }
}

/// Ends a process group when dropped (the caller stopped waiting, or the hook is done).
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            talaria_tools::kill_group(pgid);
        }
    }
}

/// Runs `hook` with `payload` on stdin in `cwd`, through `shell` (the session's).
pub async fn run_hook(
    hook: &Hook,
    payload: &serde_json::Value,
    cwd: &std::path::Path,
    shell: &talaria_tools::Shell,
) -> HookRun {
    // A project's hook is confined (the workspace it runs from is the agent's to write), and
    // so is every hook in a folder that is not trusted, or that asked to be.
    let launch = shell.local(&hook.command, hook.confined);
    let mut command = tokio::process::Command::new(&launch.program);
    command.args(&launch.args);
    if let Some(env) = &launch.env {
        command.env_clear().envs(env.iter().cloned());
    }
    if let Some((name, spec)) = talaria_tools::spec_variable(&launch) {
        command.env(name, spec);
    }
    if !launch.supervised {
        command.process_group(0);
    }
    command
        .env("CLAUDE_PROJECT_DIR", cwd)
        .env("TALARIA_PROJECT_DIR", cwd)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return HookRun {
                start_error: Some(format!("cannot start it: {e}")),
                ..HookRun::default()
            };
        }
    };
    let mut guard = GroupGuard(child.id());
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let bytes = payload.to_string().into_bytes();
    let io = async {
        let write = async {
            // A hook that does not read its input is fine: the write just fails.
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(&bytes).await;
                let _ = stdin.shutdown().await;
            }
        };
        let ((), out, err) = tokio::join!(write, read_capped(stdout), read_capped(stderr));
        (out, err)
    };
    let waited = async {
        let waited = tokio::time::timeout(hook.timeout, child.wait()).await;
        // Whatever it left running (or all of it, at its timeout) ends now: its pipes close.
        drop(GroupGuard(guard.0.take()));
        let _ = child.wait().await;
        waited
    };
    let (waited, output) = tokio::join!(
        waited,
        tokio::time::timeout(hook.timeout + OUTPUT_GRACE, io)
    );
    let mut run = HookRun::default();
    match waited {
        Ok(Ok(status)) => run.exit_code = status.code(),
        Ok(Err(e)) => run.start_error = Some(format!("waiting for it failed: {e}")),
        Err(_) => run.timed_out = true,
    }
    if let Ok((out, err)) = output {
        run.stdout = String::from_utf8_lossy(&out).into_owned();
        run.stderr = String::from_utf8_lossy(&err).into_owned();
    }
    run
}

/// At most [`MAX_OUTPUT`] bytes of a pipe, until it closes.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(pipe: Option<R>) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Some(pipe) = pipe {
        let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut bytes).await;
    }
    bytes
}
