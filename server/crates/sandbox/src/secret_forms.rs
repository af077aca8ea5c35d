//! Secrets known by a whole form rather than a token's beginning: webhook addresses (whose
//! path is the key that lets anyone post: Slack, Discord, Microsoft Teams), HTTP
//! authorization header values (`Basic dXNlcjpwYXNz`, `Bearer …`), long hex keys, HashiCorp
//! Vault's legacy tokens (`s.` and 24 letters and digits) and Twilio API keys (`SK` and 32
//! hex digits).
//!
//! Hex is taken for a key from 64 digits on (a 256-bit key, an Ethereum private key): 40
//! digits are a SHA-1 commit (`GITHUB_SHA`, `GIT_COMMIT`) and 32 an MD5 or a dashless UUID,
//! which environments hold all the time; at 64 the price is a SHA-256 checksum written
//! bare, withheld from the command (a digest written `sha256:…`, as registries write it,
//! passes).

use base64::Engine;

/// Webhook addresses, host and path in lower case, each followed by its key.
const WEBHOOKS: &[&str] = &[
    "hooks.slack.com/services/",
    "hooks.slack.com/workflows/",
    "hooks.slack.com/triggers/",
    "discord.com/api/webhooks/",
    "discordapp.com/api/webhooks/",
    ".webhook.office.com/webhookb2/",
    "outlook.office.com/webhook/",
];
/// The fewest characters of a webhook's key after its address.
const WEBHOOK_KEY: usize = 16;
/// Authorization schemes whose credential is a token (`Basic` is judged by what it holds).
const TOKEN_SCHEMES: &[&str] = &["bearer", "token", "negotiate", "ntlm"];
/// The fewest characters of such a token (RFC 6750's example has 14).
const SCHEME_TOKEN: usize = 12;
/// The fewest hex digits taken for a key.
const HEX_KEY: usize = 64;

/// Whether `value` holds a secret of one of these forms.
pub(crate) fn looks_secret(value: &str) -> bool {
    has_webhook(value)
        || has_authorization(value)
        || value
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '"' | '\'' | '@' | '='))
            .any(|word| is_hex_key(word) || is_vault_legacy(word) || is_twilio_key(word))
}

fn has_webhook(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    WEBHOOKS.iter().any(|address| {
        lower.match_indices(address).any(|(at, _)| {
            lower[at + address.len()..]
                .chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '@'))
                .filter(char::is_ascii_alphanumeric)
                .count()
                >= WEBHOOK_KEY
        })
    })
}

/// A header value, or a header line: a scheme word, then its credential.
fn has_authorization(value: &str) -> bool {
    let words: Vec<&str> = value
        .split(|c: char| c.is_whitespace() || matches!(c, ':' | '"' | '\'' | ',' | ';' | '{' | '}'))
        .filter(|word| !word.is_empty())
        .collect();
    words.windows(2).any(|pair| {
        let scheme = pair[0].to_ascii_lowercase();
        if scheme == "basic" {
            is_basic_credential(pair[1])
        } else {
            TOKEN_SCHEMES.contains(&scheme.as_str()) && is_scheme_token(pair[1])
        }
    })
}

/// `user:password` in base64, as `Basic` carries it (the user may be empty, as with APIs
/// that take a token as the password; the password may not).
fn is_basic_credential(word: &str) -> bool {
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::STANDARD_NO_PAD,
    ];
    engines.iter().any(|engine| {
        engine
            .decode(word)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .is_some_and(|text| {
                text.split_once(':')
                    .is_some_and(|(_user, password)| !password.is_empty())
            })
    })
}

/// A token as HTTP writes one (`token68`), long enough, with letters and digits.
fn is_scheme_token(word: &str) -> bool {
    word.len() >= SCHEME_TOKEN
        && word.starts_with(|c: char| c.is_ascii_alphanumeric())
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '+' | '/' | '=')
        })
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
}

fn is_hex_key(word: &str) -> bool {
    let digits = word
        .strip_prefix("0x")
        .or_else(|| word.strip_prefix("0X"))
        .unwrap_or(word);
    digits.len() >= HEX_KEY && digits.chars().all(|c| c.is_ascii_hexdigit())
}

/// A Vault token of before 1.10: `s.` and 24 letters (both cases) and digits.
fn is_vault_legacy(word: &str) -> bool {
    word.strip_prefix("s.").is_some_and(|body| {
        body.len() == 24
            && body.chars().all(|c| c.is_ascii_alphanumeric())
            && body.chars().any(|c| c.is_ascii_uppercase())
            && body.chars().any(|c| c.is_ascii_lowercase())
    })
}

/// A Twilio API key: `SK` and 32 lowercase hex digits.
fn is_twilio_key(word: &str) -> bool {
    word.strip_prefix("SK").is_some_and(|body| {
        body.len() == 32
            && body
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_headers_hex_keys_and_legacy_tokens_are_caught() {
        for secret in [
            "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "https://hooks.slack.com/workflows/T01ABC/A02DEF/123456789/abcdEFGHijkl",
            "https://discord.com/api/webhooks/123456789012345678/AbCdEf-gHiJkLmNoP_qRsTuV",
            "https://discordapp.com/api/webhooks/1234/abcdefghijklmnopqrstuv",
            "https://contoso.webhook.office.com/webhookb2/0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9@x/IncomingWebhook/abc/def",
            "https://outlook.office.com/webhook/0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9@x/IncomingWebhook/ab",
            "Basic dXNlcjpwYXNzd29yZA==",
            "Basic dXNlcjpwYXNzd29yZA",
            "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l",
            "Bearer 4f1c2a9e8b7d6c5e4f3a2b1c",
            "Authorization:Bearer abcdefghij1234567890",
            "{\"Authorization\":\"Bearer mF_9.B5f-4.1JqM\"}",
            "token 0123456789abcdef0123456789abcdef01234567",
            "Negotiate YIIGhgYGKwYBBQUCoIIGejCCBnag4Q",
            &"0123456789abcdef".repeat(4),
            &format!("0x{}", "AbCdEf0123456789".repeat(4)),
            "s.Gf8OiKX2Lp0bN3qR5tY7uW9z",
            "SK0123456789abcdef0123456789abcdef",
            &format!("deploy key {}", "0123456789abcdef".repeat(4)),
            "Basic OnBhc3M=", // ":pass"
        ] {
            assert!(looks_secret(secret), "{secret}");
            assert!(crate::secret_shapes::looks_secret(secret), "{secret}");
        }
    }

    #[test]
    fn look_alikes_pass() {
        for plain in [
            "3a7bd3e2360a3d29eea436fcfb7e44c735d117c4", // a SHA-1 commit
            "d41d8cd98f00b204e9800998ecf8427e",         // an MD5
            "550e8400e29b41d4a716446655440000",         // a dashless UUID
            "550e8400-e29b-41d4-a716-446655440000",
            &"0123456789abcdef".repeat(3), // 48 digits
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "https://hooks.slack.com/",
            "https://api.slack.com/messaging/webhooks",
            "https://discord.com/channels/123456789/987654321",
            "https://discord.com/api/webhooks/",
            "https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors",
            "/usr/share/doc/basic/README",
            "Basic information about the project",
            "Basic usage: run make",
            "Bearer tokens are sent in headers",
            "Bearer",
            "Bearer abcdefghijklmnopqr", // no digit
            "Bearer abc123",             // too short
            "Bearer 1234567890123456",   // no letter
            "Bearer -abcdef1234567890",  // not a token's first character
            "Bearer abcdef1234567890$%", // not a token's characters
            "Basic dXNlcjo=",            // "user:", no password
            "Basic YQ==",                // "a", no colon
            "a token like this-one-is-fine",
            "s.example-cdn-assets-host.com",
            "s.abcdefghijklmnopqrstuvwx", // one case only
            "s.Gf8OiKX2Lp0bN3qR5tY7uW9zExtra",
            "SKIP_TESTS_FOR_THE_WHOLE_REPOSITORY",
            "SK0123456789ABCDEF0123456789ABCDEF",
            "/home/dev/project/target/debug",
            "https://example.com/a/b?c=d",
        ] {
            assert!(!looks_secret(plain), "{plain}");
        }
    }
}
