//! Rules the code keeps that a compiler does not check: no production signature returns
//! `Result<_, String>` (errors are typed), checked by reading the sources.

use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`, test crates and build output left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(name.as_ref(), "tests" | "target" | "node_modules" | "fuzz") {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The lines before a file's test module that return `Result<…, String>`.
fn string_errors(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let production = text.split("#[cfg(test)]").next().unwrap_or_default();
    production
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.trim_start();
            !code.starts_with("//") && code.contains("Result<") && code.contains(", String>")
        })
        .map(|(number, line)| format!("{}:{}: {}", path.display(), number + 1, line.trim()))
        .collect()
}

#[test]
fn no_production_signature_returns_a_string_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["server", "protocol", "clients"] {
        sources(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 100,
        "the sources were not found: {}",
        files.len()
    );
    let found: Vec<String> = files.iter().flat_map(|f| string_errors(f)).collect();
    assert!(
        found.is_empty(),
        "errors are typed (thiserror), not strings:\n{}",
        found.join("\n")
    );
}
