//! The `settings!` declaration: each table of `config.toml` written once — every key's name,
//! type, default, environment variable and one-line doc — and from it the parser's serde
//! struct, the getters that apply the defaults, the environment layer, the field names typo
//! detection compares with, and the rows of `docs/configuration.md` (`reference.rs`).
//!
//! The model is rust-analyzer's `config_data!`: a doc comment and `name: Type = default` per
//! key. Here a key may add, in this order: `env "VAR"` (the variable over the file), `unit
//! "s"` (shown after the type), `kind "…"` (the type as the document words it) and `shown "…"`
//! (the default as the document words it — an expression — for a default that depends on
//! something else).

use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::ConfigError;

/// Where a value came from: what an error about it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    /// The file (its line is found when the error is placed).
    File,
    /// An environment variable, and the text it held.
    Env {
        variable: &'static str,
        raw: String,
    },
}

/// A value and where it came from: what an environment-overridable key resolves to.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    /// Whether the file or the environment set it (not the default).
    pub fn is_set(&self) -> bool {
        self.source != Source::Default
    }

    /// A bad value, placed where it was written: the variable, else the file's `key`.
    pub fn problem(&self, key: &str, shown: impl std::fmt::Display, detail: &str) -> ConfigError {
        match &self.source {
            Source::Env { variable, raw } => ConfigError::variable(variable, raw, detail),
            Source::Default | Source::File => ConfigError::value(key, shown, detail),
        }
    }
}

/// In the file a value is itself: its source is the file.
impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sourced<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(|value| Self {
            value,
            source: Source::File,
        })
    }
}

/// One row of the reference: a key as the document shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Its name in its table (`model`, `base_url`), or its dotted path once placed.
    pub name: String,
    pub kind: String,
    pub default: String,
    /// The variable over the file, if any.
    pub env: Option<&'static str>,
    pub doc: String,
}

/// A table of the file as the reference shows it: where it is written, what it is for, its
/// keys.
#[derive(Debug, Clone)]
pub struct Section {
    /// `""` for the top level; `compression`, `fallback[]`, `auxiliary.<task>`, …
    pub table: String,
    pub doc: String,
    pub keys: Vec<Key>,
}

/// The type of a key as the document words it, and a default as it is shown.
pub trait SettingType {
    fn kind() -> String;
    fn shown(&self) -> String;
}

macro_rules! shown_by_display {
    ($($ty:ty => $kind:literal),* $(,)?) => {$(
        impl SettingType for $ty {
            fn kind() -> String {
                $kind.into()
            }
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

shown_by_display!(bool => "boolean", u32 => "integer", u64 => "integer", usize => "integer", f64 => "number");

impl SettingType for String {
    fn kind() -> String {
        "string".into()
    }
    fn shown(&self) -> String {
        if self.is_empty() {
            "none".into()
        } else {
            self.clone()
        }
    }
}

impl SettingType for PathBuf {
    fn kind() -> String {
        "string (path)".into()
    }
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl<T: SettingType> SettingType for Option<T> {
    fn kind() -> String {
        T::kind()
    }
    fn shown(&self) -> String {
        self.as_ref().map_or_else(|| "none".into(), T::shown)
    }
}

impl<T: SettingType> SettingType for Vec<T> {
    fn kind() -> String {
        format!("list of {}s", T::kind())
    }
    fn shown(&self) -> String {
        let items: Vec<String> = self.iter().map(T::shown).collect();
        format!("[{}]", items.join(", "))
    }
}

impl<T: SettingType> SettingType for BTreeMap<String, T> {
    fn kind() -> String {
        format!("table: name → {}", T::kind())
    }
    fn shown(&self) -> String {
        if self.is_empty() {
            "{}".into()
        } else {
            format!("{} entries", self.len())
        }
    }
}

impl<T: SettingType> SettingType for HashMap<String, T> {
    fn kind() -> String {
        format!("table: name → {}", T::kind())
    }
    fn shown(&self) -> String {
        if self.is_empty() {
            "none".into()
        } else {
            format!("{} entries", self.len())
        }
    }
}

impl SettingType for crate::router::Price {
    fn kind() -> String {
        let fields = super::keys::fields_of::<Self>().join(", ");
        format!("{{{fields}}} in USD per million tokens")
    }
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

/// A value read from an environment variable (`unit`: the key's declared unit, if any).
pub trait FromEnv: Sized {
    fn from_env(variable: &'static str, raw: &str, unit: Option<&str>)
    -> Result<Self, ConfigError>;
}

impl FromEnv for String {
    fn from_env(_: &'static str, raw: &str, _: Option<&str>) -> Result<Self, ConfigError> {
        Ok(raw.to_string())
    }
}

impl<T: FromEnv> FromEnv for Option<T> {
    fn from_env(
        variable: &'static str,
        raw: &str,
        unit: Option<&str>,
    ) -> Result<Self, ConfigError> {
        T::from_env(variable, raw, unit).map(Some)
    }
}

macro_rules! whole_numbers_from_env {
    ($($ty:ty),*) => {$(
        impl FromEnv for $ty {
            fn from_env(
                variable: &'static str,
                raw: &str,
                unit: Option<&str>,
            ) -> Result<Self, ConfigError> {
                raw.trim().parse().map_err(|_| {
                    let unit = match unit {
                        Some("s") => Some("seconds"),
                        Some("ms") => Some("milliseconds"),
                        other => other,
                    };
                    let of = unit.map(|unit| format!(" of {unit}")).unwrap_or_default();
                    let detail = format!("{variable} must be a whole number{of}");
                    ConfigError::variable(variable, raw, detail)
                })
            }
        }
    )*};
}

whole_numbers_from_env!(u32, u64, usize);

impl FromEnv for bool {
    fn from_env(variable: &'static str, raw: &str, _: Option<&str>) -> Result<Self, ConfigError> {
        on_or_off(raw).ok_or_else(|| ConfigError::variable(variable, raw, "\"on\" or \"off\""))
    }
}

/// `on`/`off` and their synonyms (`true`, `1`, `yes`; `false`, `0`, `no`).
pub fn on_or_off(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Some(true),
        "off" | "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// The environment as configuration reads it.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What a declared table is to the file around it: its keys, its serde field names, its
/// environment layer. Lists (`[[fallback]]`) and named tables (`[auxiliary.<task>]`) are
/// tables of their entries.
pub trait Table {
    fn keys() -> Vec<Key>;
    fn fields() -> &'static [&'static str];
    fn apply_env(&mut self, env: Env<'_>) -> Result<(), ConfigError>;
}

impl<T: Table> Table for Vec<T> {
    fn keys() -> Vec<Key> {
        T::keys()
    }
    fn fields() -> &'static [&'static str] {
        T::fields()
    }
    fn apply_env(&mut self, env: Env<'_>) -> Result<(), ConfigError> {
        self.iter_mut().try_for_each(|entry| entry.apply_env(env))
    }
}

impl<T: Table> Table for BTreeMap<String, T> {
    fn keys() -> Vec<Key> {
        T::keys()
    }
    fn fields() -> &'static [&'static str] {
        T::fields()
    }
    fn apply_env(&mut self, env: Env<'_>) -> Result<(), ConfigError> {
        self.values_mut().try_for_each(|entry| entry.apply_env(env))
    }
}

/// The doc lines of a key as one line.
pub fn one_line(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|line| line.trim())
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Declares a table of `config.toml`; see the module's documentation. `required { … }` holds
/// keys an entry must have (`[[fallback]]`'s `provider`); `tables { … }` the tables inside
/// this one, each written as its field's name or `as "…"` (`"fallback[]"`).
macro_rules! settings {
    (
        $(#[doc = $table_doc:literal])*
        $vis:vis struct $name:ident {
            $(required {
                $( $(#[doc = $rdoc:literal])+ $rkey:ident : $rty:ty ; )*
            })?
            $(
                $(#[doc = $doc:literal])+
                $key:ident : $ty:ty = $default:expr
                    $(, env $env:literal)?
                    $(, unit $unit:literal)?
                    $(, kind $kind:literal)?
                    $(, shown $shown:expr)?
                ;
            )*
        }
        $(tables {
            $( $(#[doc = $ndoc:literal])* $table:ident : $tty:ty $(as $written:literal)? ),* $(,)?
        })?
    ) => {
        $(#[doc = $table_doc])*
        #[derive(Debug, Default, Clone, PartialEq, serde::Deserialize)]
        $vis struct $name {
            $($( pub(super) $rkey: $rty, )*)?
            $( #[serde(default)] pub(super) $key: Option<$crate::config::declare::Sourced<$ty>>, )*
            $($( #[serde(default)] pub(super) $table: $tty, )*)?
        }

        #[allow(dead_code)]
        impl $name {
            $( settings!(@get [$($doc),+] $key, $ty, $default; $($env)?); )*

            $($(
                $(#[doc = $ndoc])*
                pub fn $table(&self) -> &$tty {
                    &self.$table
                }
            )*)?

            /// The tables of the reference this declaration makes: its own keys, then each
            /// table inside it.
            pub fn sections() -> Vec<$crate::config::declare::Section> {
                let own = $crate::config::declare::Section {
                    table: String::new(),
                    doc: $crate::config::declare::one_line(&[$($table_doc),*]),
                    keys: <Self as $crate::config::declare::Table>::keys()
                        .into_iter()
                        .filter(|key| !key.name.contains(['.', '[']))
                        .collect(),
                };
                #[allow(unused_mut)]
                let mut all = vec![own];
                $($(
                    all.push($crate::config::declare::Section {
                        table: settings!(@written $table $($written)?).to_string(),
                        doc: $crate::config::declare::one_line(&[$($ndoc),*]),
                        keys: <$tty as $crate::config::declare::Table>::keys(),
                    });
                )*)?
                all
            }

            /// The table inside this one named `name`, to be downcast to its declared type.
            pub fn table_named(&self, name: &str) -> Option<&dyn std::any::Any> {
                match name {
                    $($( stringify!($table) => Some(&self.$table), )*)?
                    _ => None,
                }
            }

            /// Each table inside this one: its name in the file and its serde field names.
            pub fn tables() -> Vec<(&'static str, &'static [&'static str])> {
                vec![$($(
                    (stringify!($table), <$tty as $crate::config::declare::Table>::fields()),
                )*)?]
            }
        }

        impl $crate::config::declare::Table for $name {
            fn keys() -> Vec<$crate::config::declare::Key> {
                use $crate::config::declare::{Key, one_line};
                #[allow(unused_mut)]
                let mut keys = vec![
                    $($(Key {
                        name: stringify!($rkey).trim_start_matches("r#").to_string(),
                        kind: <$rty as $crate::config::declare::SettingType>::kind(),
                        default: "required".into(),
                        env: None,
                        doc: one_line(&[$($rdoc),+]),
                    },)*)?
                    $(Key {
                        name: stringify!($key).trim_start_matches("r#").to_string(),
                        kind: settings!(@kind $ty; $($unit)?; $($kind)?),
                        default: settings!(@shown $ty, $default; $($shown)?),
                        env: settings!(@env_name $($env)?),
                        doc: one_line(&[$($doc),+]),
                    },)*
                ];
                $($(
                    let written = settings!(@written $table $($written)?);
                    keys.extend(<$tty as $crate::config::declare::Table>::keys().into_iter().map(
                        |key| Key { name: format!("{written}.{}", key.name), ..key },
                    ));
                )*)?
                keys
            }

            fn fields() -> &'static [&'static str] {
                $crate::config::keys::fields_of::<Self>()
            }

            #[allow(unused_variables)]
            fn apply_env(
                &mut self,
                env: $crate::config::declare::Env<'_>,
            ) -> Result<(), $crate::config::ConfigError> {
                $( settings!(@apply self, env, $key, $ty, [$($unit)?]; $($env)?); )*
                $($( $crate::config::declare::Table::apply_env(&mut self.$table, env)?; )*)?
                Ok(())
            }
        }
    };

    (@get [$($doc:literal),+] $key:ident, $ty:ty, $default:expr;) => {
        $(#[doc = $doc])+
        pub fn $key(&self) -> $ty {
            match &self.$key {
                Some(set) => set.value.clone(),
                None => $default,
            }
        }
    };
    (@get [$($doc:literal),+] $key:ident, $ty:ty, $default:expr; $env:literal) => {
        $(#[doc = $doc])+
        pub fn $key(&self) -> $crate::config::declare::Sourced<$ty> {
            match &self.$key {
                Some(set) => set.clone(),
                None => $crate::config::declare::Sourced {
                    value: $default,
                    source: $crate::config::declare::Source::Default,
                },
            }
        }
    };

    (@apply $self:ident, $envf:ident, $key:ident, $ty:ty, [$($unit:literal)?];) => {};
    (@apply $self:ident, $envf:ident, $key:ident, $ty:ty, [$($unit:literal)?]; $env:literal) => {
        if let Some(raw) = $envf($env).filter(|raw| !raw.trim().is_empty()) {
            let unit: Option<&str> = None $(.or(Some($unit)))?;
            let value = <$ty as $crate::config::declare::FromEnv>::from_env($env, &raw, unit)?;
            $self.$key = Some($crate::config::declare::Sourced {
                value,
                source: $crate::config::declare::Source::Env { variable: $env, raw },
            });
        }
    };

    (@kind $ty:ty; ; ) => { <$ty as $crate::config::declare::SettingType>::kind() };
    (@kind $ty:ty; $unit:literal; ) => {
        format!("{} ({})", <$ty as $crate::config::declare::SettingType>::kind(), $unit)
    };
    (@kind $ty:ty; ; $kind:literal) => { String::from($kind) };
    (@kind $ty:ty; $unit:literal; $kind:literal) => { format!("{} ({})", $kind, $unit) };

    (@shown $ty:ty, $default:expr;) => {
        $crate::config::declare::SettingType::shown(&{
            let value: $ty = $default;
            value
        })
    };
    (@shown $ty:ty, $default:expr; $shown:expr) => { ($shown).to_string() };

    (@env_name) => { None };
    (@env_name $env:literal) => { Some($env) };

    (@written $table:ident) => { stringify!($table) };
    (@written $table:ident $written:literal) => { $written };
}

pub(crate) use settings;

#[cfg(test)]
mod tests {
    use super::*;

    settings! {
        /// An entry of a list.
        pub struct Hook {
            required {
                /// What it runs.
                command: String;
            }
            /// How long it may take.
            timeout_secs: u64 = 60, env "SAMPLE_HOOK_TIMEOUT", unit "s";
            /// Whether it runs.
            enabled: bool = true, env "SAMPLE_HOOK_ENABLED";
        }
    }

    settings! {
        /// The top of a sample file.
        pub struct Sample {
            /// A word.
            word: String = "hi".to_string(), kind "a greeting", shown "hi (or hello)";
            /// Some names.
            names: Vec<String> = Vec::new();
        }
        tables {
            /// Hooks by event, each a list.
            hooks: BTreeMap<String, Vec<Hook>> as "hooks.<event>[]",
        }
    }

    fn parsed(text: &str) -> Sample {
        toml::from_str(text).expect("parses")
    }

    /// A table of lists of entries (the shape of `[[hooks.PreToolUse]]`) is declared like any
    /// other: its keys documented under their path, the environment applied to each entry.
    #[test]
    fn nested_lists_of_entries_are_declared_documented_and_layered() {
        let mut sample = parsed("[[hooks.PreToolUse]]\ncommand = \"a\"\ntimeout_secs = 5\n");
        let hook = &sample.hooks()["PreToolUse"][0];
        assert_eq!((hook.command.as_str(), hook.timeout_secs().value), ("a", 5));
        assert!(hook.enabled().value && !hook.enabled().is_set());
        let env = |name: &str| (name == "SAMPLE_HOOK_ENABLED").then(|| "off".to_string());
        sample.apply_env(&env).expect("applies");
        let enabled = sample.hooks()["PreToolUse"][0].enabled();
        assert!(!enabled.value);
        assert_eq!(
            enabled.source,
            Source::Env {
                variable: "SAMPLE_HOOK_ENABLED",
                raw: "off".into()
            }
        );
        let sections = Sample::sections();
        assert_eq!(sections[1].table, "hooks.<event>[]");
        let timeout = &sections[1].keys[1];
        assert_eq!(
            (
                timeout.name.as_str(),
                timeout.kind.as_str(),
                timeout.default.as_str()
            ),
            ("timeout_secs", "integer (s)", "60")
        );
        assert_eq!(timeout.env, Some("SAMPLE_HOOK_TIMEOUT"));
        assert_eq!(sections[1].keys[0].default, "required");
        let word = &sections[0].keys[0];
        assert_eq!(
            (word.kind.as_str(), word.default.as_str()),
            ("a greeting", "hi (or hello)")
        );
        assert_eq!(sections[0].keys[1].kind, "list of strings");
        assert_eq!(Sample::tables()[0].0, "hooks");
        assert_eq!(
            Sample::tables()[0].1,
            ["command", "timeout_secs", "enabled"]
        );
    }

    #[test]
    fn a_bad_variable_is_an_error_naming_it_and_a_missing_required_key_fails_to_parse() {
        let mut sample = parsed("[[hooks.Stop]]\ncommand = \"b\"\n");
        let env = |name: &str| (name == "SAMPLE_HOOK_TIMEOUT").then(|| "soon".to_string());
        let error = sample.apply_env(&env).expect_err("not a number");
        assert_eq!(
            error.to_string(),
            "environment: SAMPLE_HOOK_TIMEOUT = \"soon\": SAMPLE_HOOK_TIMEOUT must be a whole number of seconds"
        );
        let missing = toml::from_str::<Sample>("[[hooks.Stop]]\ntimeout_secs = 1\n");
        assert!(missing.is_err_and(|e| e.to_string().contains("missing field `command`")));
        assert_eq!(parsed("").word(), "hi", "the default");
        assert_eq!(parsed("word = \"yo\"").word(), "yo");
    }
}
