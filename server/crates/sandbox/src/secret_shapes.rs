//! Values that look like secrets, whatever the variable holding them is called: keys and
//! tokens by the shapes their issuers give them (`ghp_…`, `sk-…`, `AKIA…`, `xoxb-…`, a JWT,
//! a PEM private key), connection strings and addresses that carry one (`Password=`,
//! `AccountKey=`, `?token=`), and long random-looking strings (mixed case and digits, high
//! entropy); webhook addresses, authorization header values and other whole forms are in
//! `secret_forms.rs`. Tuned to leave what environments usually hold alone: paths, lists,
//! versions, commit hashes and UUIDs (lowercase hex), words.

/// Beginnings that issuers give their keys and tokens, each with the fewest characters that
/// follow in a real one.
const TOKEN_PREFIXES: &[(&str, usize)] = &[
    ("ghp_", 30),
    ("gho_", 30),
    ("ghu_", 30),
    ("ghs_", 30),
    ("ghr_", 30),
    ("github_pat_", 30),
    ("glpat-", 20),
    ("glptt-", 20),
    ("gldt-", 20),
    ("sk-ant-", 20),
    ("sk-proj-", 20),
    ("sk-", 20),
    ("xoxb-", 10),
    ("xoxp-", 10),
    ("xoxa-", 10),
    ("xoxr-", 10),
    ("xoxs-", 10),
    ("xapp-", 10),
    ("AKIA", 16),
    ("ASIA", 16),
    ("AIza", 30),
    ("ya29.", 20),
    ("npm_", 30),
    ("pypi-", 30),
    ("hf_", 30),
    ("SG.", 30),
    ("sk_live_", 20),
    ("rk_live_", 20),
    ("sk_test_", 20),
    ("whsec_", 20),
    ("dop_v1_", 30),
    ("doo_v1_", 30),
    ("shpat_", 20),
    ("shpss_", 20),
    ("glc_", 20),
    ("sq0atp-", 20),
    ("sq0csp-", 20),
    ("AGE-SECRET-KEY-", 20),
    // HashiCorp Vault: service, batch and recovery tokens.
    ("hvs.", 24),
    ("hvb.", 24),
    ("hvr.", 24),
    ("glsa_", 30),
    ("sntrys_", 30),
    ("pul-", 30),
    ("lin_api_", 30),
];

/// Pieces of a longer value (compared in lower case) that put a secret right after them:
/// anywhere (`access_token=`, `DbPassword=`), or, for the short ones, only as a field name
/// of their own (`sig=`, not `…sig=` at the end of a longer word).
const SECRET_FIELDS: &[(&str, bool)] = &[
    ("password=", true),
    ("accountkey=", true),
    ("sharedaccesskey=", true),
    ("secret=", true),
    ("token=", true),
    ("api_key=", true),
    ("apikey=", true),
    ("pwd=", false),
    ("sig=", false),
];

/// The shortest run of random-looking characters taken for a key.
const RANDOM_LENGTH: usize = 32;
/// Bits of entropy per character above which such a run is taken as random (random
/// base-62 text of 32 characters has about 4.8; English words run together, 4 to 4.3).
const RANDOM_ENTROPY: f64 = 4.5;

/// Whether `value` looks like a secret by its shape.
pub fn looks_secret(value: &str) -> bool {
    let value = value.trim();
    is_private_key(value)
        || has_secret_field(value)
        || crate::secret_forms::looks_secret(value)
        || value
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '"' | '\'' | '@'))
            .any(|word| is_token(word) || is_jwt(word) || is_random(word))
}

fn is_private_key(value: &str) -> bool {
    value.contains("-----BEGIN") && value.contains("PRIVATE KEY")
}

fn has_secret_field(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    SECRET_FIELDS.iter().any(|(field, anywhere)| {
        lower.match_indices(field).any(|(at, _)| {
            let own_name = *anywhere
                || lower[..at]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !c.is_ascii_alphanumeric());
            // With a value, not an empty field.
            let filled = lower[at + field.len()..]
                .chars()
                .next()
                .is_some_and(|c| !matches!(c, '&' | ';' | ' '));
            own_name && filled
        })
    })
}

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
}

fn is_token(word: &str) -> bool {
    TOKEN_PREFIXES.iter().any(|(prefix, least)| {
        word.strip_prefix(prefix).is_some_and(|rest| {
            let body = rest
                .chars()
                .take_while(|&c| token_char(c) || c == '.')
                .count();
            body >= *least
        })
    })
}

/// A JSON Web Token: three base64url parts, the first a JSON object (`eyJ`).
fn is_jwt(word: &str) -> bool {
    let parts: Vec<&str> = word.split('.').collect();
    parts.len() == 3
        && word.starts_with("eyJ")
        && parts[..2].iter().all(|part| part.len() >= 10)
        && parts.iter().all(|part| part.chars().all(token_char))
}

/// A long run of characters of a key's alphabet with upper and lower case letters and
/// digits, as random as a key (not a path).
fn is_random(word: &str) -> bool {
    let alphabet = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-');
    word.len() >= RANDOM_LENGTH
        && !word.starts_with(['/', '.', '~'])
        && word.chars().all(alphabet)
        && word.chars().any(|c| c.is_ascii_uppercase())
        && word.chars().any(|c| c.is_ascii_lowercase())
        && word.chars().any(|c| c.is_ascii_digit())
        && entropy(word) >= RANDOM_ENTROPY
}

/// Shannon entropy of `word`'s characters, in bits per character.
fn entropy(word: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    for c in word.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
    }
    let total = word.chars().count() as f64;
    counts
        .values()
        .map(|&n| {
            let p = n as f64 / total;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_tokens_are_known_by_their_shape() {
        for secret in [
            "ghp_R2d2C3poR2d2C3poR2d2C3poR2d2C3po1234",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "glpat-xxxxxxxxxxxxxxxxxxxx",
            "sk-proj-abcdefghijklmnopqrstuvwxyz0123",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
            "xoxb-1234567890-abcdefghij",
            "AKIAIOSFODNN7EXAMPLE",
            "AIzaSyA-1234567890abcdefghijklmnopqrstu",
            "npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
            "pypi-AgEIcHlwaS5vcmcCJGE0ZjBkZjEzLWFiY2QtNDJlZi05ODc2",
            "sk_live_abcdefghijklmnopqrstuvwxyz",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
            "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=abc123==;EndpointSuffix=core.windows.net",
            "Server=db;Database=app;User Id=sa;Password=hunter2;",
            "https://hooks.example.com/services/x?token=abcdef",
            "https://x.blob.core.windows.net/c?sv=2021&sig=abcdef%3D",
            "q8Xz3LmN0vB7cR2tY5wE9uI1oP4aS6dFgH", // a random key, no known issuer
            "dGhpcyBpcyBhIFJhbmRvbSBLZXkgMTIzNDU2Nzg5MA==", // base64
            "Bearer ghp_R2d2C3poR2d2C3poR2d2C3poR2d2C3po1234",
            "https://api.example.com/cb?access_token=abc123",
            "Host=db;DbPassword=hunter2",
            "sig=abc",
            "hvs.CAESIJlWh2y0ZnbBRNaVHtmSFBeAG8AbhqFl2eUp4uNYKJ7aGh4KHGh2cy5NcXV4",
            "hvb.AAAAAQJgxmTb0b7V9a2cjXqqOHc2NmKy4gWGyn0lDkB6LZiwvAAAAAAAAAAAAAA",
            "hvr.Fx3OP9WqXyGyk2jC5rN7YcdA0m",
            "glsa_abcdefghijklmnopqrstuvwxyz012345_0a1b2c3d",
        ] {
            assert!(looks_secret(secret), "{secret}");
        }
    }

    #[test]
    fn what_environments_usually_hold_is_left_alone() {
        for plain in [
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "/home/dev/.nvm/versions/node/v20.11.1/bin/node",
            "en_US.UTF-8",
            "xterm-256color",
            "3a7bd3e2360a3d29eea436fcfb7e44c735d117c4", // a commit
            "550e8400-e29b-41d4-a716-446655440000",     // a UUID
            "w0t0p0:6B5C1A2E-1F0E-4C43-8C65-4E0C7F3D9A10",
            "rs=0:di=01;34:ln=01;36:mi=00:pi=40;33:so=01;35:do=01;35",
            "--max-old-space-size=4096",
            "MyVeryLongCamelCaseIdentifierName2024",
            "unix:path=/run/user/1000/bus,guid=0123456789abcdef0123456789abcdef",
            "https://api.example.com/v1?lang=en&page=2",
            "sk-1", // too short for a key
            "gnome-shell:1234",
            "org.gnome.Shell.desktop",
            "C.UTF-8",
            "1",
            "",
            "keyboard-layout=us",
            "/tmp/talaria-1234-0-ab/HOME_x9Q2mZ7vL4pR8kT1wY6sN3bC5dF0gH",
            "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
            "keep the PRIVATE KEY out of the repository",
            "https://api.example.com/v1?token=&page=2", // an empty field
            "design=flat;mode=dark",                    // `sig=` inside a word
            "sk-learn/datasets/iris/data.csv",          // a path, not a key
            "hvs.short",                                // too short for a token
        ] {
            assert!(!looks_secret(plain), "{plain}");
        }
    }
}
