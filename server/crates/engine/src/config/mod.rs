//! Configuration: `$TALARIA_HOME/config.toml` overridden by environment variables.
//!
//! Precedence: environment > config file > defaults. An API key counts as configured when it
//! is present at all, even empty (an empty key sends no credentials: local servers). Several
//! keys form a pool: `api_keys = [...]` in the file, or comma-separated in the variable.

mod declare;
mod error;
mod keys;
mod parts;
pub mod reference;
mod resolve;
mod schema;
use parts::{
    Bases, agents_of, auxiliaries_of, context_window_of, fallbacks_of, key_strategy_of,
    learning_of, mcp_servers_of, mode_of, models_of, provider_of, retry_of, shell_environment_of,
    store_of, titles_of, tokenizers_of,
};

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::approval::Mode;
use crate::credentials::KeyStrategy;
use crate::router::Price;
pub use error::ConfigError;
use resolve::*;
use schema::*;

pub use crate::providers::ProviderKind;

/// The kind a configured provider name means, or the error that says what is known.
pub(super) fn provider_named(name: &str) -> Result<ProviderKind, ConfigError> {
    ProviderKind::named(name)
        .ok_or_else(|| ConfigError::value("provider", format!("{name:?}"), unknown_provider(name)))
}

/// What an unknown provider name is told, with the name it is probably a typo of.
pub(super) fn unknown_provider(name: &str) -> String {
    let names: Vec<&str> = crate::providers::PROVIDERS.iter().map(|p| p.name).collect();
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    let expected = match quoted.split_last() {
        Some((last, [])) => format!("expected {last}"),
        Some((last, rest)) => format!("expected {} or {last}", rest.join(", ")),
        None => "no provider is registered".into(),
    };
    match keys::closest(name.trim(), &names) {
        Some(meant) => format!("unknown provider; did you mean \"{meant}\"? ({expected})"),
        None => format!("unknown provider; {expected}"),
    }
}

/// An endpoint's address and keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub base_url: String,
    /// Empty: no key configured. `[""]`: explicitly none needed.
    pub api_keys: Vec<String>,
    /// Headers sent with every request (from a client-managed provider; none from the file).
    pub headers: talaria_provider::http::ExtraHeaders,
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
    /// The approval mode new sessions start in.
    pub mode: Mode,
    /// Toolsets offered to sessions (`None`: all of them).
    pub toolsets: Option<Vec<String>>,
    pub retry: RetryPolicy,
    pub key_strategy: KeyStrategy,
    /// Anthropic extended-thinking budget, when enabled.
    pub thinking_budget: Option<u32>,
    /// Each service's address and keys, by its table (`openai`, `anthropic`: see
    /// `crate::providers::SERVICES`).
    pub endpoints: std::collections::BTreeMap<&'static str, Endpoint>,
    pub fallback: Vec<Fallback>,
    /// Models for side tasks, by task name; a task without one uses the session's model.
    pub auxiliary: std::collections::BTreeMap<String, Auxiliary>,
    /// Problems that did not stop loading (unknown keys, e.g. from a newer version).
    pub warnings: Vec<String>,
    /// Those of `warnings` that are probably a known key mistyped (`modle`): its setting is
    /// not applied, so `talaria doctor` counts them as problems.
    pub typos: Vec<String>,
    /// A "still working" notice after this many seconds of silence from the model.
    pub still_working_secs: u64,
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
    /// Other ACP agents `delegate_task` may hand a task to (`[agents.<name>]`, enabled ones).
    pub agents: Vec<AgentEntry>,
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
    /// The user's hooks (`[[hooks.EVENT]]`).
    pub hooks: std::sync::Arc<crate::hooks::Hooks>,
    /// Every setting as declared, with its default: what a plain setting is read from
    /// (`config.settings.nudges()`); the fields above are only what is checked, combined or
    /// rewritten after loading (a small window's toolsets).
    pub settings: Settings,
}

/// Every setting of the file as declared (`schema.rs`), the environment applied: each key
/// read through its getter, which gives its default when it is not set
/// (`config.settings.learning().stage_reviews()`). A plain setting needs nothing more; one
/// that must be checked or combined is resolved into a field of `Config` as well.
#[derive(Clone, Default, PartialEq)]
pub struct Settings(std::sync::Arc<FileConfig>);

impl std::ops::Deref for Settings {
    type Target = FileConfig;

    fn deref(&self) -> &FileConfig {
        &self.0
    }
}

/// Every setting, a store URL's password hidden (the configuration's `Debug` is its
/// fingerprint: what it shows must change when a setting does).
impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = FileConfig::clone(&self.0);
        if let Some(url) = &mut shown.store.url {
            url.value = url.value.as_deref().map(without_password);
            if let declare::Source::Env { raw, .. } = &mut url.source {
                *raw = without_password(raw);
            }
        }
        shown.fmt(f)
    }
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
    /// The declared defaults of `[sandbox]` (on; on as well if the declared mode could not be
    /// read: the sandbox fails closed).
    fn default() -> Self {
        let file = FileSandbox::default();
        sandbox_with(
            &file,
            declare::on_or_off(&file.mode().value).unwrap_or(true),
        )
    }
}

/// An MCP server for every session (`[mcp_servers.<name>]`, resolved: defaults applied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpServerEntry {
    pub name: String,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: std::collections::BTreeMap<String, String>,
    pub url: Option<String>,
    /// `http` (the default) or `sse` for a `url`.
    pub transport: Option<String>,
    pub headers: std::collections::BTreeMap<String, String>,
    pub enabled: Option<bool>,
    pub startup_timeout_secs: Option<u64>,
    pub tool_timeout_secs: Option<u64>,
    /// A client registered beforehand with the server's authorization server (for one that
    /// offers no dynamic registration).
    pub oauth_client_id: Option<String>,
    /// The scopes to ask for at sign-in, instead of those the server names.
    pub oauth_scope: Option<String>,
}

/// Another ACP agent `delegate_task` may hand a task to (`[agents.<name>]`, resolved:
/// defaults applied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentEntry {
    pub name: String,
    /// Its program (an ACP agent on stdio); empty when `registry` names it instead.
    pub command: String,
    /// Its ACP registry id, resolved to its installed command when it starts (`command`,
    /// when set, wins).
    pub registry: Option<String>,
    /// The registry copy (`agents_registry`) the id is looked up in before the built-in table.
    pub registry_file: Option<std::path::PathBuf>,
    pub args: Vec<String>,
    /// Added to the environment it starts with.
    pub env: std::collections::BTreeMap<String, String>,
    /// `acp` when it does its file and command work through its client (Talaria) only; else
    /// it is taken to run its own tools, outside Talaria's walls.
    pub tools: Option<String>,
    pub enabled: Option<bool>,
    /// Silence in a turn, while nothing waits on Talaria, before it is stopped as hung; also
    /// how long it is kept for the session's next task.
    pub idle_timeout_secs: Option<u64>,
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
    /// The declared defaults of `[learning]`.
    fn default() -> Self {
        learning_of(&FileLearning::default())
    }
}

/// The context window assumed when neither the configuration nor the server says.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// The longest wait for a model's first byte when `first_byte_timeout_secs` is not set: for
/// hosted APIs, and for servers on this machine or a private network (which can spend
/// minutes reading a long prompt on a CPU).
pub const FIRST_BYTE_TIMEOUT_SECS: (u64, u64) = (300, 1800);

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

impl Config {
    /// Whether the session's model is served on this machine or a private network.
    pub fn local_model(&self) -> bool {
        is_local(&self.endpoint().base_url)
    }

    /// Whether a turn that edited files and ran nothing is asked once to run the project's
    /// check: as set, else for local models (hosted ones check their own work).
    pub fn verify_after_edits(&self) -> bool {
        self.settings
            .verify_after_edits()
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
        self.endpoint_of(self.provider)
    }

    /// The endpoint of the service a provider kind reaches.
    pub fn endpoint_of(&self, kind: ProviderKind) -> &Endpoint {
        static NONE: Endpoint = Endpoint {
            base_url: String::new(),
            api_keys: Vec::new(),
            headers: talaria_provider::http::ExtraHeaders::NONE,
        };
        self.endpoints.get(kind.table()).unwrap_or(&NONE)
    }

    /// The call limits for a model served at `base_url`: servers on this machine or a private
    /// network get a long first-byte timeout and, unless `max_output_tokens` is set, a default
    /// output cap (they would otherwise generate without limit).
    pub fn call_limits(&self, base_url: &str, model: &str) -> crate::router::CallLimits {
        let local = is_local(base_url);
        let paced = local && self.settings.max_output_tokens().is_none();
        crate::router::CallLimits {
            first_byte_timeout: std::time::Duration::from_secs(
                self.settings
                    .first_byte_timeout_secs()
                    .unwrap_or(if local {
                        FIRST_BYTE_TIMEOUT_SECS.1
                    } else {
                        FIRST_BYTE_TIMEOUT_SECS.0
                    })
                    .max(1),
            ),
            still_working_after: std::time::Duration::from_secs(self.still_working_secs),
            default_max_tokens: paced.then_some(crate::pace::UNMEASURED_CAP),
            pace: paced.then(|| crate::pace::Pace::of(base_url, model)),
        }
    }

    /// `None` when credentials are configured; otherwise what the user must set.
    pub fn missing_credentials(&self) -> Option<String> {
        if self.provider.is_built_in() || !self.endpoint().api_keys.is_empty() {
            return None;
        }
        let var = self.provider.key_variable();
        let table = self.provider.table();
        Some(format!(
            "no API key for the {} provider: set {var} in the agent's environment, or \
             api_key under [{table}] in {} (an empty key is allowed for local servers). Editors \
             and SDK clients may not pass your shell's environment to the agent; the config file \
             always works, and `talaria setup`, run in a terminal, writes it",
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
        assert_eq!(
            config.endpoint_of(ProviderKind::OpenAi).base_url,
            "http://x/v1"
        );
        assert_eq!(config.endpoint_of(ProviderKind::OpenAi).api_keys, ["k"]);
        assert!(config.missing_credentials().is_none());
    }

    /// A plain setting is read from the declaration alone: its default, the file's value, a
    /// variable over both, and where the value came from.
    #[test]
    fn every_declared_setting_is_readable_with_its_default_and_source() {
        let defaulted = load(&[], None).expect("config");
        assert!(defaulted.settings.learning().stage_reviews());
        assert_eq!(defaulted.settings.max_turn_requests(), 90);
        assert!(!defaulted.settings.titles().is_set());
        assert_eq!(defaulted.sandbox, SandboxConfig::default());
        assert!(SandboxConfig::default().enabled && SandboxConfig::default().namespaces);
        assert_eq!(defaulted.learning, Learning::default());
        let config = load(
            &[("TALARIA_SANDBOX_NAMESPACES", "off"), ("TALARIA_TITLES", "on")],
            Some("max_turn_requests = 7\n[learning]\nstage_reviews = false\n[sandbox]\nnamespaces = true\n"),
        )
        .expect("config");
        assert_eq!(config.settings.max_turn_requests(), 7);
        assert!(!config.settings.learning().stage_reviews());
        let namespaces = config.settings.sandbox().namespaces();
        assert!(!namespaces.value, "the variable is over the file");
        assert!(matches!(
            namespaces.source,
            declare::Source::Env {
                variable: "TALARIA_SANDBOX_NAMESPACES",
                ..
            }
        ));
        assert!(!config.sandbox.namespaces);
        let agents = load(
            &[],
            Some("[agents.c]\ncommand = \"c\"\n[agents.off]\ncommand = \"x\"\nenabled = false\n"),
        )
        .expect("config")
        .agents;
        assert_eq!(agents.len(), 1, "a disabled agent is not offered");
        assert_eq!(
            (agents[0].tools.as_deref(), agents[0].idle_timeout_secs),
            (Some("own"), Some(300)),
            "the declared defaults"
        );
        let by_id = load(
            &[("HOME", "/home/u")],
            Some("agents_registry = \"~/acp/registry.json\"\n[agents.c]\nregistry = \"claude-acp\"\n"),
        )
        .expect("config")
        .agents;
        assert_eq!(
            (by_id[0].command.as_str(), by_id[0].registry.as_deref()),
            ("", Some("claude-acp"))
        );
        assert_eq!(
            by_id[0].registry_file.as_deref(),
            Some(std::path::Path::new("/home/u/acp/registry.json"))
        );
        let neither = load(&[], Some("[agents.c]\nargs = [\"x\"]\n"));
        assert!(
            matches!(&neither, Err(e) if e.to_string().contains("`registry`")),
            "an agent names its program or its id: {neither:?}"
        );
        let titles = load(&[("TALARIA_TITLES", "maybe")], None);
        assert!(
            matches!(&titles, Err(e) if e.to_string().contains("TALARIA_TITLES = \"maybe\"")),
            "{titles:?}"
        );
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
        assert_eq!(
            config.endpoint_of(ProviderKind::OpenAi).api_keys,
            ["a", "b", "c"]
        );
        assert_eq!(config.key_strategy, KeyStrategy::RoundRobin);
        assert_eq!(config.retry.max_attempts, 5);
        assert_eq!(config.fallback[0].provider, ProviderKind::Anthropic);
        assert_eq!(config.fallback[0].endpoint.api_keys, ["z"]);
        assert_eq!(
            config.fallback[0].endpoint.base_url,
            "https://api.anthropic.com"
        );
        assert_eq!(config.settings.prices()["gpt-4.1-mini"].output, 1.6);
        let responses = load(
            &[
                ("TALARIA_PROVIDER", "openai-responses"),
                ("OPENAI_API_KEY", ""),
            ],
            None,
        )
        .expect("config");
        assert_eq!(responses.provider, ProviderKind::OpenAiResponses);
        assert_eq!(responses.endpoint_of(ProviderKind::OpenAi).api_keys, [""]);
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
            window.starts_with("environment: TALARIA_CONTEXT_WINDOW = \"lots\"")
                && window.ends_with("must be a whole number of tokens"),
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
