//! Every path ARCHITECTURE.md names exists: a file or folder of the repository, named from
//! the root or from within its crate (`acp/dispatch.rs`), so the map cannot point at what
//! was moved or removed. The map also stays a map: at most 30 KB. And the README stays a
//! front door (at most 15 KB), and every relative link of the documents leads somewhere.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file and folder under `dir`, relative to the root (`/`-separated).
fn tree(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if matches!(
            name.as_str(),
            "target" | "node_modules" | ".git" | "dist" | "code-server"
        ) {
            continue;
        }
        let relative = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        out.push(relative);
        if path.is_dir() {
            tree(root, &path, out);
        }
    }
}

/// The backticked words of `text` that name a path (`a/b.rs`, `clients/`, `x.md`).
fn named_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (i, piece) in text.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let word = piece.split("::").next().unwrap_or(piece);
        let plain = !word.is_empty()
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
        let looks_like_path = word.contains('/')
            || [".rs", ".md", ".toml", ".sh", ".json", ".mjs", ".py"]
                .iter()
                .any(|ext| word.ends_with(ext));
        // ACP methods (`session/update`) and the user's files (`config.toml`) are not ours.
        let method = ["session/", "fs/", "terminal/", "providers/", "auth/"]
            .iter()
            .any(|prefix| word.starts_with(prefix));
        let users = ["SKILL.md", "config.toml", "state.db"].contains(&word);
        if plain
            && looks_like_path
            && !method
            && !users
            && !word.starts_with('/')
            && !word.starts_with('.')
        {
            paths.push(word.trim_end_matches('/').to_string());
        }
    }
    paths
}

#[test]
fn every_path_the_map_names_exists_and_the_map_stays_short() {
    let root = root();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    assert!(
        map.len() <= 30_000,
        "ARCHITECTURE.md is {} bytes: a map, at most 30 KB (file detail goes in `//!` comments)",
        map.len()
    );
    let mut files = Vec::new();
    tree(&root, &root, &mut files);
    let missing: Vec<String> = named_paths(&map)
        .into_iter()
        .filter(|named| {
            !files
                .iter()
                .any(|file| file == named || file.ends_with(&format!("/{named}")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

/// The relative link targets of a Markdown text (`[text](target)`, anchors dropped).
fn link_targets(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|target| target.split('#').next().unwrap_or("").to_string())
        .filter(|target| !target.is_empty() && !target.contains("://"))
        .filter(|target| !target.starts_with("mailto:"))
        .collect()
}

#[test]
fn the_front_door_stays_short_and_every_documents_link_leads_somewhere() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    assert!(
        readme.len() <= 15_000,
        "README.md is {} bytes; it is the front door (at most 15 KB): move detail to docs/",
        readme.len()
    );
    let mut documents = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/");
    documents.extend(docs.flatten().map(|entry| entry.path()));
    let mut broken = Vec::new();
    for document in documents
        .iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
    {
        let text = std::fs::read_to_string(document).expect("a document");
        let folder = document.parent().unwrap_or(&root);
        for target in link_targets(&text) {
            if !folder.join(&target).exists() {
                broken.push(format!("{}: {target}", document.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
    // And the reader sees a broken one.
    assert_eq!(
        link_targets("[a](docs/x.md#part) [b](https://example.com) [c](y.md)"),
        ["docs/x.md", "y.md"]
    );
}
