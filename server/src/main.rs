//! The `talaria` binary: serves the Agent Client Protocol on stdio.
//!
//! stdout carries only protocol messages; logs go to stderr through `tracing`.

mod acp;
mod agents;
mod batch;
mod config_file;
mod demo;
mod doctor;
mod home;
mod logging;
mod sessions;
mod setup;
mod store;
mod trust_cli;
mod web;

use std::io::Write;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "talaria",
    version = env!("TALARIA_VERSION_LINE"),
    about = "Talaria: a headless AI agent server speaking the Agent Client Protocol on stdio",
    long_about = "Talaria is started by an editor or frontend as a subprocess and speaks the Agent \
Client Protocol (JSON-RPC 2.0, one message per line, or Content-Length framed) on stdin/stdout. \
Logs go to stderr; set TALARIA_LOG (or RUST_LOG), e.g. TALARIA_LOG=debug.\n\n\
Configuration: $TALARIA_HOME/config.toml (default ~/.talaria), overridden by TALARIA_PROVIDER, \
TALARIA_MODEL, TALARIA_CONTEXT_WINDOW, OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL and \
ANTHROPIC_API_KEY."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve ACP on stdio (the default).
    Acp(AcpArgs),
    /// Check the configuration and whether the model can be reached; prints the fix for each
    /// problem and exits non-zero when there is one.
    Doctor {
        /// Also make a one-token test call to the model.
        #[arg(long)]
        call: bool,
    },
    /// The other ACP agents configured under `[agents.<name>]`: whether each starts
    /// (`initialize` answered), its version and what it can do, and whether its work stays
    /// inside Talaria's walls; exits non-zero when one does not start.
    Agents,
    /// First-run set-up in a terminal: choose the provider (hosted, a local server found on
    /// this machine, or the built-in demo), the model and the key; checks them with a
    /// one-token call and writes $TALARIA_HOME/config.toml (an existing file keeps its other
    /// settings). The key is typed without echo and never printed.
    Setup,
    /// Try Talaria in a minute with no key and no model server: talaria-chat with the
    /// built-in demo model (scripted answers) in a small sample project.
    Demo(demo::DemoArgs),
    /// Serve ACP over the network for browser frontends and remote services: WebSocket and
    /// streamable HTTP on one endpoint, `/acp`, behind a bearer token; loopback only unless
    /// told otherwise (with TLS).
    Serve(web::ServeArgs),
    /// Run a dataset of tasks (JSONL) as sessions, in parallel, for a harness: results,
    /// trajectories and a summary in --out; resumable, recordable, replayable; spread over
    /// machines with a PostgreSQL --queue.
    Batch(batch::BatchArgs),
    /// Manage the session store ($TALARIA_HOME/state.db).
    Store {
        #[command(subcommand)]
        action: StoreAction,
    },
    /// Trust a folder (and its subfolders): sessions there load its AGENTS.md/CLAUDE.md,
    /// skills, configuration and hooks. `--revoke` forgets the decision, `--list` lists them.
    Trust(trust_cli::TrustArgs),
    /// About config.toml.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Debug, clap::Subcommand)]
enum ConfigAction {
    /// Print the reference of every setting (Markdown: docs/configuration.md).
    Reference,
}

/// How `talaria acp` serves.
#[derive(Debug, Default, clap::Args)]
struct AcpArgs {
    /// Record each session's model calls into DIR (one cassette per session,
    /// `session-001.jsonl` on, in the order sessions start).
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    record: Option<std::path::PathBuf>,
    /// Serve each session's model calls from the cassettes in DIR (recorded with --record);
    /// no model is called.
    #[arg(long, value_name = "DIR")]
    replay: Option<std::path::PathBuf>,
    /// How fast a replay streams: `fast` (at once) or `recorded` (the recorded pace).
    #[arg(long, value_name = "PACE", default_value = "fast", requires = "replay")]
    replay_timing: ReplayPace,
    /// In a replay, serve tool calls from the cassette instead of running them (no side
    /// effects; fully deterministic).
    #[arg(long, requires = "replay")]
    replay_tools: bool,
}

/// `--replay-timing`.
#[derive(Debug, Clone, Copy, Default, clap::ValueEnum)]
enum ReplayPace {
    #[default]
    Fast,
    Recorded,
}

#[derive(Debug, Subcommand)]
enum StoreAction {
    /// Write a consistent copy of the store to PATH (safe while Talaria runs).
    Backup {
        /// Where the copy goes; it must not exist yet.
        path: std::path::PathBuf,
    },
}

/// `talaria config reference`: every setting, as docs/configuration.md holds it.
fn print_config_reference() -> std::process::ExitCode {
    let text = talaria_engine::configuration_reference();
    match std::io::stdout().write_all(text.as_bytes()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}

/// `talaria serve`: until a stop signal.
fn serve(runtime: &tokio::runtime::Runtime, args: web::ServeArgs) -> std::process::ExitCode {
    home::make_private();
    let home = talaria_engine::default_home(&|key| std::env::var(key).ok());
    runtime.block_on(web::serve(args, home))
}

/// `talaria agents`.
async fn list_agents() -> std::process::ExitCode {
    let config = match talaria_engine::Config::load() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("talaria agents: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| config.home.clone());
    if agents::list_agents(&mut std::io::stdout(), &config.agents, &cwd).await {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// `talaria store backup PATH`.
fn backup(target: &std::path::Path) -> std::process::ExitCode {
    let mut stderr = std::io::stderr();
    if let Ok(config) = talaria_engine::Config::load()
        && config.store.url.is_some()
    {
        let _ = writeln!(
            stderr,
            "talaria store backup: sessions are kept in PostgreSQL ({}); back that database \
             up with pg_dump",
            store::describe(&config)
        );
        return std::process::ExitCode::from(2);
    }
    let home = talaria_engine::default_home(&|key| std::env::var(key).ok());
    let source = home.join("state.db");
    let copied = talaria_store::SqliteStore::open(&source).and_then(|store| store.backup(target));
    match copied {
        Ok(()) => {
            let _ = writeln!(
                stderr,
                "backed up {} to {}",
                source.display(),
                target.display()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            let _ = writeln!(stderr, "talaria store backup: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn main() -> std::process::ExitCode {
    // The sandbox helper first, before anything starts a thread: the supervisor of one
    // command, or the sandbox's init it starts.
    let mut args = std::env::args_os();
    match args.nth(1).as_deref().and_then(std::ffi::OsStr::to_str) {
        Some(talaria_sandbox::HELPER_ARG) => return talaria_sandbox::helper_main(args.collect()),
        Some(talaria_sandbox::INIT_ARG) => return talaria_sandbox::init_main(args.collect()),
        Some(talaria_sandbox::FOLLOW_ARG) => {
            return talaria_sandbox::follow_parent_main(args.collect());
        }
        _ => {}
    }
    // The loader read the relocation table before `main` and nothing reads it again: its
    // pages leave the agent's resident memory (0.7 MB in the release archives, linked for
    // glibc 2.28; ARCHITECTURE.md, "Memory").
    let relocation_bytes_released = talaria_pages::release_relocation_table();
    // The agent's memory holds keys: not dumpable, no core file.
    talaria_sandbox::protect_this_process();
    let cli = Cli::parse();
    logging::init();
    tracing::debug!(relocation_bytes_released, "started");
    talaria_util::failpoint::setup();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(16)
        .thread_name("talaria")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match cli.command.unwrap_or(Command::Acp(AcpArgs::default())) {
        Command::Doctor { call } => {
            home::make_private();
            let mut stdout = std::io::stdout();
            let problems = runtime.block_on(doctor::run(&mut stdout, call));
            if problems == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Command::Store {
            action: StoreAction::Backup { path },
        } => backup(&path),
        Command::Config {
            action: ConfigAction::Reference,
        } => print_config_reference(),
        Command::Trust(args) => {
            home::make_private();
            trust_cli::run(args)
        }
        Command::Setup => {
            home::make_private();
            runtime.block_on(setup::run())
        }
        Command::Serve(args) => serve(&runtime, args),
        Command::Agents => runtime.block_on(list_agents()),
        Command::Demo(args) => {
            home::make_private();
            drop(runtime);
            demo::run(args)
        }
        Command::Batch(args) => {
            home::make_private();
            runtime.block_on(batch::run(args))
        }
        Command::Acp(args) => serve_stdio(runtime, args),
    }
}

/// `talaria acp` (and `talaria` alone): ACP on stdin and stdout until the input ends.
fn serve_stdio(runtime: tokio::runtime::Runtime, args: AcpArgs) -> std::process::ExitCode {
    home::make_private();
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        // A person started it by hand: say what it is (stderr; stdout stays protocol).
        let _ = writeln!(
            std::io::stderr(),
            "talaria speaks the Agent Client Protocol on stdin/stdout and is meant to be \
             started by an editor (Zed, VS Code) or a client. To chat in a terminal, run \
             `talaria-chat`. Ctrl-D quits."
        );
    }
    let cassettes = sessions::CassetteOptions {
        record: args.record,
        replay: args.replay,
        timing: match args.replay_timing {
            ReplayPace::Fast => talaria_provider::cassette::ReplayTiming::Fast,
            ReplayPace::Recorded => talaria_provider::cassette::ReplayTiming::Recorded,
        },
        replay_tools: args.replay_tools,
    };
    let result = runtime.block_on(acp::serve(
        tokio::io::stdin(),
        tokio::io::stdout(),
        cassettes,
    ));
    // Everything that must finish was waited for within the stop's budget (the
    // output flushed included); blocking work still running (a read of the input, a
    // store call that does not return, a tool reading a slow file) is not waited for.
    runtime.shutdown_background();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
