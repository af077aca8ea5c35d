//! `config.toml` as it is written: the declaration of every table and key this version
//! knows (`settings!`: name, type, default, environment variable, one-line doc — the one
//! place a setting is declared) and the parser that collects the keys it does not.
//!
//! From this declaration come the parser's serde structs, the defaults (each key's getter),
//! the environment layer, the keys typo detection knows, `docs/configuration.md` and the
//! variables `talaria doctor` reports. Resolution rules (a clamp, a check with its error) stay
//! in `resolve.rs` and `parts.rs`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::declare::settings;
use super::{
    DEFAULT_CONTEXT_WINDOW, DEFAULT_SIDE_TASK_TIMEOUT_SECS, FIRST_BYTE_TIMEOUT_SECS, Price,
};
use crate::approval::Mode;
use crate::providers::{PROVIDERS, ProviderKind};

/// The providers' default models, as the reference shows them.
fn default_models() -> String {
    let mut models: Vec<String> = Vec::new();
    for spec in PROVIDERS.iter().filter(|spec| !spec.built_in) {
        let shown = format!("`{}`", spec.default_model);
        if !models.contains(&shown) {
            models.push(shown);
        }
    }
    format!("the provider's default ({})", models.join(", "))
}

settings! {
    /// Keys at the top of the file, before any table.
    pub struct FileConfig {
        /// The wire API: `openai` (Chat Completions and compatible servers), `openai-responses`
        /// (the Responses API), `anthropic` (Messages), or `demo` (the built-in demo model:
        /// scripted answers, no server, no key).
        provider: String = ProviderKind::OpenAi.as_str().to_string(), env "TALARIA_PROVIDER";
        /// The model sessions start with.
        model: Option<String> = None, env "TALARIA_MODEL", shown default_models();
        /// The models a client may switch a session to (the `model` config option); the model
        /// is always among them.
        models: Vec<String> = Vec::new();
        /// The window compaction plans for.
        context_window: u64 = DEFAULT_CONTEXT_WINDOW, env "TALARIA_CONTEXT_WINDOW", unit "tokens",
            shown format!("{DEFAULT_CONTEXT_WINDOW}, or what a local server reports");
        /// Model requests one turn may make before it ends with `max_turn_requests` (at least 1).
        max_turn_requests: u32 = 90;
        /// The output cap of each model request.
        max_output_tokens: Option<u32> = None, unit "tokens", shown "none (local servers: a default cap)";
        /// Whether prompts may carry images to the model.
        supports_images: bool = true;
        /// The approval mode sessions start in: `read-only`, `plan`, `ask`, `accept-edits` or
        /// `yolo`.
        mode: String = Mode::Ask.id().to_string();
        /// The toolsets sessions offer the model (`file`, `terminal`, `todo`, `clarify`,
        /// `skills`, …).
        toolsets: Option<Vec<String>> = None, shown "all";
        /// Reads of credential stores (`~/.ssh`, `~/.aws`, …) ask in every mode, yolo included.
        ask_for_credential_reads: bool = true;
        /// A session is titled by a side call to the model after its first turn (on a local
        /// server only when set, or when `[auxiliary.title]` names another endpoint).
        titles: bool = true, env "TALARIA_TITLES";
        /// A model that announces an action without taking it is nudged once per turn.
        nudges: bool = true;
        /// After a turn that edited and ran nothing, the model is asked once to run the
        /// project's check.
        verify_after_edits: Option<bool> = None, shown "true on local servers, false otherwise";
        /// How long a model request may wait for its first byte.
        first_byte_timeout_secs: Option<u64> = None, unit "s",
            shown format!("{} (local servers: {})", FIRST_BYTE_TIMEOUT_SECS.0, FIRST_BYTE_TIMEOUT_SECS.1);
        /// A silent model call shows a "still working" thought after this long (at least 1 s).
        still_working_secs: u64 = 10, unit "s";
        /// Time allowed to connect to the model's server.
        connect_timeout_secs: u64 = 30, unit "s";
        /// A stream with no bytes for this long is abandoned and retried.
        stream_idle_timeout_secs: u64 = 180, unit "s";
        /// Attempts per model request (retries of transient failures included; at least 1).
        max_attempts: u32 = 3;
        /// The first retry's wait (doubled each time, with jitter).
        retry_base_ms: u64 = 2000, unit "ms";
        /// The longest wait between retries.
        retry_cap_ms: u64 = 60_000, unit "ms";
        /// The retry budget: the longest wait a provider may ask for (`Retry-After`, or the
        /// reset of a spent rate-limit window) that is waited out; a longer one is not retried,
        /// and the turn ends with `quotaExceeded` (or another key or fallback model is tried).
        retry_after_cap_secs: u64 = 60, unit "s";
        /// How a pool of keys is used: `fill-first` or `round-robin`.
        key_strategy: String = "fill-first".to_string();
        /// A key refused for rate or quota rests this long.
        key_cooldown_secs: u64 = 60, unit "s";
        /// Anthropic's `max_tokens` when a request sets none.
        anthropic_max_tokens: u32 = 8192;
        /// Anthropic's extended thinking budget (a session's thought level decides over it; 0:
        /// none).
        thinking_budget: Option<u32> = None, unit "tokens";
        /// The Responses API returns reasoning summaries, shown as thoughts.
        reasoning_summaries: bool = true;
        /// Prices for cost accounting of models Talaria does not know, by model name.
        prices: HashMap<String, Price> = HashMap::new();
        /// The token encoding counted for a model, by model name.
        tokenizers: HashMap<String, String> = HashMap::new(),
            kind "table: name → `cl100k` or `o200k`", shown "by model family";
        /// How long a client that intercepts tool calls (the tool-interception draft) may take
        /// to decide on one; silence past it stops the call (at least 1 s).
        tool_interception_timeout_secs: u64 = 60, unit "s";
        /// A copy of the ACP registry (its `registry.json`, or one agent's `agent.json`) that
        /// `[agents.<name>] registry` ids are looked up in before Talaria's built-in table.
        agents_registry: Option<String> = None,
            kind "string (path, `~` expanded, else from `TALARIA_HOME`)";
        /// Your commands around the session's events, with Claude Code's contract (a trusted
        /// project's `.talaria/config.toml` may add its own): see [hooks.md](hooks.md).
        hooks: toml::Table = toml::Table::new(),
            kind "tables: `[[hooks.EVENT]]` with `matcher`, `command`, `timeout_s`", shown "none";
    }
    tables {
        /// OpenAI and every server compatible with it (llama.cpp, Ollama, LM Studio, vLLM,
        /// OpenRouter…).
        openai: FileEndpoint,
        /// Anthropic's API.
        anthropic: FileEndpoint,
        /// Fallback models (`[[fallback]]`), tried in order when the model fails for good.
        fallback: Vec<FileFallback> as "fallback[]",
        /// Models for side tasks (`title`, `compression`, `review`, `subagent`); a task without
        /// one uses the session's model.
        auxiliary: BTreeMap<String, FileAuxiliary> as "auxiliary.<task>",
        /// When and how the context is compacted.
        compression: FileCompression,
        /// The background review that writes skills and memory.
        learning: FileLearning,
        /// The memory files' limits.
        memory: FileMemory,
        /// Subagents (`delegate_task`).
        delegation: FileDelegation,
        /// MCP servers every session connects.
        mcp_servers: BTreeMap<String, FileMcpServer> as "mcp_servers.<name>",
        /// Other ACP agents `delegate_task {agent}` and `/agent` hand tasks to.
        agents: BTreeMap<String, FileAgent> as "agents.<name>",
        /// The OS sandbox every command runs in.
        sandbox: FileSandbox,
        /// Commands' environment.
        shell_environment: FileShellEnvironment,
        /// Where sessions are kept.
        store: FileStore,
        /// Recording model calls.
        record: FileRecord,
    }
}

settings! {
    /// A service's address and keys (`[openai]`, `[anthropic]`: see `crate::providers::SERVICES`).
    pub struct FileEndpoint {
        /// The service's address.
        base_url: Option<String> = None, kind "string (URL)";
        /// Its key (comma-separated in the variable for a pool; `""` for none needed).
        api_key: Option<String> = None;
        /// A pool of keys, used by `key_strategy` (over `api_key`).
        api_keys: Option<Vec<String>> = None;
    }
}

settings! {
    /// One fallback model.
    pub struct FileFallback {
        required {
            /// A fallback's wire API.
            provider: String;
            /// Its model.
            model: String;
        }
        /// Its server.
        base_url: Option<String> = None, kind "string (URL)", shown "the service's";
        /// The variable holding its key (withheld from commands).
        api_key_env: Option<String> = None, shown "the service's keys";
    }
}

settings! {
    /// The model of one kind of side task.
    pub struct FileAuxiliary {
        /// The side task's wire API.
        provider: Option<String> = None, shown "the main provider";
        /// Its model.
        model: Option<String> = None, shown "the session's model";
        /// Its server.
        base_url: Option<String> = None, kind "string (URL)", shown "the service's";
        /// The variable holding its key (withheld from commands).
        api_key_env: Option<String> = None, shown "the service's keys";
        /// How long the side task may take (at least 1 s).
        timeout_secs: u64 = DEFAULT_SIDE_TASK_TIMEOUT_SECS, unit "s";
    }
}

settings! {
    /// `[compression]`.
    pub struct FileCompression {
        /// Compact the context when it fills.
        enabled: bool = talaria_compress::Settings::default().enabled;
        /// Compact once the context takes this share of the window.
        threshold: f64 = talaria_compress::Settings::default().threshold,
            kind "share of the window";
        /// The same for windows of 512k tokens and more.
        large_threshold: f64 = talaria_compress::Settings::default().large_threshold,
            kind "share of the window";
        /// The recent turns kept whole.
        tail_ratio: f64 = talaria_compress::Settings::default().tail_ratio,
            kind "share of the window";
        /// The first entries always kept (the task as first asked).
        head_entries: usize = talaria_compress::Settings::default().head_entries;
    }
}

settings! {
    /// `[learning]`.
    pub struct FileLearning {
        /// A background review writes skills after this many model calls that used tools since
        /// the last skill write (0: never).
        skill_review_after: u32 = 10, unit "tool calls";
        /// A background review updates memory after this many user turns since the last
        /// memory write (0: never).
        memory_review_after: u32 = 10, unit "turns";
        /// What a review writes waits as a proposal for the user (`false`: it goes live).
        stage_reviews: bool = true;
        /// Model requests one review may make (1–64).
        max_review_calls: u32 = 16;
        /// Run reviews on a local server too (they compete with the conversation for it), also
        /// when `[auxiliary.review]` names no other endpoint.
        on_local_servers: bool = false;
    }
}

settings! {
    /// `[memory]`.
    pub struct FileMemory {
        /// The agent's notes, at most this many characters (at least 100).
        memory_chars: usize = 2_200;
        /// The user's profile, at most this many characters (at least 100).
        user_chars: usize = 1_375;
    }
}

settings! {
    /// `[delegation]`.
    pub struct FileDelegation {
        /// Subagents running at once (at most 16; 0 offers no `delegate_task`).
        max_concurrent: usize = 3;
    }
}

settings! {
    /// One MCP server for every session (`[mcp_servers.<name>]`).
    pub struct FileMcpServer {
        /// A stdio server's program (or `url` for an HTTP one).
        command: Option<String> = None;
        /// Its arguments.
        args: Vec<String> = Vec::new();
        /// Its environment.
        env: BTreeMap<String, String> = BTreeMap::new();
        /// An HTTP (streamable) server's address.
        url: Option<String> = None, kind "string (URL)";
        /// For a `url`: `http` (streamable HTTP, falling back to HTTP+SSE when the server
        /// answers as an SSE-only one does) or `sse` (the older HTTP+SSE transport).
        r#type: String = "http".to_string();
        /// Headers for an HTTP server.
        headers: BTreeMap<String, String> = BTreeMap::new();
        /// Connect it to every session.
        enabled: bool = true;
        /// How long it may take to start and list its tools.
        startup_timeout_secs: u64 = 10, unit "s";
        /// How long one of its tool calls may take.
        tool_timeout_secs: u64 = 300, unit "s";
        /// For an HTTP server that asks for sign-in and whose authorization server offers no
        /// dynamic registration: the client id registered there (with a loopback redirect,
        /// `http://127.0.0.1/callback`, any port).
        oauth_client_id: Option<String> = None;
        /// The scopes to ask for at sign-in (space-separated), instead of those the server
        /// names.
        oauth_scope: Option<String> = None;
    }
}

settings! {
    /// Another ACP agent (`[agents.<name>]`).
    pub struct FileAgent {
        /// An ACP agent's program (on stdio) that `delegate_task {agent}` and `/agent` hand
        /// tasks to (over `registry` when both are set).
        command: Option<String> = None, shown "none: `registry` is required then";
        /// Its id in the ACP registry (`claude-acp`, `codex-acp`, `gemini`, …), started as its
        /// installed command: the binary on PATH, else `npx`/`uvx` of the package (see
        /// [features](features.md), other agents).
        registry: Option<String> = None;
        /// Its arguments (after the registry's, for a `registry` agent).
        args: Vec<String> = Vec::new();
        /// Added to the environment it starts with (its own keys, e.g. `ANTHROPIC_API_KEY`;
        /// over the registry's).
        env: BTreeMap<String, String> = BTreeMap::new();
        /// `acp` when it does all its file and command work through its client (then Talaria's
        /// rules, sandbox and checkpoints cover it); `own` when it runs its own tools (only as
        /// safe as its own sandbox).
        tools: String = "own".to_string();
        /// Offer it.
        enabled: bool = true;
        /// Silence in a turn, while nothing waits on Talaria, before it is stopped as hung; also
        /// how long it is kept running for the session's next task after one ends (at least
        /// 1 s).
        idle_timeout_secs: u64 = 300, unit "s";
    }
}

settings! {
    /// `[sandbox]`.
    pub struct FileSandbox {
        /// `on` or `off`: commands run in the OS sandbox (namespaces, Landlock, seccomp,
        /// limits).
        mode: String = "on".to_string(), env "TALARIA_SANDBOX";
        /// Writable beyond the workspace and the private temporary directory; each only while
        /// it leads where it led when first met (`TALARIA_HOME/sandbox-writable.json`).
        writable: Vec<String> = Vec::new(), kind "list of paths";
        /// Hidden from commands beyond the credential stores.
        hidden: Vec<String> = Vec::new(), kind "list of paths";
        /// Commands may use the network.
        network: bool = true;
        /// Unix sockets commands may connect to (an ssh agent, a docker socket).
        unix_sockets: Vec<String> = Vec::new(), kind "list of paths";
        /// Processes one command may start (never above the hard limit; 0: no limit).
        max_processes: u32 = talaria_sandbox::DEFAULT_MAX_PROCESSES;
        /// Use Linux namespaces (a private view of the file system and processes) where the
        /// kernel allows.
        namespaces: bool = true, env "TALARIA_SANDBOX_NAMESPACES";
    }
}

settings! {
    /// `[shell_environment]`.
    pub struct FileShellEnvironment {
        /// Variables commands keep beyond the clean environment.
        keep: Vec<String> = Vec::new(), kind "list of variable names";
        /// Variables set for every command.
        set: BTreeMap<String, String> = BTreeMap::new();
    }
}

settings! {
    /// `[store]`.
    pub struct FileStore {
        /// A PostgreSQL database for sessions shared across hosts.
        url: Option<String> = None, env "TALARIA_STORE_URL", kind "string (postgres:// URL)",
            shown "none: the embedded SQLite store";
        /// A password file in libpq's format for the PostgreSQL store.
        passfile: Option<String> = None, kind "string (path, `~` expanded)",
            shown "libpq's (`PGPASSFILE`, `~/.pgpass`)";
        /// How long a client taking control of a session that another process runs waits for
        /// that process to hand it over (its running turn ends first; at least 1 s).
        handover_wait_secs: u64 = 60, env "TALARIA_HANDOVER_WAIT_SECS", unit "s";
    }
}

settings! {
    /// `[record]`: every session's model calls recorded (as `talaria acp --record`).
    pub struct FileRecord {
        /// Record every session's model calls as cassettes here (as `talaria acp --record`).
        dir: Option<PathBuf> = None;
    }
}

/// Parses `config.toml`, collecting keys this version does not know (they are reported, not
/// fatal, so a file written for a newer version still loads). A known key with a bad value is
/// an error naming the key and its line.
pub(super) fn parse_file(
    text: &str,
    unknown: &mut Vec<String>,
) -> Result<FileConfig, toml::de::Error> {
    let deserializer = toml::Deserializer::parse(text)?;
    serde_ignored::deserialize(deserializer, |path| unknown.push(path.to_string()))
}

impl FileConfig {
    /// A service's table of the file (`[openai]`, `[anthropic]`); empty when the file has
    /// none. A new service's table is an entry of `tables` above.
    pub(super) fn service(&self, table: &str) -> FileEndpoint {
        self.table_named(table)
            .and_then(|found| found.downcast_ref::<FileEndpoint>())
            .cloned()
            .unwrap_or_default()
    }
}
