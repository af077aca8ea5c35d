//! The steps of resolving a configuration: each setting (or group of settings) from the file
//! and the environment, with the error that names the key or variable at fault.

use super::declare::{Source, Sourced};
use super::{
    AgentEntry, Auxiliary, ConfigError, Endpoint, Fallback, FileAgent, FileAuxiliary, FileConfig,
    FileFallback, FileLearning, FileMcpServer, FileStore, KeyStrategy, Learning, McpServerEntry,
    Mode, Path, PathBuf, ProviderKind, RetryPolicy, ShellEnvironment, StoreConfig, provider_named,
    split_keys, unknown_provider, without_password,
};
use std::collections::{BTreeMap, HashMap};

/// The base endpoints fallbacks and auxiliary models start from: each service's.
pub(super) struct Bases {
    pub endpoints: BTreeMap<&'static str, Endpoint>,
}

impl Bases {
    pub(super) fn for_kind(&self, kind: ProviderKind) -> &Endpoint {
        static NONE: Endpoint = Endpoint {
            base_url: String::new(),
            api_keys: Vec::new(),
            headers: talaria_provider::http::ExtraHeaders::NONE,
        };
        self.endpoints.get(kind.table()).unwrap_or(&NONE)
    }

    /// The endpoint of an entry: its own URL and key variable, else the base's.
    fn endpoint(
        &self,
        kind: ProviderKind,
        base_url: Option<String>,
        api_key_env: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Endpoint {
        let base = self.for_kind(kind);
        Endpoint {
            base_url: base_url.unwrap_or_else(|| base.base_url.clone()),
            api_keys: match api_key_env {
                Some(var) => env(var).map(|v| split_keys(&v)).unwrap_or_default(),
                None => base.api_keys.clone(),
            },
            headers: base.headers.clone(),
        }
    }
}

/// The provider named (`TALARIA_PROVIDER`, else the file's `provider`, else the default).
pub(super) fn provider_of(named: &Sourced<String>) -> Result<ProviderKind, ConfigError> {
    let name = &named.value;
    ProviderKind::named(name)
        .ok_or_else(|| named.problem("provider", format!("{name:?}"), &unknown_provider(name)))
}

/// The window (`TALARIA_CONTEXT_WINDOW`, else the file's, else the default) and whether it
/// was set at all.
pub(super) fn context_window_of(window: &Sourced<u64>) -> Result<(u64, bool), ConfigError> {
    if window.value < 1024 {
        let detail = "the context window is too small (at least 1024 tokens)";
        return Err(window.problem("context_window", window.value, detail));
    }
    Ok((window.value, window.is_set()))
}

/// The session's model (`TALARIA_MODEL`, else the file's, else the provider's default) and
/// the models offered for switching, the model among them.
pub(super) fn models_of(provider: ProviderKind, file: &FileConfig) -> (String, Vec<String>) {
    if provider.is_built_in() {
        // The demo has one model, whatever the file names for others.
        let only = provider.spec().default_model.to_string();
        return (only.clone(), vec![only]);
    }
    let model = file
        .model()
        .value
        .unwrap_or_else(|| provider.spec().default_model.into());
    let mut models = file.models();
    if !models.contains(&model) {
        models.insert(0, model.clone());
    }
    (model, models)
}

pub(super) fn mode_of(id: &str) -> Result<Mode, ConfigError> {
    Mode::from_id(id).ok_or_else(|| {
        ConfigError::value(
            "mode",
            format!("{id:?}"),
            "unknown mode; expected one of read-only, plan, ask, accept-edits, yolo",
        )
    })
}

pub(super) fn key_strategy_of(name: &str) -> Result<KeyStrategy, ConfigError> {
    KeyStrategy::parse(name).ok_or_else(|| {
        ConfigError::value(
            "key_strategy",
            format!("{name:?}"),
            "unknown key strategy; expected fill-first or round-robin",
        )
    })
}

/// The fallback chain, in order.
pub(super) fn fallbacks_of(
    entries: Vec<FileFallback>,
    bases: &Bases,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Fallback>, ConfigError> {
    let mut fallback = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let kind = provider_named(&entry.provider)
            .map_err(|e| e.for_key(&format!("fallback[{index}].provider")))?;
        fallback.push(Fallback {
            provider: kind,
            endpoint: bases.endpoint(kind, entry.base_url(), entry.api_key_env().as_deref(), env),
            model: entry.model,
        });
    }
    Ok(fallback)
}

/// The side tasks' models (`[auxiliary.<task>]`).
pub(super) fn auxiliaries_of(
    entries: BTreeMap<String, FileAuxiliary>,
    provider: ProviderKind,
    model: &str,
    bases: &Bases,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, Auxiliary>, ConfigError> {
    let mut auxiliary = BTreeMap::new();
    for (task, entry) in entries {
        let kind = match &entry.provider() {
            Some(name) => provider_named(name)
                .map_err(|e| e.for_key(&format!("auxiliary.{task}.provider")))?,
            None => provider,
        };
        let endpoint = bases.endpoint(kind, entry.base_url(), entry.api_key_env().as_deref(), env);
        auxiliary.insert(
            task,
            Auxiliary {
                provider: kind,
                model: entry.model().unwrap_or_else(|| model.to_string()),
                endpoint,
                timeout_secs: entry.timeout_secs().max(1),
            },
        );
    }
    Ok(auxiliary)
}

/// Token encodings configured per model.
pub(super) fn tokenizers_of(
    file: &HashMap<String, String>,
) -> Result<HashMap<String, talaria_compress::Encoding>, ConfigError> {
    let mut tokenizers = HashMap::new();
    for (model_name, encoding) in file {
        let parsed = talaria_compress::Encoding::parse(encoding).ok_or_else(|| {
            ConfigError::value(
                format!("tokenizers.\"{model_name}\""),
                format!("{encoding:?}"),
                "the known encodings are cl100k and o200k",
            )
        })?;
        tokenizers.insert(model_name.clone(), parsed);
    }
    Ok(tokenizers)
}

/// `[learning]`, with the defaults for what it leaves out.
pub(super) fn learning_of(file: &FileLearning) -> Learning {
    Learning {
        skill_review_after: file.skill_review_after(),
        memory_review_after: file.memory_review_after(),
        stage_reviews: file.stage_reviews(),
        max_review_calls: file.max_review_calls().clamp(1, 64),
        on_local_servers: file.on_local_servers(),
    }
}

/// Whether sessions are titled by a model (`TALARIA_TITLES`, else the file), and whether
/// that was set at all.
pub(super) fn titles_of(titles: &Sourced<bool>) -> (bool, bool) {
    (titles.value, titles.is_set())
}

/// What commands' environments keep and set; the keys the configuration reads from
/// variables are withheld from them.
pub(super) fn shell_environment_of(file: &FileConfig) -> ShellEnvironment {
    let withheld = file
        .fallback
        .iter()
        .filter_map(FileFallback::api_key_env)
        .chain(
            file.auxiliary
                .values()
                .filter_map(FileAuxiliary::api_key_env),
        )
        .collect();
    ShellEnvironment {
        keep: file.shell_environment.keep(),
        set: file.shell_environment.set(),
        withheld,
    }
}

/// The enabled `[mcp_servers.<name>]`, named.
pub(super) fn mcp_servers_of(file: &BTreeMap<String, FileMcpServer>) -> Vec<McpServerEntry> {
    file.iter()
        .filter(|(_, entry)| entry.enabled())
        .map(|(name, entry)| McpServerEntry {
            name: name.clone(),
            command: entry.command(),
            args: entry.args(),
            env: entry.env(),
            url: entry.url(),
            transport: Some(entry.r#type()),
            headers: entry.headers(),
            enabled: Some(true),
            startup_timeout_secs: Some(entry.startup_timeout_secs()),
            tool_timeout_secs: Some(entry.tool_timeout_secs()),
            oauth_client_id: entry.oauth_client_id(),
            oauth_scope: entry.oauth_scope(),
        })
        .collect()
}

/// The enabled `[agents.<name>]`, named, their defaults applied; each names its program
/// (`command`) or its registry id (`registry`, looked up in `registry_file` first).
pub(super) fn agents_of(
    file: &BTreeMap<String, FileAgent>,
    registry_file: Option<&std::path::Path>,
) -> Result<Vec<AgentEntry>, ConfigError> {
    let mut agents = Vec::new();
    for (name, entry) in file.iter().filter(|(_, entry)| entry.enabled()) {
        let command = entry.command().filter(|c| !c.trim().is_empty());
        let registry = entry.registry().filter(|r| !r.trim().is_empty());
        if command.is_none() && registry.is_none() {
            return Err(ConfigError::value(
                format!("agents.{name}"),
                "(no command)",
                "set `command` (the agent's program) or `registry` (its ACP registry id, e.g. \
                 \"claude-acp\")",
            ));
        }
        agents.push(AgentEntry {
            name: name.clone(),
            command: command.unwrap_or_default(),
            registry: registry.map(|id| id.trim().to_string()),
            registry_file: registry_file.map(std::path::Path::to_path_buf),
            args: entry.args(),
            env: entry.env(),
            tools: Some(entry.tools()),
            enabled: Some(true),
            idle_timeout_secs: Some(entry.idle_timeout_secs()),
        });
    }
    Ok(agents)
}

/// Retries and backoff for model calls.
pub(super) fn retry_of(file: &FileConfig) -> RetryPolicy {
    RetryPolicy {
        max_attempts: file.max_attempts().max(1),
        base_ms: file.retry_base_ms(),
        cap_ms: file.retry_cap_ms(),
        retry_after_cap_secs: file.retry_after_cap_secs(),
    }
}

/// `[store]` with `TALARIA_STORE_URL` over its `url`; a URL must be PostgreSQL's (the
/// password never shows in an error).
pub(super) fn store_of(
    file: &FileStore,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreConfig, ConfigError> {
    const DETAIL: &str =
        "a PostgreSQL URL (postgres://user@host:port/database), or none for the embedded store";
    let is_postgres =
        |url: &str| url.starts_with("postgres://") || url.starts_with("postgresql://");
    let named = file.url();
    let url = match named.value.filter(|v| !v.trim().is_empty()) {
        Some(url) if !is_postgres(url.trim()) => {
            let hidden = without_password(&url);
            return Err(match named.source {
                Source::Env { variable, .. } => ConfigError::variable(variable, &hidden, DETAIL),
                Source::Default | Source::File => {
                    ConfigError::value("store.url", format!("{hidden:?}"), DETAIL)
                }
            });
        }
        other => other.map(|url| url.trim().to_string()),
    };
    let passfile = file.passfile().map(|path| match path.strip_prefix("~/") {
        Some(rest) => Path::new(&env("HOME").unwrap_or_default()).join(rest),
        None => PathBuf::from(path),
    });
    Ok(StoreConfig { url, passfile })
}
