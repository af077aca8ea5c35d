//! Configuration: `$TALARIA_HOME/config.toml` overridden by environment variables.
//!
//! Precedence: environment > config file > defaults. An API key counts as configured when it
//! is present at all, even empty (an empty key sends no credentials: local servers). Several
//! keys form a pool: `api_keys = [...]` in the file, or comma-separated in the variable.

mod keys;
mod parts;
use parts::{
    Bases, auxiliaries_of, context_window_of, fallbacks_of, key_strategy_of, learning_of,
    mcp_servers_of, mode_of, provider_of, retry_of, shell_environment_of, store_of, titles_of,
    tokenizers_of,
};

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::approval::Mode;
use crate::credentials::KeyStrategy;
use crate::router::Price;

/// Which model API a session talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI Chat Completions and compatible servers.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// The OpenAI Responses API.
    OpenAiResponses,
}

impl ProviderKind {
    /// Parses a provider name.
    pub fn parse(name: &str) -> Result<Self, ConfigError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "openai" | "openai-chat" | "openai-compatible" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            "openai-responses" | "responses" => Ok(Self::OpenAiResponses),
            _ => Err(ConfigError::value(
                "provider",
                format!("{name:?}"),
                Self::unknown(name),
            )),
        }
    }

    /// What an unknown provider name is told, with the name it is probably a typo of.
    fn unknown(name: &str) -> String {
        let names = ["openai", "anthropic", "openai-responses"];
        let expected = "expected \"openai\", \"anthropic\" or \"openai-responses\"";
        match keys::closest(name.trim(), &names) {
            Some(meant) => format!("unknown provider; did you mean \"{meant}\"? ({expected})"),
            None => format!("unknown provider; {expected}"),
        }
    }

    /// The model used when none is configured.
    fn default_model(self) -> &'static str {
        match self {
            Self::OpenAi | Self::OpenAiResponses => "gpt-4.1-mini",
            Self::Anthropic => "claude-sonnet-4-5",
        }
    }

    /// The name used in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::OpenAiResponses => "openai-responses",
        }
    }

    /// The environment variable that holds this provider's key.
    pub fn key_variable(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_API_KEY",
            Self::OpenAi | Self::OpenAiResponses => "OPENAI_API_KEY",
        }
    }

    /// The environment variable that holds this provider's address.
    pub fn url_variable(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_BASE_URL",
            Self::OpenAi | Self::OpenAiResponses => "OPENAI_BASE_URL",
        }
    }

    /// The table of `config.toml` this provider's address and keys are in.
    pub fn table(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi | Self::OpenAiResponses => "openai",
        }
    }
}

/// Why a base URL cannot be used: no `http://`/`https://`, or no host.
fn base_url_problem(url: &str) -> Option<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        let suggestion = if is_local_without_scheme(url) {
            "http"
        } else {
            "https"
        };
        return Some(format!(
            "an address starting with http:// or https:// is expected (e.g. {suggestion}://{})",
            url.trim_start_matches('/')
        ));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Some(format!(
            "{scheme}:// cannot be used: an http:// or https:// address is expected"
        ));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() {
        return Some("the address has no host (e.g. http://127.0.0.1:8080/v1)".into());
    }
    None
}

/// `is_local` for a URL that may lack its scheme.
fn is_local_without_scheme(url: &str) -> bool {
    is_local(&format!("http://{url}"))
}

/// The active provider's base URL checked, where it is written.
fn check_base_url(
    provider: ProviderKind,
    endpoint: &Endpoint,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let Some(problem) = base_url_problem(&endpoint.base_url) else {
        return Ok(());
    };
    let variable = provider.url_variable();
    Err(match env(variable).filter(|v| !v.trim().is_empty()) {
        Some(value) => ConfigError::variable(variable, &value, problem),
        None => ConfigError::value(
            format!("{}.base_url", provider.table()),
            format!("{:?}", endpoint.base_url),
            problem,
        ),
    })
}

/// An endpoint's address and keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub base_url: String,
    /// Empty: no key configured. `[""]`: explicitly none needed.
    pub api_keys: Vec<String>,
}

/// One entry of the fallback chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    pub provider: ProviderKind,
    pub model: String,
    pub endpoint: Endpoint,
}

/// A model for one kind of side task (`[auxiliary.<task>]`: `compression`, `title`, `review`,
/// `subagent`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auxiliary {
    pub provider: ProviderKind,
    pub model: String,
    pub endpoint: Endpoint,
    /// The longest a side task of this kind may take.
    pub timeout_secs: u64,
}

pub use crate::router::DEFAULT_SIDE_TASK_TIMEOUT_SECS;

/// Retry and backoff settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per model for retryable errors (including the first).
    pub max_attempts: u32,
    pub base_ms: u64,
    pub cap_ms: u64,
    /// The longest `Retry-After` honoured.
    pub retry_after_cap_secs: u64,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `TALARIA_HOME`.
    pub home: PathBuf,
    pub provider: ProviderKind,
    pub model: String,
    /// Models offered for switching (always includes `model`).
    pub models: Vec<String>,
    /// Context window of the model, in tokens.
    pub context_window: u64,
    /// Whether `context_window` was set (file or environment) rather than defaulted; a
    /// default may be replaced by what a local server reports.
    pub context_window_set: bool,
    /// Model calls allowed in one turn before it stops with `max_turn_requests`.
    pub max_turn_requests: u32,
    /// `max_tokens` sent with each call, when set.
    pub max_output_tokens: Option<u32>,
    /// Whether the model accepts images.
    pub supports_images: bool,
    /// The approval mode new sessions start in.
    pub mode: Mode,
    /// Toolsets offered to sessions (`None`: all of them).
    pub toolsets: Option<Vec<String>>,
    /// Reads of credential stores and Talaria's own configuration ask in every mode (`yolo`
    /// included). `false` relaxes them to the rule for `.env` files.
    pub ask_for_credential_reads: bool,
    pub connect_timeout_secs: u64,
    /// A stream with no bytes for this long is abandoned.
    pub stream_idle_timeout_secs: u64,
    pub retry: RetryPolicy,
    pub key_strategy: KeyStrategy,
    pub key_cooldown_secs: u64,
    /// `max_tokens` for Anthropic when `max_output_tokens` is not set (the API requires one).
    pub anthropic_max_tokens: u32,
    /// Anthropic extended-thinking budget, when enabled.
    pub thinking_budget: Option<u32>,
    /// Ask the Responses API for reasoning summaries.
    pub reasoning_summaries: bool,
    pub openai: Endpoint,
    pub anthropic: Endpoint,
    pub fallback: Vec<Fallback>,
    /// Models for side tasks, by task name; a task without one uses the session's model.
    pub auxiliary: std::collections::BTreeMap<String, Auxiliary>,
    /// USD per million tokens, by model.
    pub prices: HashMap<String, Price>,
    /// Problems that did not stop loading (unknown keys, e.g. from a newer version).
    pub warnings: Vec<String>,
    /// Those of `warnings` that are probably a known key mistyped (`modle`): its setting is
    /// not applied, so `talaria doctor` counts them as problems.
    pub typos: Vec<String>,
    /// The longest wait for a model's response to start (`None`: 300 s for hosted APIs,
    /// 1800 s for servers on this machine or a private network, which can spend minutes
    /// reading a long prompt on a CPU).
    pub first_byte_timeout_secs: Option<u64>,
    /// A "still working" notice after this many seconds of silence from the model.
    pub still_working_secs: u64,
    /// Nudge a model once per turn when it announces an action without taking it.
    pub nudges: bool,
    /// Ask the model once to run the project's check after it edited files and ran nothing
    /// (`verify_after_edits`; unset: for models served on this machine or a private network).
    pub verify_after_edits_set: Option<bool>,
    /// When and how the context is compacted (`[compression]`).
    pub compression: talaria_compress::Settings,
    /// The background review (`[learning]`).
    pub learning: Learning,
    /// Memory file limits in characters (`[memory]`): the agent's notes, the user's profile.
    pub memory_chars: (usize, usize),
    /// Subagents running at once (`[delegation] max_concurrent`; 0 offers no `delegate_task`).
    pub max_subagents: usize,
    /// MCP servers every session connects (`[mcp_servers.<name>]`, enabled ones).
    pub mcp_servers: Vec<McpServerEntry>,
    /// Token encodings configured per model (`[tokenizers]`); others follow the model family.
    pub tokenizers: HashMap<String, talaria_compress::Encoding>,
    /// Sessions get a title from a model (`[auxiliary.title]`, else the session's) after
    /// their first turn; off: the first line of the first prompt.
    pub titles: bool,
    /// `titles` was set (file or environment) rather than defaulted.
    pub titles_set: bool,
    /// Slots the local model server reports (llama.cpp `total_slots`), when probed.
    pub server_slots: Option<u64>,
    /// The OS sandbox for commands (`[sandbox]`, `TALARIA_SANDBOX`).
    pub sandbox: SandboxConfig,
    /// How commands' environment is adjusted (`[shell_environment]`), and the variables
    /// named by `api_key_env` (withheld from commands like every provider variable).
    pub shell_environment: ShellEnvironment,
    /// Where sessions are kept (`[store]`, `TALARIA_STORE_URL`).
    pub store: StoreConfig,
}

/// `[store]`: the embedded SQLite file under `TALARIA_HOME`, or a PostgreSQL database shared
/// by every host that names it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StoreConfig {
    /// A `postgres://` URL (`TALARIA_STORE_URL` over `[store] url`); `None`: embedded.
    pub url: Option<String>,
    /// A passfile in libpq's format (`[store] passfile`, `~` expanded).
    pub passfile: Option<PathBuf>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &self.url.as_deref().map(without_password))
            .field("passfile", &self.passfile)
            .finish()
    }
}

/// A URL with the password of its user part (if any) hidden: safe to show and log.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// `[sandbox]`: the OS sandbox every command runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Off only when `mode = "off"` (or `TALARIA_SANDBOX=off`).
    pub enabled: bool,
    /// More writable places (`~` expanded; relative ones are the project's).
    pub writable: Vec<String>,
    /// More places hidden from commands.
    pub hidden: Vec<String>,
    /// Commands may open network connections.
    pub network: bool,
    /// UNIX sockets outside the writable places commands may connect to (`~` expanded).
    pub unix_sockets: Vec<String>,
    /// The most processes (and threads) one command may run at once; 0 for no limit.
    pub max_processes: u32,
    /// Use user, mount and PID namespaces where the machine allows them (`[sandbox]
    /// namespaces`, `TALARIA_SANDBOX_NAMESPACES`).
    pub namespaces: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            writable: Vec::new(),
            hidden: Vec::new(),
            network: true,
            unix_sockets: Vec::new(),
            max_processes: talaria_sandbox::DEFAULT_MAX_PROCESSES,
            namespaces: true,
        }
    }
}

/// `[shell_environment]`, plus what the configuration itself names as secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellEnvironment {
    /// Variables kept although they look secret.
    pub keep: Vec<String>,
    /// Variables set for every command.
    pub set: std::collections::BTreeMap<String, String>,
    /// Variables withheld because the configuration reads keys from them (`api_key_env`).
    pub withheld: Vec<String>,
}

/// Why the configuration could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {detail}")]
    Read { path: String, detail: String },
    /// The file is not TOML, or a value has the wrong type; `detail` names the line, the key
    /// when there is one, and shows the line.
    #[error("{path}, {detail}")]
    Parse { path: String, detail: String },
    /// A value of the right type that means nothing here (`mode = "yes"`), with where it is
    /// written: the file and line, or the environment variable.
    #[error("{place}: {key} = {value}: {detail}")]
    Value {
        key: String,
        value: String,
        detail: String,
        place: String,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// Several problems in the file, each as its own error would say it.
    #[error("{} problems in the configuration:\n{}", .0.len(), .0.iter().map(|e| format!("- {e}")).collect::<Vec<_>>().join("\n"))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    /// A bad value of `key` in the configuration file (its line is found when the file is
    /// read).
    fn value(
        key: impl Into<String>,
        value: impl std::fmt::Display,
        detail: impl Into<String>,
    ) -> Self {
        Self::Value {
            key: key.into(),
            value: value.to_string(),
            detail: detail.into(),
            place: String::new(),
        }
    }

    /// The same bad value, written under another key.
    fn for_key(self, key: &str) -> Self {
        match self {
            Self::Value {
                value,
                detail,
                place,
                ..
            } => Self::Value {
                key: key.into(),
                value,
                detail,
                place,
            },
            other => other,
        }
    }

    /// A bad value that came from an environment variable.
    fn variable(name: &str, value: &str, detail: impl Into<String>) -> Self {
        Self::Value {
            key: name.into(),
            value: format!("{value:?}"),
            detail: detail.into(),
            place: "environment".into(),
        }
    }

    /// What to do about it: a variable is corrected (or unset) where it is set, a file at
    /// the place named.
    pub fn fix(&self) -> String {
        match self {
            Self::Value { key, place, .. } if place == "environment" => {
                format!(
                    "correct {key} where it is set (your shell or the editor's agent settings), or unset it"
                )
            }
            Self::Several(all)
                if all
                    .iter()
                    .all(|e| matches!(e, Self::Value { place, .. } if place == "environment")) =>
            {
                "correct the variables named where they are set, or unset them".into()
            }
            Self::Several(_) => "correct each place named".into(),
            Self::Read { .. } => "make the file readable, or move it away".into(),
            _ => "correct the file at the place named".into(),
        }
    }

    /// The line of the file this error is at, when it is one of the file's.
    fn line_in(&self, text: &str) -> Option<usize> {
        match self {
            Self::Value { key, place, .. } if place != "environment" => {
                crate::config_place::line_of(text, key)
            }
            _ => None,
        }
    }

    /// Fills in where a bad value of the file is written.
    fn placed(self, path: &Path, text: &str) -> Self {
        match self {
            Self::Value {
                key,
                value,
                detail,
                place,
            } if place.is_empty() => {
                let place = match crate::config_place::line_of(text, &key) {
                    Some(line) => format!("{}, line {line}", path.display()),
                    None => path.display().to_string(),
                };
                Self::Value {
                    key,
                    value,
                    detail,
                    place,
                }
            }
            other => other,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct FileEndpoint {
    base_url: Option<String>,
    api_key: Option<String>,
    api_keys: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct FileFallback {
    provider: String,
    model: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
}

#[derive(Debug, Deserialize)]
struct FileAuxiliary {
    provider: Option<String>,
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct FileCompression {
    enabled: Option<bool>,
    threshold: Option<f64>,
    large_threshold: Option<f64>,
    tail_ratio: Option<f64>,
    head_entries: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
struct FileLearning {
    skill_review_after: Option<u32>,
    memory_review_after: Option<u32>,
    stage_reviews: Option<bool>,
    max_review_calls: Option<u32>,
    on_local_servers: Option<bool>,
}

/// An MCP server for every session (`[mcp_servers.<name>]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct McpServerEntry {
    #[serde(skip)]
    pub name: String,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    pub enabled: Option<bool>,
    pub startup_timeout_secs: Option<u64>,
    pub tool_timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct FileDelegation {
    max_concurrent: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
struct FileSandbox {
    mode: Option<String>,
    writable: Option<Vec<String>>,
    hidden: Option<Vec<String>>,
    network: Option<bool>,
    unix_sockets: Option<Vec<String>>,
    max_processes: Option<u32>,
    namespaces: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct FileShellEnvironment {
    keep: Option<Vec<String>>,
    set: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
struct FileStore {
    url: Option<String>,
    passfile: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct FileMemory {
    memory_chars: Option<usize>,
    user_chars: Option<usize>,
}

/// The background review (`[learning]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learning {
    /// Model calls that used tools since the last skill write before a review (0: never).
    pub skill_review_after: u32,
    /// User turns since the last memory write before a review (0: never).
    pub memory_review_after: u32,
    /// The review's writes wait as proposals for the user (else they go live).
    pub stage_reviews: bool,
    /// The most model calls one review makes.
    pub max_review_calls: u32,
    /// Reviews also run on a model server on this machine or a private network (where they
    /// compete with the conversation for the server; off unless `[auxiliary.review]` names
    /// another endpoint).
    pub on_local_servers: bool,
}

impl Default for Learning {
    fn default() -> Self {
        Self {
            skill_review_after: 10,
            memory_review_after: 10,
            stage_reviews: true,
            max_review_calls: 16,
            on_local_servers: false,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct FileConfig {
    provider: Option<String>,
    model: Option<String>,
    models: Option<Vec<String>>,
    context_window: Option<u64>,
    max_turn_requests: Option<u32>,
    max_output_tokens: Option<u32>,
    supports_images: Option<bool>,
    mode: Option<String>,
    toolsets: Option<Vec<String>>,
    ask_for_credential_reads: Option<bool>,
    titles: Option<bool>,
    nudges: Option<bool>,
    verify_after_edits: Option<bool>,
    first_byte_timeout_secs: Option<u64>,
    still_working_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    stream_idle_timeout_secs: Option<u64>,
    max_attempts: Option<u32>,
    retry_base_ms: Option<u64>,
    retry_cap_ms: Option<u64>,
    retry_after_cap_secs: Option<u64>,
    key_strategy: Option<String>,
    key_cooldown_secs: Option<u64>,
    anthropic_max_tokens: Option<u32>,
    thinking_budget: Option<u32>,
    reasoning_summaries: Option<bool>,
    #[serde(default)]
    openai: FileEndpoint,
    #[serde(default)]
    anthropic: FileEndpoint,
    #[serde(default)]
    fallback: Vec<FileFallback>,
    #[serde(default)]
    auxiliary: std::collections::BTreeMap<String, FileAuxiliary>,
    #[serde(default)]
    prices: HashMap<String, Price>,
    #[serde(default)]
    compression: FileCompression,
    #[serde(default)]
    learning: FileLearning,
    #[serde(default)]
    memory: FileMemory,
    #[serde(default)]
    delegation: FileDelegation,
    #[serde(default)]
    mcp_servers: std::collections::BTreeMap<String, McpServerEntry>,
    /// Model name → tiktoken encoding (`cl100k`, `o200k`).
    #[serde(default)]
    tokenizers: HashMap<String, String>,
    #[serde(default)]
    sandbox: FileSandbox,
    #[serde(default)]
    shell_environment: FileShellEnvironment,
    #[serde(default)]
    store: FileStore,
}

/// `[sandbox]` with `TALARIA_SANDBOX` and `TALARIA_SANDBOX_NAMESPACES` (`off`/`on`) over it.
fn sandbox_config(
    file: FileSandbox,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SandboxConfig, ConfigError> {
    let parse = |value: &str| match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Some(true),
        "off" | "false" | "0" | "no" => Some(false),
        _ => None,
    };
    const ON_OR_OFF: &str = "the sandbox is \"on\" or \"off\"";
    let enabled = match env("TALARIA_SANDBOX").filter(|v| !v.trim().is_empty()) {
        Some(value) => parse(&value)
            .ok_or_else(|| ConfigError::variable("TALARIA_SANDBOX", &value, ON_OR_OFF))?,
        None => match &file.mode {
            Some(mode) => parse(mode).ok_or_else(|| {
                ConfigError::value("sandbox.mode", format!("{mode:?}"), ON_OR_OFF)
            })?,
            None => true,
        },
    };
    let namespaces = match env("TALARIA_SANDBOX_NAMESPACES").filter(|v| !v.trim().is_empty()) {
        Some(value) => parse(&value).ok_or_else(|| {
            ConfigError::variable("TALARIA_SANDBOX_NAMESPACES", &value, "\"on\" or \"off\"")
        })?,
        None => file.namespaces.unwrap_or(true),
    };
    Ok(SandboxConfig {
        enabled,
        writable: file.writable.unwrap_or_default(),
        hidden: file.hidden.unwrap_or_default(),
        network: file.network.unwrap_or(true),
        unix_sockets: file.unix_sockets.unwrap_or_default(),
        max_processes: file
            .max_processes
            .unwrap_or(talaria_sandbox::DEFAULT_MAX_PROCESSES),
        namespaces,
    })
}

/// `[compression]` over the defaults; shares must lie in (0, 1].
fn compression_settings(file: &FileCompression) -> Result<talaria_compress::Settings, ConfigError> {
    let defaults = talaria_compress::Settings::default();
    let share = |name: &str, value: Option<f64>, default: f64| match value {
        None => Ok(default),
        Some(v) if v > 0.0 && v <= 1.0 => Ok(v),
        Some(v) => Err(ConfigError::value(
            format!("compression.{name}"),
            v,
            "it is a share of the window, above 0 and at most 1",
        )),
    };
    Ok(talaria_compress::Settings {
        enabled: file.enabled.unwrap_or(defaults.enabled),
        threshold: share("threshold", file.threshold, defaults.threshold)?,
        large_threshold: share(
            "large_threshold",
            file.large_threshold,
            defaults.large_threshold,
        )?,
        large_window: defaults.large_window,
        tail_ratio: share("tail_ratio", file.tail_ratio, defaults.tail_ratio)?,
        head_entries: file.head_entries.unwrap_or(defaults.head_entries),
    })
}

/// Parses `config.toml`, collecting keys this version does not know (they are reported, not
/// fatal, so a file written for a newer version still loads). A known key with a bad value is
/// an error naming the key and its line.
fn parse_file(text: &str, unknown: &mut Vec<String>) -> Result<FileConfig, toml::de::Error> {
    let deserializer = toml::Deserializer::parse(text)?;
    serde_ignored::deserialize(deserializer, |path| unknown.push(path.to_string()))
}

/// The context window assumed when neither the configuration nor the server says.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// Whether a base URL points at this machine or a private network.
pub fn is_local(base_url: &str) -> bool {
    let host = base_url
        .split("://")
        .nth(1)
        .unwrap_or(base_url)
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") || host.ends_with(".local") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback() || ip.is_unique_local(),
        Err(_) => false,
    }
}

/// The default home: `$TALARIA_HOME`, else `~/.talaria`.
pub fn default_home(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(home) = env("TALARIA_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    let user_home = env("HOME")
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| ".".into());
    Path::new(&user_home).join(".talaria")
}

/// Splits a comma-separated key list; an empty value is one empty key (no credentials needed).
fn split_keys(value: &str) -> Vec<String> {
    let keys: Vec<String> = value
        .split(',')
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .collect();
    if keys.is_empty() {
        vec![String::new()]
    } else {
        keys
    }
}

fn endpoint(
    file: FileEndpoint,
    env: &dyn Fn(&str) -> Option<String>,
    url_var: &str,
    key_var: &str,
    default_url: &str,
) -> Endpoint {
    let base_url = env(url_var)
        .filter(|v| !v.trim().is_empty())
        .or(file.base_url)
        .unwrap_or_else(|| default_url.to_string());
    let api_keys = match env(key_var) {
        Some(value) => split_keys(&value),
        None => match (file.api_keys, file.api_key) {
            (Some(keys), _) if !keys.is_empty() => keys,
            (_, Some(key)) => split_keys(&key),
            _ => Vec::new(),
        },
    };
    Endpoint { base_url, api_keys }
}

/// Whether a TOML error is about a value's type or meaning (not the file's syntax).
fn is_type_error(message: &str) -> bool {
    [
        "invalid type",
        "invalid value",
        "unknown variant",
        "invalid length",
    ]
    .iter()
    .any(|start| message.starts_with(start))
}

/// The keys a table of the file knows (`""` for the top level).
fn known_keys(table: &str) -> Option<&'static [&'static str]> {
    Some(match table {
        "" => keys::fields_of::<FileConfig>(),
        "openai" | "anthropic" => keys::fields_of::<FileEndpoint>(),
        "fallback" => keys::fields_of::<FileFallback>(),
        "auxiliary" => keys::fields_of::<FileAuxiliary>(),
        "compression" => keys::fields_of::<FileCompression>(),
        "learning" => keys::fields_of::<FileLearning>(),
        "memory" => keys::fields_of::<FileMemory>(),
        "delegation" => keys::fields_of::<FileDelegation>(),
        "sandbox" => keys::fields_of::<FileSandbox>(),
        "shell_environment" => keys::fields_of::<FileShellEnvironment>(),
        "store" => keys::fields_of::<FileStore>(),
        "mcp_servers" => keys::fields_of::<McpServerEntry>(),
        _ => return None,
    })
}

/// The known key an unknown one (`sandbox.netwrok`, `fallback.0.modle`) is probably a
/// typo of, written as the file would.
fn typo_of(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('.').collect();
    let (key, tables) = parts.split_last()?;
    let table = tables.first().copied().unwrap_or("");
    let known = known_keys(table)?;
    let meant = keys::closest(key, known)?;
    let mut written: Vec<&str> = tables.to_vec();
    written.push(meant);
    Some(written.join("."))
}

impl Bases {
    /// Both providers' endpoints: the variables over the file over the defaults.
    fn of(
        openai: FileEndpoint,
        anthropic: FileEndpoint,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        Self {
            openai: endpoint(
                openai,
                env,
                "OPENAI_BASE_URL",
                "OPENAI_API_KEY",
                "https://api.openai.com/v1",
            ),
            anthropic: endpoint(
                anthropic,
                env,
                "ANTHROPIC_BASE_URL",
                "ANTHROPIC_API_KEY",
                "https://api.anthropic.com",
            ),
        }
    }
}

/// The configuration with a warning per unknown key of the file (and the key it is probably
/// a typo of).
fn with_warnings(mut config: Config, path: &Path, unknown: Vec<String>) -> Config {
    for key in unknown {
        match typo_of(&key) {
            Some(meant) => {
                let warning = format!(
                    "{}: unknown key `{key}` ignored; did you mean `{meant}`? (until it is \
                     renamed, the default applies)",
                    path.display()
                );
                config.typos.push(warning.clone());
                config.warnings.push(warning);
            }
            None => config.warnings.push(format!(
                "{}: unknown key `{key}` ignored (a setting of another Talaria version, or a typo)",
                path.display()
            )),
        }
    }
    config
}

impl Config {
    /// Loads from the process environment and `$TALARIA_HOME/config.toml`.
    pub fn load() -> Result<Self, ConfigError> {
        Self::load_with(&|key| std::env::var(key).ok())
    }

    /// Loads with a custom environment (for tests).
    pub fn load_with(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let home = default_home(env);
        let path = home.join("config.toml");
        let file = match std::fs::read_to_string(&path) {
            Ok(text) => return Self::load_file(home, &path, &text, env),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileConfig::default(),
            Err(e) => {
                return Err(ConfigError::Read {
                    path: path.display().to_string(),
                    detail: e.to_string(),
                });
            }
        };
        Self::resolve(home, file, env)
    }

    /// Loads with the file's text; every problem of the file is reported, not the first
    /// only: after each one its line is left out and the rest read again.
    fn load_file(
        home: PathBuf,
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        const MAX_PROBLEMS: usize = 20;
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut problems: Vec<ConfigError> = Vec::new();
        let mut left_out: Vec<usize> = Vec::new();
        loop {
            let current = lines.join("\n");
            let mut unknown = Vec::new();
            let (problem, line) = match parse_file(&current, &mut unknown) {
                Ok(file) => match Self::resolve(home.clone(), file, env) {
                    Ok(config) if problems.is_empty() => {
                        return Ok(with_warnings(config, path, unknown));
                    }
                    Ok(_) => break,
                    Err(e) => {
                        let line = e.line_in(&current);
                        (e.placed(path, &current), line)
                    }
                },
                // After a line was left out, a syntax error may be that line's doing (a value
                // over several lines): only type errors are told from there on.
                Err(e) if !problems.is_empty() && !is_type_error(e.message()) => break,
                Err(e) => {
                    let line = e.span().map(|span| {
                        current[..span.start.min(current.len())]
                            .matches('\n')
                            .count()
                            + 1
                    });
                    let error = ConfigError::Parse {
                        path: path.display().to_string(),
                        detail: crate::config_place::describe(&current, &e),
                    };
                    (error, line)
                }
            };
            problems.push(problem);
            match line {
                Some(line) if !left_out.contains(&line) && problems.len() < MAX_PROBLEMS => {
                    left_out.push(line);
                    if let Some(text) = lines.get_mut(line - 1) {
                        text.clear();
                    }
                }
                _ => break,
            }
        }
        Err(if problems.len() == 1 {
            problems.remove(0)
        } else {
            ConfigError::Several(problems)
        })
    }

    fn resolve(
        home: PathBuf,
        file: FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env_nonempty = |key: &str| env(key).filter(|v| !v.trim().is_empty());
        let (shell_environment, retry) = (shell_environment_of(&file), retry_of(&file));
        let provider = provider_of(file.provider.as_deref(), &env_nonempty)?;
        let (context_window, context_window_set) =
            context_window_of(file.context_window, &env_nonempty)?;
        let model = env_nonempty("TALARIA_MODEL")
            .or(file.model)
            .unwrap_or_else(|| provider.default_model().into());
        let mut models = file.models.unwrap_or_default();
        if !models.contains(&model) {
            models.insert(0, model.clone());
        }
        let mode = mode_of(file.mode.as_deref())?;
        let key_strategy = key_strategy_of(file.key_strategy.as_deref())?;
        let bases = Bases::of(file.openai, file.anthropic, env);
        check_base_url(provider, bases.for_kind(provider), env)?;
        let fallback = fallbacks_of(file.fallback, &bases, env)?;
        let auxiliary = auxiliaries_of(file.auxiliary, provider, &model, &bases, env)?;
        let Bases { openai, anthropic } = bases;
        let (titles, titles_set) = titles_of(file.titles, &env_nonempty);
        Ok(Self {
            sandbox: sandbox_config(file.sandbox, env)?,
            store: store_of(file.store, env)?,
            shell_environment,
            compression: compression_settings(&file.compression)?,
            tokenizers: tokenizers_of(&file.tokenizers)?,
            learning: learning_of(&file.learning),
            memory_chars: (
                file.memory.memory_chars.unwrap_or(2_200).max(100),
                file.memory.user_chars.unwrap_or(1_375).max(100),
            ),
            max_subagents: file.delegation.max_concurrent.unwrap_or(3).min(16),
            mcp_servers: mcp_servers_of(file.mcp_servers),
            home,
            provider,
            model,
            models,
            context_window,
            context_window_set,
            max_turn_requests: file.max_turn_requests.unwrap_or(90).max(1),
            max_output_tokens: file.max_output_tokens,
            supports_images: file.supports_images.unwrap_or(true),
            mode,
            toolsets: file.toolsets,
            ask_for_credential_reads: file.ask_for_credential_reads.unwrap_or(true),
            connect_timeout_secs: file.connect_timeout_secs.unwrap_or(30),
            stream_idle_timeout_secs: file.stream_idle_timeout_secs.unwrap_or(180),
            retry,
            key_strategy,
            key_cooldown_secs: file.key_cooldown_secs.unwrap_or(60),
            anthropic_max_tokens: file.anthropic_max_tokens.unwrap_or(8192),
            thinking_budget: file.thinking_budget.filter(|b| *b > 0),
            reasoning_summaries: file.reasoning_summaries.unwrap_or(true),
            openai,
            anthropic,
            fallback,
            auxiliary,
            prices: file.prices,
            warnings: Vec::new(),
            typos: Vec::new(),
            nudges: file.nudges.unwrap_or(true),
            verify_after_edits_set: file.verify_after_edits,
            first_byte_timeout_secs: file.first_byte_timeout_secs,
            still_working_secs: file.still_working_secs.unwrap_or(10).max(1),
            titles_set,
            server_slots: None,
            titles,
        })
    }

    /// Whether the session's model is served on this machine or a private network.
    pub fn local_model(&self) -> bool {
        is_local(&self.endpoint().base_url)
    }

    /// Whether a turn that edited files and ran nothing is asked once to run the project's
    /// check: as set, else for local models (hosted ones check their own work).
    pub fn verify_after_edits(&self) -> bool {
        self.verify_after_edits_set
            .unwrap_or_else(|| self.local_model())
    }

    /// Whether side task `task` has a model of its own on another endpoint.
    fn side_endpoint_elsewhere(&self, task: &str) -> bool {
        self.auxiliary
            .get(task)
            .is_some_and(|aux| aux.endpoint.base_url != self.endpoint().base_url)
    }

    /// Whether sessions get titles from a model: on a local server only when titles were
    /// turned on explicitly or `[auxiliary.title]` names another endpoint (a title request
    /// would take the server's slot, and its prompt cache, from the conversation).
    pub fn model_titles(&self) -> bool {
        self.titles
            && (!self.local_model() || self.titles_set || self.side_endpoint_elsewhere("title"))
    }

    /// Whether the background review runs: on a local server only when
    /// `[learning] on_local_servers` is set or `[auxiliary.review]` names another endpoint.
    pub fn reviews(&self) -> bool {
        (self.learning.skill_review_after > 0 || self.learning.memory_review_after > 0)
            && (!self.local_model()
                || self.learning.on_local_servers
                || self.side_endpoint_elsewhere("review"))
    }

    /// Whether the model server serves one request at a time, so side work would evict the
    /// conversation from its prompt cache: a local server, unless it reports more slots.
    pub fn single_slot(&self) -> bool {
        self.local_model() && self.server_slots.is_none_or(|slots| slots <= 1)
    }

    /// The endpoint of the selected provider.
    pub fn endpoint(&self) -> &Endpoint {
        match self.provider {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => &self.openai,
            ProviderKind::Anthropic => &self.anthropic,
        }
    }

    /// The call limits for a model served at `base_url`: servers on this machine or a private
    /// network get a long first-byte timeout and, unless `max_output_tokens` is set, a default
    /// output cap (they would otherwise generate without limit).
    pub fn call_limits(&self, base_url: &str, model: &str) -> crate::router::CallLimits {
        let local = is_local(base_url);
        let paced = local && self.max_output_tokens.is_none();
        crate::router::CallLimits {
            first_byte_timeout: std::time::Duration::from_secs(
                self.first_byte_timeout_secs
                    .unwrap_or(if local { 1800 } else { 300 })
                    .max(1),
            ),
            still_working_after: std::time::Duration::from_secs(self.still_working_secs),
            default_max_tokens: paced.then_some(crate::pace::UNMEASURED_CAP),
            pace: paced.then(|| crate::pace::Pace::of(base_url, model)),
        }
    }

    /// `None` when credentials are configured; otherwise what the user must set.
    pub fn missing_credentials(&self) -> Option<String> {
        if !self.endpoint().api_keys.is_empty() {
            return None;
        }
        let var = self.provider.key_variable();
        let table = match self.provider {
            ProviderKind::Anthropic => "anthropic",
            _ => "openai",
        };
        Some(format!(
            "no API key for the {} provider: set {var} in the agent's environment, or \
             api_key under [{table}] in {} (an empty key is allowed for local servers). Editors \
             and SDK clients may not pass your shell's environment to the agent; the config file \
             always works",
            self.provider.as_str(),
            self.home.join("config.toml").display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(vars: &[(&str, &str)], file: Option<&str>) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        if let Some(text) = file {
            std::fs::write(dir.path().join("config.toml"), text).expect("write");
        }
        let mut map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        map.insert("TALARIA_HOME".into(), dir.path().display().to_string());
        Config::load_with(&|key| map.get(key).cloned())
    }

    #[test]
    fn environment_overrides_the_file() {
        let config = load(
            &[("TALARIA_MODEL", "env-model"), ("OPENAI_BASE_URL", "http://x/v1")],
            Some("model = \"file-model\"\nmodels = [\"other\"]\ncontext_window = 4096\n[openai]\napi_key = \"k\"\n"),
        )
        .expect("config");
        assert_eq!(config.model, "env-model");
        assert_eq!(config.models, ["env-model", "other"]);
        assert_eq!(config.context_window, 4096);
        assert!(config.context_window_set);
        let defaulted = load(&[], Some("model = \"m\"\n")).expect("config");
        assert_eq!(defaulted.context_window, DEFAULT_CONTEXT_WINDOW);
        assert!(
            !defaulted.context_window_set,
            "a default may yield to the server's figure"
        );
        assert_eq!(config.openai.base_url, "http://x/v1");
        assert_eq!(config.openai.api_keys, ["k"]);
        assert!(config.missing_credentials().is_none());
    }

    #[test]
    fn compression_and_tokenizers_are_configurable_and_checked() {
        let config = load(
            &[],
            Some("model = \"m\"\n[compression]\nthreshold = 0.6\nhead_entries = 1\nenabled = false\n[tokenizers]\n\"my-model\" = \"o200k\"\n"),
        )
        .expect("config");
        assert!((config.compression.threshold - 0.6).abs() < 1e-9);
        assert_eq!(config.compression.head_entries, 1);
        assert!(!config.compression.enabled);
        assert!(
            (config.compression.tail_ratio - 0.2).abs() < 1e-9,
            "defaults stay"
        );
        assert_eq!(
            config.tokenizers.get("my-model"),
            Some(&talaria_compress::Encoding::O200k)
        );
        let bad_share = load(&[], Some("[compression]\nthreshold = 1.5\n"));
        assert!(
            matches!(&bad_share, Err(e @ ConfigError::Value { .. }) if e.to_string().contains("line 2: compression.threshold = 1.5")),
            "{bad_share:?}"
        );
        let bad_encoding = load(&[], Some("[tokenizers]\nx = \"p50k\"\n"));
        assert!(
            matches!(&bad_encoding, Err(e @ ConfigError::Value { .. }) if e.to_string().contains("line 2") && e.to_string().contains("cl100k and o200k")),
            "{bad_encoding:?}"
        );
    }

    #[test]
    fn auxiliary_models_per_task_default_to_the_session_provider_and_model() {
        let config = load(
            &[("OPENAI_API_KEY", "k"), ("AUX_KEY", "ak")],
            Some(concat!(
                "[auxiliary.title]\nmodel = \"small\"\ntimeout_secs = 20\n",
                "[auxiliary.compression]\nprovider = \"anthropic\"\nmodel = \"haiku\"\n",
                "base_url = \"http://127.0.0.1:9/\"\napi_key_env = \"AUX_KEY\"\n",
                "[auxiliary.review]\n",
            )),
        )
        .expect("config");
        let title = &config.auxiliary["title"];
        assert_eq!(
            (title.provider, title.model.as_str()),
            (ProviderKind::OpenAi, "small")
        );
        assert_eq!(title.endpoint.api_keys, ["k"]);
        assert_eq!(title.timeout_secs, 20);
        let compression = &config.auxiliary["compression"];
        assert_eq!(compression.provider, ProviderKind::Anthropic);
        assert_eq!(compression.endpoint.base_url, "http://127.0.0.1:9/");
        assert_eq!(compression.endpoint.api_keys, ["ak"]);
        assert_eq!(compression.timeout_secs, DEFAULT_SIDE_TASK_TIMEOUT_SECS);
        assert_eq!(config.auxiliary["review"].model, config.model);
    }

    #[test]
    fn key_pools_fallbacks_and_prices() {
        let config = load(
            &[("OPENAI_API_KEY", "a, b,c"), ("BACKUP_KEY", "z")],
            Some(concat!(
                "key_strategy = \"round-robin\"\nmax_attempts = 5\nretry_base_ms = 10\n",
                "[[fallback]]\nprovider = \"anthropic\"\nmodel = \"claude-x\"\napi_key_env = \"BACKUP_KEY\"\n",
                "[prices.\"gpt-4.1-mini\"]\ninput = 0.4\noutput = 1.6\n",
            )),
        )
        .expect("config");
        assert_eq!(config.openai.api_keys, ["a", "b", "c"]);
        assert_eq!(config.key_strategy, KeyStrategy::RoundRobin);
        assert_eq!(config.retry.max_attempts, 5);
        assert_eq!(config.fallback[0].provider, ProviderKind::Anthropic);
        assert_eq!(config.fallback[0].endpoint.api_keys, ["z"]);
        assert_eq!(
            config.fallback[0].endpoint.base_url,
            "https://api.anthropic.com"
        );
        assert_eq!(config.prices["gpt-4.1-mini"].output, 1.6);
        let responses = load(
            &[
                ("TALARIA_PROVIDER", "openai-responses"),
                ("OPENAI_API_KEY", ""),
            ],
            None,
        )
        .expect("config");
        assert_eq!(responses.provider, ProviderKind::OpenAiResponses);
        assert_eq!(responses.openai.api_keys, [""]);
    }

    #[test]
    fn the_store_is_chosen_by_url_and_its_password_never_shows() {
        let told = |result: Result<Config, ConfigError>| match result {
            Ok(_) => panic!("accepted"),
            Err(error) => error.to_string(),
        };
        let embedded = load(&[], None).expect("config");
        assert_eq!(embedded.store.url, None);
        let file = "[store]\nurl = \"postgres://team@db.example/talaria\"\n";
        let shared = load(&[], Some(file)).expect("config");
        assert_eq!(
            shared.store.url.as_deref(),
            Some("postgres://team@db.example/talaria")
        );
        let over = load(
            &[("TALARIA_STORE_URL", "postgresql://team:hunter2@db2/talaria")],
            Some(file),
        )
        .expect("config");
        assert_eq!(
            over.store.url.as_deref(),
            Some("postgresql://team:hunter2@db2/talaria")
        );
        let shown = format!("{over:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("team:***@db2/talaria"), "{shown}");
        let wrong = told(load(
            &[("TALARIA_STORE_URL", "mysql://team:hunter2@db/x")],
            None,
        ));
        assert!(
            wrong.contains("TALARIA_STORE_URL") && !wrong.contains("hunter2"),
            "{wrong}"
        );
        let in_file = told(load(&[], Some("[store]\nurl = \"sqlite:x:pw@h\"\n")));
        assert!(
            in_file.contains("line 2") && in_file.contains("store.url"),
            "{in_file}"
        );
        let passfile = load(
            &[("HOME", "/home/me")],
            Some("[store]\npassfile = \"~/.pgpass\"\n"),
        )
        .expect("config");
        assert_eq!(
            passfile.store.passfile,
            Some(PathBuf::from("/home/me/.pgpass"))
        );
    }

    #[test]
    fn missing_key_says_what_to_set() {
        let config = load(&[], None).expect("config");
        let missing = config.missing_credentials().expect("missing");
        assert!(missing.contains("OPENAI_API_KEY"), "{missing}");
        let anthropic = load(&[("TALARIA_PROVIDER", "anthropic")], None).expect("config");
        assert!(
            anthropic
                .missing_credentials()
                .expect("missing")
                .contains("ANTHROPIC_API_KEY")
        );
        let empty_key = load(&[("OPENAI_API_KEY", "")], None).expect("config");
        assert!(empty_key.missing_credentials().is_none());
    }

    #[test]
    fn bad_values_are_errors_not_panics() {
        assert!(matches!(
            load(&[], Some("model = [")),
            Err(ConfigError::Parse { .. })
        ));
        let told = |result: Result<Config, ConfigError>| match result {
            Ok(_) => panic!("accepted"),
            Err(error) => error.to_string(),
        };
        let window = told(load(&[("TALARIA_CONTEXT_WINDOW", "lots")], None));
        assert!(
            window.starts_with("environment: TALARIA_CONTEXT_WINDOW = \"lots\""),
            "{window}"
        );
        let provider = told(load(&[("TALARIA_PROVIDER", "palm")], None));
        assert!(
            provider.contains("TALARIA_PROVIDER = \"palm\": unknown provider"),
            "{provider}"
        );
    }

    /// Every kind of mistake in the file names its place: a value that means nothing here, a
    /// value of the wrong type, broken TOML.
    #[test]
    fn each_kind_of_mistake_names_its_key_and_line() {
        let told = |text: &str| match load(&[], Some(text)) {
            Ok(_) => panic!("accepted {text}"),
            Err(error) => error.to_string(),
        };
        // A bad enum value.
        for (text, place) in [
            (
                "model = \"m\"\nmode = \"yes\"\n",
                "line 2: mode = \"yes\": unknown mode",
            ),
            (
                "key_strategy = \"random\"",
                "line 1: key_strategy = \"random\"",
            ),
            (
                "\n[sandbox]\nmode = \"maybe\"\n",
                "line 3: sandbox.mode = \"maybe\"",
            ),
            (
                "provider = \"palm\"\n",
                "line 1: provider = \"palm\": unknown provider",
            ),
            (
                "[[fallback]]\nprovider = \"openai\"\nmodel = \"a\"\n[[fallback]]\nprovider = \"palm\"\nmodel = \"b\"\n",
                "line 5: fallback[1].provider = \"palm\"",
            ),
            (
                "[auxiliary.title]\nprovider = \"palm\"\n",
                "line 2: auxiliary.title.provider",
            ),
            ("context_window = 10\n", "line 1: context_window = 10"),
        ] {
            let message = told(text);
            assert!(message.contains("config.toml, "), "{message}");
            assert!(message.contains(place), "{place}: {message}");
        }
        // A wrong type: valid TOML, so not called invalid TOML.
        let typed = told("model = \"m\"\nmax_turn_requests = \"lots\"\n");
        assert!(
            typed.contains(
                "line 2, key `max_turn_requests`: a whole number (like 90) is expected, not the text \"lots\""
            ),
            "{typed}"
        );
        assert!(!typed.contains("not valid TOML"), "{typed}");
        let nested = told("[learning]\nskill_review_after = true\n");
        assert!(
            nested.contains("line 2, key `learning.skill_review_after`"),
            "{nested}"
        );
        // Broken TOML, shown with its line as written (real line breaks, no escapes).
        let syntax = told("model = \"qwen2.5-coder\n");
        assert!(syntax.contains("line 1"), "{syntax}");
        assert!(
            syntax.contains("\n  1 | model = \"qwen2.5-coder"),
            "{syntax}"
        );
    }

    #[test]
    fn unknown_keys_are_warnings_so_newer_files_still_load() {
        let config = load(
            &[("OPENAI_API_KEY", "k")],
            Some("colour = 1\nmodel = \"m\"\n[openai]\nregion = \"eu\"\n[future_section]\nx = 1\n"),
        )
        .expect("loads");
        assert_eq!(config.model, "m");
        assert_eq!(config.warnings.len(), 3, "{:?}", config.warnings);
        assert!(config.warnings[0].contains("unknown key `colour`"));
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("`openai.region`"))
        );
        assert!(config.warnings.iter().all(|w| w.contains("config.toml")));
    }

    #[test]
    fn local_servers_get_long_first_byte_timeouts_and_a_default_output_cap() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "http://[::1]:8080/v1",
            "http://192.168.1.20:1234/v1",
            "http://10.0.0.5/v1",
        ] {
            assert!(is_local(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "https://api.anthropic.com",
            "http://8.8.8.8/v1",
        ] {
            assert!(!is_local(url), "{url}");
        }
        let config = load(&[("OPENAI_API_KEY", "k")], None).expect("config");
        let local = config.call_limits("http://127.0.0.1:8080/v1", "m");
        assert_eq!(local.first_byte_timeout.as_secs(), 1800);
        assert_eq!(local.default_max_tokens, Some(4096));
        let hosted = config.call_limits("https://api.openai.com/v1", "m");
        assert_eq!(hosted.first_byte_timeout.as_secs(), 300);
        assert_eq!(hosted.default_max_tokens, None);
    }
}
