//! The agent's terminals: each a `terminal` call of the session (its sandbox, its command
//! rules, its card) running in a task of its own, so the agent can wait, read, kill and
//! release it as ACP's terminals allow.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use talaria_record::ResultStatus;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use futures_util::future::BoxFuture;

/// Runs the `terminal` tool with these arguments until the token fires.
pub(super) type RunCommand = Box<
    dyn FnOnce(
            serde_json::Value,
            CancellationToken,
        ) -> BoxFuture<'static, Result<talaria_record::ToolResultEntry, HostError>>
        + Send,
>;
use crate::external_agents::{ChildCommand, ChildExit, ChildOutput, HostError};

struct Terminal {
    done: watch::Receiver<Option<ChildOutput>>,
    cancel: CancellationToken,
}

/// The delegation's terminals by id.
#[derive(Default)]
pub(super) struct Terminals {
    running: Mutex<HashMap<String, Terminal>>,
    next: AtomicU64,
}

impl Terminals {
    /// Starts `command` as a `terminal` call; its terminal id.
    pub(super) fn start(
        &self,
        run: RunCommand,
        parent: &CancellationToken,
        command: ChildCommand,
    ) -> Result<String, HostError> {
        let line = shell_line(&command)?;
        let id = format!("term-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let cancel = parent.child_token();
        let (tx, done) = watch::channel(None);
        let running = cancel.clone();
        tokio::spawn(async move {
            let mut args = json!({"command": line});
            if let Some(cwd) = &command.cwd {
                args["workdir"] = json!(cwd);
            }
            let ended = run(args, running).await;
            let _ = tx.send(Some(output_of(ended, command.output_limit)));
        });
        talaria_util::lock(&self.running).insert(id.clone(), Terminal { done, cancel });
        Ok(id)
    }

    fn done(&self, id: &str) -> Result<watch::Receiver<Option<ChildOutput>>, HostError> {
        talaria_util::lock(&self.running)
            .get(id)
            .map(|t| t.done.clone())
            .ok_or_else(|| HostError::NoTerminal(id.to_string()))
    }

    /// What the terminal printed so far (its output comes when the command ends).
    pub(super) fn output(&self, id: &str) -> Result<ChildOutput, HostError> {
        Ok(self.done(id)?.borrow().clone().unwrap_or_default())
    }

    pub(super) async fn wait(&self, id: &str) -> Result<ChildExit, HostError> {
        let mut done = self.done(id)?;
        let ended = done
            .wait_for(Option::is_some)
            .await
            .map_err(|_| HostError::NoTerminal(id.to_string()))?;
        Ok(ended.clone().and_then(|o| o.exit).unwrap_or_default())
    }

    pub(super) fn kill(&self, id: &str) -> Result<(), HostError> {
        let running = talaria_util::lock(&self.running);
        let terminal = running
            .get(id)
            .ok_or_else(|| HostError::NoTerminal(id.to_string()))?;
        terminal.cancel.cancel();
        Ok(())
    }

    pub(super) fn release(&self, id: &str) -> Result<(), HostError> {
        let terminal = talaria_util::lock(&self.running)
            .remove(id)
            .ok_or_else(|| HostError::NoTerminal(id.to_string()))?;
        terminal.cancel.cancel();
        Ok(())
    }

    pub(super) fn stop_all(&self) {
        for (_, terminal) in talaria_util::lock(&self.running).drain() {
            terminal.cancel.cancel();
        }
    }
}

/// The command as one shell line: `env` assignments, the program and its arguments quoted.
fn shell_line(command: &ChildCommand) -> Result<String, HostError> {
    if let Some((name, _)) = command.env.iter().find(|(name, _)| !is_env_name(name)) {
        return Err(HostError::Refused(format!(
            "{name:?} is not an environment variable's name (letters, digits and _, not \
             starting with a digit)"
        )));
    }
    let mut words: Vec<String> = command
        .env
        .iter()
        .map(|(k, v)| format!("{k}={}", quoted(v)))
        .collect();
    if command.args.is_empty() {
        // A command without arguments is taken as a shell line (as agents send them).
        words.push(command.command.clone());
    } else {
        words.push(quoted(&command.command));
        words.extend(command.args.iter().map(|a| quoted(a)));
    }
    Ok(words.join(" "))
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The call's record entry as a terminal's output and exit.
fn output_of(
    ended: Result<talaria_record::ToolResultEntry, HostError>,
    limit: Option<u64>,
) -> ChildOutput {
    let entry = match ended {
        Ok(entry) => entry,
        Err(why) => {
            return ChildOutput {
                output: why.to_string(),
                truncated: false,
                exit: Some(ChildExit {
                    code: Some(126),
                    signal: None,
                }),
            };
        }
    };
    let raw = entry.raw_output.clone().unwrap_or_default();
    let code = raw["exit_code"]
        .as_i64()
        .and_then(|c| i32::try_from(c).ok());
    let signal = raw["signal"].as_str().map(str::to_string);
    let mut output = command_output(&entry.model_text, entry.status != ResultStatus::Completed);
    let refused = code.is_none() && signal.is_none() && entry.status != ResultStatus::Completed;
    // The tool keeps a long output's start and end: what it left out is a cut too.
    let mut truncated = raw["elided_bytes"].as_u64().is_some_and(|n| n > 0);
    if let Some(limit) = limit.and_then(|l| usize::try_from(l).ok())
        && output.len() > limit
    {
        let mut cut = output.len() - limit;
        while !output.is_char_boundary(cut) {
            cut += 1;
        }
        output = output[cut..].to_string();
        truncated = true;
    }
    ChildOutput {
        output,
        truncated,
        exit: Some(ChildExit {
            code: if refused { Some(126) } else { code },
            signal,
        }),
    }
}

/// What a command printed, from the `terminal` call's text: its output (or "(no output)"),
/// notes (a sandbox refusal), then a blank line and its status line last; a failed call's
/// text starts with "Error: ". Only that last status line goes.
fn command_output(text: &str, failed: bool) -> String {
    let text = match text.strip_prefix("Error: ") {
        Some(rest) if failed => rest,
        _ => text,
    };
    let status = [
        "Exit code: ",
        "Killed by ",
        "Exit status unknown",
        "Timed out after ",
        "Cancelled by the user",
    ];
    let text = match text.rsplit_once("\n\n") {
        Some((before, last)) if status.iter().any(|s| last.starts_with(s)) => before,
        _ => text,
    };
    match text.strip_prefix("(no output)") {
        Some(rest) => rest.trim_start_matches('\n').to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commands_output_is_its_text_without_the_status_line() {
        let text = "Error: out\nerr\n\nThe OS sandbox refused it.\n\nExit code: 1";
        assert_eq!(
            command_output(text, true),
            "out\nerr\n\nThe OS sandbox refused it."
        );
        assert_eq!(command_output("fine\n\nExit code: 0", false), "fine");
        assert_eq!(
            command_output("Error: as printed\n\nExit code: 0", false),
            "Error: as printed"
        );
        // What the command printed stays, even when it looks like a status line.
        assert_eq!(
            command_output("Exit code: 7\n\nExit code: 0", false),
            "Exit code: 7"
        );
        assert_eq!(command_output("(no output)\n\nExit code: 0", false), "");
    }

    #[test]
    fn a_command_is_one_quoted_shell_line() {
        let command = ChildCommand {
            command: "grep".into(),
            args: vec!["it's".into(), "a file".into()],
            cwd: None,
            env: vec![("A".into(), "b c".into())],
            output_limit: None,
        };
        assert_eq!(
            shell_line(&command).expect("a line"),
            r"A='b c' 'grep' 'it'\''s' 'a file'"
        );
        let line = ChildCommand {
            command: "ls -la | wc -l".into(),
            args: vec![],
            env: vec![],
            ..command
        };
        assert_eq!(shell_line(&line).expect("a line"), "ls -la | wc -l");
        for name in ["FOO=$(touch x)", "A B", "1A", "A;B", "", "A\nB"] {
            let bad = ChildCommand {
                env: vec![(name.into(), "v".into())],
                ..line.clone()
            };
            assert!(shell_line(&bad).is_err(), "{name:?}");
        }
    }
}
