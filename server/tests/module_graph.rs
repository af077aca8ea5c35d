//! The module graph has no circle: within each crate, no file reaches itself through the
//! files it uses. Files are read with `syn` (test code left out); an edge is any path in
//! production code (a `use`, or a qualified path such as `crate::events::EngineEvent`) that
//! names an item of another file. A module's own child modules (the files of its folder) are
//! part of it, so edges between a file and its ancestors do not count: that is the layout's
//! way of saying "one room" (the session actor and its rooms, the safety walker and its parts).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::visit::{self, Visit};

#[path = "support/production.rs"]
mod production;
use production::{is_test_only, item_is_test_only, production_files};

/// A module path inside a crate (`["session", "actor"]`); the crate root is empty.
type ModulePath = Vec<String>;

/// The crate roots whose graphs are checked.
const CRATES: &[&str] = &[
    "server/src",
    "server/crates/compress/src",
    "server/crates/engine/src",
    "server/crates/mcp/src",
    "server/crates/provider/src",
    "server/crates/record/src",
    "server/crates/sandbox/src",
    "server/crates/skills/src",
    "server/crates/store/src",
    "server/crates/tools/src",
    "server/crates/util/src",
    "protocol/src",
];

/// The module a file is, from its path below the crate root.
fn module_of(relative: &Path) -> ModulePath {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Every path a file's production code names, as written (segments).
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl Paths {
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(&path.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                let mut path = prefix.clone();
                path.push(name.ident.to_string());
                self.found.push(path);
            }
            syn::UseTree::Rename(rename) => {
                let mut path = prefix.clone();
                path.push(rename.ident.to_string());
                self.found.push(path);
            }
            syn::UseTree::Glob(_) => self.found.push(prefix.clone()),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(tree, prefix);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !item_is_test_only(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&item.tree, &mut Vec::new());
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.found
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        visit::visit_path(self, path);
    }
}

/// The files of a crate by module, and each file's edges to other files' modules.
fn graph(files: &BTreeMap<ModulePath, String>) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let mut edges = BTreeMap::new();
    for (module, text) in files {
        let Ok(parsed) = syn::parse_file(text) else {
            panic!("{module:?} does not parse");
        };
        let mut paths = Paths::default();
        paths.visit_file(&parsed);
        let mut targets = BTreeSet::new();
        for path in paths.found {
            let Some(absolute) = resolve(module, &path, files) else {
                continue;
            };
            // The longest module the path goes through is the file it names.
            let target = (0..=absolute.len())
                .rev()
                .map(|n| absolute[..n].to_vec())
                .find(|prefix| files.contains_key(prefix));
            if let Some(target) = target
                && !target.starts_with(module)
                && !module.starts_with(&target)
            {
                targets.insert(target);
            }
        }
        edges.insert(module.clone(), targets);
    }
    edges
}

/// A path's absolute module path, when it is one of this crate's.
fn resolve(
    module: &ModulePath,
    path: &[String],
    files: &BTreeMap<ModulePath, String>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some([module.as_slice(), &path[1..]].concat()),
        "super" => {
            let mut base = module.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            Some([base.as_slice(), rest].concat())
        }
        // A child module named without `self::` (`floor::check`).
        _ => {
            let child = [module.as_slice(), &path[..1]].concat();
            files
                .contains_key(&child)
                .then(|| [module.as_slice(), path].concat())
        }
    }
}

/// The first circle found, as the files around it.
fn circle(edges: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Option<Vec<ModulePath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &ModulePath,
        edges: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        marks: &mut BTreeMap<ModulePath, Mark>,
        stack: &mut Vec<ModulePath>,
    ) -> Option<Vec<ModulePath>> {
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let start = stack.iter().position(|m| m == next).unwrap_or(0);
                    return Some(stack[start..].to_vec());
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(found) = visit(next, edges, marks, stack) {
                        return Some(found);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        if !marks.contains_key(node)
            && let Some(found) = visit(node, edges, &mut marks, &mut Vec::new())
        {
            return Some(found);
        }
    }
    None
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    for krate in CRATES {
        let src = root.join(krate);
        let mut files = BTreeMap::new();
        for (path, text) in production_files(&src) {
            let relative = path.strip_prefix(&src).unwrap_or(&path);
            // Binaries beside the crate root are crates of their own.
            if relative.starts_with("bin") {
                continue;
            }
            files.insert(module_of(relative), text);
        }
        assert!(!files.is_empty(), "{krate}: no sources found");
        if let Some(found) = circle(&graph(&files)) {
            circles.push(format!("{krate}: {found:?}"));
        }
    }
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

/// Files given by module path and text.
fn planted(files: &[(&str, &str)]) -> BTreeMap<ModulePath, String> {
    files
        .iter()
        .map(|(module, text)| {
            let path = if module.is_empty() {
                Vec::new()
            } else {
                module.split("::").map(str::to_string).collect()
            };
            (path, text.to_string())
        })
        .collect()
}

#[test]
fn a_circle_is_found_through_uses_paths_and_the_second_half_of_a_file() {
    let root = "mod events; mod client; mod session;";
    // Through `use`s.
    let files = planted(&[
        ("", root),
        ("events", "use crate::client::Request; pub struct Event;"),
        ("client", "use crate::events::Event; pub struct Request;"),
    ]);
    assert!(circle(&graph(&files)).is_some());
    // Through a qualified path deep in the second half of a file, past a test module.
    let files = planted(&[
        ("", root),
        ("events", "pub struct Event;"),
        (
            "client",
            "use crate::events::Event;\n#[cfg(test)] mod tests { }\n\
             pub fn later() { let _ = crate::session::spawn(); }",
        ),
        (
            "session",
            "pub fn spawn() { let _ = super::client::later; }",
        ),
    ]);
    let found = circle(&graph(&files)).expect("circle client ↔ session");
    assert!(found.contains(&vec!["session".to_string()]), "{found:?}");
    // Only test code closing the loop, or a parent and its own child: no circle.
    let files = planted(&[
        ("", root),
        (
            "events",
            "#[cfg(test)] use crate::client::Request; pub struct Event;",
        ),
        ("client", "use crate::events::Event; pub struct Request;"),
        ("session", "mod actor; use actor::Actor;"),
        (
            "session::actor",
            "use super::super::events::Event; pub struct Actor;",
        ),
    ]);
    assert_eq!(circle(&graph(&files)), None);
}
