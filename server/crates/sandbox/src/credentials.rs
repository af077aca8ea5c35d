//! Where credentials live: the stores under a home (folders and files), the names of
//! private keys and token files, and what counts as one wherever it is. The sandbox hides
//! them from commands (matched when each command starts); Talaria's file tools and approval
//! policy judge paths by the same lists.

use std::path::{Path, PathBuf};

/// Folders under the home directory that hold credentials.
pub const HOME_CREDENTIAL_DIRS: &[&str] = &[
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
    ".config/containers",
    ".config/op",
    ".config/rclone",
    ".config/doctl",
    ".config/github-copilot",
    ".local/share/containers",
    ".pulumi",
    ".terraform.d",
    ".fly",
    "Library/Keychains",
    "Library/Application Support/Google/Chrome",
    "Library/Application Support/Firefox",
    "Library/Cookies",
];
/// Files under the home directory that hold tokens.
pub const HOME_CREDENTIAL_FILES: &[&str] = &[
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
    ".config/git/credentials",
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".gemini/oauth_creds.json",
    ".huggingface/token",
    ".cache/huggingface/token",
    ".config/huggingface/token",
    ".s3cfg",
    ".boto",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".config/hcloud/cli.toml",
];
/// Folders that are credential stores wherever they are (another user's home, a mount).
pub const ANYWHERE_CREDENTIAL_DIRS: &[&str] =
    &[".ssh", ".aws", ".gnupg", ".azure", ".password-store"];
/// File names that are credentials wherever they are.
pub const ANYWHERE_CREDENTIAL_FILES: &[&str] =
    &[".netrc", ".git-credentials", ".pgpass", ".vault-token"];
pub const PRIVATE_KEY_NAMES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
];
pub const PRIVATE_KEY_EXTENSIONS: &[&str] = &[
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
/// Whether a file called `name` is a key or token file by its name alone (compared in lower
/// case): `id_ed25519`, `.netrc`, `deploy.pem`.
pub fn is_key_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ANYWHERE_CREDENTIAL_FILES.contains(&lower.as_str())
        || PRIVATE_KEY_NAMES.contains(&lower.as_str())
        || PRIVATE_KEY_EXTENSIONS
            .iter()
            .any(|ext| lower.ends_with(ext))
}

/// The credential stores under `home` (whether they exist or not).
pub fn home_stores(home: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    HOME_CREDENTIAL_DIRS
        .iter()
        .chain(HOME_CREDENTIAL_FILES)
        .map(move |store| home.join(store))
}

/// Whether `path` is in one of `home`'s credential stores, or a key at its top.
pub fn in_home_store(home: &Path, path: &Path) -> bool {
    let Ok(inside) = path.strip_prefix(home) else {
        return false;
    };
    HOME_CREDENTIAL_DIRS
        .iter()
        .any(|dir| inside.starts_with(dir))
        || HOME_CREDENTIAL_FILES
            .iter()
            .any(|file| inside == Path::new(file))
        || (inside.components().count() == 1
            && inside
                .file_name()
                .is_some_and(|name| is_key_name(&name.to_string_lossy())))
}

/// The keys and token files at the top of `home` now (blocking: lists it).
pub fn keys_at_top(home: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(home) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| !entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|entry| is_key_name(&entry.file_name().to_string_lossy()))
        .map(|entry| entry.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_keys_of_a_home() {
        let home = Path::new("/home/u");
        for inside in [
            "/home/u/.ssh/id_rsa",
            "/home/u/.aws/credentials",
            "/home/u/.netrc",
            "/home/u/ID_ED25519",
            "/home/u/deploy.pem",
            "/home/u/.codex/auth.json",
        ] {
            assert!(in_home_store(home, Path::new(inside)), "{inside}");
        }
        for outside in ["/home/u/notes.txt", "/home/u/sub/deploy.pem", "/srv/.netrc"] {
            assert!(!in_home_store(home, Path::new(outside)), "{outside}");
        }
        assert!(home_stores(home).any(|p| p == Path::new("/home/u/.config/gcloud")));
    }
}
