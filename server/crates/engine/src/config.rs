//! Configuration: `$TALARIA_HOME/config.toml` overridden by environment variables.
//!
//! Precedence: environment > config file > defaults. An API key counts as configured when it
//! is present at all, even empty (an empty key sends no `Authorization` header: local servers).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Which model API a session talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI Chat Completions and compatible servers.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl ProviderKind {
    fn parse(name: &str) -> Result<Self, ConfigError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "openai" | "openai-chat" | "openai-compatible" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            other => Err(ConfigError::Invalid(format!(
                "unknown provider {other:?}; expected \"openai\" or \"anthropic\""
            ))),
        }
    }

    /// The name used in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

/// An endpoint's address and credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub base_url: String,
    pub api_key: Option<String>,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `TALARIA_HOME`.
    pub home: PathBuf,
    pub provider: ProviderKind,
    pub model: String,
    /// Context window of the model, in tokens.
    pub context_window: u64,
    /// Model calls allowed in one turn before it stops with `max_turn_requests`.
    pub max_turn_requests: u32,
    /// `max_tokens` sent with each call, when set.
    pub max_output_tokens: Option<u32>,
    /// Whether the model accepts images.
    pub supports_images: bool,
    /// The approval mode new sessions start in.
    pub mode: crate::approval::Mode,
    /// Toolsets offered to sessions (`None`: all of them).
    pub toolsets: Option<Vec<String>>,
    pub connect_timeout_secs: u64,
    /// A stream with no bytes for this long is abandoned.
    pub stream_idle_timeout_secs: u64,
    pub openai: Endpoint,
    pub anthropic: Endpoint,
}

/// Why the configuration could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {detail}")]
    Read { path: String, detail: String },
    #[error("{path} is not valid TOML: {detail}")]
    Parse { path: String, detail: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEndpoint {
    base_url: Option<String>,
    api_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    provider: Option<String>,
    model: Option<String>,
    context_window: Option<u64>,
    max_turn_requests: Option<u32>,
    max_output_tokens: Option<u32>,
    supports_images: Option<bool>,
    mode: Option<String>,
    toolsets: Option<Vec<String>>,
    connect_timeout_secs: Option<u64>,
    stream_idle_timeout_secs: Option<u64>,
    #[serde(default)]
    openai: FileEndpoint,
    #[serde(default)]
    anthropic: FileEndpoint,
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
    /// Loads from the process environment and `$TALARIA_HOME/config.toml`.
    pub fn load() -> Result<Self, ConfigError> {
        Self::load_with(&|key| std::env::var(key).ok())
    }

    /// Loads with a custom environment (for tests).
    pub fn load_with(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let home = default_home(env);
        let path = home.join("config.toml");
        let file = match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str::<FileConfig>(&text).map_err(|e| ConfigError::Parse {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?,
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

    fn resolve(
        home: PathBuf,
        file: FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env_nonempty = |key: &str| env(key).filter(|v| !v.trim().is_empty());
        let provider = match env_nonempty("TALARIA_PROVIDER").or(file.provider) {
            Some(name) => ProviderKind::parse(&name)?,
            None => ProviderKind::OpenAi,
        };
        let context_window = match env_nonempty("TALARIA_CONTEXT_WINDOW") {
            Some(value) => value.trim().parse::<u64>().map_err(|_| {
                ConfigError::Invalid(format!(
                    "TALARIA_CONTEXT_WINDOW must be a whole number of tokens, got {value:?}"
                ))
            })?,
            None => file.context_window.unwrap_or(128_000),
        };
        if context_window < 1024 {
            return Err(ConfigError::Invalid(format!(
                "context window of {context_window} tokens is too small (at least 1024)"
            )));
        }
        let model =
            env_nonempty("TALARIA_MODEL")
                .or(file.model)
                .unwrap_or_else(|| match provider {
                    ProviderKind::OpenAi => "gpt-4.1-mini".into(),
                    ProviderKind::Anthropic => "claude-sonnet-4-5".into(),
                });
        let mode = match file.mode.as_deref() {
            None => crate::approval::Mode::Ask,
            Some(id) => crate::approval::Mode::from_id(id).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "unknown mode {id:?}; expected one of read-only, ask, accept-edits, yolo"
                ))
            })?,
        };
        Ok(Self {
            home,
            mode,
            toolsets: file.toolsets,
            provider,
            model,
            context_window,
            max_turn_requests: file.max_turn_requests.unwrap_or(90).max(1),
            max_output_tokens: file.max_output_tokens,
            supports_images: file.supports_images.unwrap_or(true),
            connect_timeout_secs: file.connect_timeout_secs.unwrap_or(30),
            stream_idle_timeout_secs: file.stream_idle_timeout_secs.unwrap_or(180),
            openai: Endpoint {
                base_url: env_nonempty("OPENAI_BASE_URL")
                    .or(file.openai.base_url)
                    .unwrap_or_else(|| "https://api.openai.com/v1".into()),
                api_key: env("OPENAI_API_KEY").or(file.openai.api_key),
            },
            anthropic: Endpoint {
                base_url: env_nonempty("ANTHROPIC_BASE_URL")
                    .or(file.anthropic.base_url)
                    .unwrap_or_else(|| "https://api.anthropic.com".into()),
                api_key: env("ANTHROPIC_API_KEY").or(file.anthropic.api_key),
            },
        })
    }

    /// The endpoint of the selected provider.
    pub fn endpoint(&self) -> &Endpoint {
        match self.provider {
            ProviderKind::OpenAi => &self.openai,
            ProviderKind::Anthropic => &self.anthropic,
        }
    }

    /// `None` when credentials are configured; otherwise what the user must set.
    pub fn missing_credentials(&self) -> Option<String> {
        if self.endpoint().api_key.is_some() {
            return None;
        }
        let (var, table) = match self.provider {
            ProviderKind::OpenAi => ("OPENAI_API_KEY", "openai"),
            ProviderKind::Anthropic => ("ANTHROPIC_API_KEY", "anthropic"),
        };
        Some(format!(
            "no API key for the {} provider: set {var} in the agent's environment, or \
             api_key under [{table}] in {} (an empty key is allowed for local servers)",
            self.provider.as_str(),
            self.home.join("config.toml").display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
            &[
                ("TALARIA_MODEL", "env-model"),
                ("OPENAI_BASE_URL", "http://x/v1"),
            ],
            Some("model = \"file-model\"\ncontext_window = 4096\n[openai]\napi_key = \"k\"\n"),
        )
        .expect("config");
        assert_eq!(config.model, "env-model");
        assert_eq!(config.context_window, 4096);
        assert_eq!(config.openai.base_url, "http://x/v1");
        assert_eq!(config.openai.api_key.as_deref(), Some("k"));
        assert!(config.missing_credentials().is_none());
    }

    #[test]
    fn missing_key_says_what_to_set() {
        let config = load(&[], None).expect("config");
        let missing = config.missing_credentials().expect("missing");
        assert!(missing.contains("OPENAI_API_KEY"), "{missing}");
        let empty_key = load(&[("OPENAI_API_KEY", "")], None).expect("config");
        assert!(empty_key.missing_credentials().is_none());
    }

    #[test]
    fn bad_values_are_errors_not_panics() {
        assert!(matches!(
            load(&[], Some("model = [")),
            Err(ConfigError::Parse { .. })
        ));
        assert!(matches!(
            load(&[("TALARIA_CONTEXT_WINDOW", "lots")], None),
            Err(ConfigError::Invalid(m)) if m.contains("TALARIA_CONTEXT_WINDOW")
        ));
        assert!(matches!(
            load(&[("TALARIA_PROVIDER", "palm")], None),
            Err(ConfigError::Invalid(m)) if m.contains("palm")
        ));
        assert!(matches!(
            load(&[], Some("colour = 1")),
            Err(ConfigError::Parse { .. })
        ));
    }
}
