//! Evaluates word nodes (words, quoted strings, expansions, substitutions) to their text, as
//! far as it is known before the command runs.

use tree_sitter::Node;

use super::walk::Walker;

/// Stands for a part of a word only known at run time.
pub(super) const UNKNOWN: char = '\u{1}';
/// Stands for `$IFS`: the word splits there at run time.
const IFS_SPLIT: char = '\u{1f}';

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

    fn push(&mut self, part: Word) {
        self.text.push_str(&part.text);
        self.exact &= part.exact;
        self.fetched |= part.fetched;
    }

    fn unknown() -> Self {
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
fn unescape_unquoted(raw: &str) -> String {
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
fn unescape_double_quoted(raw: &str) -> String {
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
fn decode_ansi_c(raw: &str) -> String {
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

impl Walker<'_> {
    /// The words an argument node stands for (several when `$IFS` splits it).
    pub(super) fn words(&self, node: Node, src: &str) -> Vec<Word> {
        let word = self.word(node, src, true);
        if !word.text.contains(IFS_SPLIT) {
            return vec![word];
        }
        word.text
            .split(IFS_SPLIT)
            .filter(|part| !part.is_empty())
            .map(|part| Word {
                text: part.to_string(),
                exact: false,
                fetched: word.fetched,
            })
            .collect()
    }

    /// Evaluates one word node; `first` says it starts an argument (where `~` expands).
    pub(super) fn word(&self, node: Node, src: &str, first: bool) -> Word {
        let raw = text(node, src);
        match node.kind() {
            "word" => Word::literal(self.expand_tilde(unescape_unquoted(raw), first)),
            "command_name" => match node.named_child(0) {
                Some(inner) => self.word(inner, src, first),
                None => Word::literal(""),
            },
            "number" | "string_content" | "heredoc_content" => {
                Word::literal(unescape_double_quoted(raw))
            }
            "raw_string" => Word::literal(
                raw.strip_prefix('\'')
                    .and_then(|r| r.strip_suffix('\''))
                    .unwrap_or(raw),
            ),
            "ansi_c_string" => Word::literal(decode_ansi_c(raw)),
            "string" | "translated_string" => {
                let mut word = Word::literal("");
                let mut cursor = node.walk();
                for part in node.named_children(&mut cursor) {
                    word.push(self.word(part, src, false));
                }
                word
            }
            "concatenation" => {
                let mut word = Word::literal("");
                let mut cursor = node.walk();
                for (index, part) in node.named_children(&mut cursor).enumerate() {
                    word.push(self.word(part, src, first && index == 0));
                }
                word
            }
            "simple_expansion" | "expansion" => self.expansion(node, src),
            "command_substitution" => self.substitution(node, src),
            "process_substitution" => Word {
                text: UNKNOWN.to_string(),
                exact: false,
                fetched: contains_fetcher(node, src),
            },
            _ => Word {
                text: raw.to_string(),
                exact: false,
                fetched: contains_fetcher(node, src),
            },
        }
    }

    fn expand_tilde(&self, text: String, first: bool) -> String {
        if !first || !text.starts_with('~') {
            return text;
        }
        let (user, rest) = match text[1..].find('/') {
            Some(slash) => (&text[1..1 + slash], &text[1 + slash..]),
            None => (&text[1..], ""),
        };
        let home = match user {
            "" => match &self.env.home {
                Some(home) => home.clone(),
                None => return text,
            },
            "root" => "/root".to_string(),
            user if user
                .chars()
                .all(|c| c.is_alphanumeric() || "._-".contains(c)) =>
            {
                format!("/home/{user}")
            }
            _ => return text,
        };
        format!("{home}{rest}")
    }

    /// `$NAME` / `${NAME}` (and `${NAME:?}`, `${NAME:-…}`, `${NAME=…}`, which stand for the
    /// value when it is set): `$HOME` from the environment, variables assigned earlier in the
    /// command, anything else unknown.
    fn expansion(&self, node: Node, src: &str) -> Word {
        let raw = text(node, src);
        let inner = raw
            .trim_start_matches('$')
            .trim_start_matches('{')
            .trim_end_matches('}');
        // `$!` and `$$` are process ids: never -1 or 1, never a path.
        if matches!(inner, "!" | "$") {
            return Word {
                text: format!("${inner}"),
                exact: false,
                fetched: false,
            };
        }
        let name_end = inner
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(inner.len());
        let (name, operator) = inner.split_at(name_end);
        let value_if_set = operator.is_empty()
            || [":?", "?", ":-", "-", ":=", "="]
                .iter()
                .any(|op| operator.starts_with(op));
        if name.is_empty() || !value_if_set {
            return Word::unknown();
        }
        if name == "HOME"
            && let Some(home) = &self.env.home
        {
            return Word::literal(home.clone());
        }
        if name == "IFS" && operator.is_empty() {
            return Word {
                text: IFS_SPLIT.to_string(),
                exact: false,
                fetched: false,
            };
        }
        match self.vars.get(name) {
            Some(value) if operator.is_empty() || !value.is_empty() => Word {
                text: value.clone(),
                exact: false,
                fetched: false,
            },
            _ => Word::unknown(),
        }
    }

    /// `$(…)`: `$(echo x)` / `$(printf x)` of literal words stand for their text (a best
    /// effort: still not exact); anything else is unknown.
    fn substitution(&self, node: Node, src: &str) -> Word {
        let fetched = contains_fetcher(node, src);
        let mut cursor = node.walk();
        let commands: Vec<Node> = node.named_children(&mut cursor).collect();
        if let [command] = commands.as_slice()
            && command.kind() == "command"
        {
            let words: Vec<Word> = self.command_words(*command, src);
            if let Some((program, args)) = words.split_first()
                && matches!(program.text.as_str(), "echo" | "printf")
                && words.iter().all(|w| w.exact)
            {
                let printed: Vec<&str> = args
                    .iter()
                    .map(|w| w.text.as_str())
                    .filter(|t| !t.starts_with('-'))
                    .collect();
                return Word {
                    text: printed.join(" ").trim().to_string(),
                    exact: false,
                    fetched,
                };
            }
        }
        Word {
            text: UNKNOWN.to_string(),
            exact: false,
            fetched,
        }
    }
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
