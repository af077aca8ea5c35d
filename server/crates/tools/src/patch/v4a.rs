//! The multi-file patch format (`*** Begin Patch` … `*** End Patch`) used by Hermes and Codex:
//! `*** Add File:`, `*** Update File:` (with optional `*** Move to:`), `*** Delete File:`;
//! update hunks start with `@@` (optionally followed by an anchor line) and hold context (` `),
//! removed (`-`) and added (`+`) lines.

use crate::error::ToolError;

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

/// A change to one region of a file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hunk {
    pub anchor: Option<String>,
    pub lines: Vec<HunkLine>,
}

/// One file operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

type Lines<'p> = std::iter::Peekable<std::str::Lines<'p>>;

/// Parses a patch.
pub fn parse(patch: &str) -> Result<Vec<FileOp>, ToolError> {
    let mut ops = Vec::new();
    let mut lines = patch.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim() == "*** Begin Patch" {
            continue;
        }
        if line.trim() == "*** End Patch" {
            break;
        }
        if let Some(path) = line.strip_prefix("*** Add File:") {
            ops.push(FileOp::Add {
                path: path.trim().to_string(),
                content: added_content(&mut lines),
            });
        } else if let Some(path) = line.strip_prefix("*** Delete File:") {
            ops.push(FileOp::Delete {
                path: path.trim().to_string(),
            });
        } else if let Some(path) = line.strip_prefix("*** Update File:") {
            ops.push(parse_update(path.trim(), &mut lines)?);
        } else {
            return Err(ToolError::Rejected(format!(
                "unexpected line {line:?}: expected *** Add File:, *** Update File: or *** Delete File:"
            )));
        }
    }
    if ops.is_empty() {
        return Err(ToolError::Rejected(
            "the patch contains no file operations".into(),
        ));
    }
    Ok(ops)
}

/// The content of an Add File section (each line's `+` dropped).
fn added_content(lines: &mut Lines<'_>) -> String {
    let mut content = String::new();
    while let Some(next) = lines.peek() {
        if next.starts_with("***") {
            break;
        }
        let next = lines.next().unwrap_or_default().trim_end_matches('\r');
        content.push_str(next.strip_prefix('+').unwrap_or(next));
        content.push('\n');
    }
    content
}

/// An Update File section: an optional move, then hunks (`@@ anchor` starts one).
fn parse_update(path: &str, lines: &mut Lines<'_>) -> Result<FileOp, ToolError> {
    let mut move_to = None;
    let mut hunks: Vec<Hunk> = Vec::new();
    while let Some(next) = lines.peek() {
        let next = next.trim_end_matches('\r');
        if let Some(target) = next.strip_prefix("*** Move to:") {
            move_to = Some(target.trim().to_string());
            lines.next();
            continue;
        }
        if next.trim() == "*** End of File" {
            lines.next();
            continue;
        }
        if next.starts_with("***") {
            break;
        }
        let next = lines.next().unwrap_or_default().trim_end_matches('\r');
        if let Some(anchor) = next.strip_prefix("@@") {
            let anchor = anchor.trim().trim_end_matches("@@").trim();
            hunks.push(Hunk {
                anchor: (!anchor.is_empty()).then(|| anchor.to_string()),
                lines: Vec::new(),
            });
            continue;
        }
        if hunks.is_empty() {
            hunks.push(Hunk::default());
        }
        let parsed = hunk_line(path, next)?;
        if let Some(hunk) = hunks.last_mut() {
            hunk.lines.push(parsed);
        }
    }
    if hunks.iter().all(|h| h.lines.is_empty()) && move_to.is_none() {
        return Err(ToolError::Rejected(format!(
            "the update of {path} has no changes"
        )));
    }
    Ok(FileOp::Update {
        path: path.to_string(),
        move_to,
        hunks,
    })
}

/// One line of a hunk: added, removed or context.
fn hunk_line(path: &str, line: &str) -> Result<HunkLine, ToolError> {
    Ok(match line.chars().next() {
        Some('+') => HunkLine::Add(line[1..].to_string()),
        Some('-') => HunkLine::Remove(line[1..].to_string()),
        Some(' ') => HunkLine::Context(line[1..].to_string()),
        None => HunkLine::Context(String::new()),
        Some(_) => {
            return Err(ToolError::Rejected(format!(
                "in the update of {path}: line {line:?} must start with ' ', '-' or '+'"
            )));
        }
    })
}

fn find(
    haystack: &[String],
    needle: &[String],
    from: usize,
    eq: impl Fn(&str, &str) -> bool,
) -> Option<usize> {
    if needle.is_empty() {
        return Some(from.min(haystack.len()));
    }
    if needle.len() > haystack.len() {
        return None;
    }
    (from..=haystack.len().saturating_sub(needle.len())).find(|&start| {
        needle
            .iter()
            .enumerate()
            .all(|(k, n)| eq(&haystack[start + k], n))
    })
}

/// Applies update hunks to `text`.
pub fn apply(text: &str, hunks: &[Hunk]) -> Result<String, ToolError> {
    let trailing_newline = text.ends_with('\n');
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut cursor = 0;
    for (number, hunk) in hunks.iter().enumerate() {
        if let Some(anchor) = &hunk.anchor
            && let Some(found) = (cursor..lines.len())
                .find(|&i| lines[i].trim() == anchor.trim())
                .or_else(|| (cursor..lines.len()).find(|&i| lines[i].contains(anchor.trim())))
        {
            cursor = found + 1;
        }
        let old: Vec<String> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.clone()),
                HunkLine::Add(_) => None,
            })
            .collect();
        let new: Vec<String> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Add(t) => Some(t.clone()),
                HunkLine::Remove(_) => None,
            })
            .collect();
        let at = find(&lines, &old, cursor, |a, b| a == b)
            .or_else(|| find(&lines, &old, cursor, |a, b| a.trim_end() == b.trim_end()))
            .or_else(|| find(&lines, &old, cursor, |a, b| a.trim() == b.trim()))
            .or_else(|| find(&lines, &old, 0, |a, b| a.trim() == b.trim()))
            .ok_or_else(|| {
                ToolError::Rejected(format!(
                    "hunk {} did not match; its context and removed lines were not found:\n{}",
                    number + 1,
                    old.join("\n")
                ))
            })?;
        let end = at + old.len();
        lines.splice(at..end, new.iter().cloned());
        cursor = at + new.len();
    }
    let mut out = lines.join("\n");
    if trailing_newline || text.is_empty() {
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "*** Begin Patch
*** Add File: new.txt
+hello
+world
*** Update File: src/lib.rs
*** Move to: src/core.rs
@@ fn two() {
-    2
+    22
*** Delete File: old.txt
*** End Patch";

    #[test]
    fn parses_every_operation() {
        let ops = parse(PATCH).expect("parse");
        assert_eq!(
            ops[0],
            FileOp::Add {
                path: "new.txt".into(),
                content: "hello\nworld\n".into()
            }
        );
        assert!(
            matches!(&ops[1], FileOp::Update { path, move_to: Some(to), hunks } if path == "src/lib.rs" && to == "src/core.rs" && hunks[0].anchor.as_deref() == Some("fn two() {"))
        );
        assert_eq!(
            ops[2],
            FileOp::Delete {
                path: "old.txt".into()
            }
        );
        assert!(parse("garbage").is_err());
        assert!(parse("*** Begin Patch\n*** End Patch").is_err());
    }

    #[test]
    fn applies_hunks_after_anchors_with_whitespace_tolerance() {
        let text = "fn one() {\n    2\n}\nfn two() {\n    2\n}\n";
        let ops = parse(PATCH).expect("parse");
        let FileOp::Update { hunks, .. } = &ops[1] else {
            panic!("update")
        };
        assert_eq!(
            apply(text, hunks).expect("apply"),
            "fn one() {\n    2\n}\nfn two() {\n    22\n}\n"
        );
        let bad = vec![Hunk {
            anchor: None,
            lines: vec![HunkLine::Remove("nope".into())],
        }];
        assert!(
            apply(text, &bad)
                .expect_err("expected an error")
                .to_string()
                .contains("did not match")
        );
    }
}
