//! `talaria demo`: Talaria tried in a minute with no key and no model server. It makes a
//! small sample project (or uses `--dir`), says what is about to happen, and hands the
//! terminal to `talaria-chat` running this `talaria` with the built-in demo model
//! (`TALARIA_PROVIDER=demo`: a script in `talaria-provider`, never the network). Editors and
//! `talaria serve` get the same model from `provider = "demo"` (`talaria setup` offers it) or
//! the variable.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `talaria demo`'s options.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// The folder the demo works in (its files are read, and one is written if you allow
    /// it); default: a new sample project in the temporary directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Arguments for talaria-chat (`-p "question"` for one answer, `--approve once`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CHAT ARGS"
    )]
    chat: Vec<OsString>,
}

/// The sample project's files.
const SAMPLE: &[(&str, &str)] = &[
    (
        "README.md",
        "# Greeter\n\nA tiny sample project for the Talaria demo: `greet.py` says hello.\n\n\
         Run it with `python3 greet.py NAME`.\n",
    ),
    (
        "greet.py",
        "import sys\n\n\ndef greet(name):\n    return f\"Hello, {name}!\"\n\n\n\
         if __name__ == \"__main__\":\n    print(greet(sys.argv[1] if len(sys.argv) > 1 else \
         \"world\"))\n",
    ),
];

/// Why the demo could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot make the demo's folder {path}: {source}")]
    Folder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "talaria demo runs talaria-chat, which is neither beside {beside} nor on the PATH: \
         install it (`cargo install --locked --path clients/terminal`), or try the demo in your \
         editor or `talaria serve` with TALARIA_PROVIDER=demo in the agent's environment"
    )]
    NoChat { beside: String },
    #[error("cannot start {chat}: {source}")]
    Start {
        chat: String,
        #[source]
        source: std::io::Error,
    },
}

/// Runs the demo: on success this process becomes talaria-chat and never returns.
pub fn run(args: DemoArgs) -> std::process::ExitCode {
    match start(args) {
        Ok(never) => match never {},
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "talaria demo: {why}");
            std::process::ExitCode::from(2)
        }
    }
}

fn start(args: DemoArgs) -> Result<std::convert::Infallible, DemoError> {
    use std::os::unix::process::CommandExt;
    let agent = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("talaria"));
    let chat = chat_beside(&agent).ok_or_else(|| DemoError::NoChat {
        beside: agent.display().to_string(),
    })?;
    let dir = match args.dir {
        Some(dir) => dir,
        None => sample_project()?,
    };
    let _ = writeln!(
        std::io::stderr(),
        "Talaria demo: the built-in demo model (a short script: no key, no model server, \
         nothing sent anywhere) in {}.\nAsk anything: it shows a plan, reads a file and \
         proposes an edit that asks you first. `talaria setup` sets up a real model.\n",
        dir.display()
    );
    let failed = std::process::Command::new(&chat)
        .arg("--agent")
        .arg(&agent)
        .args(["--agent-arg", "acp"])
        .args(&args.chat)
        .current_dir(&dir)
        .env("TALARIA_PROVIDER", "demo")
        .exec();
    Err(DemoError::Start {
        chat: chat.display().to_string(),
        source: failed,
    })
}

/// `talaria-chat` beside `agent` (as every package installs them), else on the PATH.
fn chat_beside(agent: &Path) -> Option<PathBuf> {
    let beside = agent.with_file_name("talaria-chat");
    if beside.is_file() {
        return Some(beside);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("talaria-chat"))
            .find(|candidate| candidate.is_file())
    })
}

/// A new folder with the sample project, in the temporary directory.
fn sample_project() -> Result<PathBuf, DemoError> {
    let made = tempfile::Builder::new()
        .prefix("talaria-demo-")
        .tempdir()
        .map(tempfile::TempDir::keep);
    let dir = made.map_err(|source| DemoError::Folder {
        path: std::env::temp_dir(),
        source,
    })?;
    for (name, text) in SAMPLE {
        std::fs::write(dir.join(name), text).map_err(|source| DemoError::Folder {
            path: dir.clone(),
            source,
        })?;
    }
    Ok(dir)
}
