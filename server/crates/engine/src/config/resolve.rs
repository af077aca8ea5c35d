//! Resolution: the file and the environment read, checked and resolved into a `Config`
//! (environment over file over defaults), with a placed error for every problem.

use super::declare::{Table, on_or_off};
use super::{
    Bases, Config, ConfigError, Endpoint, FileCompression, FileConfig, FileEndpoint, FileSandbox,
    Path, PathBuf, ProviderKind, SandboxConfig, Settings, agents_of, auxiliaries_of,
    context_window_of, default_home, fallbacks_of, is_local, key_strategy_of, keys, learning_of,
    mcp_servers_of, mode_of, models_of, parse_file, provider_of, retry_of, shell_environment_of,
    store_of, titles_of, tokenizers_of,
};
/// Why a base URL cannot be used: no `http://`/`https://`, or no host.
pub(super) fn base_url_problem(url: &str) -> Option<String> {
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
pub(super) fn is_local_without_scheme(url: &str) -> bool {
    is_local(&format!("http://{url}"))
}

/// The active provider's base URL checked, where it is written.
pub(super) fn check_base_url(
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

/// `[sandbox]` with `TALARIA_SANDBOX` and `TALARIA_SANDBOX_NAMESPACES` (`off`/`on`) over it.
pub(super) fn sandbox_config(file: &FileSandbox) -> Result<SandboxConfig, ConfigError> {
    let mode = file.mode();
    let enabled = on_or_off(&mode.value).ok_or_else(|| {
        mode.problem(
            "sandbox.mode",
            format!("{:?}", mode.value),
            "the sandbox is \"on\" or \"off\"",
        )
    })?;
    Ok(sandbox_with(file, enabled))
}

/// `[sandbox]` with whether it is on already decided.
pub(super) fn sandbox_with(file: &FileSandbox, enabled: bool) -> SandboxConfig {
    SandboxConfig {
        enabled,
        writable: file.writable(),
        hidden: file.hidden(),
        network: file.network(),
        unix_sockets: file.unix_sockets(),
        max_processes: file.max_processes(),
        namespaces: file.namespaces().value,
    }
}

/// `[compression]` over the defaults; shares must lie in (0, 1].
pub(super) fn compression_settings(
    file: &FileCompression,
) -> Result<talaria_compress::Settings, ConfigError> {
    let share = |name: &str, value: f64| {
        if value > 0.0 && value <= 1.0 {
            Ok(value)
        } else {
            Err(ConfigError::value(
                format!("compression.{name}"),
                value,
                "it is a share of the window, above 0 and at most 1",
            ))
        }
    };
    Ok(talaria_compress::Settings {
        enabled: file.enabled(),
        threshold: share("threshold", file.threshold())?,
        large_threshold: share("large_threshold", file.large_threshold())?,
        large_window: talaria_compress::Settings::default().large_window,
        tail_ratio: share("tail_ratio", file.tail_ratio())?,
        head_entries: file.head_entries(),
    })
}

/// Splits a comma-separated key list; an empty value is one empty key (no credentials needed).
pub(super) fn split_keys(value: &str) -> Vec<String> {
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

pub(super) fn endpoint(
    file: FileEndpoint,
    env: &dyn Fn(&str) -> Option<String>,
    url_var: &str,
    key_var: &str,
    default_url: &str,
) -> Endpoint {
    let base_url = env(url_var)
        .filter(|v| !v.trim().is_empty())
        .or(file.base_url())
        .unwrap_or_else(|| default_url.to_string());
    let api_keys = match env(key_var) {
        Some(value) => split_keys(&value),
        None => match (file.api_keys(), file.api_key()) {
            (Some(keys), _) if !keys.is_empty() => keys,
            (_, Some(key)) => split_keys(&key),
            _ => Vec::new(),
        },
    };
    Endpoint {
        base_url,
        api_keys,
        headers: talaria_provider::http::ExtraHeaders::default(),
    }
}

/// Whether a TOML error is about a value's type or meaning (not the file's syntax).
pub(super) fn is_type_error(message: &str) -> bool {
    [
        "invalid type",
        "invalid value",
        "unknown variant",
        "invalid length",
    ]
    .iter()
    .any(|start| message.starts_with(start))
}

/// The keys a table of the file knows (`""` for the top level), from the declaration.
pub(super) fn known_keys(table: &str) -> Option<&'static [&'static str]> {
    if table.is_empty() {
        return Some(FileConfig::fields());
    }
    FileConfig::tables()
        .into_iter()
        .find(|(name, _)| *name == table)
        .map(|(_, fields)| fields)
}

/// The known key an unknown one (`sandbox.netwrok`, `fallback.0.modle`) is probably a
/// typo of, written as the file would.
pub(super) fn typo_of(path: &str) -> Option<String> {
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
    /// Every service's endpoint: the variables over the file over the defaults.
    pub(super) fn of(file: &FileConfig, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let endpoints = crate::providers::SERVICES
            .iter()
            .map(|service| {
                let configured = file.service(service.table);
                let found = endpoint(
                    configured,
                    env,
                    service.url_variable,
                    service.key_variable,
                    service.default_url,
                );
                (service.table, found)
            })
            .collect();
        Self { endpoints }
    }
}

/// The configuration with a warning per unknown key of the file (and the key it is probably
/// a typo of).
pub(super) fn with_warnings(mut config: Config, path: &Path, unknown: Vec<String>) -> Config {
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
        mut file: FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        file.apply_env(env)?;
        let settings = Settings(std::sync::Arc::new(file.clone()));
        let bases = Bases::of(&file, env);
        let (shell_environment, retry) = (shell_environment_of(&file), retry_of(&file));
        let provider = provider_of(&file.provider())?;
        let (context_window, context_window_set) = context_window_of(&file.context_window())?;
        let (model, models) = models_of(provider, &file);
        let mode = mode_of(&file.mode())?;
        let key_strategy = key_strategy_of(&file.key_strategy())?;
        if !provider.is_built_in() {
            check_base_url(provider, bases.for_kind(provider), env)?;
        }
        let fallback = fallbacks_of(std::mem::take(&mut file.fallback), &bases, env)?;
        let auxiliary = auxiliaries_of(
            std::mem::take(&mut file.auxiliary),
            provider,
            &model,
            &bases,
            env,
        )?;
        let (titles, titles_set) = titles_of(&file.titles());
        Ok(Self {
            sandbox: sandbox_config(&file.sandbox)?,
            store: store_of(&file.store, env)?,
            hooks: crate::hooks::user_hooks(Some(&file.hooks()))
                .map_err(|e| ConfigError::value(format!("hooks.{}", e.key), "…", e.why))?,
            shell_environment,
            compression: compression_settings(&file.compression)?,
            tokenizers: tokenizers_of(&file.tokenizers())?,
            learning: learning_of(&file.learning),
            memory_chars: (
                file.memory.memory_chars().max(100),
                file.memory.user_chars().max(100),
            ),
            max_subagents: file.delegation.max_concurrent().min(16),
            mcp_servers: mcp_servers_of(&file.mcp_servers),
            agents: agents_of(
                &file.agents,
                file.agents_registry()
                    .map(|path| match path.strip_prefix("~/") {
                        Some(rest) => Path::new(&env("HOME").unwrap_or_default()).join(rest),
                        None => home.join(path),
                    })
                    .as_deref(),
            )?,
            home,
            provider,
            model,
            models,
            context_window,
            context_window_set,
            max_turn_requests: file.max_turn_requests().max(1),
            mode,
            toolsets: file.toolsets(),
            retry,
            key_strategy,
            thinking_budget: file.thinking_budget().filter(|b| *b > 0),
            endpoints: bases.endpoints,
            fallback,
            auxiliary,
            warnings: Vec::new(),
            typos: Vec::new(),
            still_working_secs: file.still_working_secs().max(1),
            titles_set,
            server_slots: None,
            titles,
            settings,
        })
    }
}
