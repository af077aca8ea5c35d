//! The configuration reference: every setting of `config.toml`, its type, default,
//! environment override and meaning, rendered as `docs/configuration.md` (`talaria config
//! reference`). A test holds it to the file schema's own field lists, so a setting cannot be
//! added without its line here, and the document to what this renders.

/// One setting of `config.toml`.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Where it is: `model`, `sandbox.network`, `fallback[].model`, `auxiliary.<task>.model`.
    pub key: &'static str,
    pub kind: &'static str,
    pub default: &'static str,
    /// The environment variable that overrides it (empty: none).
    pub env: &'static str,
    pub meaning: &'static str,
}

const fn s(
    key: &'static str,
    kind: &'static str,
    default: &'static str,
    env: &'static str,
    meaning: &'static str,
) -> Setting {
    Setting {
        key,
        kind,
        default,
        env,
        meaning,
    }
}

/// Every setting, in the order the document shows them (by table).
pub const SETTINGS: &[Setting] = &[
    // The model.
    s(
        "provider",
        "string",
        "openai",
        "TALARIA_PROVIDER",
        "The wire API: `openai` (Chat Completions and compatible servers), `openai-responses` (the Responses API), `anthropic` (Messages), or `demo` (the built-in demo model: scripted answers, no server, no key).",
    ),
    s(
        "model",
        "string",
        "the provider's default (`gpt-4.1-mini`, `claude-sonnet-4-5`)",
        "TALARIA_MODEL",
        "The model sessions start with.",
    ),
    s(
        "models",
        "list of strings",
        "[] (the model alone)",
        "",
        "The models a client may switch a session to (the `model` config option).",
    ),
    s(
        "context_window",
        "integer (tokens)",
        "128000, or what a local server reports",
        "TALARIA_CONTEXT_WINDOW",
        "The window compaction plans for.",
    ),
    s(
        "max_turn_requests",
        "integer",
        "90",
        "",
        "Model requests one turn may make before it ends with `max_turn_requests`.",
    ),
    s(
        "max_output_tokens",
        "integer",
        "none (local servers: a default cap)",
        "",
        "The output cap of each model request.",
    ),
    s(
        "supports_images",
        "boolean",
        "true",
        "",
        "Whether prompts may carry images to the model.",
    ),
    s(
        "mode",
        "string",
        "ask",
        "",
        "The approval mode sessions start in: `read-only`, `plan`, `ask`, `accept-edits` or `yolo`.",
    ),
    s(
        "toolsets",
        "list of strings",
        "all",
        "",
        "The toolsets sessions offer the model (`file`, `terminal`, `todo`, `clarify`, `skills`, …).",
    ),
    s(
        "ask_for_credential_reads",
        "boolean",
        "true",
        "",
        "Reads of credential stores (`~/.ssh`, `~/.aws`, …) ask in every mode, yolo included.",
    ),
    s(
        "titles",
        "boolean",
        "true",
        "TALARIA_TITLES",
        "A session is titled by a side call to the model after its first turn.",
    ),
    s(
        "nudges",
        "boolean",
        "true",
        "",
        "A model that answers with tools unused when they were needed is nudged once.",
    ),
    s(
        "verify_after_edits",
        "boolean",
        "true on local servers, false otherwise",
        "",
        "After a turn that edited and ran nothing, the model is asked once to run the project's check.",
    ),
    s(
        "first_byte_timeout_secs",
        "integer (s)",
        "300 (local servers: 1800)",
        "",
        "How long a model request may wait for its first byte.",
    ),
    s(
        "still_working_secs",
        "integer (s)",
        "10",
        "",
        "A silent model call shows a \"still working\" thought after this long.",
    ),
    s(
        "connect_timeout_secs",
        "integer (s)",
        "30",
        "",
        "Time allowed to connect to the model's server.",
    ),
    s(
        "stream_idle_timeout_secs",
        "integer (s)",
        "180",
        "",
        "A stream with no bytes for this long is abandoned and retried.",
    ),
    s(
        "max_attempts",
        "integer",
        "3",
        "",
        "Attempts per model request (retries of transient failures included).",
    ),
    s(
        "retry_base_ms",
        "integer (ms)",
        "2000",
        "",
        "The first retry's wait (doubled each time, with jitter).",
    ),
    s(
        "retry_cap_ms",
        "integer (ms)",
        "60000",
        "",
        "The longest wait between retries.",
    ),
    s(
        "retry_after_cap_secs",
        "integer (s)",
        "60",
        "",
        "The retry budget: the longest wait a provider may ask for (`Retry-After`, or the reset of a spent rate-limit window) that is waited out; a longer one is not retried, and the turn ends with `quotaExceeded` (or another key or fallback model is tried).",
    ),
    s(
        "key_strategy",
        "string",
        "fill-first",
        "",
        "How a pool of keys is used: `fill-first` or `round-robin`.",
    ),
    s(
        "key_cooldown_secs",
        "integer (s)",
        "60",
        "",
        "A key refused for rate or quota rests this long.",
    ),
    s(
        "anthropic_max_tokens",
        "integer",
        "8192",
        "",
        "Anthropic's `max_tokens` when a request sets none.",
    ),
    s(
        "thinking_budget",
        "integer (tokens)",
        "none",
        "",
        "Anthropic's extended thinking budget (a session's thought level decides over it).",
    ),
    s(
        "reasoning_summaries",
        "boolean",
        "true",
        "",
        "The Responses API returns reasoning summaries, shown as thoughts.",
    ),
    s(
        "prices",
        "table: model → {input, output, cache_read, cache_write} per million tokens",
        "none",
        "",
        "Prices for cost accounting of models Talaria does not know.",
    ),
    s(
        "tokenizers",
        "table: model → `cl100k` or `o200k`",
        "by model family",
        "",
        "The token encoding counted for a model.",
    ),
    // The services' endpoints.
    s(
        "openai.base_url",
        "string (URL)",
        "https://api.openai.com/v1",
        "OPENAI_BASE_URL",
        "The OpenAI-compatible server (llama.cpp, Ollama, LM Studio, vLLM, OpenRouter…).",
    ),
    s(
        "openai.api_key",
        "string",
        "none",
        "OPENAI_API_KEY",
        "Its key (comma-separated in the variable for a pool; `\"\"` for none needed).",
    ),
    s(
        "openai.api_keys",
        "list of strings",
        "none",
        "OPENAI_API_KEY",
        "A pool of keys, used by `key_strategy`.",
    ),
    s(
        "anthropic.base_url",
        "string (URL)",
        "https://api.anthropic.com",
        "ANTHROPIC_BASE_URL",
        "Anthropic's API.",
    ),
    s(
        "anthropic.api_key",
        "string",
        "none",
        "ANTHROPIC_API_KEY",
        "Its key.",
    ),
    s(
        "anthropic.api_keys",
        "list of strings",
        "none",
        "ANTHROPIC_API_KEY",
        "A pool of keys.",
    ),
    // Fallbacks and side tasks.
    s(
        "fallback[].provider",
        "string",
        "required",
        "",
        "A fallback's wire API, tried in order when the model fails for good.",
    ),
    s("fallback[].model", "string", "required", "", "Its model."),
    s(
        "fallback[].base_url",
        "string (URL)",
        "the service's",
        "",
        "Its server.",
    ),
    s(
        "fallback[].api_key_env",
        "string",
        "the service's keys",
        "",
        "The variable holding its key (withheld from commands).",
    ),
    s(
        "auxiliary.<task>.provider",
        "string",
        "the main provider",
        "",
        "The wire API of a side task (`title`, `compression`, `review`, `subagent`).",
    ),
    s(
        "auxiliary.<task>.model",
        "string",
        "the session's model",
        "",
        "Its model.",
    ),
    s(
        "auxiliary.<task>.base_url",
        "string (URL)",
        "the service's",
        "",
        "Its server.",
    ),
    s(
        "auxiliary.<task>.api_key_env",
        "string",
        "the service's keys",
        "",
        "The variable holding its key (withheld from commands).",
    ),
    s(
        "auxiliary.<task>.timeout_secs",
        "integer (s)",
        "120",
        "",
        "How long the side task may take.",
    ),
    // Compaction.
    s(
        "compression.enabled",
        "boolean",
        "true",
        "",
        "Compact the context when it fills.",
    ),
    s(
        "compression.threshold",
        "share of the window",
        "0.75",
        "",
        "Compact once the context takes this share of the window.",
    ),
    s(
        "compression.large_threshold",
        "share of the window",
        "0.5",
        "",
        "The same for windows of 512k tokens and more.",
    ),
    s(
        "compression.tail_ratio",
        "share of the window",
        "0.2",
        "",
        "The recent turns kept whole.",
    ),
    s(
        "compression.head_entries",
        "integer",
        "3",
        "",
        "The first entries always kept (the task as first asked).",
    ),
    // Learning and memory.
    s(
        "learning.skill_review_after",
        "integer (tool calls)",
        "10",
        "",
        "A background review writes skills after this many tool calls (0: never).",
    ),
    s(
        "learning.memory_review_after",
        "integer (turns)",
        "10",
        "",
        "A background review updates memory after this many turns (0: never).",
    ),
    s(
        "learning.stage_reviews",
        "boolean",
        "true",
        "",
        "What a review writes waits as a proposal for the user (`false`: it goes live).",
    ),
    s(
        "learning.max_review_calls",
        "integer",
        "16",
        "",
        "Model requests one review may make (1–64).",
    ),
    s(
        "learning.on_local_servers",
        "boolean",
        "false",
        "",
        "Run reviews on a local server too (they compete with the conversation for it), also when `[auxiliary.review]` names no other endpoint.",
    ),
    s(
        "memory.memory_chars",
        "integer",
        "2200",
        "",
        "The agent's notes, at most this many characters.",
    ),
    s(
        "memory.user_chars",
        "integer",
        "1375",
        "",
        "The user's profile, at most this many characters.",
    ),
    s(
        "delegation.max_concurrent",
        "integer",
        "3",
        "",
        "Subagents running at once (at most 16).",
    ),
    // MCP servers.
    s(
        "mcp_servers.<name>.command",
        "string",
        "none",
        "",
        "A stdio server's program (or `url` for an HTTP one).",
    ),
    s(
        "mcp_servers.<name>.args",
        "list of strings",
        "[]",
        "",
        "Its arguments.",
    ),
    s(
        "mcp_servers.<name>.env",
        "table of strings",
        "{}",
        "",
        "Its environment.",
    ),
    s(
        "mcp_servers.<name>.url",
        "string (URL)",
        "none",
        "",
        "An HTTP (streamable) server's address.",
    ),
    s(
        "mcp_servers.<name>.type",
        "string",
        "http",
        "",
        "For a `url`: `http` (streamable HTTP, falling back to HTTP+SSE when the server answers as an SSE-only one does) or `sse` (the older HTTP+SSE transport).",
    ),
    s(
        "mcp_servers.<name>.headers",
        "table of strings",
        "{}",
        "",
        "Headers for an HTTP server.",
    ),
    s(
        "mcp_servers.<name>.enabled",
        "boolean",
        "true",
        "",
        "Connect it to every session.",
    ),
    s(
        "mcp_servers.<name>.startup_timeout_secs",
        "integer (s)",
        "10",
        "",
        "How long it may take to start and list its tools.",
    ),
    s(
        "mcp_servers.<name>.tool_timeout_secs",
        "integer (s)",
        "300",
        "",
        "How long one of its tool calls may take.",
    ),
    s(
        "mcp_servers.<name>.oauth_client_id",
        "string",
        "none",
        "",
        "For an HTTP server that asks for sign-in and whose authorization server offers no dynamic registration: the client id registered there (with a loopback redirect, `http://127.0.0.1/callback`, any port).",
    ),
    s(
        "mcp_servers.<name>.oauth_scope",
        "string",
        "none",
        "",
        "The scopes to ask for at sign-in (space-separated), instead of those the server names.",
    ),
    // Other agents.
    s(
        "agents.<name>.command",
        "string",
        "required",
        "",
        "An ACP agent's program (on stdio) that `delegate_task {agent}` and `/agent` hand tasks to.",
    ),
    s(
        "agents.<name>.args",
        "list of strings",
        "[]",
        "",
        "Its arguments.",
    ),
    s(
        "agents.<name>.env",
        "table",
        "{}",
        "",
        "Added to the environment it starts with (its own keys, e.g. `ANTHROPIC_API_KEY`).",
    ),
    s(
        "agents.<name>.tools",
        "string",
        "own",
        "",
        "`acp` when it does all its file and command work through its client (then Talaria's rules, sandbox and checkpoints cover it); `own` when it runs its own tools (only as safe as its own sandbox).",
    ),
    s("agents.<name>.enabled", "boolean", "true", "", "Offer it."),
    s(
        "agents.<name>.idle_timeout_secs",
        "integer (s)",
        "300",
        "",
        "Silence in a turn, while nothing waits on Talaria, before it is stopped as hung.",
    ),
    // The sandbox and commands' environment.
    s(
        "sandbox.mode",
        "string",
        "on",
        "TALARIA_SANDBOX",
        "`on` or `off`: commands run in the OS sandbox (namespaces, Landlock, seccomp, limits).",
    ),
    s(
        "sandbox.writable",
        "list of paths",
        "[]",
        "",
        "Writable beyond the workspace and the private temporary directory; each only while \
         it leads where it led when first met (`TALARIA_HOME/sandbox-writable.json`).",
    ),
    s(
        "sandbox.hidden",
        "list of paths",
        "[]",
        "",
        "Hidden from commands beyond the credential stores.",
    ),
    s(
        "sandbox.network",
        "boolean",
        "true",
        "",
        "Commands may use the network.",
    ),
    s(
        "sandbox.unix_sockets",
        "list of paths",
        "[]",
        "",
        "Unix sockets commands may connect to (an ssh agent, a docker socket).",
    ),
    s(
        "sandbox.max_processes",
        "integer",
        "512",
        "",
        "Processes one command may start (never above the hard limit).",
    ),
    s(
        "sandbox.namespaces",
        "boolean",
        "true",
        "TALARIA_SANDBOX_NAMESPACES",
        "Use Linux namespaces (a private view of the file system and processes) where the kernel allows.",
    ),
    s(
        "shell_environment.keep",
        "list of variable names",
        "[]",
        "",
        "Variables commands keep beyond the clean environment.",
    ),
    s(
        "shell_environment.set",
        "table of strings",
        "{}",
        "",
        "Variables set for every command.",
    ),
    // Persistence.
    s(
        "store.url",
        "string (postgres:// URL)",
        "none: the embedded SQLite store",
        "TALARIA_STORE_URL",
        "A PostgreSQL database for sessions shared across hosts.",
    ),
    s(
        "store.passfile",
        "string (path, `~` expanded)",
        "libpq's (`PGPASSFILE`, `~/.pgpass`)",
        "",
        "A password file in libpq's format for the PostgreSQL store.",
    ),
    s(
        "record.dir",
        "string (path)",
        "none",
        "",
        "Record every session's model calls as cassettes here (as `talaria acp --record`).",
    ),
];

/// The document: an introduction, then one table per part of the file.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         Talaria reads `$TALARIA_HOME/config.toml` (`~/.talaria/config.toml` by default); every \
         setting is optional, and a variable in the agent's environment overrides the file. \
         `talaria setup` writes a first file, `talaria doctor` checks it (a mistyped key is named \
         with the key it is probably a typo of). This page is generated from the file's schema \
         (`talaria config reference > docs/configuration.md`); a test keeps it whole and current.\n",
    );
    let mut table = None;
    for setting in SETTINGS {
        let part = part_of(setting.key);
        if table != Some(part) {
            table = Some(part);
            out.push_str(&format!("\n## {}\n\n", heading(part)));
            out.push_str(
                "| Setting | Type | Default | Variable | Meaning |\n|---|---|---|---|---|\n",
            );
        }
        let env = if setting.env.is_empty() {
            String::new()
        } else {
            format!("`{}`", setting.env)
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {env} | {} |\n",
            setting.key, setting.kind, setting.default, setting.meaning
        ));
    }
    out
}

/// The table a key belongs to (`""` for the top level).
fn part_of(key: &str) -> &str {
    match key.find(['.', '[']) {
        Some(at) => &key[..at],
        None => "",
    }
}

fn heading(part: &str) -> String {
    match part {
        "" => "The model and the session".into(),
        other => format!("`[{other}]`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How a table's key is written in the reference.
    fn written(table: &str, field: &str) -> String {
        match table {
            "" => field.to_string(),
            "fallback" => format!("fallback[].{field}"),
            "auxiliary" => format!("auxiliary.<task>.{field}"),
            "mcp_servers" => format!("mcp_servers.<name>.{field}"),
            "agents" => format!("agents.<name>.{field}"),
            table => format!("{table}.{field}"),
        }
    }

    #[test]
    fn every_setting_of_the_schema_is_in_the_reference_and_nothing_else() {
        let tables = [
            "",
            "openai",
            "anthropic",
            "fallback",
            "auxiliary",
            "compression",
            "learning",
            "memory",
            "delegation",
            "sandbox",
            "shell_environment",
            "store",
            "record",
            "mcp_servers",
            "agents",
        ];
        let keys: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
        let mut expected = Vec::new();
        for table in tables {
            let fields = super::super::resolve::known_keys(table).expect("a table");
            for field in fields {
                // A table of its own is documented by its keys.
                if table.is_empty() && tables.contains(field) {
                    continue;
                }
                expected.push(written(table, field));
            }
        }
        for key in &expected {
            assert!(
                keys.contains(&key.as_str()),
                "{key} is not in the reference"
            );
        }
        for key in &keys {
            assert!(
                expected.iter().any(|e| e == key),
                "{key} is in the reference but not in the schema"
            );
        }
    }

    #[test]
    fn the_document_is_what_the_reference_renders() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../docs/configuration.md");
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            written == markdown(),
            "{} is stale: run `cargo run -p talaria-server -- config reference > docs/configuration.md`",
            path.display()
        );
    }
}
