//! Why a configuration could not be loaded: `ConfigError`, every error placed (file, line,
//! key) and with its fix.

use super::Path;
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
    pub(super) fn value(
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
    pub(super) fn for_key(self, key: &str) -> Self {
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
    pub(super) fn variable(name: &str, value: &str, detail: impl Into<String>) -> Self {
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
    pub(super) fn line_in(&self, text: &str) -> Option<usize> {
        match self {
            Self::Value { key, place, .. } if place != "environment" => {
                crate::config_place::line_of(text, key)
            }
            _ => None,
        }
    }

    /// Fills in where a bad value of the file is written.
    pub(super) fn placed(self, path: &Path, text: &str) -> Self {
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
