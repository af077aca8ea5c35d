//! `terminal {command, timeout?, workdir?, background?}`: runs a shell command (locally or in
//! an editor terminal) in its own process group, with a timeout and an output cap; or starts a
//! background process managed with `process`. The hard floor is checked here as well as by
//! the approval policy, so no path around the policy can run a refused command.

use std::sync::LazyLock;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::shell::safety::{self, StartDir};
use crate::shell::{CommandResult, CommandSpec};
use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolEffect, ToolKind, ToolLocation, ToolOutcome, ToolStatus, parse_args,
};

/// Default foreground timeout, seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 180;
/// The longest foreground timeout, seconds.
pub const MAX_TIMEOUT_SECS: u64 = 3600;
/// Output kept per command (head and tail).
pub const MAX_OUTPUT_BYTES: usize = 30_000;

/// The `terminal` tool.
#[derive(Debug)]
pub struct Terminal;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "terminal".into(),
    toolset: "terminal".into(),
    description: "Run a shell command (bash) in the working directory or `workdir`. Returns \
        combined stdout/stderr (long output keeps its beginning and end) and the exit code. \
        Foreground commands time out after `timeout` seconds (default 180) and are killed with \
        everything they started. For servers and watchers use background=true, then manage \
        the process with the `process` tool. Do not use it to read or edit files: use \
        read_file, search_files, patch and write_file."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command."},
            "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECS, "description": "Seconds before a foreground command is killed (default 180)."},
            "workdir": {"type": "string", "description": "Directory to run in (default: the working directory)."},
            "background": {"type": "boolean", "description": "Start in the background and return at once with a process id."}
        },
        "required": ["command"]
    }),
    kind: ToolKind::Execute,
    approval: ApprovalNeed::RunsCommands,
    concurrency: Concurrency::Exclusive,
    max_result_chars: None,
    effects: Effects::runs(Some("command")),
});

#[derive(Debug, Deserialize)]
struct Args {
    command: String,
    timeout: Option<u64>,
    workdir: Option<String>,
    #[serde(default)]
    background: bool,
}

pub(crate) fn one_line(command: &str, max: usize) -> String {
    let flat = command.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

impl Tool for Terminal {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription {
        let command = args.get("command").and_then(Value::as_str).unwrap_or("");
        let workdir = args
            .get("workdir")
            .and_then(Value::as_str)
            .map_or_else(|| ctx.cwd.clone(), |w| ctx.resolve(w));
        CallDescription {
            title: format!("`{}`", one_line(command, 80)),
            command_start: StartDir::At(workdir.display().to_string()),
            locations: vec![ToolLocation {
                path: workdir,
                line: None,
            }],
            paths: Vec::new(),
            writes: Vec::new(),
            command: Some(command.to_string()),
            read_only: false,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            if args.command.trim().is_empty() {
                return ToolOutcome::failed("terminal needs a non-empty `command`.");
            }
            let workdir = args
                .workdir
                .as_deref()
                .map_or_else(|| ctx.cwd.clone(), |w| ctx.resolve(w));
            let class =
                safety::classify_at(&args.command, StartDir::At(workdir.display().to_string()));
            if let Some(why) = &class.floor {
                return ToolOutcome::failed(format!("Refused: {why}. This command is never run."));
            }
            if !workdir.is_dir() {
                return ToolOutcome::failed(format!(
                    "workdir {} is not a directory.",
                    workdir.display()
                ));
            }
            let confine = !ctx.unconfined;
            // The first command of a process finds out (off the runtime thread) whether the
            // sandbox's namespaces work here.
            ctx.shell.find_layers().await;
            if args.background {
                return start_in_background(ctx, &args.command, confine, &workdir);
            }
            let timeout = args
                .timeout
                .unwrap_or(DEFAULT_TIMEOUT_SECS)
                .clamp(1, MAX_TIMEOUT_SECS);
            // Only a confined command's refusals can offer a run outside the sandbox.
            let log = confine.then(|| ctx.shell.refusal_log()).flatten();
            let log_path = log.as_ref().map(|log| log.path());
            let spec = CommandSpec {
                command: args.command.clone(),
                cwd: workdir.clone(),
                timeout: Duration::from_secs(timeout),
                max_output_bytes: MAX_OUTPUT_BYTES,
                local: ctx.shell.local_logged(&args.command, confine, log_path),
                elsewhere: ctx.shell.elsewhere_logged(&args.command, confine, log_path),
            };
            let sandboxed = spec.local.sandboxed;
            let result = match ctx
                .commands
                .run(spec, &ctx.cancel, ctx.progress.clone())
                .await
            {
                Ok(result) => result,
                Err(why) => return ToolOutcome::failed(why),
            };
            if sandboxed && let Some(why) = helper_failure(&result) {
                return ToolOutcome::failed(format!(
                    "The command did not run: the OS sandbox could not be entered ({why})."
                ));
            }
            let refused = log.map(|log| log.read()).unwrap_or_default();
            let denial = sandboxed
                .then(|| ctx.shell.policy())
                .flatten()
                .and_then(|policy| what_was_refused(policy, &refused, &result, &workdir, &class));
            // A command that was not found: what this machine has instead.
            let instead = if result.exit_code == Some(127) {
                crate::shell::missing_command::hint(&result.output).await
            } else {
                None
            };
            outcome_of(result, timeout, denial, instead)
        })
    }
}

/// What the sandbox refused a finished command. A refusal the sandbox logged that a run
/// outside could get past comes first, and alone can offer that run; then what the output
/// says (a read of a hidden file, for one), which only explains, since a command prints
/// whatever it likes; then any other logged refusal (some are routine: a library probing
/// for a socket it does without).
fn what_was_refused(
    policy: &talaria_sandbox::SandboxPolicy,
    refused: &[talaria_sandbox::refusals::Refusal],
    result: &CommandResult,
    workdir: &std::path::Path,
    class: &safety::CommandClass,
) -> Option<talaria_sandbox::denial::Denial> {
    use talaria_sandbox::refusals::Refusal;
    let failed = result.exit_code != Some(0);
    let (liftable, other): (Vec<_>, Vec<_>) = refused
        .iter()
        // Without namespaces, libraries routinely probe for a socket they do without.
        .filter(|refusal| failed && **refusal != Refusal::UnixSocket)
        .map(|refusal| refusal.denial(policy))
        .partition(|denial| denial.liftable);
    if let Some(denial) = liftable.into_iter().next() {
        return Some(denial);
    }
    let named: Vec<std::path::PathBuf> = class
        .paths
        .iter()
        .map(|p| crate::tool::resolve_in(workdir, p))
        .collect();
    talaria_sandbox::denial::explain(policy, &result.output, workdir, &named)
        .map(|denial| talaria_sandbox::denial::Denial {
            liftable: false,
            ..denial
        })
        .or_else(|| other.into_iter().next())
}

/// What the model reads of a finished command: its output, what the sandbox refused, and
/// how it ended (anything but exit code 0 is a failed call).
fn outcome_of(
    result: crate::shell::CommandResult,
    timeout: u64,
    denial: Option<talaria_sandbox::denial::Denial>,
    instead: Option<String>,
) -> ToolOutcome {
    let mut text = result.output.trim_end().to_string();
    if text.is_empty() {
        text.push_str("(no output)");
    }
    if let Some(instead) = instead {
        text.push_str("\n\n");
        text.push_str(&instead);
    }
    if let Some(denial) = &denial {
        text.push_str(&format!(
            "\n\nThe OS sandbox refused {}. Only the user can let a command out of \
                     the sandbox; do not try to work around it.",
            denial.what
        ));
    }
    let status_line = if result.cancelled {
        "Cancelled by the user; the command and its child processes were killed.".to_string()
    } else if result.timed_out {
        format!("Timed out after {timeout} s; the command and its child processes were killed.")
    } else {
        match (result.exit_code, &result.signal) {
            (Some(code), _) => format!("Exit code: {code}"),
            (None, Some(signal)) => format!("Killed by {signal}"),
            (None, None) => "Exit status unknown".to_string(),
        }
    };
    let ok = result.exit_code == Some(0) && !result.timed_out && !result.cancelled;
    let mut outcome =
        ToolOutcome::completed(format!("{text}\n\n{status_line}")).with_raw_output(json!({
            "exit_code": result.exit_code,
            "signal": result.signal,
            "timed_out": result.timed_out,
            "elided_bytes": result.elided_bytes,
        }));
    if !ok {
        outcome.status = ToolStatus::Failed;
    }
    if let Some(terminal_id) = result.terminal_id {
        outcome = outcome.with_effect(ToolEffect::Terminal { terminal_id });
    }
    // Only a refusal the sandbox logged, that a run let out of the walls could get past (a
    // hidden place stays hidden however the command runs), of a command that failed, is
    // offered as one.
    if let Some(denial) = denial.filter(|denial| denial.liftable && !ok) {
        outcome = outcome.with_effect(ToolEffect::SandboxDenied { what: denial.what });
    }
    outcome
}

/// Why the sandbox helper could not start the command, if that is how it ended.
fn helper_failure(result: &CommandResult) -> Option<String> {
    if result.exit_code != Some(i32::from(talaria_sandbox::HELPER_FAILED)) {
        return None;
    }
    result
        .output
        .lines()
        .find_map(|line| line.strip_prefix("talaria sandbox: "))
        .map(str::to_string)
}

/// `terminal {background: true}`: the command started as a session's background process.
fn start_in_background(
    ctx: &ToolContext,
    command: &str,
    confine: bool,
    workdir: &std::path::Path,
) -> ToolOutcome {
    let launch = ctx.shell.local(command, confine);
    let started = ctx
        .state
        .processes
        .start(&mut |id| crate::session_state::spawn_background(id, command, &launch, workdir));
    match started {
        Ok(process) => ToolOutcome::completed(format!(
            "Started background process {} (pid {}): {}\nUse the process tool (action poll, log, wait, write or kill, id \"{}\") to follow it.",
            process.id(),
            process.pid(),
            one_line(command, 200),
            process.id()
        ))
        .with_raw_output(json!({"id": process.id(), "pid": process.pid()})),
        Err(why) => ToolOutcome::failed(why),
    }
}
