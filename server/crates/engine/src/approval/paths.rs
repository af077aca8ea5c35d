//! Path checks for the edit policy: inside the workspace roots, and sensitive locations.

use std::path::{Component, Path, PathBuf};

/// Whether `path` is one of `roots` or below one (lexically; paths are already absolute and
/// normalised by the tools).
pub fn inside_any(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

/// Files whose change deserves a human look in every mode but yolo: `.git` internals, `.ssh`,
/// environment files, private keys and certificates.
pub fn is_sensitive(path: &Path) -> bool {
    let components: Vec<String> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if components
        .iter()
        .any(|c| c == ".ssh" || c == ".gnupg" || c == ".aws")
    {
        return true;
    }
    // `.git/…` internals (but not `.gitignore` or `.github/`).
    if let Some(pos) = components.iter().position(|c| c == ".git")
        && pos + 1 < components.len()
    {
        return true;
    }
    let Some(name) = components.last() else {
        return false;
    };
    let lower = name.to_ascii_lowercase();
    talaria_tools::is_env_file(&lower)
        || lower.starts_with("id_rsa")
        || lower.starts_with("id_ed25519")
        || lower.starts_with("id_ecdsa")
        || lower.starts_with("id_dsa")
        || [".pem", ".key", ".p12", ".pfx", ".keystore", ".jks"]
            .iter()
            .any(|ext| lower.ends_with(ext))
        || lower == ".netrc"
        || lower == ".npmrc"
        || lower == ".pypirc"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_paths() {
        for path in [
            "/p/.git/config",
            "/home/u/.ssh/config",
            "/p/.env",
            "/p/.env.production",
            "/p/.env-production",
            "/p/prod.env",
            "/p/certs/server.key",
            "/p/id_ed25519",
        ] {
            assert!(is_sensitive(Path::new(path)), "{path}");
        }
        for path in [
            "/p/.gitignore",
            "/p/.github/workflows/ci.yml",
            "/p/src/env.rs",
            "/p/.environment.md",
            "/p/keys.rs",
        ] {
            assert!(!is_sensitive(Path::new(path)), "{path}");
        }
        let roots = vec![PathBuf::from("/p"), PathBuf::from("/extra")];
        assert!(inside_any(Path::new("/p/a/b"), &roots));
        assert!(inside_any(Path::new("/extra"), &roots));
        assert!(!inside_any(Path::new("/px/a"), &roots));
    }
}
