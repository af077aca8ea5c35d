//! Which paths hold secrets: credential stores and private keys (reading them asks in every
//! mode), and `.env`-style files (reading them asks unless the session is in `yolo`).
//! Used by the approval policy, by `search_files` (which skips such files unless the search
//! was aimed at them and approved) and for terminal commands that name them.

use std::path::{Component, Path, PathBuf};

/// How secret a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathSecrecy {
    /// Ordinary project or system file.
    Normal,
    /// Environment-style secrets (`.env`, `.envrc`, `secrets.yaml`): read only after asking,
    /// except in `yolo`.
    Secret,
    /// Credential stores, private keys, Talaria's own configuration: read only after asking,
    /// in every mode.
    Credential,
}

/// Folders under the home directory that hold credentials.
const HOME_CREDENTIAL_DIRS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".azure",
    ".kube",
    ".config/gcloud",
    ".config/gh",
    ".docker",
    ".password-store",
    ".local/share/keyrings",
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    "Library/Keychains",
    "Library/Application Support/Google/Chrome",
    "Library/Application Support/Firefox",
    "Library/Cookies",
];
/// Files under the home directory that hold tokens.
const HOME_CREDENTIAL_FILES: &[&str] = &[
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".pgpass",
    ".my.cnf",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".config/hub",
    ".vault-token",
];
/// Folders that are credential stores wherever they are (another user's home, a mount).
const ANYWHERE_CREDENTIAL_DIRS: &[&str] = &[".ssh", ".aws", ".gnupg", ".azure", ".password-store"];
/// File names that are credentials wherever they are.
const ANYWHERE_CREDENTIAL_FILES: &[&str] =
    &[".netrc", ".git-credentials", ".pgpass", ".vault-token"];
const PRIVATE_KEY_NAMES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
];
const PRIVATE_KEY_EXTENSIONS: &[&str] = &[
    ".pem",
    ".key",
    ".p12",
    ".pfx",
    ".jks",
    ".keystore",
    ".ppk",
    ".asc",
    ".gpg",
];
/// Sub-folders of `TALARIA_HOME` the agent may read (its own stored tool results, skills,
/// memory files and staged proposals).
const TALARIA_HOME_READABLE: &[&str] = &["tool-results", "skills", "memories", "proposals"];

/// The rules, with the home directories they are relative to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SensitivePaths {
    home: Option<PathBuf>,
    talaria_home: Option<PathBuf>,
}

impl SensitivePaths {
    /// Rules for the given home and `TALARIA_HOME`.
    pub fn new(home: Option<PathBuf>, talaria_home: Option<PathBuf>) -> Self {
        Self { home, talaria_home }
    }

    /// Rules from this process's `HOME` and `TALARIA_HOME` (default `~/.talaria`).
    pub fn from_env() -> Self {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let talaria_home = std::env::var_os("TALARIA_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".talaria")));
        Self::new(home, talaria_home)
    }

    /// How secret `path` (absolute, normalised) is.
    pub fn classify(&self, path: &Path) -> PathSecrecy {
        if let Some(talaria) = &self.talaria_home
            && let Ok(inside) = path.strip_prefix(talaria)
        {
            let readable = inside.components().next().is_some_and(|first| {
                TALARIA_HOME_READABLE
                    .iter()
                    .any(|r| first.as_os_str() == *r)
            });
            if !readable {
                return PathSecrecy::Credential;
            }
        }
        if let Some(home) = &self.home
            && let Ok(inside) = path.strip_prefix(home)
            && (HOME_CREDENTIAL_DIRS
                .iter()
                .any(|dir| inside.starts_with(dir))
                || HOME_CREDENTIAL_FILES
                    .iter()
                    .any(|file| inside == Path::new(file)))
        {
            return PathSecrecy::Credential;
        }
        let names: Vec<String> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        if names
            .iter()
            .any(|n| ANYWHERE_CREDENTIAL_DIRS.contains(&n.as_str()))
        {
            return PathSecrecy::Credential;
        }
        let Some(name) = names.last() else {
            return PathSecrecy::Normal;
        };
        let lower = name.to_ascii_lowercase();
        if ANYWHERE_CREDENTIAL_FILES.contains(&lower.as_str())
            || PRIVATE_KEY_NAMES.contains(&lower.as_str())
            || PRIVATE_KEY_EXTENSIONS
                .iter()
                .any(|ext| lower.ends_with(ext))
        {
            return PathSecrecy::Credential;
        }
        if is_env_file(&lower)
            || matches!(
                lower.as_str(),
                ".npmrc" | ".pypirc" | ".dev.vars" | ".secrets"
            )
            || lower.starts_with("secrets.")
            || lower == "credentials.json"
            || lower == "credentials"
        {
            return PathSecrecy::Secret;
        }
        PathSecrecy::Normal
    }

    /// Whether `path` is inside `TALARIA_HOME` (the agent's own settings, rules, store,
    /// skills and memory).
    pub fn in_agent_home(&self, path: &Path) -> bool {
        self.talaria_home
            .as_ref()
            .is_some_and(|home| path.starts_with(home))
    }

    /// What the OS sandbox hides from commands, and what it lets them read again inside that:
    /// the credential stores under the home, private keys at its top level, and
    /// `TALARIA_HOME` (its skills, memory, proposals and stored results stay readable).
    pub fn hidden_locations(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut hidden = Vec::new();
        let mut readable = Vec::new();
        if let Some(home) = &self.home {
            hidden.extend(HOME_CREDENTIAL_DIRS.iter().map(|d| home.join(d)));
            hidden.extend(HOME_CREDENTIAL_FILES.iter().map(|f| home.join(f)));
            if let Ok(entries) = std::fs::read_dir(home) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if entry.file_type().is_ok_and(|t| t.is_file())
                        && self.classify(&path) == PathSecrecy::Credential
                    {
                        hidden.push(path);
                    }
                }
            }
        }
        if let Some(talaria) = &self.talaria_home {
            hidden.push(talaria.clone());
            readable.extend(TALARIA_HOME_READABLE.iter().map(|d| talaria.join(d)));
        }
        (hidden, readable)
    }

    /// The most secret of `paths`.
    pub fn worst<'a>(&self, paths: impl IntoIterator<Item = &'a Path>) -> PathSecrecy {
        paths
            .into_iter()
            .map(|p| self.classify(p))
            .max()
            .unwrap_or(PathSecrecy::Normal)
    }
}

/// `.env`, `.env.local`, `.env-production`, `.env_staging`, `prod.env`, `prod-secrets.env`,
/// `.envrc`; not `.env.example` and friends (`lower` is the file name in lower case).
pub fn is_env_file(lower: &str) -> bool {
    let templated = [
        ".example",
        ".sample",
        ".template",
        ".dist",
        ".defaults",
        ".tmpl",
    ]
    .iter()
    .any(|suffix| lower.ends_with(suffix));
    let dotted = lower
        .strip_prefix(".env")
        .is_some_and(|rest| rest.is_empty() || rest == "rc" || rest.starts_with(['.', '-', '_']));
    let suffixed = [".env", "-env", "_env"]
        .iter()
        .any(|suffix| lower.len() > suffix.len() && lower.ends_with(suffix));
    !templated && (dotted || suffixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> SensitivePaths {
        SensitivePaths::new(Some("/home/dev".into()), Some("/home/dev/.talaria".into()))
    }

    #[test]
    fn credential_stores_and_keys() {
        for path in [
            "/home/dev/.ssh/id_rsa",
            "/home/dev/.ssh/config",
            "/home/dev/.aws/credentials",
            "/home/dev/.config/gcloud/application_default_credentials.json",
            "/home/dev/.azure/accessTokens.json",
            "/home/dev/.kube/config",
            "/home/dev/.docker/config.json",
            "/home/dev/.netrc",
            "/home/dev/.npmrc",
            "/home/dev/.pypirc",
            "/home/dev/.git-credentials",
            "/home/dev/.mozilla/firefox/x.default/logins.json",
            "/home/dev/.config/google-chrome/Default/Login Data",
            "/home/dev/Library/Keychains/login.keychain-db",
            "/home/dev/.talaria/config.toml",
            "/home/dev/.talaria/permissions.json",
            "/root/.ssh/authorized_keys",
            "/work/p/deploy/server.key",
            "/work/p/certs/tls.pem",
            "/work/p/id_ed25519",
        ] {
            assert_eq!(
                rules().classify(Path::new(path)),
                PathSecrecy::Credential,
                "{path}"
            );
        }
    }

    #[test]
    fn env_files_are_secret() {
        for path in [
            "/work/p/.env",
            "/work/p/.env.local",
            "/work/p/.envrc",
            "/work/p/prod.env",
            "/work/p/.npmrc",
            "/work/p/config/secrets.yaml",
            "/work/p/.env-production",
            "/work/p/.env_staging",
            "/work/p/.env.production.local",
            "/work/p/deploy/prod-secrets.env",
            "/work/p/site_env",
            "/work/p/.ENV.LOCAL",
        ] {
            assert_eq!(
                rules().classify(Path::new(path)),
                PathSecrecy::Secret,
                "{path}"
            );
        }
    }

    #[test]
    fn ordinary_files_are_normal() {
        for path in [
            "/work/p/src/main.rs",
            "/work/p/.env.example",
            "/work/p/.env-production.sample",
            "/work/p/src/env.rs",
            "/work/p/environment.ts",
            "/work/p/.envoy.yaml",
            "/work/p/keys.rs",
            "/work/p/id_utils.py",
            "/home/dev/.ssh.md",
            "/home/dev/.talaria/tool-results/call-1.txt",
            "/home/dev/.talaria/skills/x/SKILL.md",
            "/home/dev/.bashrc",
            "/etc/hosts",
        ] {
            assert_eq!(
                rules().classify(Path::new(path)),
                PathSecrecy::Normal,
                "{path}"
            );
        }
    }
}
