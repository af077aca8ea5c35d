//! Evaluates word nodes (words, quoted strings, expansions, substitutions) to their text, as
//! far as it is known before the command runs.

use tree_sitter::Node;

/// Stands for a part of a word only known at run time.
pub(super) const UNKNOWN: char = '\u{1}';
/// Stands for `$IFS`: the word splits there at run time.
pub(super) const IFS_SPLIT: char = '\u{1f}';

/// Programs that download: their output run by a shell is download-and-run.
pub(super) const FETCHERS: &[&str] = &["curl", "wget", "fetch", "aria2c", "http", "xh", "lynx"];

/// One word after quote removal and the expansions known statically.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Word {
    /// The text; parts only known at run time are [`UNKNOWN`], variables assigned earlier in
    /// the command are their values (a best effort for the floor).
    pub text: String,
    /// The text is exactly what the shell will see (no variable or substitution involved,
    /// `$HOME` and `~` aside).
    pub exact: bool,
    /// A command or process substitution inside it downloads something.
    pub fetched: bool,
}

impl Word {
    /// A literal word.
    pub fn literal(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            exact: true,
            fetched: false,
        }
    }

    /// The text with unknown parts shown as `…`, for messages.
    pub fn shown(&self) -> String {
        self.text.replace(UNKNOWN, "…")
    }

    /// Appends a part (the word is exact only when every part is).
    pub(super) fn push(&mut self, part: Word) {
        self.text.push_str(&part.text);
        self.exact &= part.exact;
        self.fetched |= part.fetched;
    }

    /// A word known only at run time.
    pub(super) fn unknown() -> Self {
        Self {
            text: UNKNOWN.to_string(),
            exact: false,
            fetched: false,
        }
    }
}

pub(super) fn text<'a>(node: Node, src: &'a str) -> &'a str {
    node.utf8_text(src.as_bytes()).unwrap_or("")
}

/// The last path component of a program name.
pub(super) fn basename(text: &str) -> &str {
    text.rsplit('/').next().unwrap_or(text)
}

/// Removes backslash escapes from an unquoted word (`\\\n` is a line continuation).
pub(super) fn unescape_unquoted(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') | None => {}
                Some(next) => out.push(next),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Removes the escapes that double quotes honour.
pub(super) fn unescape_double_quoted(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('"' | '\\' | '$' | '`') => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                Some('\n') => {
                    chars.next();
                }
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Decodes `$'…'` (the common escapes; anything else is kept).
pub(super) fn decode_ansi_c(raw: &str) -> String {
    let inner = raw
        .strip_prefix("$'")
        .and_then(|r| r.strip_suffix('\''))
        .unwrap_or(raw);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('x') => {
                let hex: String = std::iter::from_fn(|| chars.next_if(char::is_ascii_hexdigit))
                    .take(2)
                    .collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) => out.push(decoded),
                    None => out.push(UNKNOWN),
                }
            }
            Some(d @ '0'..='7') => {
                let mut octal = d.to_string();
                while octal.len() < 3 {
                    match chars.next_if(|c| ('0'..='7').contains(c)) {
                        Some(c) => octal.push(c),
                        None => break,
                    }
                }
                match u32::from_str_radix(&octal, 8).ok().and_then(char::from_u32) {
                    Some(decoded) => out.push(decoded),
                    None => out.push(UNKNOWN),
                }
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Whether any command under `node` runs a downloader.
pub(super) fn contains_fetcher(node: Node, src: &str) -> bool {
    let mut cursor = node.walk();
    let mut stack = vec![node];
    while let Some(current) = stack.pop() {
        if current.kind() == "command_name"
            && FETCHERS.contains(&basename(&unescape_unquoted(text(current, src))))
        {
            return true;
        }
        stack.extend(current.named_children(&mut cursor));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_removed_as_the_shell_would() {
        assert_eq!(unescape_unquoted(r"r\m"), "rm");
        assert_eq!(unescape_unquoted("a\\\nb"), "ab");
        assert_eq!(unescape_double_quoted(r#"a\"b\$c\d"#), r#"a"b$c\d"#);
        assert_eq!(decode_ansi_c(r"$'r\x6d\n\101'"), "rm\nA");
    }
}
