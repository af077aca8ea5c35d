//! A request as a cassette keys it: the body Talaria sends (in the OpenAI shape, which carries
//! the model, the tools and every message), with what changes from run to run written as
//! placeholders — the workspace and temporary paths, the home directory, dates, and the
//! secrets the caller names (they never reach a cassette).

use serde_json::Value;

use crate::model::ChatRequest;

/// What a request's volatile parts are, and what they become.
#[derive(Debug, Clone, Default)]
pub struct Normaliser {
    /// Texts replaced wherever they occur (longest first), by their placeholders.
    replacements: Vec<(String, String)>,
    /// Texts that must never be written (keys, passwords): replaced by `[REDACTED]`.
    secrets: Vec<String>,
    /// Further redaction of free text (the secret filters of the caller).
    redact: Option<fn(&str) -> String>,
}

impl Normaliser {
    /// Writes `text` as `placeholder` (a path, an id) wherever it occurs.
    pub fn replace(mut self, text: impl Into<String>, placeholder: impl Into<String>) -> Self {
        let text = text.into();
        if !text.is_empty() {
            self.replacements.push((text, placeholder.into()));
            self.replacements
                .sort_by_key(|(text, _)| std::cmp::Reverse(text.len()));
        }
        self
    }

    /// Never writes `secret` (a configured key, a password).
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        if secret.len() >= 4 {
            self.secrets.push(secret);
        }
        self
    }

    /// Runs every string through `redact` too (the caller's secret filters).
    pub fn redacting(mut self, redact: fn(&str) -> String) -> Self {
        self.redact = Some(redact);
        self
    }

    /// The request as a cassette keys it.
    pub fn request(&self, request: &ChatRequest<'_>) -> Value {
        let mut body = crate::openai::request_body(request);
        if let Value::Object(map) = &mut body {
            // How the stream is asked for, and the key used, are not the conversation.
            map.remove("stream");
            map.remove("stream_options");
        }
        self.value(&mut body);
        body
    }

    /// Normalises every string in `value`, in place.
    pub fn value(&self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.text(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(map) => map.values_mut().for_each(|item| self.value(item)),
            _ => {}
        }
    }

    /// A recorded value with this run's texts in place of the placeholders (the inverse of
    /// the replacements; redactions and dates stay as recorded).
    pub fn restore_value(&self, value: &mut Value) {
        match value {
            Value::String(text) => {
                for (original, placeholder) in &self.replacements {
                    if text.contains(placeholder.as_str()) {
                        *text = text.replace(placeholder.as_str(), original);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.restore_value(item)),
            Value::Object(map) => map.values_mut().for_each(|item| self.restore_value(item)),
            _ => {}
        }
    }

    /// One text, normalised and redacted.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            out = out.replace(secret.as_str(), "[REDACTED]");
        }
        if let Some(redact) = self.redact {
            out = redact(&out);
        }
        for (from, to) in &self.replacements {
            if out.contains(from.as_str()) {
                out = out.replace(from.as_str(), to);
            }
        }
        dates_written_as_placeholders(&out)
    }
}

/// `2026-12-01` (and `2026-12-01 (Tuesday)`) become `<date>`.
fn dates_written_as_placeholders(text: &str) -> String {
    let bytes = text.as_bytes();
    let is_date = |at: usize| {
        let shape = b"dddd-dd-dd";
        at + shape.len() <= bytes.len()
            && shape.iter().enumerate().all(|(i, c)| match c {
                b'd' => bytes[at + i].is_ascii_digit(),
                other => bytes[at + i] == *other,
            })
            && (at == 0 || !bytes[at - 1].is_ascii_digit())
            && bytes
                .get(at + shape.len())
                .is_none_or(|b| !b.is_ascii_digit())
    };
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < bytes.len() {
        if is_date(at) {
            out.push_str("<date>");
            at += 10;
            // The weekday the environment writes after it.
            if let Some(rest) = text.get(at..)
                && rest.starts_with(" (")
                && let Some(close) = rest.find(')')
                && close <= 12
            {
                at += close + 1;
            }
            continue;
        }
        let Some(ch) = text.get(at..).and_then(|rest| rest.chars().next()) else {
            break;
        };
        out.push(ch);
        at += ch.len_utf8();
    }
    out
}
