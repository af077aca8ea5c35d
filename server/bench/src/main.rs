//! `talaria-bench`: start-up, latency, memory and throughput figures for an ACP agent binary
//! (by default this workspace's release `talaria`) against the in-process mock LLM.
//!
//! Usage: `talaria-bench [--agent PATH] [--iterations N]`. Prints one line per figure with its
//! target. Figures are medians over the iterations (minimum in brackets).

/// Writes one line of the report to this program's standard output (a report, not a
/// protocol stream: the agent it measures is another process).
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod agents;
mod batch;
mod checkpoints;
mod compression;
mod fresh_home;
mod hot_code;
mod locked_turns;
mod replay;
mod sandbox;
mod serve;
mod sessions;
mod shared_store;
mod steering;
mod waiting;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use talaria_harness::{AgentProcess, MockLlm, MockReply, WireFraming};

struct Options {
    agent: PathBuf,
    /// The model API the agent speaks to the mock: the provider it is started with.
    api: ModelApi,
    iterations: usize,
    /// The PostgreSQL store's figures: a database URL, or `local` for a throwaway cluster
    /// (the agent must be built with `--features postgres`).
    postgres: Option<String>,
    /// Only the turn's figures (start, session/new, a turn, a 10,000-delta stream).
    turn_only: bool,
    /// Only the checkpoints' figures (no agent needed).
    checkpoints_only: bool,
    sandbox_only: bool,
    /// Only `talaria serve`'s figures.
    serve_only: bool,
    /// Only `talaria serve`'s streaming figures (for profiling the transport).
    serve_streaming_only: bool,
    /// Only the delivery to 1, 10 and 100 clients attached to one session.
    attach_only: bool,
    /// Only `talaria batch`'s figures.
    batch_only: bool,
    /// Only the answers of 40 sessions through a long lock.
    locked_turns_only: bool,
    /// Only the first against the second `session/new` of fresh homes.
    fresh_home_only: bool,
    agents_only: bool,
}

fn options() -> anyhow::Result<Options> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let mut options = Options {
        agent: target.join("release").join("talaria"),
        api: ModelApi::Chat,
        iterations: 20,
        postgres: None,
        turn_only: false,
        checkpoints_only: false,
        sandbox_only: false,
        serve_only: false,
        serve_streaming_only: false,
        attach_only: false,
        batch_only: false,
        locked_turns_only: false,
        fresh_home_only: false,
        agents_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--agent" => options.agent = args.next().context("--agent needs a path")?.into(),
            "--api" => options.api = ModelApi::named(&args.next().unwrap_or_default())?,
            "--iterations" => {
                options.iterations = args
                    .next()
                    .context("--iterations needs a number")?
                    .parse()?
            }
            "--postgres" => {
                options.postgres = Some(args.next().context("--postgres needs a URL")?);
            }
            "--turn-only" => options.turn_only = true,
            "--checkpoints-only" => options.checkpoints_only = true,
            "--sandbox-only" => options.sandbox_only = true,
            "--serve-only" => options.serve_only = true,
            "--serve-streaming-only" => {
                options.serve_only = true;
                options.serve_streaming_only = true;
            }
            "--attach-only" => {
                options.serve_only = true;
                options.attach_only = true;
            }
            "--batch-only" => options.batch_only = true,
            "--locked-turns-only" => options.locked_turns_only = true,
            "--fresh-home-only" => options.fresh_home_only = true,
            "--agents-only" => options.agents_only = true,
            "-h" | "--help" => {
                report!(
                    "usage: talaria-bench [--agent PATH] [--api chat|messages|responses] [--iterations N] [--postgres URL|local] [--turn-only] [--checkpoints-only] [--sandbox-only] [--serve-only] [--serve-streaming-only] [--attach-only] [--batch-only] [--locked-turns-only] [--fresh-home-only] [--agents-only]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    if !options.agent.exists() && !options.checkpoints_only {
        bail!(
            "{} does not exist: run `cargo build --release -p talaria-server` first",
            options.agent.display()
        );
    }
    Ok(options)
}

/// The three model APIs the providers speak, each answered by the mock.
#[derive(Clone, Copy)]
enum ModelApi {
    /// OpenAI chat completions (the `openai` provider).
    Chat,
    /// Anthropic Messages (the `anthropic` provider).
    Messages,
    /// OpenAI Responses (the `openai-responses` provider).
    Responses,
}

impl ModelApi {
    fn named(name: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "chat" => Self::Chat,
            "messages" => Self::Messages,
            "responses" => Self::Responses,
            other => bail!("--api takes chat, messages or responses, not {other:?}"),
        })
    }

    fn provider(self) -> &'static str {
        match self {
            Self::Chat => "openai",
            Self::Messages => "anthropic",
            Self::Responses => "openai-responses",
        }
    }
}

struct Env {
    mock: MockLlm,
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
    api: ModelApi,
}

impl Env {
    fn vars(&self) -> Vec<(String, String)> {
        let mut vars = self.common_vars();
        vars.push(("TALARIA_PROVIDER".into(), self.api.provider().into()));
        if let ModelApi::Messages = self.api {
            vars.push(("ANTHROPIC_BASE_URL".into(), self.mock.base_url()));
            vars.push(("ANTHROPIC_API_KEY".into(), "bench".into()));
        }
        vars
    }

    fn common_vars(&self) -> Vec<(String, String)> {
        vec![
            ("HOME".into(), self.home.path().display().to_string()),
            (
                "TALARIA_HOME".into(),
                self.home.path().join("t").display().to_string(),
            ),
            ("OPENAI_BASE_URL".into(), self.mock.base_url()),
            ("OPENAI_API_KEY".into(), "bench".into()),
            ("TALARIA_MODEL".into(), "mock-model".into()),
            ("TALARIA_LOG".into(), "warn".into()),
            // Titles would add a model call to each measured session.
            ("TALARIA_TITLES".into(), "off".into()),
        ]
    }

    /// The variables with `TALARIA_HOME` at `home` instead.
    fn vars_with_home(&self, home: &std::path::Path) -> Vec<(String, String)> {
        let mut vars = self.vars();
        for (key, value) in &mut vars {
            if key == "TALARIA_HOME" {
                *value = home.display().to_string();
            }
        }
        vars
    }

    /// Scripts an answer of `pieces` deltas of `piece_bytes` each (a space ends each).
    fn push_answer(&self, piece_bytes: usize, pieces: usize) {
        let piece = "x".repeat(piece_bytes.saturating_sub(1)) + " ";
        self.mock.push(MockReply::Text {
            chunks: vec![piece; pieces],
            reasoning: Vec::new(),
            delay_ms: 0,
            usage: None,
            finish_reason: None,
        });
    }
}

fn median(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    (values[values.len() / 2], values[0])
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    proc_kib(&format!("/proc/{pid}/status"), "VmHWM")
}

/// A `kB` figure of a `/proc` file's line `name:`.
fn proc_kib(path: &str, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(':'))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// What of the agent's memory is its own: anonymous pages (heap, stacks; `RssAnon`) and the
/// proportional share of everything it maps (`Pss`, from `smaps_rollup`), in MB. Peak RSS
/// (`VmHWM`) also counts the binary's file-backed code pages, shared and dropped under
/// pressure.
struct PrivateMemory {
    anon_mb: f64,
    pss_mb: f64,
}

fn private_memory(pid: u32) -> Option<PrivateMemory> {
    let anon = proc_kib(&format!("/proc/{pid}/status"), "RssAnon")?;
    let pss = proc_kib(&format!("/proc/{pid}/smaps_rollup"), "Pss")?;
    Some(PrivateMemory {
        anon_mb: anon as f64 / 1024.0,
        pss_mb: pss as f64 / 1024.0,
    })
}

struct StreamFigures {
    first_to_last: Duration,
    prompt_to_end: Duration,
    agent_cpu_ms: Option<f64>,
    peak_rss_mb: Option<f64>,
    private: Option<PrivateMemory>,
}

async fn stream_throughput(
    agent: &std::path::Path,
    vars: &[(String, String)],
    cwd: &std::path::Path,
    deltas: usize,
) -> anyhow::Result<StreamFigures> {
    use tokio::io::AsyncWriteExt;
    let RawSession {
        mut child,
        pid,
        mut stdin,
        mut lines,
        session,
    } = RawSession::start(agent, vars, cwd).await?;
    let send = |value: serde_json::Value| format!("{value}\n");
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "stream"}]}});
    let sent = Instant::now();
    stdin.write_all(send(prompt).as_bytes()).await?;
    let (mut first, mut last, mut count) = (None, None, 0usize);
    loop {
        let line = lines
            .next_line()
            .await?
            .context("agent closed mid-stream")?;
        if line.contains("\"agent_message_chunk\"") {
            count += 1;
            let now = Instant::now();
            first.get_or_insert(now);
            last = Some(now);
        } else if line.contains("\"stopReason\"") {
            break;
        }
    }
    let prompt_to_end = sent.elapsed();
    if count != deltas {
        bail!("expected {deltas} chunks, got {count}");
    }
    let figures = StreamFigures {
        first_to_last: last.zip(first).map(|(l, f)| l - f).unwrap_or_default(),
        prompt_to_end,
        agent_cpu_ms: cpu_ms(pid),
        peak_rss_mb: peak_rss_kib(pid).map(|k| k as f64 / 1024.0),
        private: private_memory(pid),
    };
    drop(stdin);
    child.wait().await?;
    Ok(figures)
}

/// `talaria acp` started with piped stdio, its output read as raw lines.
struct RawAgent {
    child: tokio::process::Child,
    pid: u32,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl RawAgent {
    fn spawn(agent: &std::path::Path, vars: &[(String, String)]) -> anyhow::Result<Self> {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let mut child = tokio::process::Command::new(agent)
            .arg("acp")
            .env_clear()
            .envs(vars.iter().cloned())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().context("pid")?;
        let stdin = child.stdin.take().context("stdin")?;
        let lines =
            BufReader::with_capacity(1 << 20, child.stdout.take().context("stdout")?).lines();
        Ok(Self {
            child,
            pid,
            stdin,
            lines,
        })
    }
}

/// An agent started with one session, read as raw lines (so the client does not compete with
/// the agent for the cores).
struct RawSession {
    child: tokio::process::Child,
    pid: u32,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    session: String,
}

impl RawSession {
    async fn start(
        agent: &std::path::Path,
        vars: &[(String, String)],
        cwd: &std::path::Path,
    ) -> anyhow::Result<Self> {
        use tokio::io::AsyncWriteExt;
        let RawAgent {
            child,
            pid,
            mut stdin,
            mut lines,
        } = RawAgent::spawn(agent, vars)?;
        let send = |value: serde_json::Value| format!("{value}\n");
        stdin.write_all(send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})).as_bytes()).await?;
        stdin.write_all(send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})).as_bytes()).await?;
        loop {
            let line = lines.next_line().await?.context("agent closed")?;
            let value: serde_json::Value = serde_json::from_str(&line)?;
            if value["id"] == 2 {
                let session = value["result"]["sessionId"]
                    .as_str()
                    .context("no session")?
                    .to_string();
                return Ok(Self {
                    child,
                    pid,
                    stdin,
                    lines,
                    session,
                });
            }
        }
    }
}

/// How long a prompt whose answer is a slowly streamed call (held back from the chat) leaves
/// the client without any update.
async fn held_back_first_progress(
    agent: &std::path::Path,
    vars: &[(String, String)],
    cwd: &std::path::Path,
) -> anyhow::Result<Duration> {
    use tokio::io::AsyncWriteExt;
    let RawSession {
        mut child,
        mut stdin,
        mut lines,
        session,
        ..
    } = RawSession::start(agent, vars, cwd).await?;
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "read it"}]}});
    let sent = Instant::now();
    stdin.write_all(format!("{prompt}\n").as_bytes()).await?;
    let mut first = None;
    loop {
        let line = lines.next_line().await?.context("agent closed")?;
        if first.is_none()
            && line.contains("\"session/update\"")
            && !line.contains("available_commands_update")
        {
            first = Some(sent.elapsed());
        }
        if line.contains("\"stopReason\"") {
            break;
        }
    }
    drop(stdin);
    child.wait().await?;
    first.context("no update before the end of the turn")
}

/// User plus system CPU time of a live process, in milliseconds.
fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 10.0)
}

/// The sandbox's cost per command, and for a write-heavy command.
fn print_sandbox_figures(options: &Options, home: &std::path::Path, cwd: &std::path::Path) {
    let cost = sandbox::measure(&options.agent, home, cwd, options.iterations.max(50));
    report!(
        "command spawn, sandboxed          {:8.2} ms  (min {:.2}; direct {:.2}, min {:.2})   target: + <= 5 ms",
        cost.sandboxed.0,
        cost.sandboxed.1,
        cost.direct.0,
        cost.direct.1
    );
    report!(
        "  sandbox cost per command        {:8.2} ms  (namespaces, Landlock, filters, limits)",
        cost.sandboxed.0 - cost.direct.0
    );
    report!(
        "  without namespaces              {:8.2} ms  (min {:.2}; Landlock, filters, limits)",
        cost.without_namespaces.0 - cost.direct.0,
        cost.without_namespaces.1 - cost.direct.1
    );
    report!(
        "  {} file creations, sandboxed    {:8.2} ms  (min {:.2}; direct {:.2}: each passes the watcher)",
        sandbox::WRITES,
        cost.writes_sandboxed.0,
        cost.writes_sandboxed.1,
        cost.writes_direct.0
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = options()?;
    if options.checkpoints_only {
        return print_checkpoint_figures(options.iterations.max(20));
    }
    let env = Env {
        api: options.api,
        mock: MockLlm::start(Vec::new()).await?,
        home: tempfile::tempdir()?,
        workspace: tempfile::tempdir()?,
    };
    let cwd = env.workspace.path().to_path_buf();
    if options.sandbox_only {
        print_sandbox_figures(&options, env.home.path(), &cwd);
        return Ok(());
    }
    if options.serve_only {
        return print_serve_figures(&options, &env, &cwd).await;
    }
    if options.batch_only {
        return print_batch_figures(&options, &env).await;
    }
    if options.locked_turns_only {
        return print_locked_turns(&options, &env).await;
    }
    if options.fresh_home_only {
        return print_fresh_home_figures(&options, &env).await;
    }
    if options.agents_only {
        return print_agent_figures(&options, &env).await;
    }
    let mut samples = Samples::default();
    for _ in 0..options.iterations {
        one_run(&options, &env, &cwd, &mut samples).await?;
    }
    // Throughput: one 10,000-delta stream, read as raw lines (no JSON parsing on our side, so
    // the client does not compete with the agent for the machine's cores).
    let deltas = 10_000;
    let chunks: Vec<String> = (0..deltas).map(|i| format!("tok{i} ")).collect();
    env.mock.push(MockReply::Text {
        chunks,
        reasoning: Vec::new(),
        delay_ms: 0,
        usage: None,
        finish_reason: None,
    });
    let stream = stream_throughput(&options.agent, &env.vars(), &cwd, deltas).await?;

    print_turn_figures(&options, &mut samples, &stream, deltas);
    if options.turn_only {
        return Ok(());
    }
    print_fresh_home_figures(&options, &env).await?;
    print_answer_shape_figures(&options, &env, &cwd).await?;
    print_locked_turns(&options, &env).await?;
    print_session_figures(&options, &env).await?;
    print_sandbox_figures(&options, env.home.path(), &cwd);
    print_steering_figures(&options, &env, &cwd).await?;
    print_checkpoint_figures(options.iterations.max(20))?;
    print_serve_figures(&options, &env, &cwd).await?;
    print_batch_figures(&options, &env).await?;
    let replay = replay::measure(&options.agent, &env.mock, &env.vars(), &cwd).await?;
    report!(
        "replay of a 50-turn session       {:8.1} ms  (recorded against the mock: {:.1} ms)",
        ms(replay.replayed),
        ms(replay.recorded)
    );
    let compression = compression::measure(options.iterations).await;
    report!(
        "compaction pass, {}k-token record {:8.2} ms  (summariser mocked; saved {:.0} %)   target <= 20 ms",
        compression.history_tokens / 1000,
        ms(compression.pass),
        compression.saved_share * 100.0
    );
    report!(
        "  with a summary of the middle      {:8.2} ms  (as /compact does)",
        ms(compression.summarising_pass)
    );
    report!(
        "token accounting of a new turn    {:8.3} ms  (on that history)   target <= 1 ms",
        ms(compression.new_turn)
    );
    Ok(())
}

/// The first `session/new` of fresh homes against the second (at least 20 homes).
async fn print_fresh_home_figures(options: &Options, env: &Env) -> anyhow::Result<()> {
    let figures = fresh_home::measure(&options.agent, env, options.iterations.max(20)).await?;
    let (first, first_min) = figures.first;
    let (second, second_min) = figures.second;
    let (difference, _) = figures.difference;
    report!(
        "first session/new, fresh home     {first:8.2} ms  (min {first_min:.2}; the second {second:.2}, min {second_min:.2}; {} homes)",
        figures.runs
    );
    report!("  first less second, per home     {difference:8.2} ms   target <= 2 ms");
    Ok(())
}

async fn print_agent_figures(options: &Options, env: &Env) -> anyhow::Result<()> {
    let figures = agents::measure(&options.agent, env, options.iterations.clamp(3, 10)).await?;
    report!(
        "another agent, per forwarded word {:8.3} ms  ({} words a turn, {} runs)   target < 5 ms",
        figures.per_update,
        figures.updates,
        figures.runs
    );
    report!(
        "another agent, start overhead     {:8.2} ms  (its own start and first word: {:.2} ms)   target < 50 ms",
        figures.start_overhead,
        figures.direct_start
    );
    report!(
        "  the session's model call to the card {:8.2} ms",
        figures.to_card
    );
    report!(
        "  the card to the agent's session      {:8.2} ms  (approval, checkpoint)",
        figures.to_announced
    );
    report!(
        "  its start and first word             {:8.2} ms  (helper, initialize, session/new, prompt)",
        figures.to_first_word
    );
    report!(
        "  a second task's first word, kept     {:8.2} ms  (session/new, prompt)",
        figures.kept_first_word
    );
    Ok(())
}

/// Checkpoints on a workspace of 10,000 files.
fn print_checkpoint_figures(runs: usize) -> anyhow::Result<()> {
    let cost = checkpoints::measure(runs)?;
    report!(
        "checkpoint, file tool's edit      {:8.2} ms  (min {:.2}; 10,000-file workspace)   target: + < 5 ms",
        cost.edit.0,
        cost.edit.1
    );
    report!(
        "checkpoint, command               {:8.2} ms  (min {:.2}; two stat walks, one file changed)   target: + < 50 ms",
        cost.command.0,
        cost.command.1
    );
    report!(
        "  first index of the workspace    {:8.1} ms  (every file read once, in the background)",
        cost.index_ms
    );
    report!(
        "rewind restoring 100 files        {:8.2} ms",
        cost.restore_100_ms
    );
    report!(
        "checkpoint store growth per turn  {:8.1} KB  (3 edits and a command changing 2 files of 2 KB)",
        cost.growth_per_turn as f64 / 1024.0
    );
    Ok(())
}

/// A steer's delay to the request that carries it, and an idle steer against a prompt.
async fn print_steering_figures(
    options: &Options,
    env: &Env,
    cwd: &std::path::Path,
) -> anyhow::Result<()> {
    let steer = steering::measure(
        &options.agent,
        &env.mock,
        &env.vars(),
        cwd,
        options.iterations.min(10),
    )
    .await?;
    report!(
        "steer -> the request carrying it  {:8.2} ms  (min {:.2}; while text streams)   target < 50 ms",
        steer.to_request.0,
        steer.to_request.1
    );
    report!(
        "  idle steer -> its request       {:8.2} ms  (min {:.2}; a prompt: {:.2}, min {:.2})",
        steer.idle_steer.0,
        steer.idle_steer.1,
        steer.prompt.0,
        steer.prompt.1
    );
    Ok(())
}

/// What each run measures.
#[derive(Default)]
struct Samples {
    initialize: Vec<f64>,
    new_session: Vec<f64>,
    later_session: Vec<f64>,
    first_chunk: Vec<f64>,
    to_request: Vec<f64>,
    later_to_request: Vec<f64>,
    rss: Vec<f64>,
}

/// One prompt's latencies as the client and the model's server see them.
struct PromptTimes {
    /// From sending `session/prompt` to its request's headers at the mock: Talaria's own time.
    to_request: Duration,
    /// From sending it to the first answer chunk, less the mock's own time to its first byte.
    first_chunk: Duration,
}

/// Sends one prompt to `session` and waits for its answer.
async fn timed_prompt(
    agent: &mut AgentProcess,
    env: &Env,
    session: &str,
) -> anyhow::Result<PromptTimes> {
    env.mock
        .push(MockReply::text(&["first", " chunk", " and more"]));
    let before = env.mock.requests().len();
    let sent = Instant::now();
    let id = agent
        .start_request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await?;
    // The first answer chunk (the session's command list may already be queued).
    agent
        .wait_for(Duration::from_secs(10), |m| {
            m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await?;
    let client_latency = sent.elapsed();
    agent.wait_response(id, Duration::from_secs(10)).await?;
    let request = env
        .mock
        .requests()
        .into_iter()
        .nth(before)
        .context("mock request")?;
    let mock_latency = match (request.received_at, request.first_byte_at) {
        (Some(received), Some(first)) => first.duration_since(received),
        _ => Duration::ZERO,
    };
    let to_request = request
        .received_at
        .map(|received| received.saturating_duration_since(sent))
        .unwrap_or_default();
    Ok(PromptTimes {
        to_request,
        first_chunk: client_latency.saturating_sub(mock_latency),
    })
}

/// One run: spawn and initialize, a session, a prompt to its request and its first chunk
/// (less the mock's own latency), peak RSS after that turn, a second prompt of the session to
/// its request, a later session of the same process.
async fn one_run(
    options: &Options,
    env: &Env,
    cwd: &std::path::Path,
    samples: &mut Samples,
) -> anyhow::Result<()> {
    let spawned = Instant::now();
    let mut agent = AgentProcess::spawn(
        &options.agent,
        &["acp"],
        &env.vars(),
        WireFraming::NewlineDelimited,
    )
    .await?;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await?;
    samples.initialize.push(ms(spawned.elapsed()));

    let sent = Instant::now();
    let session = agent
        .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .await?;
    samples.new_session.push(ms(sent.elapsed()));
    let session = session["sessionId"]
        .as_str()
        .context("session id")?
        .to_string();

    let first = timed_prompt(&mut agent, env, &session).await?;
    samples.to_request.push(ms(first.to_request));
    samples.first_chunk.push(ms(first.first_chunk));
    if let Some(kib) = agent.pid().and_then(peak_rss_kib) {
        samples.rss.push(kib as f64 / 1024.0);
    }
    let later = timed_prompt(&mut agent, env, &session).await?;
    samples.later_to_request.push(ms(later.to_request));
    // A later session/new of the same process, for comparison with the first.
    let sent = Instant::now();
    agent
        .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .await?;
    samples.later_session.push(ms(sent.elapsed()));
    agent.close_stdin();
    agent.wait_exit(Duration::from_secs(5)).await?;
    Ok(())
}

/// The turn's figures against their targets.
fn print_turn_figures(
    options: &Options,
    samples: &mut Samples,
    stream: &StreamFigures,
    deltas: usize,
) {
    let (init_med, init_min) = median(&mut samples.initialize);
    let (new_med, new_min) = median(&mut samples.new_session);
    let (later_med, _) = median(&mut samples.later_session);
    let (chunk_med, chunk_min) = median(&mut samples.first_chunk);
    let (request_med, request_min) = median(&mut samples.to_request);
    let (later_request_med, later_request_min) = median(&mut samples.later_to_request);
    let (rss_med, rss_max) = {
        let (med, _) = median(&mut samples.rss);
        (med, samples.rss.iter().copied().fold(0.0, f64::max))
    };
    report!(
        "talaria-bench: {} ({} iterations)",
        options.agent.display(),
        options.iterations
    );
    report!(
        "spawn -> initialize answered      {init_med:8.2} ms  (min {init_min:.2})   target <= 5 ms"
    );
    report!(
        "session/new answered              {new_med:8.2} ms  (min {new_min:.2}; a later one {later_med:.2})   target <= 2 ms"
    );
    report!(
        "prompt -> first chunk (- mock)    {chunk_med:8.2} ms  (min {chunk_min:.2})   target <= 2 ms"
    );
    report!(
        "prompt -> its request at the mock {request_med:8.2} ms  (min {request_min:.2}; the session's second prompt {later_request_med:.2}, min {later_request_min:.2})   target <= 1 ms"
    );
    report!(
        "peak RSS after a turn             {rss_med:8.2} MB  (max {rss_max:.2}; code pages included)   target <= 8.1 MB"
    );
    match hot_code::hot_section_bytes(&options.agent) {
        Some(0) => report!(
            "  hot code linked first              none  (the compiler's order: server/hot-code/)"
        ),
        Some(bytes) => report!(
            "  hot code linked first          {:8.2} MB  (.text.hot: server/hot-code/functions.txt)",
            bytes as f64 / 1e6
        ),
        None => {}
    }
    report!(
        "deltas forwarded                  {:8.0} /s  (first to last of {deltas} chunks: {:.1} ms)   target >= 300000/s",
        (deltas - 1) as f64 / stream.first_to_last.as_secs_f64(),
        ms(stream.first_to_last)
    );
    report!(
        "  prompt to turn end              {:8.1} ms  (includes the mock generating the stream)",
        ms(stream.prompt_to_end)
    );
    if let Some(cpu) = stream.agent_cpu_ms {
        report!("  agent CPU, whole process       {cpu:8.1} ms  (user+system, incl. start-up)");
    }
    if let Some(mb) = stream.peak_rss_mb {
        report!("  peak RSS after the stream      {mb:8.2} MB");
    }
    if let Some(private) = &stream.private {
        report!(
            "  private memory after it        {:8.2} MB  (RssAnon: heap and stacks; PSS {:.2} MB)   target <= 6 MB",
            private.anon_mb,
            private.pss_mb
        );
    }
}

/// The durable store's figures (a private `TALARIA_HOME`) against their targets.
/// A 50 MB answer streamed in 1 KB deltas and saved, with `vars` (which store).
async fn large_answer(
    options: &Options,
    env: &Env,
    vars: &[(String, String)],
    cwd: &std::path::Path,
) -> anyhow::Result<StreamFigures> {
    let large = 50 * 1024;
    env.push_answer(1024, large);
    stream_throughput(&options.agent, vars, cwd, large).await
}

/// 40 sessions' answers through a write lock held for the whole round, against a free store.
async fn print_locked_turns(options: &Options, env: &Env) -> anyhow::Result<()> {
    let turns = locked_turns::measure(&options.agent, env).await?;
    let last = |answers: &[Duration]| answers.last().map_or(0.0, |d| d.as_secs_f64());
    report!(
        "{} sessions x {}-call turns, store locked: each answer within {:6.2} s of its healthy one (rounds: {:.1} s free, {:.1} s locked)   target <= {:.1} s",
        locked_turns::SESSIONS,
        locked_turns::CALLS_PER_TURN,
        turns.worst_added().as_secs_f64(),
        last(&turns.free),
        last(&turns.locked),
        locked_turns::TARGET.as_secs_f64()
    );
    Ok(())
}

/// Figures of answers with a shape of their own: a 50 MB answer's memory, and how soon a
/// call the chat does not see yet shows progress.
async fn print_answer_shape_figures(
    options: &Options,
    env: &Env,
    cwd: &std::path::Path,
) -> anyhow::Result<()> {
    let large_stream = large_answer(options, env, &env.vars(), cwd).await?;
    if let Some(mb) = large_stream.peak_rss_mb {
        report!(
            "peak RSS, a 50 MB answer          {mb:8.1} MB  (streamed in {:.1} s)   target <= 3 x 50 MB + baseline",
            large_stream.prompt_to_end.as_secs_f64()
        );
    }
    let waiting = waiting::measure(&options.agent, env).await?;
    report!(
        "private memory, {} MB answer waiting   {:8.1} MB  (store locked; {:.1} MB with it free: {:.2} MB per waiting MB)   target < 0.2 MB per MB",
        waiting::ANSWER_MB,
        waiting.locked.anon_mb,
        waiting.free.anon_mb,
        (waiting.locked.anon_mb - waiting.free.anon_mb) / waiting::ANSWER_MB as f64
    );
    let mut progress = Vec::new();
    for _ in 0..options.iterations.min(5) {
        let mut chunks = vec!["{\"name\": \"read_file\",".to_string()];
        chunks.extend((0..14).map(|_| " ".to_string()));
        chunks.push(" \"arguments\": {\"path\": \"missing.py\"}}".to_string());
        env.mock.push(MockReply::Text {
            chunks,
            reasoning: Vec::new(),
            delay_ms: 250,
            usage: None,
            finish_reason: None,
        });
        env.mock.push(MockReply::text(&["There is no such file."]));
        progress.push(held_back_first_progress(&options.agent, &env.vars(), cwd).await?);
    }
    progress.sort();
    if let (Some(median), Some(max)) = (progress.get(progress.len() / 2), progress.last()) {
        report!(
            "first progress, a held-back call      {:6.2} s  (max {:.2}; the call streams for 4 s)   target <= 2 s",
            median.as_secs_f64(),
            max.as_secs_f64()
        );
    }
    Ok(())
}

async fn print_session_figures(options: &Options, env: &Env) -> anyhow::Result<()> {
    let sessions_home = tempfile::tempdir()?;
    let sessions_workspace = tempfile::tempdir()?;
    let vars = env.vars_with_home(sessions_home.path());
    let sessions = sessions::measure(
        &options.agent,
        &vars,
        sessions_home.path(),
        sessions_workspace.path(),
    )
    .await?;
    report!(
        "store append (one entry)          {:8.3} ms  (p50 {:.3})   target p99 <= 2 ms",
        ms(sessions.append_p99),
        ms(sessions.append_p50)
    );
    report!(
        "store append per entry at 1k      {:8.3} ms  (at 200k entries: {:.3} ms)   target: no growth",
        ms(sessions.append_at_1k),
        ms(sessions.append_at_200k)
    );
    report!(
        "session/load of 2,000 messages    {:8.1} ms  (replayed before the answer)",
        ms(sessions.load_2k)
    );
    report!(
        "session/load of 10,000 messages   {:8.1} ms  (replayed before the answer)   target <= 200 ms",
        ms(sessions.replay_10k)
    );
    report!(
        "session/list over 1,000 sessions  {:8.2} ms  (over 10,000: {:.2} ms)   target <= 20 ms",
        ms(sessions.list_1k),
        ms(sessions.list_10k)
    );
    if let Some(kb) = sessions.rss_per_idle_session_kb {
        report!("RSS per idle loaded session       {kb:8.1} KB   target <= 50 KB");
    }
    print_shared_figures(options, env, &vars, &sessions, sessions_workspace.path()).await
}

/// The PostgreSQL store's figures next to the embedded store's.
async fn print_shared_figures(
    options: &Options,
    env: &Env,
    vars: &[(String, String)],
    embedded: &sessions::SessionFigures,
    workspace: &std::path::Path,
) -> anyhow::Result<()> {
    let (_cluster, url) = match options.postgres.as_deref() {
        None => {
            report!("PostgreSQL store: not measured (--postgres URL|local)");
            return Ok(());
        }
        Some("local") => {
            anyhow::ensure!(
                shared_store::local_server_available(),
                "--postgres local needs PostgreSQL's initdb (Debian's postgresql)"
            );
            let (cluster, url) = shared_store::local_server().await?;
            (Some(cluster), url)
        }
        Some(url) => (None, url.to_string()),
    };
    let shared = shared_store::measure(&options.agent, vars, &url, workspace).await?;
    report!("PostgreSQL store (local server)   PostgreSQL      SQLite");
    report!(
        "  append one entry, p50 / p99     {:6.3} / {:6.3} ms  {:6.3} / {:6.3} ms",
        ms(shared.append_p50),
        ms(shared.append_p99),
        ms(embedded.append_p50),
        ms(embedded.append_p99)
    );
    report!(
        "  session/load of 2,000 messages  {:8.1} ms       {:8.1} ms",
        ms(shared.load_2k),
        ms(embedded.load_2k)
    );
    report!(
        "  session/list over 1,000         {:8.2} ms       {:8.2} ms",
        ms(shared.list_1k),
        ms(embedded.list_1k)
    );
    let mut on_postgres = vars.to_vec();
    on_postgres.push(("TALARIA_STORE_URL".into(), url.clone()));
    let large = large_answer(options, env, &on_postgres, workspace).await?;
    if let Some(mb) = large.peak_rss_mb {
        report!("  peak RSS, a 50 MB answer        {mb:8.1} MB   target <= 3 x 50 MB + baseline");
    }
    Ok(())
}

/// `talaria serve`: start to first answer, idle connections, streaming against stdio.
async fn print_serve_figures(
    options: &Options,
    env: &Env,
    cwd: &std::path::Path,
) -> anyhow::Result<()> {
    let vars = env.vars();
    if options.attach_only {
        return print_attach_figures(env, options, cwd).await;
    }
    if !options.serve_streaming_only {
        let runs = options.iterations.clamp(1, 10);
        let (median, min) =
            serve::start_to_first_answer(&options.agent, &env.mock, &vars, cwd, runs).await?;
        report!(
            "serve: start to first answer      {median:8.1} ms  (min {min:.1}; over WebSocket)"
        );
        let kb = serve::idle_connection_kb(&options.agent, &vars, 1000).await?;
        report!(
            "serve: memory per idle connection {kb:8.1} KB  (1,000 connections)   target < 50 KB"
        );
        print_attach_figures(env, options, cwd).await?;
    }
    let (sessions, deltas) = (100, 1000);
    // Rounds taken in turn (stdio, one connection, one per session), so that what else the
    // machine does weighs on each alike; the median of each is reported.
    let mut figures: [Vec<serve::StreamingFigures>; 3] = Default::default();
    for _ in 0..STREAMING_ROUNDS {
        let stdio =
            serve::streaming_over_stdio(&options.agent, &env.mock, &vars, cwd, sessions, deltas);
        figures[0].push(stdio.await?);
        for (slot, connections) in [(1, 1), (2, sessions)] {
            let ws = serve::streaming_over_websocket(
                &options.agent,
                &env.mock,
                &vars,
                cwd,
                (connections, sessions),
                deltas,
            );
            figures[slot].push(ws.await?);
        }
    }
    let [stdio, one, many] = figures.map(serve::StreamingFigures::median);
    for (ws, connections) in [(one, 1), (many, sessions)] {
        report!(
            "serve: agent CPU per delta, WS    {:8.2} us  (stdio {:.2} us, {:+.0} %; {sessions} sessions on {connections} connection(s) x {deltas} deltas at once; wall {:.0} ms vs {:.0} ms; median of {STREAMING_ROUNDS})   target within 10 % of stdio",
            ws.cpu_us_per_delta,
            stdio.cpu_us_per_delta,
            (ws.cpu_us_per_delta / stdio.cpu_us_per_delta - 1.0) * 100.0,
            ws.wall_ms,
            stdio.wall_ms
        );
    }
    Ok(())
}

/// `talaria serve`: one streaming session followed by 1, 10 and 100 attached observers.
async fn print_attach_figures(
    env: &Env,
    options: &Options,
    cwd: &std::path::Path,
) -> anyhow::Result<()> {
    let vars = env.vars();
    for observers in [1, 10, 100] {
        let figures =
            serve::attach_fanout(&options.agent, &env.mock, &vars, cwd, observers, 500).await?;
        report!(
            "serve: last observer behind first {:8.2} ms  (p99 {:.2} ms; {observers} observer(s), 500 deltas 1 ms apart; {:.1} KB each, connection included)   target <= 5 ms at 100",
            figures.p50_spread_ms,
            figures.p99_spread_ms,
            figures.kb_per_observer
        );
    }
    Ok(())
}

/// How many times each streaming load runs.
const STREAMING_ROUNDS: usize = 5;

/// `talaria batch`: 1,000 trivial tasks in one process, and over two workers on a queue.
async fn print_batch_figures(options: &Options, env: &Env) -> anyhow::Result<()> {
    let vars = env.vars();
    let local = batch::local(&options.agent, &env.mock, &vars, 1000).await?;
    report!(
        "batch: 1,000 trivial tasks        {:8.0} /s  (--parallel 64; peak RSS {:.1} MB)   target >= 100/s, < 200 MB",
        local.tasks_per_second,
        local.peak_rss_mb
    );
    let (_cluster, url) = match options.postgres.as_deref() {
        None => {
            report!("batch on a PostgreSQL queue: not measured (--postgres URL|local)");
            return Ok(());
        }
        Some("local") => {
            let (cluster, url) = shared_store::local_server().await?;
            (Some(cluster), url)
        }
        Some(url) => (None, url.to_string()),
    };
    let queued = batch::two_workers(&options.agent, &env.mock, &vars, &url, 1000).await?;
    report!(
        "batch: 1,000 tasks, 2 workers     {:8.0} /s  (one PostgreSQL queue, --parallel 32 each; peak RSS {:.1} MB)",
        queued.tasks_per_second,
        queued.peak_rss_mb
    );
    Ok(())
}
