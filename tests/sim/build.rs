//! Lists the failpoints the sources name (every string literal `"area::step::before"` or
//! `"…::after"` in the server's and clients' Rust files), for the simulation to crash and
//! fault at: a point added anywhere is in the next build's simulations.

use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut points = Vec::new();
    for dir in ["server", "clients"] {
        let dir = root.join(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        scan(&dir, &mut points);
    }
    points.sort();
    points.dedup();
    let listed: String = points.iter().map(|p| format!("    {p:?},\n")).collect();
    let out = Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("source_points.rs");
    let text = format!(
        "/// The failpoints the sources name, sorted.\npub const SOURCE_POINTS: &[&str] = &[\n{listed}];\n"
    );
    if let Err(e) = std::fs::write(&out, text) {
        println!("cargo:warning=cannot write {}: {e}", out.display());
    }
}

fn scan(dir: &Path, points: &mut Vec<String>) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in listing.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() && !matches!(name.as_str(), "target" | "node_modules") => {
                scan(&path, points);
            }
            Ok(kind) if kind.is_file() && name.ends_with(".rs") => {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    points.extend(text.split('"').filter(|s| is_point(s)).map(str::to_string));
                }
            }
            _ => {}
        }
    }
}

/// `area::step::before` or `area::step::after` (a step may have parts of its own:
/// `serve::mailbox::keep::after`), lower-case names.
fn is_point(text: &str) -> bool {
    let parts: Vec<&str> = text.split("::").collect();
    let Some((when, names)) = parts.split_last() else {
        return false;
    };
    names.len() >= 2
        && matches!(*when, "before" | "after")
        && names
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
}
