//! `process {action, id?, data?, timeout?, offset?, limit?}`: manage background processes
//! started by `terminal {background: true}`: list, poll, log, wait, write (stdin), kill.

use std::sync::LazyLock;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::interfaces::{BackgroundProcess, ExitInfo};
use crate::shell::safety::{self, StartDir};
use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolKind, ToolOutcome, parse_args,
};

/// The `process` tool.
#[derive(Debug)]
pub struct Process;

/// The most output returned by one poll or wait.
const MAX_CHUNK_CHARS: usize = 20_000;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "process".into(),
    toolset: "terminal".into(),
    description: "Manage background processes started with terminal(background=true). \
        Actions: list; poll (status and output since the last poll); log (retained output by \
        line, with offset/limit); wait (until exit or `timeout` seconds, default 30); write \
        (send `data` to stdin; include \\n to submit a line); kill."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "poll", "log", "wait", "write", "kill"]},
            "id": {"type": "string", "description": "The process id (e.g. proc_1); not needed for list."},
            "data": {"type": "string", "description": "Text to write to stdin (write)."},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 600, "description": "Seconds to wait (wait)."},
            "offset": {"type": "integer", "minimum": 0, "description": "First line (log; default: the last 200 lines)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Lines to return (log)."}
        },
        "required": ["action"]
    }),
    kind: ToolKind::Execute,
    approval: ApprovalNeed::RunsCommands,
    concurrency: Concurrency::Exclusive,
    max_result_chars: None,
    effects: Effects::runs(None),
});

#[derive(Debug, Deserialize)]
struct Args {
    action: String,
    #[serde(alias = "session_id")]
    id: Option<String>,
    data: Option<String>,
    timeout: Option<u64>,
    offset: Option<usize>,
    limit: Option<usize>,
}

fn status_of(exit: Option<ExitInfo>) -> String {
    match exit {
        None => "running".into(),
        Some(ExitInfo {
            code: Some(code), ..
        }) => format!("exited with code {code}"),
        Some(ExitInfo {
            signal: Some(signal),
            ..
        }) => format!("killed by signal {signal}"),
        Some(_) => "exited".into(),
    }
}

fn clip_tail(text: &str, max: usize) -> String {
    match talaria_util::tail(text, max) {
        None => text.to_string(),
        Some((skipped, kept)) => format!("[… {skipped} earlier characters not shown …]\n{kept}"),
    }
}

/// What a model that used `process` with nothing in the background reads.
const NOTHING_IN_THE_BACKGROUND: &str = "No background processes are running: `process` only \
    manages commands started with `terminal` and `background: true`. To run a command (tests, \
    a script), call `terminal` with {\"command\": \"…\"}.";

impl Tool for Process {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        let action = args.get("action").and_then(Value::as_str).unwrap_or("?");
        let id = args.get("id").and_then(Value::as_str).unwrap_or("");
        // Text written to a running process is judged like a command typed into a shell
        // there, in a directory earlier input may have changed.
        let typed = (action == "write")
            .then(|| args.get("data").and_then(Value::as_str))
            .flatten();
        CallDescription {
            title: match typed {
                Some(data) => format!("Type into {id}: `{}`", crate::terminal::one_line(data, 80)),
                None => format!("Process {action} {id}").trim_end().to_string(),
            },
            command: typed.map(str::to_string),
            command_start: StartDir::Unknown,
            // Looking at processes that were already approved needs no new approval.
            read_only: matches!(action, "list" | "poll" | "log" | "wait"),
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            if args.action == "list" {
                let all = ctx.state.processes.list();
                if all.is_empty() {
                    return ToolOutcome::completed("No background processes.");
                }
                let lines: Vec<String> = all
                    .iter()
                    .map(|p| {
                        format!(
                            "{}  pid {}  {}  {}s  {}",
                            p.id(),
                            p.pid(),
                            status_of(p.exit_info()),
                            p.started().elapsed().as_secs(),
                            p.command()
                        )
                    })
                    .collect();
                return ToolOutcome::completed(lines.join("\n"));
            }
            // `process` only manages commands started with `terminal` in the background: a
            // model that reaches for it to run something is pointed at `terminal`.
            let none_running = ctx.state.processes.list().is_empty();
            let Some(id) = args.id.as_deref() else {
                if none_running {
                    return ToolOutcome::failed(NOTHING_IN_THE_BACKGROUND.to_string());
                }
                return ToolOutcome::failed(format!(
                    "process action {:?} needs `id` (see action list).",
                    args.action
                ));
            };
            let Some(process) = ctx.state.processes.get(id) else {
                if none_running {
                    return ToolOutcome::failed(NOTHING_IN_THE_BACKGROUND.to_string());
                }
                return ToolOutcome::failed(format!(
                    "No background process {id:?}; use action list."
                ));
            };
            act(&args, process.as_ref(), ctx).await
        })
    }
}

async fn act(args: &Args, process: &dyn BackgroundProcess, ctx: &ToolContext) -> ToolOutcome {
    match args.action.as_str() {
        "poll" => {
            let new = process.take_new_output();
            ToolOutcome::completed(format!(
                "{}: {}\n{}",
                process.id(),
                status_of(process.exit_info()),
                if new.is_empty() {
                    "(no new output)".to_string()
                } else {
                    clip_tail(&new, MAX_CHUNK_CHARS)
                }
            ))
        }
        "log" => log_page(args, process),
        "wait" => wait_for(args, process, ctx).await,
        "write" => {
            let Some(data) = args.data.as_deref() else {
                return ToolOutcome::failed("write needs `data`.");
            };
            if let Some(why) = safety::classify_at(data, StartDir::Unknown).floor {
                return ToolOutcome::failed(format!("Refused: {why}. This is never typed."));
            }
            match process.write_stdin(data).await {
                Ok(()) => ToolOutcome::completed(format!(
                    "Wrote {} bytes to {}.",
                    data.len(),
                    process.id()
                )),
                Err(why) => ToolOutcome::failed(why),
            }
        }
        "kill" => {
            if process.exit_info().is_some() {
                return ToolOutcome::completed(format!(
                    "{} already {}.",
                    process.id(),
                    status_of(process.exit_info())
                ));
            }
            process.kill();
            let exit = process.wait(Duration::from_secs(5)).await;
            ToolOutcome::completed(format!("Killed {}: {}.", process.id(), status_of(exit)))
        }
        other => ToolOutcome::failed(format!(
            "Unknown process action {other:?}; use list, poll, log, wait, write or kill."
        )),
    }
}

/// A page of the process's whole log (the last lines unless `offset` says otherwise).
fn log_page(args: &Args, process: &dyn BackgroundProcess) -> ToolOutcome {
    let (text, dropped) = process.full_log();
    let lines: Vec<&str> = text.lines().collect();
    let limit = args.limit.unwrap_or(200).clamp(1, 2000);
    // Clamped: the model may send any number.
    let offset = args
        .offset
        .unwrap_or(lines.len().saturating_sub(limit))
        .min(lines.len());
    let page: Vec<&str> = lines.iter().skip(offset).take(limit).copied().collect();
    let mut out = format!(
        "{} ({}), lines {}-{} of {}:\n{}",
        process.id(),
        status_of(process.exit_info()),
        offset + 1,
        offset + page.len(),
        lines.len(),
        page.join("\n")
    );
    if dropped > 0 {
        out.push_str(&format!(
            "\n({dropped} bytes of older output were discarded)"
        ));
    }
    ToolOutcome::completed(out)
}

/// Waits for the process to exit (at most `timeout`), then reports its new output.
async fn wait_for(args: &Args, process: &dyn BackgroundProcess, ctx: &ToolContext) -> ToolOutcome {
    let timeout = Duration::from_secs(args.timeout.unwrap_or(30).clamp(1, 600));
    let exit = tokio::select! {
        exit = process.wait(timeout) => exit,
        () = ctx.cancel.cancelled() => return ToolOutcome::failed("Wait cancelled by the user (the process keeps running)."),
    };
    let new = process.take_new_output();
    let state = match exit {
        None => format!("still running after {} s", timeout.as_secs()),
        some => status_of(some),
    };
    ToolOutcome::completed(format!(
        "{}: {state}\n{}",
        process.id(),
        if new.is_empty() {
            "(no new output)".into()
        } else {
            clip_tail(&new, MAX_CHUNK_CHARS)
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terminal::Terminal;
    use crate::tool::ToolStatus;
    use tokio_util::sync::CancellationToken;

    /// A process the table only pretends to run: what `process` reads goes through the
    /// interfaces alone.
    #[derive(Debug)]
    struct Recorded {
        output: std::sync::Mutex<Vec<String>>,
    }

    impl BackgroundProcess for Recorded {
        fn id(&self) -> &str {
            "job_7"
        }
        fn command(&self) -> &str {
            "make watch"
        }
        fn pid(&self) -> u32 {
            4242
        }
        fn started(&self) -> std::time::Instant {
            std::time::Instant::now()
        }
        fn exit_info(&self) -> Option<ExitInfo> {
            Some(ExitInfo {
                code: Some(0),
                signal: None,
            })
        }
        fn take_new_output(&self) -> String {
            talaria_util::lock(&self.output).drain(..).collect()
        }
        fn full_log(&self) -> (String, usize) {
            (String::new(), 0)
        }
        fn wait(&self, _: Duration) -> futures_util::future::BoxFuture<'_, Option<ExitInfo>> {
            Box::pin(async { self.exit_info() })
        }
        fn write_stdin<'a>(
            &'a self,
            _: &'a str,
        ) -> futures_util::future::BoxFuture<'a, Result<(), crate::error::ToolError>> {
            Box::pin(async { Ok(()) })
        }
        fn kill(&self) {}
    }

    #[derive(Debug)]
    struct OneJob(std::sync::Arc<Recorded>);

    impl crate::interfaces::ProcessTable for OneJob {
        fn start(
            &self,
            _: &mut dyn FnMut(
                String,
            ) -> Result<
                std::sync::Arc<dyn BackgroundProcess>,
                crate::error::ToolError,
            >,
        ) -> Result<std::sync::Arc<dyn BackgroundProcess>, crate::error::ToolError> {
            Err(crate::error::ToolError::Rejected("no new jobs here".into()))
        }
        fn get(&self, id: &str) -> Option<std::sync::Arc<dyn BackgroundProcess>> {
            (id == "job_7").then(|| self.0.clone() as std::sync::Arc<dyn BackgroundProcess>)
        }
        fn list(&self) -> Vec<std::sync::Arc<dyn BackgroundProcess>> {
            vec![self.0.clone()]
        }
    }

    #[tokio::test]
    async fn the_process_tool_works_through_any_process_table() {
        let job = std::sync::Arc::new(Recorded {
            output: std::sync::Mutex::new(vec!["built\n".into()]),
        });
        let state = crate::interfaces::SessionToolState::new(std::sync::Arc::new(OneJob(job)));
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ToolContext::local(
            dir.path().to_path_buf(),
            CancellationToken::new(),
            std::sync::Arc::new(state),
        );
        let listed = Process.call(json!({"action": "list"}), &ctx).await;
        assert!(listed.content.contains("job_7"), "{}", listed.content);
        assert!(listed.content.contains("make watch"), "{}", listed.content);
        let polled = Process
            .call(json!({"action": "poll", "id": "job_7"}), &ctx)
            .await;
        assert_eq!(polled.status, ToolStatus::Completed, "{}", polled.content);
        assert!(polled.content.contains("built"), "{}", polled.content);
        let started = Terminal
            .call(json!({"command": "true", "background": true}), &ctx)
            .await;
        assert_eq!(started.status, ToolStatus::Failed);
        assert!(
            started.content.contains("no new jobs here"),
            "{}",
            started.content
        );
    }

    #[tokio::test]
    async fn with_nothing_in_the_background_the_model_is_pointed_at_terminal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ToolContext::local(
            dir.path().to_path_buf(),
            CancellationToken::new(),
            Default::default(),
        );
        for args in [
            json!({"action": "wait"}),
            json!({"action": "wait", "id": "test_process"}),
            json!({"action": "poll", "id": "pytest"}),
            json!({"action": "kill", "id": "proc_1"}),
            json!({"action": "write", "id": "tests", "data": "y\n"}),
        ] {
            let out = Process.call(args.clone(), &ctx).await;
            assert_eq!(out.status, ToolStatus::Failed, "{args}");
            assert!(
                out.content.contains("call `terminal`"),
                "{args}: {}",
                out.content
            );
        }
    }

    #[tokio::test]
    async fn background_processes_can_be_driven_and_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ToolContext::local(
            dir.path().to_path_buf(),
            CancellationToken::new(),
            Default::default(),
        );
        let started = Terminal
            .call(
                json!({"command": "read line; echo got:$line; sleep 60", "background": true}),
                &ctx,
            )
            .await;
        assert_eq!(started.status, ToolStatus::Completed, "{}", started.content);
        assert!(started.content.contains("proc_1"));
        let wrote = Process
            .call(
                json!({"action": "write", "id": "proc_1", "data": "hello\n"}),
                &ctx,
            )
            .await;
        assert_eq!(wrote.status, ToolStatus::Completed);
        let mut seen = String::new();
        for _ in 0..50 {
            seen.push_str(
                &Process
                    .call(json!({"action": "poll", "id": "proc_1"}), &ctx)
                    .await
                    .content,
            );
            if seen.contains("got:hello") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(seen.contains("got:hello"), "{seen}");
        let far = Process
            .call(
                json!({"action": "log", "id": "proc_1", "offset": u64::MAX}),
                &ctx,
            )
            .await;
        assert_eq!(far.status, ToolStatus::Completed, "{}", far.content);
        let listed = Process.call(json!({"action": "list"}), &ctx).await;
        assert!(listed.content.contains("running"));
        let killed = Process
            .call(json!({"action": "kill", "id": "proc_1"}), &ctx)
            .await;
        assert!(
            killed.content.contains("killed by signal 9"),
            "{}",
            killed.content
        );
        let missing = Process
            .call(json!({"action": "poll", "id": "proc_9"}), &ctx)
            .await;
        assert_eq!(missing.status, ToolStatus::Failed);
    }
}
