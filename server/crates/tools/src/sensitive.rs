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

use talaria_sandbox::credentials::{
    self, ANYWHERE_CREDENTIAL_DIRS, ANYWHERE_CREDENTIAL_FILES, PRIVATE_KEY_EXTENSIONS,
    PRIVATE_KEY_NAMES,
};

/// How many entries of the credential stores a hard-link check walks before it gives up
/// (and treats the file as a credential).
const MAX_STORE_ENTRIES: usize = 20_000;
/// Sub-folders of `TALARIA_HOME` the agent may read (its own stored tool results, skills,
/// memory files and staged proposals).
const TALARIA_HOME_READABLE: &[&str] = &["tool-results", "skills", "memories", "proposals"];

/// The rules, with the home directories they are relative to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SensitivePaths {
    /// `HOME` and the passwd entry's home (a command finds either).
    homes: Vec<PathBuf>,
    talaria_home: Option<PathBuf>,
}

impl SensitivePaths {
    /// Rules for the given home and `TALARIA_HOME`.
    pub fn new(home: Option<PathBuf>, talaria_home: Option<PathBuf>) -> Self {
        Self {
            homes: home.into_iter().collect(),
            talaria_home,
        }
    }

    /// Rules for several homes (`HOME` and the passwd entry's, when they differ).
    pub fn with_homes(homes: Vec<PathBuf>, talaria_home: Option<PathBuf>) -> Self {
        Self {
            homes,
            talaria_home,
        }
    }

    /// Rules from this process's user (its `HOME` and its passwd entry's home) and
    /// `TALARIA_HOME` (default `~/.talaria`).
    pub fn from_env() -> Self {
        let homes = talaria_sandbox::home::user_homes();
        let talaria_home = std::env::var_os("TALARIA_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| homes.first().map(|h| h.join(".talaria")));
        Self::with_homes(homes, talaria_home)
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
        if self
            .homes
            .iter()
            .any(|home| credentials::in_home_store(home, path))
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

    /// The homes whose credential stores and top-level keys are secret.
    pub fn homes(&self) -> &[PathBuf] {
        &self.homes
    }

    /// What the OS sandbox hides from commands besides the homes' credential stores (which
    /// it finds itself, from [`SensitivePaths::homes`]), and what it lets them read again
    /// inside that: `TALARIA_HOME` (its skills, memory, proposals and stored results stay
    /// readable).
    pub fn hidden_locations(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut hidden = Vec::new();
        let mut readable = Vec::new();
        if let Some(talaria) = &self.talaria_home {
            hidden.push(talaria.clone());
            readable.extend(TALARIA_HOME_READABLE.iter().map(|d| talaria.join(d)));
        }
        (hidden, readable)
    }

    /// The places whose files are credentials: each home's stores and `TALARIA_HOME` (but
    /// its readable folders).
    fn credential_roots(&self) -> Vec<PathBuf> {
        let (mut roots, _) = self.hidden_locations();
        for home in &self.homes {
            roots.extend(credentials::home_stores(home));
            roots.extend(credentials::keys_at_top(home));
        }
        roots
    }

    /// Whether `file` (already opened or about to be, with these metadata) is a credential
    /// reached through another name: a hard link to a file in a credential store, whatever
    /// path reaches it. A file with a single link cannot be one. Blocking (it walks the
    /// credential stores when the file has other links); a walk cut short counts as a match
    /// (closed).
    pub fn is_linked_credential(&self, file: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        if !file.is_file() || file.nlink() < 2 {
            return false;
        }
        let (device, inode) = (file.dev(), file.ino());
        let mut budget = MAX_STORE_ENTRIES;
        let mut stack = self.credential_roots();
        while let Some(path) = stack.pop() {
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                let Ok(entries) = std::fs::read_dir(&path) else {
                    continue;
                };
                for entry in entries.flatten() {
                    if budget == 0 {
                        return true;
                    }
                    budget -= 1;
                    let child = entry.path();
                    if !self.is_readable_agent_folder(&child) {
                        stack.push(child);
                    }
                }
            } else if meta.is_file() && meta.dev() == device && meta.ino() == inode {
                return true;
            }
        }
        false
    }

    /// `TALARIA_HOME`'s readable folders (skills, memories…): not credentials.
    fn is_readable_agent_folder(&self, path: &Path) -> bool {
        self.talaria_home.as_ref().is_some_and(|talaria| {
            TALARIA_HOME_READABLE
                .iter()
                .any(|folder| path == talaria.join(folder))
        })
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
            "/home/dev/.config/git/credentials",
            "/home/dev/.codex/auth.json",
            "/home/dev/.config/containers/auth.json",
            "/home/dev/.claude/.credentials.json",
            "/home/dev/.cache/huggingface/token",
            "/home/dev/.pulumi/credentials.json",
            "/home/dev/.terraform.d/credentials.tfrc.json",
            "/home/dev/.config/rclone/rclone.conf",
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

    #[test]
    fn every_home_counts() {
        let rules =
            SensitivePaths::with_homes(vec!["/home/env".into(), "/home/passwd".into()], None);
        for path in [
            "/home/env/.aws/credentials",
            "/home/passwd/.aws/credentials",
        ] {
            assert_eq!(
                rules.classify(Path::new(path)),
                PathSecrecy::Credential,
                "{path}"
            );
        }
        assert_eq!(rules.homes().len(), 2);
    }

    #[test]
    fn a_hard_link_to_a_key_is_a_credential_wherever_it_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        for folder in [
            home.join(".ssh"),
            home.join(".talaria/skills"),
            work.clone(),
        ] {
            std::fs::create_dir_all(folder).expect("mkdir");
        }
        std::fs::write(home.join(".ssh/id_ed25519"), "KEY").expect("key");
        std::fs::write(home.join("top.pem"), "KEY").expect("key");
        std::fs::write(home.join(".talaria/config.toml"), "api_key = 'k'").expect("config");
        std::fs::write(home.join(".talaria/skills/s.md"), "skill").expect("skill");
        std::fs::write(work.join("plain.txt"), "text").expect("text");
        for (source, link) in [
            (home.join(".ssh/id_ed25519"), "key-link"),
            (home.join("top.pem"), "pem-link"),
            (home.join(".talaria/config.toml"), "config-link"),
            (home.join(".talaria/skills/s.md"), "skill-link"),
            (work.join("plain.txt"), "plain-link"),
        ] {
            std::fs::hard_link(source, work.join(link)).expect("link");
        }
        let rules = SensitivePaths::new(Some(home.clone()), Some(home.join(".talaria")));
        let linked = |name: &str| {
            let meta = std::fs::metadata(work.join(name)).expect("meta");
            rules.is_linked_credential(&meta)
        };
        assert!(linked("key-link"));
        assert!(linked("pem-link"));
        assert!(linked("config-link"));
        assert!(!linked("skill-link"), "skills stay readable");
        assert!(!linked("plain-link"));
        assert!(!linked("plain.txt"));
    }
}
