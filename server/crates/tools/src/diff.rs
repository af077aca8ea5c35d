//! Unified diffs for edit results (what the model reads; editors get old/new text).

use similar::TextDiff;

/// A unified diff of `old` → `new` labelled with `path`; empty when nothing changed.
pub fn unified(path: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

/// Lines added and removed.
pub fn line_counts(old: &str, new: &str) -> (usize, usize) {
    let diff = TextDiff::from_lines(old, new);
    let mut added = 0;
    let mut removed = 0;
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_show_changed_lines() {
        let diff = unified("f.txt", "a\nb\nc\n", "a\nB\nc\n");
        assert!(diff.starts_with("--- a/f.txt\n+++ b/f.txt\n"), "{diff}");
        assert!(diff.contains("-b\n+B\n"));
        assert_eq!(line_counts("a\nb\n", "a\nc\nd\n"), (2, 1));
        assert_eq!(unified("f", "same", "same"), "");
    }
}
