//! Redacts secrets from text a summariser will read: API keys and tokens of known shapes,
//! bearer tokens, private key blocks, and `.env`-style assignments to secret-named variables.

use std::sync::OnceLock;

use regex::Regex;

/// What a redacted secret becomes.
pub const REDACTED: &str = "[REDACTED]";

struct Patterns {
    private_key: Regex,
    assignment: Regex,
    bearer: Regex,
    tokens: Regex,
}

fn patterns() -> &'static Patterns {
    static PATTERNS: OnceLock<Patterns> = OnceLock::new();
    PATTERNS.get_or_init(|| Patterns {
        private_key: compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
        ),
        // NAME=value / NAME: value / "name": "value" where the name says it is a secret.
        assignment: compile(
            r#"(?i)(["']?\b[A-Z0-9_.-]*(?:api[_-]?key|secret|token|passw(?:or)?d|passwd|pwd|credentials?|private[_-]?key|access[_-]?key)[A-Z0-9_.-]*["']?\s*[:=]\s*)("[^"\n]*"|'[^'\n]*'|[^\s,;}\]]+)"#,
        ),
        bearer: compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{12,}"),
        tokens: compile(
            r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|glpat-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})",
        ),
    })
}

fn compile(pattern: &str) -> Regex {
    // The patterns are constants covered by tests; a failure here is a build-time bug.
    Regex::new(pattern).unwrap_or_else(|e| panic!("secret pattern does not compile: {e}"))
}

/// The text with every secret replaced by [`REDACTED`].
pub fn redact(text: &str) -> String {
    let p = patterns();
    let text = p.private_key.replace_all(text, REDACTED);
    let text = p
        .assignment
        .replace_all(&text, |caps: &regex::Captures<'_>| {
            format!("{}{REDACTED}", &caps[1])
        });
    let text = p.bearer.replace_all(&text, |caps: &regex::Captures<'_>| {
        format!("{} {REDACTED}", &caps[1])
    });
    p.tokens.replace_all(&text, REDACTED).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_of_every_kind_are_redacted() {
        let text = "export OPENAI_API_KEY=sk-abc123abc123abc123abc123\n\
            DB_PASSWORD='hunter2 is long'\n\
            {\"api_key\": \"k-123\", \"name\": \"ok\"}\n\
            curl -H 'Authorization: Bearer abcdefghijklmnop0123' x\n\
            key ghp_abcdefghijklmnopqrstuvwxyz0123 and AKIAABCDEFGHIJKLMNOP\n\
            -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\n\
            the tokenizer counts tokens; PATH=/usr/bin";
        let clean = redact(text);
        for secret in [
            "sk-abc123",
            "hunter2",
            "k-123",
            "abcdefghijklmnop0123",
            "ghp_",
            "AKIAABCD",
            "b3BlbnNzaC1rZXk",
        ] {
            assert!(!clean.contains(secret), "{secret} left in:\n{clean}");
        }
        assert!(clean.contains("OPENAI_API_KEY=[REDACTED]"), "{clean}");
        assert!(clean.contains("\"name\": \"ok\""), "{clean}");
        assert!(
            clean.contains("the tokenizer counts tokens; PATH=/usr/bin"),
            "{clean}"
        );
    }
}
