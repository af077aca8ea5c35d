//! `talaria setup`: the first-run set-up in a terminal (the registry's "terminal" auth
//! method). It asks for the provider — a hosted one, or a local server it finds on this
//! machine (llama.cpp, Ollama, LM Studio) — the model and the key (typed without echo),
//! checks them with a one-token call as `talaria doctor --call` does, and writes
//! `$TALARIA_HOME/config.toml` (mode 0600, replaced atomically). A file that exists keeps
//! every other setting and comment: only the provider, model, address and key change
//! (`crate::config_file`). The key is never printed.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use talaria_engine::{Config, LOCAL_SERVERS, LocalServer, ProviderKind};

/// The hosted providers offered first, in the menu's order; their addresses and default
/// models are the engine's provider table's.
const HOSTED: [ProviderKind; 2] = [ProviderKind::OpenAi, ProviderKind::Anthropic];

/// What the user chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// `openai` (and compatible servers) or `anthropic`.
    pub provider: &'static str,
    pub base_url: String,
    pub model: String,
    /// Empty for a local server.
    pub api_key: String,
}

impl Choice {
    /// The built-in demo model.
    fn is_demo(&self) -> bool {
        talaria_engine::ProviderKind::named(self.provider)
            .is_some_and(talaria_engine::ProviderKind::is_built_in)
    }

    /// The settings this choice changes in a file that exists.
    fn settings(&self) -> crate::config_file::ProviderSettings<'_> {
        crate::config_file::ProviderSettings {
            provider: self.provider,
            model: &self.model,
            table: talaria_engine::ProviderKind::named(self.provider)
                .map(talaria_engine::ProviderKind::table)
                .filter(|table| !table.is_empty()),
            base_url: &self.base_url,
            api_key: &self.api_key,
        }
    }

    /// The file to write: `existing` with this choice in it, or a new one.
    fn file(&self, existing: Option<&str>, path: &Path) -> Result<String, SetupError> {
        match existing {
            Some(text) => crate::config_file::with_provider(text, &self.settings(), path)
                .map_err(|e| SetupError::Check(e.to_string())),
            None => Ok(self.to_toml()),
        }
    }

    /// What was done with the key, for the closing line.
    fn key_said(&self) -> &'static str {
        if self.api_key.is_empty() {
            "no key was typed, and none is stored"
        } else {
            "the key is stored there and was not shown"
        }
    }

    /// The configuration file for this choice (TOML, the key quoted).
    pub fn to_toml(&self) -> String {
        if self.is_demo() {
            return format!(
                "# Written by `talaria setup`: the built-in demo model (scripted answers, no key,\n\
                 # no model server). Run `talaria setup` again for a real model.\n\
                 provider = {}\nmodel = {}\n",
                toml_string(self.provider),
                toml_string(&self.model),
            );
        }
        let table = talaria_engine::ProviderKind::named(self.provider).map_or(
            ProviderKind::OpenAi.table(),
            talaria_engine::ProviderKind::table,
        );
        format!(
            "# Written by `talaria setup`. Environment variables (OPENAI_API_KEY, TALARIA_MODEL…)\n\
             # override these settings. Every setting: docs/configuration.md (`talaria config reference`).\n\
             provider = {}\nmodel = {}\n\n[{table}]\nbase_url = {}\napi_key = {}\n",
            toml_string(self.provider),
            toml_string(&self.model),
            toml_string(&self.base_url),
            toml_string(&self.api_key),
        )
    }
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Talks with the person at the terminal.
struct Terminal<'a> {
    input: &'a mut dyn BufRead,
    out: &'a mut dyn Write,
    /// Whether standard input is a terminal (echo can be turned off for the key).
    tty: bool,
}

impl Terminal<'_> {
    fn say(&mut self, text: &str) {
        let _ = writeln!(self.out, "{text}");
    }

    /// One line of input, without its end; `None` when the input ended.
    fn ask(&mut self, question: &str) -> Option<String> {
        let _ = write!(self.out, "{question}");
        let _ = self.out.flush();
        let mut line = String::new();
        match self.input.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_string()),
        }
    }

    /// A line typed without echo (the key).
    fn ask_hidden(&mut self, question: &str) -> Option<String> {
        let restore = if self.tty { echo_off() } else { None };
        let answer = self.ask(question);
        if let Some(saved) = restore {
            restore_echo(&saved);
            let _ = writeln!(self.out);
        }
        answer
    }

    /// A yes/no question; `default` when the answer is empty.
    fn confirm(&mut self, question: &str, default: bool) -> Option<bool> {
        let hint = if default { "[Y/n]" } else { "[y/N]" };
        let answer = self.ask(&format!("{question} {hint} "))?;
        Some(match answer.trim().to_ascii_lowercase().as_str() {
            "" => default,
            "y" | "yes" => true,
            _ => false,
        })
    }
}

/// Turns off echo on standard input; the settings to restore.
fn echo_off() -> Option<nix::sys::termios::Termios> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let saved = tcgetattr(&stdin).ok()?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    tcsetattr(&stdin, SetArg::TCSANOW, &quiet).ok()?;
    Some(saved)
}

fn restore_echo(saved: &nix::sys::termios::Termios) {
    let _ =
        nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, saved);
}

/// What a server's model list (OpenAI-style `/models`) said.
enum ModelList {
    Listed(Vec<String>),
    /// The server refused the key (HTTP 401 or 403).
    KeyRefused(u16),
    /// No answer in time, another error, or a body that is not a list.
    Unanswered,
}

async fn models_at(base_url: &str, key: &str, wait: Duration) -> ModelList {
    let Ok(client) = reqwest::Client::builder().timeout(wait).build() else {
        return ModelList::Unanswered;
    };
    let mut request = client.get(format!("{}/models", base_url.trim_end_matches('/')));
    if !key.is_empty() {
        request = request.bearer_auth(key);
    }
    let Ok(response) = request.send().await else {
        return ModelList::Unanswered;
    };
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return ModelList::KeyRefused(status.as_u16());
    }
    if !status.is_success() {
        return ModelList::Unanswered;
    }
    let Ok(text) = response.text().await else {
        return ModelList::Unanswered;
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(body) => ModelList::Listed(crate::doctor::model_ids(&body)),
        Err(_) => ModelList::Unanswered,
    }
}

/// The local servers answering on this machine, with their models.
async fn local_servers() -> Vec<(&'static LocalServer, Vec<String>)> {
    let probes = LOCAL_SERVERS.iter().map(|server| async move {
        match models_at(server.base_url, "", Duration::from_millis(400)).await {
            ModelList::Listed(models) => Some((server, models)),
            ModelList::KeyRefused(_) | ModelList::Unanswered => None,
        }
    });
    futures_util::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Runs the set-up on the process's terminal; the exit code.
pub async fn run() -> std::process::ExitCode {
    let stdin = std::io::stdin();
    let tty = std::io::IsTerminal::is_terminal(&stdin);
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let mut terminal = Terminal {
        input: &mut input,
        out: &mut out,
        tty,
    };
    let home = talaria_engine::default_home(&|key| std::env::var(key).ok());
    match converse(&mut terminal, &home).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(why) => {
            terminal.say(&format!("talaria setup: {why}"));
            std::process::ExitCode::from(2)
        }
    }
}

/// Why the set-up stopped.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("the input ended before the set-up was done; nothing was written")]
    InputEnded,
    #[error("left as it was: {0}")]
    Kept(String),
    #[error(transparent)]
    File(#[from] crate::config_file::ConfigFileError),
    #[error("{0}")]
    Check(String),
}

async fn converse(terminal: &mut Terminal<'_>, home: &Path) -> Result<(), SetupError> {
    let path = home.join("config.toml");
    terminal.say("Talaria set-up: choose a model provider; the answers go to");
    terminal.say(&format!("  {}", path.display()));
    // A terminal program with one person at it: waiting on the disk here holds up no one.
    let reading = path.clone();
    let existing = tokio::task::spawn_blocking(move || crate::config_file::read(&reading))
        .await
        .map_err(|e| SetupError::Check(e.to_string()))??;
    if existing.is_some() {
        let update = terminal
            .confirm(
                "A configuration exists there. Change its provider, model and key (every other \
                 setting and comment stays)?",
                false,
            )
            .ok_or(SetupError::InputEnded)?;
        if !update {
            return Err(SetupError::Kept(path.display().to_string()));
        }
    }
    let found = local_servers().await;
    loop {
        let choice = choose(terminal, &found).await?;
        let file = choice.file(existing.as_deref(), &path)?;
        terminal.say("Checking with a one-token call…");
        match check(&file, home).await {
            Ok(()) => {
                crate::config_file::rewrite(&path, &file)?;
                terminal.say(&format!(
                    "✓ It answers. Wrote {} (readable only by you; {}).",
                    path.display(),
                    choice.key_said()
                ));
                warn_about_environment(terminal);
                if choice.is_demo() {
                    terminal.say(
                        "Talaria is ready with its demo model: try `talaria-chat`, or start it \
                         from your editor. Run `talaria setup` again for a real model.",
                    );
                } else {
                    terminal.say("Talaria is ready: your editor can start it now.");
                }
                return Ok(());
            }
            Err(why) => {
                terminal.say(&format!("✗ {why}"));
                let again = terminal
                    .confirm("Try again?", true)
                    .ok_or(SetupError::InputEnded)?;
                if !again {
                    let save = terminal
                        .confirm("Save these settings anyway?", false)
                        .ok_or(SetupError::InputEnded)?;
                    if save {
                        crate::config_file::rewrite(&path, &file)?;
                        terminal.say(&format!("Wrote {} (not working yet).", path.display()));
                        return Ok(());
                    }
                    return Err(why);
                }
            }
        }
    }
}

/// Asks for the provider, the model and the key.
async fn choose(
    terminal: &mut Terminal<'_>,
    found: &[(&'static LocalServer, Vec<String>)],
) -> Result<Choice, SetupError> {
    terminal.say("");
    for (i, kind) in HOSTED.iter().enumerate() {
        terminal.say(&format!(
            "  {}) {} ({})",
            i + 1,
            kind.spec().title,
            host_of(kind.service().default_url)
        ));
    }
    let other = HOSTED.len() + 1;
    terminal.say(&format!(
        "  {other}) Another OpenAI-compatible server (its address)"
    ));
    let first_found = other + 1;
    for (i, (server, models)) in found.iter().enumerate() {
        terminal.say(&format!(
            "  {}) {} on this machine at {} ({} model{})",
            i + first_found,
            server.name,
            server.base_url,
            models.len(),
            if models.len() == 1 { "" } else { "s" }
        ));
    }
    let demo = first_found + found.len();
    terminal.say(&format!(
        "  {demo}) Try it first: the built-in demo (scripted answers; no key, no model server)"
    ));
    let default = if found.is_empty() { 1 } else { first_found };
    let picked = loop {
        let answer = terminal
            .ask(&format!("Provider [{default}]: "))
            .ok_or(SetupError::InputEnded)?;
        let number = if answer.trim().is_empty() {
            default
        } else {
            answer.trim().parse::<usize>().unwrap_or(0)
        };
        if (1..=demo).contains(&number) {
            break number;
        }
        terminal.say(&format!("Type a number from 1 to {demo}."));
    };
    if picked == demo {
        let spec = ProviderKind::Demo.spec();
        return Ok(Choice {
            provider: spec.name,
            base_url: String::new(),
            model: spec.default_model.to_string(),
            api_key: String::new(),
        });
    }
    if let Some(kind) = HOSTED.get(picked - 1) {
        return hosted(terminal, *kind).await;
    }
    if picked == other {
        return other_server(terminal).await;
    }
    let (server, models) = &found[picked - first_found];
    let model = pick_model(terminal, models)?;
    Ok(Choice {
        provider: ProviderKind::OpenAi.as_str(),
        base_url: server.base_url.to_string(),
        model,
        api_key: String::new(),
    })
}

/// The host of an address (`api.openai.com`), for the menu.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', ':']).next().unwrap_or(rest)
}

async fn hosted(terminal: &mut Terminal<'_>, kind: ProviderKind) -> Result<Choice, SetupError> {
    let default_model = kind.spec().default_model;
    let model = terminal
        .ask(&format!("Model [{default_model}]: "))
        .ok_or(SetupError::InputEnded)?;
    let api_key = ask_key(terminal, true)?;
    Ok(Choice {
        provider: kind.as_str(),
        base_url: kind.service().default_url.to_string(),
        model: if model.trim().is_empty() {
            default_model.to_string()
        } else {
            model.trim().to_string()
        },
        api_key,
    })
}

async fn other_server(terminal: &mut Terminal<'_>) -> Result<Choice, SetupError> {
    let base_url = loop {
        let url = terminal
            .ask("Server address (e.g. http://127.0.0.1:8080/v1): ")
            .ok_or(SetupError::InputEnded)?;
        let url = url.trim().trim_end_matches('/').to_string();
        if url.starts_with("http://") || url.starts_with("https://") {
            break url;
        }
        terminal.say("The address starts with http:// or https://.");
    };
    // A server on this machine or a private network usually needs none.
    let required = !talaria_engine::is_local(&base_url);
    // The key is checked against the model list as soon as it is typed: a refused one is
    // asked for again before anything else.
    let (api_key, models) = loop {
        let api_key = ask_key(terminal, required)?;
        match models_at(&base_url, &api_key, Duration::from_secs(5)).await {
            ModelList::Listed(models) => break (api_key, models),
            ModelList::Unanswered => break (api_key, Vec::new()),
            ModelList::KeyRefused(status) => terminal.say(&format!(
                "✗ The server refused {} (HTTP {status}). Type the key again.",
                if api_key.is_empty() {
                    "to answer without a key"
                } else {
                    "this key"
                }
            )),
        }
    };
    let model = pick_model(terminal, &models)?;
    Ok(Choice {
        provider: ProviderKind::OpenAi.as_str(),
        base_url,
        model,
        api_key,
    })
}

fn ask_key(terminal: &mut Terminal<'_>, required: bool) -> Result<String, SetupError> {
    let question = if required {
        "API key (typed without echo): "
    } else {
        "API key (typed without echo; Enter for none): "
    };
    loop {
        let key = terminal
            .ask_hidden(question)
            .ok_or(SetupError::InputEnded)?;
        let key = key.trim().to_string();
        if !key.is_empty() || !required {
            return Ok(key);
        }
        terminal.say("The key is needed for this provider.");
    }
}

/// A model from the server's list (by number or name), or one typed.
fn pick_model(terminal: &mut Terminal<'_>, models: &[String]) -> Result<String, SetupError> {
    for (i, model) in models.iter().enumerate().take(20) {
        terminal.say(&format!("  {}) {model}", i + 1));
    }
    loop {
        let question = match models.first() {
            Some(first) => format!("Model [{first}]: "),
            None => "Model: ".to_string(),
        };
        let answer = terminal.ask(&question).ok_or(SetupError::InputEnded)?;
        let answer = answer.trim();
        if answer.is_empty()
            && let Some(first) = models.first()
        {
            return Ok(first.clone());
        }
        if let Ok(n) = answer.parse::<usize>()
            && let Some(model) = models.get(n.wrapping_sub(1))
        {
            return Ok(model.clone());
        }
        if !answer.is_empty() {
            return Ok(answer.to_string());
        }
        terminal.say("Type the model's name.");
    }
}

/// The configuration `file` makes, read as the server reads it (the environment left out,
/// so the check tests what is written).
///
/// The configuration's home is then the real one, so that fixes name the file the user
/// edits, never the check's temporary copy.
fn config_of(file: &str, home: &Path) -> Result<(tempfile::TempDir, Config), SetupError> {
    let dir = tempfile::tempdir().map_err(|e| SetupError::Check(e.to_string()))?;
    std::fs::write(dir.path().join("config.toml"), file)
        .map_err(|e| SetupError::Check(e.to_string()))?;
    let staged = dir.path().display().to_string();
    let mut config = Config::load_with(&|key| (key == "TALARIA_HOME").then(|| staged.clone()))
        .map_err(|e| SetupError::Check(e.to_string()))?;
    config.home = home.to_path_buf();
    Ok((dir, config))
}

/// A one-token call with the configuration `file` makes; the reason and its fix when it
/// fails.
async fn check(file: &str, home: &Path) -> Result<(), SetupError> {
    let file = file.to_string();
    let home = home.to_path_buf();
    let (_dir, config) = tokio::task::spawn_blocking(move || config_of(&file, &home))
        .await
        .map_err(|e| SetupError::Check(e.to_string()))??;
    crate::doctor::test_call(&config)
        .await
        .map_err(|(why, fix)| SetupError::Check(format!("{why} (fix: {fix})")))
}

/// Variables in the environment that would override what was written.
fn warn_about_environment(terminal: &mut Terminal<'_>) {
    let set = overriding_variables(&|name| std::env::var(name).ok());
    if !set.is_empty() {
        terminal.say(&format!(
            "Note: {} set in this environment override{} the file where Talaria sees them.",
            set.join(", "),
            if set.len() == 1 { "s" } else { "" }
        ));
    }
}

/// The declared variables set in `env` that override what the set-up writes: the provider,
/// the model, and a service's address and keys.
fn overriding_variables(env: &dyn Fn(&str) -> Option<String>) -> Vec<&'static str> {
    let services: Vec<&str> = talaria_engine::key_tables().collect();
    talaria_engine::configuration_variables_set(env)
        .into_iter()
        .filter(|(_, key)| {
            key == "provider"
                || key == "model"
                || key
                    .split_once('.')
                    .is_some_and(|(table, _)| services.contains(&table))
        })
        .map(|(variable, _)| variable)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_named_are_the_declared_ones_over_what_setup_writes() {
        let env = |name: &str| {
            [
                "TALARIA_MODEL",
                "ANTHROPIC_BASE_URL",
                "OPENAI_API_KEY",
                "TALARIA_CONTEXT_WINDOW",
            ]
            .contains(&name)
            .then(|| "x".to_string())
        };
        assert_eq!(
            overriding_variables(&env),
            ["TALARIA_MODEL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL"]
        );
        assert_eq!(host_of("https://api.openai.com/v1"), "api.openai.com");
        assert_eq!(host_of("https://api.anthropic.com"), "api.anthropic.com");
    }

    #[test]
    fn the_file_quotes_what_it_writes() {
        let choice = Choice {
            provider: "openai",
            base_url: "http://127.0.0.1:8080/v1".into(),
            model: "qwen \"coder\"".into(),
            api_key: "sk-\\x".into(),
        };
        let text = choice.to_toml();
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert_eq!(parsed["model"].as_str(), Some("qwen \"coder\""));
        assert_eq!(parsed["openai"]["api_key"].as_str(), Some("sk-\\x"));
        assert_eq!(
            parsed["openai"]["base_url"].as_str(),
            Some("http://127.0.0.1:8080/v1")
        );
    }
}
