//! Find-and-replace for `patch`: exact first; then a whitespace- and indent-tolerant match by
//! lines, re-indenting the replacement to where it lands. Ambiguous matches are refused.

/// Why a replacement could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceError {
    Empty,
    NotFound,
    Ambiguous(usize),
}

impl std::fmt::Display for ReplaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => write!(f, "`old_string` is empty; to create a file use write_file"),
            Self::NotFound => write!(
                f,
                "`old_string` was not found (not even ignoring whitespace and indentation); \
                 read the file again and copy the exact text"
            ),
            Self::Ambiguous(n) => write!(
                f,
                "`old_string` matches {n} places; add surrounding lines to make it unique, \
                 or set replace_all to change every one"
            ),
        }
    }
}

/// How the match was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Exact,
    WhitespaceTolerant,
}

/// Replaces `old` with `new` in `text`: returns the new text, the number of replacements and
/// how the match was found.
pub fn replace(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, usize, Strategy), ReplaceError> {
    if old.is_empty() {
        return Err(ReplaceError::Empty);
    }
    let count = text.matches(old).count();
    if count == 1 || (count > 1 && replace_all) {
        return Ok((text.replace(old, new), count, Strategy::Exact));
    }
    if count > 1 {
        return Err(ReplaceError::Ambiguous(count));
    }
    fuzzy(text, old, new, replace_all)
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

fn fuzzy(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, usize, Strategy), ReplaceError> {
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let file_lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let old_lines: Vec<&str> = trim_blank_edges(old.lines().collect());
    if old_lines.is_empty() {
        return Err(ReplaceError::NotFound);
    }
    let matches: Vec<usize> = (0..file_lines.len().saturating_sub(old_lines.len() - 1))
        .filter(|&start| {
            old_lines
                .iter()
                .enumerate()
                .all(|(k, line)| file_lines[start + k].trim() == line.trim())
        })
        .collect();
    // Overlapping windows count once.
    let mut starts = Vec::new();
    for start in matches {
        if starts
            .last()
            .is_none_or(|&last: &usize| start >= last + old_lines.len())
        {
            starts.push(start);
        }
    }
    match starts.len() {
        0 => return Err(ReplaceError::NotFound),
        n if n > 1 && !replace_all => return Err(ReplaceError::Ambiguous(n)),
        _ => {}
    }
    let old_indent = old_lines
        .iter()
        .find(|l| !l.trim().is_empty())
        .map_or("", |l| indent_of(l));
    let new_lines: Vec<&str> = trim_blank_edges(new.lines().collect());
    let mut out: Vec<String> = Vec::with_capacity(file_lines.len());
    let mut index = 0;
    for &start in &starts {
        out.extend(file_lines[index..start].iter().map(|l| l.to_string()));
        let file_indent = file_lines[start..start + old_lines.len()]
            .iter()
            .find(|l| !l.trim().is_empty())
            .map_or("", |l| indent_of(l));
        for line in &new_lines {
            match line.strip_prefix(old_indent) {
                Some(rest) if !line.trim().is_empty() => out.push(format!("{file_indent}{rest}")),
                _ => out.push(line.to_string()),
            }
        }
        index = start + old_lines.len();
    }
    out.extend(file_lines[index..].iter().map(|l| l.to_string()));
    Ok((
        out.join(newline),
        starts.len(),
        Strategy::WhitespaceTolerant,
    ))
}

fn trim_blank_edges(mut lines: Vec<&str>) -> Vec<&str> {
    while lines.first().is_some_and(|l| l.trim().is_empty()) {
        lines.remove(0);
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_unique_and_ambiguous() {
        assert_eq!(
            replace("a b a", "b", "c", false).expect("ok"),
            ("a c a".into(), 1, Strategy::Exact)
        );
        assert_eq!(
            replace("a b a", "a", "x", false).expect_err("expected an error"),
            ReplaceError::Ambiguous(2)
        );
        assert_eq!(replace("a b a", "a", "x", true).expect("ok").0, "x b x");
        assert_eq!(
            replace("abc", "zzz", "y", false).expect_err("expected an error"),
            ReplaceError::NotFound
        );
        assert_eq!(
            replace("abc", "", "y", false).expect_err("expected an error"),
            ReplaceError::Empty
        );
    }

    #[test]
    fn tolerant_match_reindents_the_replacement() {
        let file = "fn main() {\n        let x = 1;\n        call(x);\n}\n";
        let old = "let x = 1;\n  call(x);";
        let new = "let x = 2;\ncall(x);\nlog(x);";
        let (text, count, strategy) = replace(file, old, new, false).expect("ok");
        assert_eq!(strategy, Strategy::WhitespaceTolerant);
        assert_eq!(count, 1);
        // The replacement lands at the matched indentation.
        assert_eq!(
            text,
            "fn main() {\n        let x = 2;\n        call(x);\n        log(x);\n}\n"
        );
        let indented_old = "    let x = 1;\n    call(x);";
        let indented_new = "    let y = 1;\n    call(y);";
        let (text, _, _) = replace(file, indented_old, indented_new, false).expect("ok");
        assert_eq!(
            text,
            "fn main() {\n        let y = 1;\n        call(y);\n}\n"
        );
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        let file = "a\r\n  b\r\nc\r\n";
        let (text, _, _) = replace(file, "b\nc", "B\nC", false).expect("ok");
        assert_eq!(text, "a\r\n  B\r\n  C\r\n");
    }
}
