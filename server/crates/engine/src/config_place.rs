//! Where something is written in `config.toml`: the line of a key (for a value that means
//! nothing here) and a readable account of a TOML or type error (its line, its key, the line
//! itself), so every configuration mistake names its place.

/// A header's or key's dotted path, with quotes taken off its parts.
fn normalise(path: &str) -> String {
    path.split('.')
        .map(|part| part.trim().trim_matches('"').trim_matches('\''))
        .collect::<Vec<_>>()
        .join(".")
}

/// The key a `key = value` line sets (without its table), if it is one.
fn key_of(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if trimmed.starts_with('#') || trimmed.starts_with('[') {
        return None;
    }
    let (key, _) = trimmed.split_once('=')?;
    let key = key.trim();
    (!key.is_empty()).then_some(key)
}

/// The tables the file's lines are in: for each line, the path of the table it belongs to
/// (`fallback[1]` for the second `[[fallback]]`).
fn tables(text: &str) -> Vec<String> {
    let mut current = String::new();
    let mut arrays: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    text.lines()
        .map(|line| {
            let trimmed = line.trim();
            if let Some(inner) = trimmed.strip_prefix("[[") {
                let name = normalise(inner.split("]]").next().unwrap_or_default());
                let index = arrays.entry(name.clone()).or_insert(0);
                current = format!("{name}[{index}]");
                *index += 1;
            } else if let Some(inner) = trimmed.strip_prefix('[') {
                current = normalise(inner.split(']').next().unwrap_or_default());
            }
            current.clone()
        })
        .collect()
}

/// The 1-based line where `key` (a dotted path such as `compression.threshold`,
/// `tokenizers."gpt-x"` or `fallback[0].provider`) is set; else the line of the closest
/// enclosing table or key.
pub(crate) fn line_of(text: &str, key: &str) -> Option<usize> {
    let wanted = normalise(key);
    let tables = tables(text);
    let full_path = |index: usize, line: &str| {
        let key = normalise(key_of(line)?);
        Some(match tables[index].as_str() {
            "" => key,
            table => format!("{table}.{key}"),
        })
    };
    let lines: Vec<&str> = text.lines().collect();
    let exact = (0..lines.len()).find(|&i| full_path(i, lines[i]).as_deref() == Some(&wanted));
    if exact.is_some() {
        return exact.map(|i| i + 1);
    }
    // Written another way (an inline table, a dotted key): the nearest enclosing path.
    let mut prefix = wanted.as_str();
    while let Some((shorter, _)) = prefix.rsplit_once('.') {
        prefix = shorter;
        let found = (0..lines.len()).find(|&i| {
            full_path(i, lines[i]).as_deref() == Some(prefix)
                || (tables[i] == prefix && lines[i].trim_start().starts_with('['))
        });
        if let Some(i) = found {
            return Some(i + 1);
        }
    }
    None
}

/// What serde calls a type (`u32`, `a sequence`), as a person would say it.
fn expected(what: &str) -> &str {
    let what = what
        .trim()
        .trim_start_matches("a ")
        .trim_start_matches("an ");
    match what {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number (like 90)",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number (like 0.75)",
        "boolean" | "bool" => "true or false (no quotes)",
        "string" | "str" => "text in quotes",
        "sequence" => "a list (like [\"a\", \"b\"])",
        "map" | "struct" => "a table",
        _ => what,
    }
}

/// A serde type error in plain words: `invalid type: string "ten", expected u32` becomes
/// `a whole number (like 90) is expected, not the text "ten"`; other messages stay.
fn plain(message: &str) -> String {
    let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
    else {
        return message.to_string();
    };
    let Some((found, wanted)) = rest.rsplit_once(", expected ") else {
        return message.to_string();
    };
    let found = match found.split_once(' ') {
        Some(("string", text)) => format!("the text {text}"),
        Some(("integer", number)) => format!("the number {number}"),
        Some(("floating", number)) => format!("the number {}", number.trim_start_matches("point ")),
        Some(("boolean", value)) => format!("`{value}`"),
        _ => found.to_string(),
    };
    format!("{} is expected, not {found}", expected(wanted))
}

/// A TOML or type error as a reader wants it: `line 3, key `mode`: message`, then the line.
pub(crate) fn describe(text: &str, error: &toml::de::Error) -> String {
    let Some(span) = error.span() else {
        return error.message().to_string();
    };
    let start = span.start.min(text.len());
    let line_number = text[..start].matches('\n').count() + 1;
    let line = text.lines().nth(line_number - 1).unwrap_or_default();
    let table = tables(text)
        .get(line_number - 1)
        .cloned()
        .unwrap_or_default();
    let key = key_of(line).map(|key| match table.as_str() {
        "" => normalise(key),
        table => format!("{table}.{}", normalise(key)),
    });
    let message = plain(error.message().trim_end());
    let place = match key {
        Some(key) => format!("line {line_number}, key `{key}`"),
        None => format!("line {line_number}"),
    };
    format!("{place}: {message}\n  {line_number} | {line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_errors_read_as_plain_words() {
        assert_eq!(
            plain("invalid type: string \"ten\", expected u32"),
            "a whole number (like 90) is expected, not the text \"ten\""
        );
        assert_eq!(
            plain("invalid type: integer `3`, expected a boolean"),
            "true or false (no quotes) is expected, not the number `3`"
        );
        assert_eq!(
            plain("invalid type: string \"gpt\", expected a sequence"),
            "a list (like [\"a\", \"b\"]) is expected, not the text \"gpt\""
        );
        assert_eq!(
            plain("invalid value: integer `-1`, expected u32"),
            "a whole number (like 90) is expected, not the number `-1`"
        );
        assert_eq!(plain("expected `=`"), "expected `=`");
    }

    const FILE: &str = "model = \"m\"\nmode = \"ask\"\n\n[compression]\nthreshold = 2.0\n\n[[fallback]]\nprovider = \"openai\"\n[[fallback]]\nprovider = \"palm\"\n\n[tokenizers]\n\"gpt-x\" = \"p50k\"\n";

    #[test]
    fn keys_are_found_in_their_tables() {
        assert_eq!(line_of(FILE, "mode"), Some(2));
        assert_eq!(line_of(FILE, "compression.threshold"), Some(5));
        assert_eq!(line_of(FILE, "fallback[1].provider"), Some(10));
        assert_eq!(line_of(FILE, "tokenizers.\"gpt-x\""), Some(13));
        assert_eq!(
            line_of(
                "compression = { threshold = 2.0 }\n",
                "compression.threshold"
            ),
            Some(1)
        );
        assert_eq!(line_of(FILE, "sandbox.mode"), None);
    }

    #[test]
    fn type_and_syntax_errors_name_their_line_and_key() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct File {
            max_turn_requests: Option<u32>,
        }
        let text = "\n# limits\nmax_turn_requests = \"lots\"\n";
        let error = toml::from_str::<File>(text).expect_err("a string");
        let told = describe(text, &error);
        assert!(
            told.starts_with("line 3, key `max_turn_requests`: "),
            "{told}"
        );
        assert!(
            told.contains("\n  3 | max_turn_requests = \"lots\""),
            "{told}"
        );
        let broken = "model = \"qwen2.5-coder\n";
        let error = toml::from_str::<File>(broken).expect_err("unterminated");
        let told = describe(broken, &error);
        assert!(told.starts_with("line 1"), "{told}");
        assert!(!told.contains("\\n"), "{told}");
    }
}
