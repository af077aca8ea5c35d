//! `talaria-chat`: a terminal client for ACP agents.
//!
//! The answer streams to stdout; tool cards, plans, thoughts, notices and permission questions
//! go to stderr, so `talaria-chat -p "…" > answer.txt` captures just the answer. Interactive
//! use reads prompts with a line editor (history, completion of slash commands); a line typed
//! while a turn runs steers it (`_session/steering`, where the agent speaks it: the message
//! enters the running turn) and `/queue TEXT` queues TEXT for after it. Ctrl-C cancels the running turn, answers a permission question
//! with cancel, clears the line at a prompt, and quits when pressed twice within a second.
//! The agent runs in a process group of its own, so the terminal's Ctrl-C never reaches it.
//! `--attach URL` follows (or, with `--control`, runs) a session of a `talaria serve` instead
//! (see `attached`).

// A terminal client writes to the terminal.
#![allow(clippy::print_stdout)]

mod attached;
mod auth;
mod catch_up;
mod commands;
mod input;
mod link;
mod markdown;
mod question;
mod render;
mod rewind;

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use serde_json::{Value, json};
use talaria_harness::{AgentProcess, WireFraming};

use input::{Input, Mode};
use render::Renderer;

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
    /// Approval mode to switch the session to (read-only, plan, ask, accept-edits, yolo).
    #[arg(long)]
    mode: Option<String>,
    /// Attach to a session running in a `talaria serve`: the web client's link
    /// (`http://HOST:PORT/#token=TOKEN&session=ID`), or `ws://HOST:PORT/acp` with `--session`.
    #[arg(long, value_name = "URL", conflicts_with_all = ["agent", "agent_args"])]
    attach: Option<String>,
    /// With `--attach`: the server's token (default: the link's, else
    /// `$TALARIA_HOME/serve.token`).
    #[arg(long, requires = "attach")]
    token: Option<String>,
    /// With `--attach`: the session (default: the link's).
    #[arg(long, requires = "attach")]
    session: Option<String>,
    /// With `--attach`: take control of the session (else follow it as an observer; `/control`
    /// takes control later).
    #[arg(long, requires = "attach")]
    control: bool,
}

/// The names the agent is installed under: `talaria`, and `talaria-agent` (the wheel's and
/// npm's name for the same binary).
const AGENT_NAMES: [&str; 2] = ["talaria", "talaria-agent"];

/// The agent: beside this program under either name, else the first on `PATH`, else
/// `talaria` (whose failure to start then says so).
fn default_agent() -> PathBuf {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(std::path::Path::to_path_buf));
    find_agent(beside.as_deref(), std::env::var_os("PATH").as_deref())
}

fn find_agent(beside: Option<&std::path::Path>, path: Option<&std::ffi::OsStr>) -> PathBuf {
    let is_program = |candidate: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let on_path: Vec<PathBuf> = path
        .map(|path| {
            std::env::split_paths(path)
                .filter(|dir| dir.is_absolute())
                .collect()
        })
        .unwrap_or_default();
    beside
        .into_iter()
        .chain(on_path.iter().map(PathBuf::as_path))
        .flat_map(|dir| AGENT_NAMES.iter().map(move |name| dir.join(name)))
        .find(|candidate| is_program(candidate))
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

/// The built-in commands, and with their arguments the session offers: `mode <id>` for
/// each mode, `model <name>` for each model choice.
fn built_in_completions(session: &Value) -> Vec<String> {
    let mut names: Vec<String> = commands::OWN.iter().map(|c| c.to_string()).collect();
    let modes = session["modes"]["availableModes"]
        .as_array()
        .into_iter()
        .flatten();
    names.extend(
        modes
            .filter_map(|m| m["id"].as_str())
            .map(|id| format!("mode {id}")),
    );
    let models = session["configOptions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["id"] == "model")
        .filter_map(|o| o["options"].as_array())
        .flatten();
    names.extend(
        models
            .filter_map(|m| m["value"].as_str())
            .map(|value| format!("model {value}")),
    );
    names
}

/// A second Ctrl-C within this time quits.
const DOUBLE_PRESS: Duration = Duration::from_secs(1);

const PROMPT: &str = "> ";

/// Exit codes: 0 answered (or a normal quit), 1 the one-shot turn failed, 2 the agent or
/// its session could not be started (missing program, configuration problem), 130 cancelled
/// (Ctrl-C).
const EXIT_SETUP: u8 = 2;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("talaria-chat: {e:#}");
            std::process::ExitCode::from(EXIT_SETUP)
        }
    }
}

/// Calls a set-up method; an error answer becomes the agent's message as text (its line
/// breaks kept, the JSON-RPC wrapping left out).
async fn setup_call(
    agent: &mut AgentProcess,
    method: &str,
    params: Value,
    what: &str,
) -> anyhow::Result<Value> {
    answer_of(agent.request(method, params).await?, what)
}

/// A response's result, or its error's message as text.
fn answer_of(response: Value, what: &str) -> anyhow::Result<Value> {
    if let Some(result) = response.get("result") {
        return Ok(result.clone());
    }
    let message = response["error"]["message"]
        .as_str()
        .map(|m| m.strip_prefix("Invalid params: ").unwrap_or(m).to_string())
        .unwrap_or_else(|| response.to_string());
    bail!("{what}:\n{message}")
}

/// The last meaningful line of the agent's log.
fn last_log_line(log: &str) -> String {
    log.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no log)")
        .trim()
        .to_string()
}

/// The session's state as the loop sees it.
struct Chat {
    agent: AgentProcess,
    session: String,
    /// The session's folder.
    cwd: PathBuf,
    renderer: Renderer,
    input: input::InputThread,
    commands: input::Commands,
    /// The built-in commands with their arguments (`mode ask`, `model NAME`), for completion.
    built_in: Vec<String>,
    one_shot: bool,
    approve: Approve,
    running: Option<i64>,
    /// Messages the user typed during a turn, sent after it (typed by hand: no bound needed).
    queued: VecDeque<String>,
    /// Whether the agent takes messages into a running turn (`_session/steering`).
    steering: bool,
    /// Steers sent and not answered yet, by request id.
    steers: std::collections::HashMap<i64, String>,
    /// Whether the agent rewinds (`_session/rewind`): `/rewind` is then talaria-chat's.
    rewinding: bool,
    /// The prompts as the agent named them, for `/rewind`.
    conversation: rewind::Conversation,
    /// Rewinds sent and not answered yet: how many prompts back, by request id.
    rewinds: std::collections::HashMap<i64, usize>,
    /// The permission question waiting for the user.
    pending: Option<question::Question>,
    stdin_open: bool,
    /// Whether the user was told that questions are declined because nobody can answer.
    told_unanswerable: bool,
    last_interrupt: Option<Instant>,
    exit_code: u8,
    quit: bool,
    /// The session's place in a `talaria serve`, with `--attach`.
    attach: Option<attached::Attachment>,
}

impl Chat {
    fn idle_prompt(&mut self) {
        if !self.one_shot && self.stdin_open {
            self.renderer.line_break();
            self.input.set(Mode::Prompt(PROMPT.into()));
        }
    }

    async fn send_prompt(&mut self, text: &str) -> anyhow::Result<()> {
        if self.refused_as_deleted("nothing is sent; start a new session to go on") {
            return Ok(());
        }
        self.input.set(Mode::Busy);
        self.conversation.on_sent(text);
        if let Some(attachment) = self.attach.as_mut() {
            attachment.sent = Some(text.to_string());
        }
        let id = self
            .agent
            .start_request(
                "session/prompt",
                json!({"sessionId": self.session, "prompt": [{"type": "text", "text": text}]}),
            )
            .await?;
        self.running = Some(id);
        Ok(())
    }

    async fn cancel(&mut self) -> anyhow::Result<()> {
        self.agent
            .notify("session/cancel", json!({"sessionId": self.session}))
            .await
    }

    /// Answers the waiting question with what was typed (a key, a word, Enter), or cancels
    /// it (`None`); a line that answers nothing asks again.
    async fn answer_question(&mut self, typed: Option<&str>) -> anyhow::Result<()> {
        let Some(question) = self.pending.take() else {
            self.input.set(Mode::Busy);
            return Ok(());
        };
        let answer = match typed.map(|typed| question.pick(typed)) {
            None => question::answer(None),
            Some(Some(choice)) => question::answer(choice),
            Some(None) => {
                self.input
                    .set(Mode::Keys(question.again(), question.keys()));
                self.pending = Some(question);
                return Ok(());
            }
        };
        self.agent.respond(&question.request, answer).await?;
        self.input.set(Mode::Busy);
        Ok(())
    }

    /// Whether a turn another client prompted runs in the session this client controls.
    fn others_turn(&self) -> bool {
        self.running.is_none()
            && self
                .attach
                .as_ref()
                .is_some_and(|a| a.controller && a.turn_running)
    }

    /// Ctrl-C: cancel the question or the turn; at a prompt, clear the line, or quit when
    /// pressed twice within a second.
    async fn interrupt(&mut self, now: Instant) -> anyhow::Result<()> {
        let twice = self
            .last_interrupt
            .is_some_and(|at| now.duration_since(at) < DOUBLE_PRESS);
        self.last_interrupt = Some(now);
        if twice {
            self.quit = true;
            self.exit_code = 130;
            return Ok(());
        }
        if self.pending.is_some() {
            self.renderer.status("(question cancelled)");
            self.answer_question(None).await?;
            return self.cancel().await;
        }
        if self.running.is_some() || self.others_turn() {
            self.queued.clear();
            return self.cancel().await;
        }
        self.renderer.status("(Ctrl-C again to quit)");
        self.idle_prompt();
        Ok(())
    }

    async fn on_line(&mut self, line: String) -> anyhow::Result<()> {
        if self.pending.is_some() {
            return self.answer_question(Some(&line)).await;
        }
        let line = line.trim();
        match line {
            "" => self.idle_prompt(),
            "/quit" | "/exit" => self.quit = true,
            "/help" => {
                self.renderer.help(self.attach.is_some());
                self.idle_prompt();
            }
            "/cancel" if self.others_turn() => self.cancel().await?,
            "/cancel" => {
                self.renderer.status("(nothing is running)");
                self.idle_prompt();
            }
            "/control" if self.attach.is_some() => self.take_control().await?,
            "/detach" if self.attach.is_some() => {
                self.detach().await?;
                self.quit = true;
            }
            _ if self.others_turn() && self.steering && !line.starts_with('/') => {
                self.steer(line.to_string()).await?;
            }
            _ if self.rewinding && (line == "/rewind" || line.starts_with("/rewind ")) => {
                self.rewind(line).await?;
            }
            _ if line.starts_with("/mode ") || line.starts_with("/model ") => {
                let reply = if let Some(mode) = line.strip_prefix("/mode ") {
                    self.agent
                        .request(
                            "session/set_mode",
                            json!({"sessionId": self.session, "modeId": mode.trim()}),
                        )
                        .await?
                } else {
                    let model = line.strip_prefix("/model ").unwrap_or_default().trim();
                    self.agent
                        .request(
                            "session/set_config_option",
                            json!({"sessionId": self.session, "configId": "model", "value": model}),
                        )
                        .await?
                };
                if catch_up::is_detached(&reply["error"]) {
                    return self.refused_behind(line).await;
                }
                render::reply_status(&mut self.renderer, &reply);
                self.idle_prompt();
            }
            text => self.other_line(text).await?,
        }
        Ok(())
    }

    /// `/rewind`: lists the prompts, or goes back before one (`/rewind N [files] [force]`).
    async fn rewind(&mut self, line: &str) -> anyhow::Result<()> {
        match rewind::parse(line) {
            Ok(rewind::Asked::List) => {
                let listing = self.conversation.listing();
                if listing.is_empty() {
                    self.renderer.status("(no prompt to rewind to yet)");
                }
                for entry in listing {
                    self.renderer.status(&entry);
                }
                self.renderer
                    .status("(/rewind N [files] [force]: back before prompt N, its files too)");
            }
            Ok(rewind::Asked::Rewind { back, files, force }) => {
                match self.conversation.request(&self.session, back, files, force) {
                    Ok(params) => {
                        let id = self.agent.start_request("_session/rewind", params).await?;
                        self.rewinds.insert(id, back);
                        self.input.set(Mode::Busy);
                        return Ok(());
                    }
                    Err(why) => self.renderer.status(&format!("({why})")),
                }
            }
            Err(usage) => self.renderer.status(&format!("({usage})")),
        }
        self.idle_prompt();
        Ok(())
    }

    /// Sends `text` into the running turn; the agent shows where it entered.
    async fn steer(&mut self, text: String) -> anyhow::Result<()> {
        let id = self
            .agent
            .start_request(
                "_session/steering",
                json!({
                    "sessionId": self.session,
                    "prompt": [{"type": "text", "text": text}],
                    // A turn that ended meanwhile: the line becomes the next prompt here.
                    "_meta": {"steering": {"idleBehavior": "promptRequired"}},
                }),
            )
            .await?;
        self.steers.insert(id, text);
        Ok(())
    }

    /// What became of a steer: taken (the agent shows it), or, when the turn had ended, the
    /// next prompt; a refused one is queued.
    async fn steer_answered(&mut self, text: String, message: &Value) -> anyhow::Result<()> {
        if catch_up::is_detached(&message["error"]) {
            return self.refused_behind(&text).await;
        }
        match message["result"]["outcome"].as_str() {
            Some("injected") => Ok(()),
            Some("promptRequired") if self.running.is_none() && self.queued.is_empty() => {
                self.renderer.status(&format!("> {text}"));
                self.send_prompt(&text).await
            }
            _ => {
                if let Some(error) = message["error"]["message"].as_str() {
                    self.renderer
                        .status(&format!("(not steered: {error}; queued instead)"));
                }
                self.queued.push_back(text);
                if self.running.is_none() {
                    self.next_queued().await?;
                }
                Ok(())
            }
        }
    }

    /// Sends the next queued line, or shows the prompt.
    async fn next_queued(&mut self) -> anyhow::Result<()> {
        match self.queued.pop_front() {
            // A command typed during the turn is talaria-chat's own when it names one.
            // A command typed during the turn is served as if typed now.
            Some(next) => {
                self.renderer.status(&format!("> {next}"));
                self.on_line(next).await
            }
            None => {
                self.idle_prompt();
                Ok(())
            }
        }
    }

    /// A line typed while a turn runs: it steers the turn (`/queue TEXT` waits for it
    /// instead; `/cancel` cancels it).
    async fn on_typed(&mut self, line: String) -> anyhow::Result<()> {
        let line = line.trim().to_string();
        if line.is_empty() {
            return Ok(());
        }
        if self.pending.is_some() {
            return self.on_line(line).await;
        }
        if self.attach.is_some() && matches!(line.as_str(), "/control" | "/detach") {
            return self.on_line(line).await;
        }
        if line == "/cancel" {
            self.queued.clear();
            return self.cancel().await;
        }
        if self.running.is_none() && self.queued.is_empty() {
            return self.on_line(line).await;
        }
        let queue = line
            .strip_prefix("/queue ")
            .map(|rest| rest.trim().to_string());
        match queue {
            Some(text) if !text.is_empty() => {
                self.renderer.status(&format!("(queued: {text})"));
                self.queued.push_back(text);
            }
            Some(_) => {}
            None if self.unknown_while_running(&line) => {}
            None if self.steering && self.running.is_some() && !line.starts_with('/') => {
                self.steer(line).await?;
            }
            None => {
                self.renderer.status(&format!("(queued: {line})"));
                self.queued.push_back(line);
            }
        }
        Ok(())
    }

    async fn on_message(&mut self, message: Value) -> anyhow::Result<()> {
        if self.attached_message(&message) {
            return Ok(());
        }
        if self.answers_catch_up(&message) {
            return self.caught_up(&message).await;
        }
        if message["method"] == "session/update" {
            // Attached again after falling behind, what was printed is not printed again.
            let Some(update) = self.unseen(&message["params"]["update"]) else {
                return Ok(());
            };
            self.renderer.update(&update);
            self.attached_update(&update);
            self.conversation.on_update(&update);
            if update["sessionUpdate"] == "available_commands_update" {
                let mut names = self.built_in.clone();
                let theirs = self.renderer.commands.iter().map(|(n, _)| n.clone());
                names.extend(theirs.filter(|name| !commands::OWN.contains(&name.as_str())));
                *talaria_util::lock(&self.commands) = names;
            }
            return self.after_update(&update).await;
        }
        if message.get("method").is_some() && message.get("id").is_some() {
            return self.on_request(message).await;
        }
        if let Some(text) = message
            .get("id")
            .and_then(Value::as_i64)
            .and_then(|id| self.steers.remove(&id))
        {
            return self.steer_answered(text, &message).await;
        }
        if let Some(back) = message
            .get("id")
            .and_then(Value::as_i64)
            .and_then(|id| self.rewinds.remove(&id))
        {
            let taken = self.conversation.taken(back);
            for line in rewind::told(&message, &taken, &self.cwd) {
                self.renderer.status(&line);
            }
            if message["result"]["rewound"] == true {
                self.conversation.rewound(back);
            }
            self.idle_prompt();
            return Ok(());
        }
        if message.get("id").and_then(Value::as_i64) == self.running {
            self.prompt_answered(&message).await?;
        }
        Ok(())
    }

    /// This client's prompt was answered: how its turn ended, or why it was refused; then
    /// the next queued line.
    async fn prompt_answered(&mut self, message: &Value) -> anyhow::Result<()> {
        self.running = None;
        self.conversation.on_answered(message);
        self.renderer.line_break();
        if catch_up::is_detached(&message["error"]) {
            let sent = self.attach.as_mut().and_then(|a| a.sent.take());
            return self.refused_behind(&sent.unwrap_or_default()).await;
        }
        if let Some(error) = message.get("error") {
            self.renderer
                .error(error["message"].as_str().unwrap_or("the prompt failed"));
            let hint = self.refused_hint(error);
            if let Some(hint) = hint {
                self.renderer.status(hint);
            }
            // Attached, an observer's refused prompt is told; the chat goes on.
            if self.one_shot || hint.is_none() {
                self.exit_code = 1;
            }
        } else if let Some(reason) = message["result"]["stopReason"]
            .as_str()
            .filter(|r| *r != "end_turn")
        {
            self.renderer.status(&format!("({reason})"));
            if reason == "cancelled" && self.one_shot {
                self.exit_code = 130;
            }
        }
        self.next_queued().await
    }

    async fn on_request(&mut self, message: Value) -> anyhow::Result<()> {
        let id = message["id"].clone();
        let params = message["params"].clone();
        if message["method"] == "elicitation/create" && params["mode"] == "url" {
            return self.open_address(&id, &params).await;
        }
        if message["method"] != "session/request_permission" {
            return self
                .agent
                .respond_error(&id, -32601, "not supported by talaria-chat")
                .await;
        }
        if self.attach.is_some() && matches!(self.approve, Approve::Ask) && !self.stdin_open {
            // Attached, a question nobody here can answer is left to the other clients.
            let title = self.renderer.question_title(&params);
            self.renderer.status(&format!(
                "(a question about {title} waits for another client's answer)"
            ));
            return Ok(());
        }
        let kind = match self.approve {
            Approve::Ask if self.stdin_open => None,
            Approve::Ask | Approve::Reject => Some("reject_once"),
            Approve::Once => Some("allow_once"),
            Approve::Always => Some("allow_always"),
        };
        if matches!(self.approve, Approve::Ask) && !self.stdin_open && !self.told_unanswerable {
            self.told_unanswerable = true;
            let title = self.renderer.question_title(&params);
            self.renderer.status(&format!(
                "! Nobody could be asked to allow {title}: standard input is closed, so it and \
                 every later question are declined. Pass --approve once (or always) to allow \
                 calls without asking, --approve reject to decline them."
            ));
        }
        if let Some(kind) = kind {
            return self
                .agent
                .respond(&id, permission_answer(&params, Some(kind)))
                .await;
        }
        let title = self.renderer.question_title(&params);
        if let Some(diff) = self.renderer.question_diff(&params) {
            self.renderer.status(&diff);
        }
        self.renderer.line_break();
        let question = question::Question::new(id, &params);
        self.input
            .set(Mode::Keys(question.text(&title), question.keys()));
        self.pending = Some(question);
        Ok(())
    }

    /// A URL elicitation (an MCP server's sign-in): the address is printed for the user to
    /// open, and the agent told it was shown.
    async fn open_address(&mut self, id: &Value, params: &Value) -> anyhow::Result<()> {
        let message = params["message"]
            .as_str()
            .unwrap_or("The agent asks you to open");
        let url = params["url"].as_str().unwrap_or_default();
        self.renderer.status(&format!(
            "! {message}\n  Open this address in your browser: {url}"
        ));
        self.agent.respond(id, json!({"action": "accept"})).await
    }

    async fn on_input(&mut self, input: Option<Input>) -> anyhow::Result<()> {
        match input {
            Some(Input::Line(line)) => self.on_line(line).await,
            Some(Input::Typed(line)) => {
                let handled = self.on_typed(line).await;
                self.input.ack();
                handled
            }
            Some(Input::Interrupted(at)) => self.interrupt(at).await,
            Some(Input::Eof) | None => {
                self.stdin_open = false;
                self.queued.clear();
                if self.pending.is_some() {
                    self.answer_question(None).await?;
                }
                Ok(())
            }
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let (mut agent, cwd, session, extensions, attach) = match &cli.attach {
        Some(link) => attach_session(&cli, link).await?,
        None => {
            let (agent, cwd, session, extensions) = start_session(&cli).await?;
            (agent, cwd, session, extensions, None)
        }
    };
    let session_id = session["sessionId"]
        .as_str()
        .context("the agent returned no sessionId")?
        .to_string();
    if let Some(mode) = &cli.mode {
        setup_call(
            &mut agent,
            "session/set_mode",
            json!({"sessionId": session_id, "modeId": mode}),
            "could not set the mode",
        )
        .await?;
    }
    let one_shot = cli.prompt.is_some();
    let mut renderer = Renderer::new();
    if !one_shot {
        show_banner(&mut renderer, &cli, &session, &cwd, &session_id);
    }
    if let Some(attach) = &attach {
        attached::banner(&mut renderer, attach, &session);
    }
    let built_in = built_in_completions(&session);
    let commands: input::Commands = Arc::new(Mutex::new(built_in.clone()));
    // Attached, the prompt waits for the session so far (see `show_history`).
    let initial = if one_shot || attach.is_some() {
        Mode::Busy
    } else {
        Mode::Prompt(PROMPT.into())
    };
    let input = input::start(Mode::Busy, commands.clone());
    input.set(initial);
    let mut chat = Chat {
        agent,
        session: session_id,
        cwd: cwd.clone(),
        renderer,
        input,
        commands,
        built_in,
        one_shot,
        approve: cli.approve,
        running: None,
        queued: VecDeque::new(),
        steering: extensions.steering,
        steers: std::collections::HashMap::new(),
        rewinding: extensions.rewind,
        conversation: rewind::Conversation::default(),
        rewinds: std::collections::HashMap::new(),
        pending: None,
        stdin_open: true,
        told_unanswerable: false,
        last_interrupt: None,
        exit_code: 0,
        quit: false,
        attach,
    };
    if chat.attach.is_some() {
        chat.show_history().await?;
    }
    if let Some(text) = &cli.prompt {
        chat.send_prompt(text).await?;
    }
    chat.run_loop().await?;
    Ok(chat.exit_code)
}

/// What the agent speaks beyond the protocol: steering, rewind.
#[derive(Debug, Clone, Copy)]
struct Extensions {
    steering: bool,
    rewind: bool,
}

impl Extensions {
    fn of(initialized: &Value) -> Self {
        Self {
            steering: initialized["_meta"]["steering"]["supported"] == json!(true),
            rewind: initialized["_meta"]["sessionRewind"]["supported"] == json!(true),
        }
    }
}

/// talaria-chat's `initialize`. `auth.terminal`: the agent offers its terminal set-up
/// (`talaria setup`), which a missing key's message then names.
fn initialize_params() -> Value {
    json!({"protocolVersion": 1, "clientCapabilities": {"session": {"notices": {}}, "elicitation": {"url": {}}, "auth": {"terminal": true}}, "clientInfo": {"name": "talaria-chat", "version": env!("CARGO_PKG_VERSION")}})
}

/// What a chat runs on: the agent, the directory, the session's answer (`session/new`'s, or
/// `_session/attach`'s), the agent's extensions and, attached, the attachment.
type Started = (
    AgentProcess,
    PathBuf,
    Value,
    Extensions,
    Option<attached::Attachment>,
);

/// `--attach`: connects to the `talaria serve` the link names and attaches to its session.
async fn attach_session(cli: &Cli, link_text: &str) -> anyhow::Result<Started> {
    let given = link::Given {
        token: cli.token.as_deref(),
        session: cli.session.as_deref(),
    };
    let target = link::target(link_text, given)?;
    let (agent, initialized, session) =
        attached::open(&target, cli.control, initialize_params()).await?;
    let attachment = attached::Attachment::new(&target.socket, &session)?;
    let cwd = match &cli.cwd {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::current_dir()?,
    };
    Ok((
        agent,
        cwd,
        session,
        Extensions::of(&initialized),
        Some(attachment),
    ))
}

/// Starts the agent, initializes it and opens a session in the working directory; returns
/// the agent, the directory, the `session/new` answer and whether the agent takes steers.
async fn start_session(cli: &Cli) -> anyhow::Result<(AgentProcess, PathBuf, Value, Extensions)> {
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
    let initialize = initialize_params();
    let initialized = match setup_call(
        &mut agent,
        "initialize",
        initialize,
        "the agent did not start",
    )
    .await
    {
        Ok(answer) => answer,
        Err(e) => bail!("{e:#}\n{}", last_log_line(&agent.stderr())),
    };
    let extensions = Extensions::of(&initialized);
    let response = agent
        .request("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .await?;
    if let Some(error) = response.get("error").filter(|e| auth::is_auth_required(e)) {
        let agent = match &cli.agent {
            Some(path) => path.display().to_string(),
            None => auth::as_typed(&agent_path, std::env::var_os("PATH").as_deref()),
        };
        bail!(
            "could not start a session: {}",
            auth::short_text(error, &initialized, &agent)
        );
    }
    let session = answer_of(response, "could not start a session")?;
    Ok((agent, cwd, session, extensions))
}

/// The banner: model, mode, directory, session and (Talaria's) sandbox.
fn show_banner(
    renderer: &mut Renderer,
    cli: &Cli,
    session: &Value,
    cwd: &std::path::Path,
    session_id: &str,
) {
    let model = session["configOptions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["id"] == "model")
        .and_then(|o| o["currentValue"].as_str())
        .unwrap_or("?")
        .to_string();
    let mode = cli
        .mode
        .clone()
        .or_else(|| {
            session["modes"]["currentModeId"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into());
    // Talaria says whether its commands run in the OS sandbox; other agents do not.
    let sandbox = session["_meta"]["talaria"]["sandbox"].as_str();
    renderer.banner(
        &model,
        &mode,
        &cwd.display().to_string(),
        session_id,
        sandbox,
    );
}

impl Chat {
    /// Serves input, the agent's messages and Ctrl-C until the chat ends; then stops the
    /// agent.
    async fn run_loop(&mut self) -> anyhow::Result<()> {
        loop {
            // Attached, the session is followed after the input ends.
            let done_typing = self.one_shot || (!self.stdin_open && self.attach.is_none());
            if self.quit || (self.running.is_none() && done_typing) {
                break;
            }
            tokio::select! {
                input = self.input.lines.recv(), if self.stdin_open => self.on_input(input).await?,
                message = self.agent.next_message() => {
                    let Some(message) = message else {
                        let said = last_log_line(&self.agent.stderr());
                        match &self.attach {
                            Some(attach) => bail!("{said} ({})", attach.socket),
                            None => bail!("the agent exited unexpectedly: {said}"),
                        }
                    };
                    self.on_message(message).await?;
                    let _ = std::io::stdout().flush();
                }
                _ = tokio::signal::ctrl_c() => self.interrupt(Instant::now()).await?,
            }
        }
        self.input.set(Mode::Stop);
        self.renderer.line_break();
        if let Err(e) = self.detach().await {
            self.renderer.error(&format!("{e:#}"));
        }
        self.agent.close_stdin();
        let _ = self.agent.wait_exit(Duration::from_secs(5)).await;
        Ok(())
    }
}

#[cfg(test)]
mod agent_tests {
    use super::*;

    #[test]
    fn the_agent_is_found_under_either_name_beside_the_chat_or_on_the_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let (beside, on_path) = (dir.path().join("beside"), dir.path().join("bin"));
        for folder in [&beside, &on_path] {
            std::fs::create_dir_all(folder).expect("mkdir");
        }
        let make = |path: &std::path::Path| {
            std::fs::write(path, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        let path = on_path.clone().into_os_string();
        assert_eq!(
            find_agent(Some(&beside), Some(&path)),
            PathBuf::from("talaria")
        );
        make(&on_path.join("talaria-agent"));
        assert_eq!(
            find_agent(Some(&beside), Some(&path)),
            on_path.join("talaria-agent")
        );
        make(&beside.join("talaria-agent"));
        assert_eq!(
            find_agent(Some(&beside), Some(&path)),
            beside.join("talaria-agent")
        );
        make(&beside.join("talaria"));
        assert_eq!(
            find_agent(Some(&beside), Some(&path)),
            beside.join("talaria")
        );
        // A relative PATH entry is never searched.
        let relative = std::ffi::OsString::from("bin");
        assert_eq!(find_agent(None, Some(&relative)), PathBuf::from("talaria"));
    }
}
