//! Find-and-replace for `patch`: exact first; then a whitespace- and indent-tolerant match by
//! lines, re-indenting the replacement to where it lands. Ambiguous matches are refused.

/// Why a replacement could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceError {
    Empty,
    /// With the file's closest lines, numbered (the whole file when it is short).
    NotFound(String),
    Ambiguous(usize),
}

impl std::fmt::Display for ReplaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => write!(f, "`old_string` is empty; to create a file use write_file"),
            Self::NotFound(nearest) => write!(
                f,
                "`old_string` was not found (not even ignoring whitespace and indentation). \
                 {nearest}\nCopy the exact lines to change from there into `old_string` and \
                 call `patch` again"
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
    fuzzy(text, old, new, replace_all).map_err(|error| match error {
        ReplaceError::NotFound(_) => ReplaceError::NotFound(nearest_lines(text, old)),
        other => other,
    })
}

/// A file this short is shown whole when `old_string` is not found.
const WHOLE_FILE_LINES: usize = 60;
/// Lines shown around the closest place otherwise.
const AROUND: usize = 3;

/// The file's lines most like `old` (numbered), or the whole file when it is short: what the
/// model needs to write `old_string` right without reading the file again.
fn nearest_lines(text: &str, old: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let numbered = |from: usize, to: usize| -> String {
        (from..to)
            .map(|i| format!("{:>5}| {}", i + 1, lines[i]))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if lines.len() <= WHOLE_FILE_LINES {
        return format!(
            "The whole file ({} lines):\n{}",
            lines.len(),
            numbered(0, lines.len())
        );
    }
    let wanted: Vec<&str> = old.lines().filter(|l| !l.trim().is_empty()).collect();
    let span = wanted.len().max(1);
    let best = (0..lines.len())
        .max_by_key(|&start| {
            wanted
                .iter()
                .enumerate()
                .filter_map(|(offset, want)| {
                    lines.get(start + offset).map(|line| likeness(line, want))
                })
                .sum::<usize>()
        })
        .unwrap_or(0);
    let from = best.saturating_sub(AROUND);
    let to = (best + span + AROUND).min(lines.len());
    format!(
        "The closest lines, {}–{}:\n{}",
        from + 1,
        to,
        numbered(from, to)
    )
}

/// How alike two lines are: the words (identifiers, numbers) they share.
fn likeness(line: &str, wanted: &str) -> usize {
    let words = |text: &str| -> std::collections::HashSet<String> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    words(line).intersection(&words(wanted)).count()
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
        return Err(ReplaceError::NotFound(String::new()));
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
        0 => return Err(ReplaceError::NotFound(String::new())),
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
        assert!(matches!(
            replace("abc", "zzz", "y", false).expect_err("expected an error"),
            ReplaceError::NotFound(_)
        ));
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

    #[test]
    fn text_not_found_comes_back_with_the_closest_lines_or_the_whole_short_file() {
        let short = "def add(a, b):\n    return a + b\n";
        let Err(ReplaceError::NotFound(whole)) = replace(short, "def sum(a, b):", "x", false)
        else {
            panic!("not found");
        };
        assert!(
            whole.contains("    1| def add(a, b):") && whole.contains("    2|     return a + b")
        );
        let long: String = (1..=200)
            .map(|n| format!("value_{n} = compute({n}, scale)\n"))
            .collect();
        let old = "value_150 = compute(150, factor)\nvalue_151 = compute(151, factor)";
        let Err(ReplaceError::NotFound(closest)) = replace(&long, old, "x", false) else {
            panic!("not found");
        };
        assert!(
            closest.contains("  150| value_150 = compute(150, scale)"),
            "{closest}"
        );
        assert!(
            closest.contains("  147|") && closest.contains("  154|"),
            "{closest}"
        );
        assert!(!closest.contains("  140|"), "{closest}");
    }
}
