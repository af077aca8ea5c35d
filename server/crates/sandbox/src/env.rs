//! The environment a command starts with: the agent's own, minus every variable that looks
//! like a secret and every variable Talaria reads for a provider, adjusted by
//! `[shell_environment] keep` and `set`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use serde::{Deserialize, Serialize};

/// Parts of a variable's name that mark it as a secret (compared in upper case).
pub const SECRET_NAME_PARTS: &[&str] =
    &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Prefixes of the variables Talaria reads for itself and its providers.
pub const AGENT_PREFIXES: &[&str] = &["TALARIA_", "OPENAI_", "ANTHROPIC_"];

/// How the environment of a command is derived from the agent's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvRules {
    /// More names to remove (e.g. the `api_key_env` variables of the configuration).
    #[serde(default)]
    pub remove: Vec<String>,
    /// Names kept even though they look secret (`[shell_environment] keep`).
    #[serde(default)]
    pub keep: Vec<String>,
    /// Variables set (or replaced) for every command (`[shell_environment] set`).
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// Whether a variable of this name is removed before a command starts (unless kept).
pub fn is_withheld(name: &str, rules: &EnvRules) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|part| upper.contains(part))
        || AGENT_PREFIXES
            .iter()
            .any(|prefix| upper.starts_with(prefix))
        || rules.remove.iter().any(|removed| removed == name)
}

impl EnvRules {
    /// The environment for a command, from `vars` (the agent's own environment).
    pub fn apply(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut out: Vec<(OsString, OsString)> = vars
            .into_iter()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                self.keep.iter().any(|kept| *kept == name) || !is_withheld(&name, self)
            })
            .filter(|(name, _)| !self.set.contains_key(&*name.to_string_lossy()))
            .collect();
        out.extend(
            self.set
                .iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
        );
        out
    }
}

/// The value of `name` in an environment list.
pub fn lookup<'a>(vars: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    vars.iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect()
    }

    #[test]
    fn secrets_and_provider_variables_are_withheld() {
        let rules = EnvRules {
            remove: vec!["MY_FALLBACK".into()],
            keep: vec!["GITHUB_TOKEN".into()],
            set: BTreeMap::from([("CI".into(), "1".into()), ("PATH".into(), "/x".into())]),
        };
        let out = rules.apply(vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("OPENAI_API_KEY", "sk-1"),
            ("OPENAI_BASE_URL", "http://x"),
            ("ANTHROPIC_API_KEY", "sk-2"),
            ("TALARIA_HOME", "/h"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("npm_config__authToken", "t"),
            ("PGPASSWORD", "p"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/c.json"),
            ("MY_FALLBACK", "k"),
            ("GITHUB_TOKEN", "kept"),
            ("LANG", "C.UTF-8"),
        ]));
        let names: Vec<String> = out
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["HOME", "GITHUB_TOKEN", "LANG", "CI", "PATH"]);
        assert_eq!(lookup(&out, "PATH"), Some(OsStr::new("/x")));
    }
}
