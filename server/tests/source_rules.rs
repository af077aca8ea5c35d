//! Rules the code keeps that a compiler does not check, checked by reading the sources: no
//! production signature returns `Result<_, String>` (errors are typed), and the server's
//! async code never waits on the disk (it uses `tokio::fs` or the blocking pool).

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

/// The end of the block that starts just before `from` (its `{` already read).
fn block_end(text: &str, from: usize) -> usize {
    let mut depth = 1;
    for (offset, c) in text[from..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return from + offset;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// `body` without what runs on the blocking pool (`spawn_blocking(…)`).
fn off_the_pool(body: &str) -> String {
    let mut kept = String::new();
    let mut rest = body;
    while let Some(at) = rest.find("spawn_blocking(") {
        kept.push_str(&rest[..at]);
        let after = &rest[at + "spawn_blocking(".len()..];
        let mut depth = 1;
        let mut end = after.len();
        for (offset, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = offset + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    kept.push_str(rest);
    kept
}

/// Blocking file-system calls in the bodies of a file's `async fn`s (outside the blocking
/// pool): `std::fs::…` and `Path::exists`.
fn disk_waits(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    disk_waits_in(&text, &path.display().to_string())
}

fn disk_waits_in(text: &str, label: &str) -> Vec<String> {
    let production = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = production[from..].find("async fn ") {
        let start = from + at;
        let Some(open) = production[start..].find('{') else {
            break;
        };
        let body_start = start + open + 1;
        let body_end = block_end(production, body_start);
        let body = off_the_pool(&production[body_start..body_end]);
        for waits in ["std::fs::", ".exists()"] {
            if body.contains(waits) {
                let line = production[..start].lines().count() + 1;
                found.push(format!("{label}:{line}: {waits} in an async fn"));
            }
        }
        from = body_start;
    }
    found
}

#[test]
fn the_servers_async_code_never_waits_on_disk() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(root, &mut files);
    // `talaria doctor` is a one-shot command, not the server's runtime.
    files
        .retain(|f| !f.ends_with("doctor.rs") && !f.components().any(|c| c.as_os_str() == "bench"));
    assert!(
        files.len() > 50,
        "the sources were not found: {}",
        files.len()
    );
    let found: Vec<String> = files.iter().flat_map(|f| disk_waits(f)).collect();
    assert!(
        found.is_empty(),
        "async code reads the disk on the runtime thread (use tokio::fs or spawn_blocking):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_disk_check_sees_a_blocking_read_and_lets_the_blocking_pool_be() {
    let waits = r#"
async fn bad(path: &Path) -> String {
    if path.exists() { format!("{path:?}") } else { std::fs::read_to_string(path).unwrap_or_default() }
}
async fn good(path: PathBuf) -> String {
    tokio::task::spawn_blocking(move || std::fs::read_to_string(&path)).await.ok().and_then(Result::ok).unwrap_or_default()
}
fn sync_is_fine(path: &Path) -> bool { path.exists() }
"#;
    let found = disk_waits_in(waits, "sample");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().all(|f| f.starts_with("sample:2:")),
        "{found:?}"
    );
}
