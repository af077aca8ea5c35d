//! The steps of resolving a configuration: each setting (or group of settings) from the file
//! and the environment, with the error that names the key or variable at fault.

use super::{
    AgentEntry, Auxiliary, ConfigError, DEFAULT_CONTEXT_WINDOW, DEFAULT_SIDE_TASK_TIMEOUT_SECS,
    Endpoint, Fallback, FileAuxiliary, FileConfig, FileFallback, FileLearning, FileStore,
    KeyStrategy, Learning, McpServerEntry, Mode, Path, PathBuf, ProviderKind, RetryPolicy,
    ShellEnvironment, StoreConfig, provider_named, split_keys, unknown_provider, without_password,
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

/// `TALARIA_PROVIDER`, else the file's `provider`, else OpenAI.
pub(super) fn provider_of(
    file: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ProviderKind, ConfigError> {
    match (env("TALARIA_PROVIDER"), file) {
        (Some(name), _) => provider_named(&name)
            .map_err(|_| ConfigError::variable("TALARIA_PROVIDER", &name, unknown_provider(&name))),
        (None, Some(name)) => provider_named(name),
        (None, None) => Ok(ProviderKind::OpenAi),
    }
}

/// The window (`TALARIA_CONTEXT_WINDOW`, else the file's, else the default) and whether it
/// was set at all.
pub(super) fn context_window_of(
    file: Option<u64>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(u64, bool), ConfigError> {
    let from_env = env("TALARIA_CONTEXT_WINDOW");
    let window = match &from_env {
        Some(value) => value.trim().parse::<u64>().map_err(|_| {
            ConfigError::variable(
                "TALARIA_CONTEXT_WINDOW",
                value,
                "TALARIA_CONTEXT_WINDOW must be a whole number of tokens",
            )
        })?,
        None => file.unwrap_or(DEFAULT_CONTEXT_WINDOW),
    };
    if window < 1024 {
        let detail = "the context window is too small (at least 1024 tokens)";
        return Err(match from_env {
            Some(value) => ConfigError::variable("TALARIA_CONTEXT_WINDOW", &value, detail),
            None => ConfigError::value("context_window", window, detail),
        });
    }
    Ok((window, from_env.is_some() || file.is_some()))
}

pub(super) fn mode_of(file: Option<&str>) -> Result<Mode, ConfigError> {
    match file {
        None => Ok(Mode::Ask),
        Some(id) => Mode::from_id(id).ok_or_else(|| {
            ConfigError::value(
                "mode",
                format!("{id:?}"),
                "unknown mode; expected one of read-only, plan, ask, accept-edits, yolo",
            )
        }),
    }
}

pub(super) fn key_strategy_of(file: Option<&str>) -> Result<KeyStrategy, ConfigError> {
    match file {
        None => Ok(KeyStrategy::FillFirst),
        Some(name) => KeyStrategy::parse(name).ok_or_else(|| {
            ConfigError::value(
                "key_strategy",
                format!("{name:?}"),
                "unknown key strategy; expected fill-first or round-robin",
            )
        }),
    }
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
            endpoint: bases.endpoint(kind, entry.base_url, entry.api_key_env.as_deref(), env),
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
        let kind = match &entry.provider {
            Some(name) => provider_named(name)
                .map_err(|e| e.for_key(&format!("auxiliary.{task}.provider")))?,
            None => provider,
        };
        let endpoint = bases.endpoint(kind, entry.base_url, entry.api_key_env.as_deref(), env);
        auxiliary.insert(
            task,
            Auxiliary {
                provider: kind,
                model: entry.model.unwrap_or_else(|| model.to_string()),
                endpoint,
                timeout_secs: entry
                    .timeout_secs
                    .unwrap_or(DEFAULT_SIDE_TASK_TIMEOUT_SECS)
                    .max(1),
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
    let defaults = Learning::default();
    Learning {
        skill_review_after: file
            .skill_review_after
            .unwrap_or(defaults.skill_review_after),
        memory_review_after: file
            .memory_review_after
            .unwrap_or(defaults.memory_review_after),
        stage_reviews: file.stage_reviews.unwrap_or(defaults.stage_reviews),
        max_review_calls: file
            .max_review_calls
            .unwrap_or(defaults.max_review_calls)
            .clamp(1, 64),
        on_local_servers: file.on_local_servers.unwrap_or(defaults.on_local_servers),
    }
}

/// Whether sessions are titled by a model (`TALARIA_TITLES`, else the file), and whether
/// that was set at all.
pub(super) fn titles_of(file: Option<bool>, env: &dyn Fn(&str) -> Option<String>) -> (bool, bool) {
    match env("TALARIA_TITLES") {
        Some(value) => (
            !matches!(
                value.trim().to_ascii_lowercase().as_str(),
                "0" | "false" | "off" | "no"
            ),
            true,
        ),
        None => (file.unwrap_or(true), file.is_some()),
    }
}

/// What commands' environments keep and set; the keys the configuration reads from
/// variables are withheld from them.
pub(super) fn shell_environment_of(file: &FileConfig) -> ShellEnvironment {
    let withheld = file
        .fallback
        .iter()
        .filter_map(|f| f.api_key_env.clone())
        .chain(
            file.auxiliary
                .values()
                .filter_map(|a| a.api_key_env.clone()),
        )
        .collect();
    ShellEnvironment {
        keep: file.shell_environment.keep.clone().unwrap_or_default(),
        set: file.shell_environment.set.clone().unwrap_or_default(),
        withheld,
    }
}

/// The enabled `[mcp_servers.<name>]`, named.
pub(super) fn mcp_servers_of(file: BTreeMap<String, McpServerEntry>) -> Vec<McpServerEntry> {
    file.into_iter()
        .map(|(name, entry)| McpServerEntry { name, ..entry })
        .filter(|entry| entry.enabled != Some(false))
        .collect()
}

/// The enabled `[agents.<name>]`, named.
pub(super) fn agents_of(file: BTreeMap<String, AgentEntry>) -> Vec<AgentEntry> {
    file.into_iter()
        .map(|(name, entry)| AgentEntry { name, ..entry })
        .filter(|entry| entry.enabled != Some(false))
        .collect()
}

/// Retries and backoff for model calls.
pub(super) fn retry_of(file: &FileConfig) -> RetryPolicy {
    RetryPolicy {
        max_attempts: file.max_attempts.unwrap_or(3).max(1),
        base_ms: file.retry_base_ms.unwrap_or(2000),
        cap_ms: file.retry_cap_ms.unwrap_or(60_000),
        retry_after_cap_secs: file.retry_after_cap_secs.unwrap_or(60),
    }
}

/// `[store]` with `TALARIA_STORE_URL` over its `url`; a URL must be PostgreSQL's (the
/// password never shows in an error).
pub(super) fn store_of(
    file: FileStore,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreConfig, ConfigError> {
    const DETAIL: &str =
        "a PostgreSQL URL (postgres://user@host:port/database), or none for the embedded store";
    let is_postgres =
        |url: &str| url.starts_with("postgres://") || url.starts_with("postgresql://");
    let url = match env("TALARIA_STORE_URL").filter(|v| !v.trim().is_empty()) {
        Some(url) if !is_postgres(url.trim()) => {
            return Err(ConfigError::variable(
                "TALARIA_STORE_URL",
                &without_password(&url),
                DETAIL,
            ));
        }
        Some(url) => Some(url.trim().to_string()),
        None => match file.url.filter(|v| !v.trim().is_empty()) {
            Some(url) if !is_postgres(url.trim()) => {
                return Err(ConfigError::value(
                    "store.url",
                    format!("{:?}", without_password(&url)),
                    DETAIL,
                ));
            }
            other => other.map(|url| url.trim().to_string()),
        },
    };
    let passfile = file.passfile.map(|path| match path.strip_prefix("~/") {
        Some(rest) => Path::new(&env("HOME").unwrap_or_default()).join(rest),
        None => PathBuf::from(path),
    });
    Ok(StoreConfig { url, passfile })
}
