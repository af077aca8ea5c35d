//! The environment a command starts with: the agent's own, minus every variable that looks
//! like a secret (by its name, or by its value: a URL with a password, a key or token by its
//! shape, `secret_shapes.rs`), every variable that
//! points at a UNIX socket the sandbox does not let commands reach (`SSH_AUTH_SOCK`, a D-Bus
//! or Docker address), and every variable Talaria reads for a provider, adjusted by
//! `[shell_environment] keep` and `set`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use serde::{Deserialize, Serialize};

/// Parts of a variable's name that mark it as a secret (compared in upper case).
pub const SECRET_NAME_PARTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "SSHPASS",
];

/// Words of a variable's name (between underscores) that mark it as a secret: `SENTRY_DSN`,
/// `GH_PAT`, `NPM_AUTH`, `MYSQL_PWD` (`PWD` alone is the working folder).
pub const SECRET_NAME_WORDS: &[&str] = &[
    "DSN", "PAT", "AUTH", "PASS", "PWD", "CREDS", "COOKIE", "JWT", "TOTP", "MFA", "SALT", "WEBHOOK",
];

/// Whole names, and beginnings of names, of secrets the parts and words above miss:
/// Bitwarden's and 1Password's unlocked sessions.
const SECRET_NAMES: &[&str] = &["BW_SESSION"];
const SECRET_NAME_PREFIXES: &[&str] = &["OP_SESSION_"];

/// Names that hold a secret word but are not one.
const NOT_SECRET_NAMES: &[&str] = &["PWD", "OLDPWD"];

/// Variables that name a socket or bus of the user's session (removed unless the socket is
/// one commands may reach).
const SOCKET_NAMES: &[&str] = &[
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "GPG_AGENT_INFO",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "PODMAN_HOST",
    "SSH_AGENT_PID",
];

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
    /// The UNIX sockets commands may reach (`[sandbox] unix_sockets`): a variable pointing at
    /// one of them is kept.
    #[serde(default)]
    pub sockets: Vec<String>,
}

/// Whether a variable of this name is removed before a command starts (unless kept),
/// whatever its value.
pub fn is_withheld(name: &str, rules: &EnvRules) -> bool {
    let upper = name.to_ascii_uppercase();
    let secret_word = !NOT_SECRET_NAMES.contains(&upper.as_str())
        && upper
            .split('_')
            .any(|word| SECRET_NAME_WORDS.contains(&word));
    SECRET_NAME_PARTS.iter().any(|part| upper.contains(part))
        || secret_word
        || SECRET_NAMES.contains(&upper.as_str())
        || SECRET_NAME_PREFIXES
            .iter()
            .any(|prefix| upper.starts_with(prefix))
        || AGENT_PREFIXES
            .iter()
            .any(|prefix| upper.starts_with(prefix))
        || rules.remove.iter().any(|removed| removed == name)
}

/// Whether `value` holds a URL with a password (`postgres://user:pw@host/db`).
pub fn has_url_password(value: &str) -> bool {
    let mut rest = value;
    while let Some(at) = rest.find("://") {
        let after = &rest[at + 3..];
        let authority = after
            .split(['/', '?', '#', ' ', ',', ';'])
            .next()
            .unwrap_or_default();
        if let Some((userinfo, _host)) = authority.rsplit_once('@')
            && let Some((_user, password)) = userinfo.split_once(':')
            && !password.is_empty()
        {
            return true;
        }
        rest = after;
    }
    false
}

/// The socket path a variable's value points at, if it names a UNIX socket
/// (`unix:path=/run/user/1000/bus`, `unix:///var/run/docker.sock`, `/tmp/ssh-x/agent.1`).
fn socket_path(value: &str) -> &str {
    let value = value.trim();
    let value = value.strip_prefix("unix://").unwrap_or(value);
    let value = value.strip_prefix("unix:path=").unwrap_or(value);
    let value = value.strip_prefix("unix:").unwrap_or(value);
    value.split([',', ';']).next().unwrap_or(value)
}

/// Whether a variable points at a UNIX socket or bus of the user's session that commands
/// may not reach.
fn is_unreachable_socket(name: &str, value: &str, rules: &EnvRules) -> bool {
    let upper = name.to_ascii_uppercase();
    let names_socket = upper.ends_with("_SOCK")
        || upper.ends_with("_SOCKET")
        || SOCKET_NAMES.contains(&upper.as_str())
        || value.trim_start().starts_with("unix:");
    names_socket && !is_allowed_socket(value, rules)
}

/// Whether a variable names a socket commands may reach (`[sandbox] unix_sockets`).
fn is_allowed_socket(value: &str, rules: &EnvRules) -> bool {
    rules
        .sockets
        .iter()
        .any(|allowed| allowed == socket_path(value))
}

/// Whether this variable is removed before a command starts (unless kept by name). A
/// variable pointing at a socket commands may reach is kept (`SSH_AUTH_SOCK` with the agent's
/// socket listed), whatever its name.
pub fn is_withheld_var(name: &str, value: &str, rules: &EnvRules) -> bool {
    if is_allowed_socket(value, rules) && !rules.remove.iter().any(|removed| removed == name) {
        return false;
    }
    is_withheld(name, rules)
        || has_url_password(value)
        || crate::secret_shapes::looks_secret(value)
        || is_unreachable_socket(name, value, rules)
}

impl EnvRules {
    /// The environment for a command, from `vars` (the agent's own environment).
    pub fn apply(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut out: Vec<(OsString, OsString)> = vars
            .into_iter()
            .filter(|(name, value)| {
                let name = name.to_string_lossy();
                self.keep.iter().any(|kept| *kept == name)
                    || !is_withheld_var(&name, &value.to_string_lossy(), self)
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
            sockets: Vec::new(),
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
            ("BW_SESSION", "xyz"),
            ("OP_SESSION_my", "xyz"),
            ("MYSQL_PWD", "p"),
            ("SSHPASS", "p"),
            ("BORG_PASSPHRASE", "p"),
            ("PWD", "/work/p"),
            ("OLDPWD", "/work"),
            ("DESKTOP_SESSION", "gnome"),
            ("OTP_VERSION", "26.2"),
            ("DEPLOY_HOOK", "ghp_R2d2C3poR2d2C3poR2d2C3poR2d2C3po1234"),
        ]));
        let names: Vec<String> = out
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "HOME",
                "GITHUB_TOKEN",
                "LANG",
                "PWD",
                "OLDPWD",
                "DESKTOP_SESSION",
                "OTP_VERSION",
                "CI",
                "PATH"
            ]
        );
        assert_eq!(lookup(&out, "PATH"), Some(OsStr::new("/x")));
    }

    #[test]
    fn secrets_under_plain_names_are_withheld_by_their_form() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let out = EnvRules::default().apply(vars(&[
            ("HEXISH", hex),
            (
                "NOTIFY_URL",
                "https://hooks.slack.com/services/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",
            ),
            (
                "VAULT_ADDR_HINT",
                "hvs.CAESIJlWh2y0ZnbBRNaVHtmSFBeAG8AbhqFl2eUp4uNYKJ7aGh4KHGh2cy5N",
            ),
            ("LEGACY_VAULT", "s.Gf8OiKX2Lp0bN3qR5tY7uW9z"),
            ("HEADER", "Basic dXNlcjpodW50ZXIy"),
            ("UPSTREAM_HEADER", "Bearer 8d7f6e5c4b3a29181716"),
            ("CHAT", "https://discord.com/api/webhooks/1234567890/AbCdEfGhIjKlMnOpQrSt"),
            ("GIT_COMMIT", "3a7bd3e2360a3d29eea436fcfb7e44c735d117c4"),
            ("IMAGE", "registry.example.com/app@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
            ("DOCS_URL", "https://api.slack.com/messaging/webhooks"),
            ("BUILD_ID", "550e8400-e29b-41d4-a716-446655440000"),
            ("MOTD", "Basic usage: run make"),
        ]));
        let names: Vec<String> = out
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["GIT_COMMIT", "IMAGE", "DOCS_URL", "BUILD_ID", "MOTD"]
        );
    }

    #[test]
    fn passwords_in_urls_dsns_pats_and_session_sockets_are_withheld() {
        let rules = EnvRules {
            keep: vec!["DOCKER_HOST".into()],
            sockets: vec!["/run/user/1000/podman/podman.sock".into()],
            ..EnvRules::default()
        };
        let out = rules.apply(vars(&[
            (
                "DATABASE_URL",
                "postgres://app:hunter2@db.internal:5432/app",
            ),
            ("REDIS_URL", "redis://:s3cret@cache:6379/0"),
            ("MIRRORS", "https://a.example/x, https://bob:pw@b.example/y"),
            ("PUBLIC_URL", "https://user@example.com/path"),
            ("SENTRY_DSN", "https://abc@o1.ingest.sentry.io/2"),
            ("GH_PAT", "ghp_x"),
            ("NPM_AUTH", "x"),
            ("SMTP_PASS", "x"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-XXXX/agent.42"),
            ("GNOME_KEYRING_SOCKET", "/run/user/1000/keyring/control"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
            ("GPG_AGENT_INFO", "/run/user/1000/gnupg/S.gpg-agent:0:1"),
            ("DOCKER_HOST", "unix:///var/run/docker.sock"),
            ("CONTAINER_HOST", "unix:///run/user/1000/podman/podman.sock"),
            (
                "SSH_AUTH_SOCK_OF_LISTED",
                "/run/user/1000/podman/podman.sock",
            ),
            ("MY_BROKER", "unix:/run/broker.sock"),
            ("PATH", "/usr/bin"),
            ("PWD", "/work/p"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("DISPLAY", ":0"),
        ]));
        let names: Vec<String> = out
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "PUBLIC_URL",
                "DOCKER_HOST",
                "CONTAINER_HOST",
                "SSH_AUTH_SOCK_OF_LISTED",
                "PATH",
                "PWD",
                "XDG_RUNTIME_DIR",
                "DISPLAY"
            ]
        );
    }
}
