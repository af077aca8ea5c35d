//! Words as the walker reads them: expansions (variables it knows, `$IFS` splitting,
//! command substitutions walked as commands of their own), quoting removed.

use tree_sitter::Node;

use super::Walker;
use crate::shell::safety::words::*;

impl Walker<'_> {
    /// The words an argument node stands for (several when `$IFS` splits it).
    pub(in crate::shell::safety) fn words(&self, node: Node, src: &str) -> Vec<Word> {
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
    pub(in crate::shell::safety) fn word(&self, node: Node, src: &str, first: bool) -> Word {
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

    pub(in crate::shell::safety) fn expand_tilde(&self, text: String, first: bool) -> String {
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
    pub(in crate::shell::safety) fn expansion(&self, node: Node, src: &str) -> Word {
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
    pub(in crate::shell::safety) fn substitution(&self, node: Node, src: &str) -> Word {
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
