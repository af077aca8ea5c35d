//! `talaria-chat`: a terminal client for ACP agents.
//!
//! The answer streams to stdout; tool calls, plans, thoughts, notices and permission questions
//! go to stderr, so `talaria-chat -p "…" > answer.txt` captures just the answer. Interactive
//! use reads prompts from stdin; `/cancel` (or Ctrl-C) cancels the running turn, `/mode ID`
//! and `/model NAME` change the session, `/quit` leaves.

// A terminal client writes to the terminal.
#![allow(clippy::print_stdout)]

mod render;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use serde_json::{Value, json};
use talaria_harness::{AgentProcess, WireFraming};
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Approve {
    /// Ask on the terminal.
    Ask,
    /// Allow each call once.
    Once,
    /// Allow, and remember for the project.
    Always,
    /// Reject every call.
    Reject,
}

#[derive(Debug, Parser)]
#[command(
    name = "talaria-chat",
    version,
    about = "Chat with an ACP agent (Talaria by default) in the terminal"
)]
struct Cli {
    /// The agent program (default: `talaria` next to this program, else on PATH).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Arguments for the agent program (default: `acp` for Talaria, none for `--agent`).
    #[arg(long = "agent-arg")]
    agent_args: Vec<String>,
    /// Working directory of the session (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Send this prompt, print the answer, and exit.
    #[arg(short, long)]
    prompt: Option<String>,
    /// How to answer permission requests.
    #[arg(long, value_enum, default_value_t = Approve::Ask)]
    approve: Approve,
    /// Approval mode to switch the session to (read-only, ask, accept-edits, yolo).
    #[arg(long)]
    mode: Option<String>,
}

fn default_agent() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("talaria")))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from("talaria"))
}

/// The option id of the given kind in a permission request.
fn option_of(params: &Value, kind: &str) -> Option<String> {
    params["options"]
        .as_array()?
        .iter()
        .find(|o| o["kind"] == kind)?["optionId"]
        .as_str()
        .map(str::to_string)
}

fn permission_answer(params: &Value, kind: Option<&str>) -> Value {
    match kind.and_then(|k| option_of(params, k)) {
        Some(option) => json!({"outcome": {"outcome": "selected", "optionId": option}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

fn answer_kind(line: &str) -> Option<&'static str> {
    match line.trim() {
        "y" | "yes" => Some("allow_once"),
        "a" | "always" => Some("allow_always"),
        // An empty line is the safe answer.
        "n" | "no" | "" => Some("reject_once"),
        "N" | "never" => Some("reject_always"),
        _ => None,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("talaria-chat: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    // `--agent` runs exactly the program given (with `--agent-arg`s); only the default,
    // Talaria, gets its `acp` subcommand.
    let (agent_path, agent_args): (PathBuf, Vec<&str>) = match &cli.agent {
        Some(path) => (
            path.clone(),
            cli.agent_args.iter().map(String::as_str).collect(),
        ),
        None if cli.agent_args.is_empty() => (default_agent(), vec!["acp"]),
        None => (
            default_agent(),
            cli.agent_args.iter().map(String::as_str).collect(),
        ),
    };
    let env: Vec<(String, String)> = std::env::vars().collect();
    let mut agent = AgentProcess::spawn(
        &agent_path,
        &agent_args,
        &env,
        WireFraming::NewlineDelimited,
    )
    .await
    .with_context(|| format!("starting {}", agent_path.display()))?;
    let cwd = match &cli.cwd {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::current_dir()?,
    };
    agent
        .call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"session": {"notices": {}}}, "clientInfo": {"name": "talaria-chat", "version": env!("CARGO_PKG_VERSION")}}))
        .await?;
    let session = agent
        .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .await?;
    let session_id = session["sessionId"]
        .as_str()
        .context("the agent returned no sessionId")?
        .to_string();
    if let Some(mode) = &cli.mode {
        agent
            .call(
                "session/set_mode",
                json!({"sessionId": session_id, "modeId": mode}),
            )
            .await?;
    }
    let one_shot = cli.prompt.is_some();
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut running: Option<i64> = None;
    let mut pending_permission: Option<(Value, Value)> = None;
    let mut stdin_open = true;
    let mut exit_code = 0u8;
    if let Some(text) = &cli.prompt {
        running = Some(
            agent
                .start_request(
                    "session/prompt",
                    json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}),
                )
                .await?,
        );
    } else {
        eprint!("> ");
    }
    loop {
        if running.is_none() && (one_shot || !stdin_open) {
            break;
        }
        tokio::select! {
            line = stdin.next_line(), if stdin_open && (!one_shot || pending_permission.is_some()) => {
                let Some(line) = line? else {
                    stdin_open = false;
                    if let Some((id, params)) = pending_permission.take() {
                        agent.respond(&id, permission_answer(&params, None)).await?;
                    }
                    continue;
                };
                if let Some((id, params)) = pending_permission.take() {
                    match answer_kind(&line) {
                        Some(kind) => agent.respond(&id, permission_answer(&params, Some(kind))).await?,
                        None => {
                            eprint!("please answer y, a, n or N: ");
                            pending_permission = Some((id, params));
                        }
                    }
                    continue;
                }
                let line = line.trim();
                match line {
                    "" => {}
                    "/quit" | "/exit" => break,
                    "/cancel" => agent.notify("session/cancel", json!({"sessionId": session_id})).await?,
                    _ if line.starts_with("/mode ") => {
                        let reply = agent.request("session/set_mode", json!({"sessionId": session_id, "modeId": line[6..].trim()})).await?;
                        render::reply_status(&reply);
                    }
                    _ if line.starts_with("/model ") => {
                        let reply = agent.request("session/set_config_option", json!({"sessionId": session_id, "configId": "model", "value": line[7..].trim()})).await?;
                        render::reply_status(&reply);
                    }
                    text => {
                        let id = agent.start_request("session/prompt", json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})).await?;
                        running.get_or_insert(id);
                    }
                }
            }
            message = agent.next_message() => {
                let Some(message) = message else { bail!("the agent exited; its log:\n{}", agent.stderr()) };
                if message["method"] == "session/update" {
                    render::update(&message["params"]["update"]);
                } else if message.get("method").is_some() && message.get("id").is_some() {
                    let id = message["id"].clone();
                    let params = message["params"].clone();
                    if message["method"] != "session/request_permission" {
                        agent.respond_error(&id, -32601, "not supported by talaria-chat").await?;
                        continue;
                    }
                    let title = params["toolCall"]["title"].as_str().unwrap_or("a tool call").to_string();
                    match cli.approve {
                        Approve::Ask if stdin_open => {
                            eprint!("\n? Allow {title}? [y] once, [a] always, [n] no (Enter), [N] never: ");
                            pending_permission = Some((id, params));
                        }
                        Approve::Ask => agent.respond(&id, permission_answer(&params, Some("reject_once"))).await?,
                        Approve::Once => agent.respond(&id, permission_answer(&params, Some("allow_once"))).await?,
                        Approve::Always => agent.respond(&id, permission_answer(&params, Some("allow_always"))).await?,
                        Approve::Reject => agent.respond(&id, permission_answer(&params, Some("reject_once"))).await?,
                    }
                } else if message.get("id").and_then(Value::as_i64) == running {
                    println!();
                    if let Some(error) = message.get("error") {
                        eprintln!("! {}", error["message"].as_str().unwrap_or("the prompt failed"));
                        exit_code = 1;
                    } else if let Some(reason) = message["result"]["stopReason"].as_str().filter(|r| *r != "end_turn") {
                        eprintln!("({reason})");
                        if reason == "cancelled" && one_shot {
                            exit_code = 130;
                        }
                    }
                    running = None;
                    if !one_shot && stdin_open {
                        eprint!("> ");
                    }
                }
                let _ = std::io::stdout().flush();
            }
            _ = tokio::signal::ctrl_c() => {
                if running.is_some() {
                    agent.notify("session/cancel", json!({"sessionId": session_id})).await?;
                } else {
                    break;
                }
            }
        }
    }
    agent.close_stdin();
    let _ = agent.wait_exit(std::time::Duration::from_secs(5)).await;
    Ok(exit_code)
}
