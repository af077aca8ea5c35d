//! Runs commands on this machine, each in a process group of its own (made by the sandbox
//! helper's supervisor, or here when there is none), so a timeout or a cancel kills the
//! command and everything it started: no orphans. A call's result waits for the output pipes
//! only briefly once the command has ended.

use crate::error::ToolError;

use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::output::HeadTail;
use super::{CommandResult, CommandRunner, CommandSpec, Launch, kill_group};
use crate::interfaces::{Progress, ProgressSink};

/// The local runner.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalRunner;

/// Kills the group when dropped (also when the future running the command is dropped).
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            kill_group(pgid);
        }
    }
}

/// How long output may still arrive once a command has ended (what it left running was
/// ended with it; a pipe held open longer is let go).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// The process `launch` describes, with its environment, in a process group of its own
/// (the helper's supervisor makes its own session, which a group leader cannot).
pub(crate) fn command(launch: &Launch) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&launch.program);
    command.args(&launch.args);
    if let Some(env) = &launch.env {
        command.env_clear().envs(env.iter().cloned());
    }
    if let Some((name, spec)) = super::launch::spec_variable(launch) {
        command.env(name, spec);
    }
    if !launch.supervised {
        command.process_group(0);
    }
    command
}

/// Forwards a pipe's bytes into `tx` until it closes.
pub(crate) fn pump<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    mut pipe: R,
    tx: mpsc::Sender<Vec<u8>>,
) {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
}

impl CommandRunner for LocalRunner {
    fn run<'a>(
        &'a self,
        spec: CommandSpec,
        cancel: &'a CancellationToken,
        progress: Option<ProgressSink>,
    ) -> BoxFuture<'a, Result<CommandResult, ToolError>> {
        Box::pin(async move {
            let mut child = command(&spec.local)
                .current_dir(&spec.cwd)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|source| ToolError::Process {
                    what: format!("cannot start the shell in {}", spec.cwd.display()),
                    source,
                })?;
            let mut guard = GroupGuard(child.id());
            let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
            if let Some(stdout) = child.stdout.take() {
                pump(stdout, tx.clone());
            }
            if let Some(stderr) = child.stderr.take() {
                pump(stderr, tx.clone());
            }
            drop(tx);
            let mut output = HeadTail::new(spec.max_output_bytes);
            let mut result = CommandResult::default();
            let deadline = tokio::time::sleep(spec.timeout);
            tokio::pin!(deadline);
            let grace = tokio::time::sleep(Duration::MAX);
            tokio::pin!(grace);
            let mut status = None;
            let mut pipes_open = true;
            while status.is_none() || pipes_open {
                tokio::select! {
                    () = &mut grace, if status.is_some() => break,
                    chunk = rx.recv(), if pipes_open => match chunk {
                        Some(chunk) => {
                            output.push(&chunk);
                            if let Some(progress) = &progress {
                                progress(Progress::Output(String::from_utf8_lossy(&chunk).into_owned()));
                            }
                        }
                        None => pipes_open = false,
                    },
                    exit = child.wait(), if status.is_none() => {
                        status = Some(exit.map_err(|source| ToolError::Process {
                            what: "waiting for the command failed".into(),
                            source,
                        })?);
                        // Whatever the command left running in its group goes too.
                        if let Some(pgid) = guard.0.take() {
                            kill_group(pgid);
                        }
                        grace.as_mut().reset(tokio::time::Instant::now() + OUTPUT_GRACE);
                    }
                    () = &mut deadline, if !result.timed_out && status.is_none() => {
                        result.timed_out = true;
                        if let Some(pgid) = guard.0 {
                            kill_group(pgid);
                        }
                    }
                    () = cancel.cancelled(), if !result.cancelled && status.is_none() => {
                        result.cancelled = true;
                        if let Some(pgid) = guard.0 {
                            kill_group(pgid);
                        }
                    }
                }
            }
            drop(guard);
            if let Some(status) = status {
                use std::os::unix::process::ExitStatusExt;
                result.exit_code = status.code();
                result.signal = status.signal().map(|s| {
                    nix::sys::signal::Signal::try_from(s)
                        .map_or_else(|_| format!("signal {s}"), |sig| sig.as_str().to_string())
                });
            }
            result.output = output.render();
            result.elided_bytes = output.elided();
            Ok(result)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str, timeout_ms: u64) -> CommandSpec {
        let shell = super::super::Shell::default();
        CommandSpec {
            command: command.into(),
            cwd: std::env::temp_dir(),
            timeout: Duration::from_millis(timeout_ms),
            max_output_bytes: 1000,
            local: shell.local(command, true),
            elsewhere: shell.elsewhere(command, true),
        }
    }

    #[tokio::test]
    async fn output_exit_code_and_caps() {
        let never = CancellationToken::new();
        let result = LocalRunner
            .run(spec("echo out; echo err >&2; exit 3", 10_000), &never, None)
            .await
            .expect("ran");
        assert_eq!(result.exit_code, Some(3));
        assert!(result.output.contains("out") && result.output.contains("err"));
        let big = LocalRunner
            .run(spec("seq 1 100000", 10_000), &never, None)
            .await
            .expect("ran");
        assert!(big.elided_bytes > 0);
        assert!(big.output.starts_with("1\n2\n") && big.output.trim_end().ends_with("100000"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let never = CancellationToken::new();
        let marker = format!("talaria-orphan-{}", std::process::id());
        let command = format!("(sleep 30; echo {marker}) & sleep 30");
        let result = LocalRunner
            .run(spec(&command, 300), &never, None)
            .await
            .expect("ran");
        assert!(result.timed_out);
        assert!(result.signal.is_some());
        // Read /proc directly (no dependency on procps being installed).
        let left: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
            .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
            .filter(|cmdline| cmdline.contains(&marker))
            .collect();
        assert!(left.is_empty(), "orphans left: {left:?}");
    }
}
