//! The module graph has no circle: within each crate, no file reaches itself through the
//! files it uses. Files are read with `syn` (test code left out); an edge is any path in
//! production code (a `use`, or a qualified path such as `crate::events::EngineEvent`) that
//! names an item of another file. A module's own child modules (the files of its folder) are
//! part of it, so edges between a file and its ancestors do not count: that is the layout's
//! way of saying "one room" (the session actor and its rooms, the safety walker and its parts).
//!
//! Rooms have no circle either: an edge between two files is also an edge between the two
//! sibling rooms that hold them below their nearest common module, so a file that reaches
//! into a room above its own (one that uses the file's room) is found even when no file-level
//! loop closes.

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
    "server/crates/files/src",
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

/// The edges between rooms: each file edge lifted to the two siblings that hold its ends
/// below their nearest common module (a top-level file is a room of its own).
fn room_edges(
    edges: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let mut rooms: BTreeMap<ModulePath, BTreeSet<ModulePath>> = BTreeMap::new();
    for (from, targets) in edges {
        for to in targets {
            let shared = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            // The graph keeps no edge between a module and its own ancestor, so both paths
            // go on past what they share.
            if shared < from.len() && shared < to.len() {
                rooms
                    .entry(from[..=shared].to_vec())
                    .or_default()
                    .insert(to[..=shared].to_vec());
            }
        }
    }
    rooms
}

/// Each crate's production files by module path (binaries beside the root left out).
fn crate_files(krate: &str) -> BTreeMap<ModulePath, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate);
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
    files
}

#[test]
fn no_crate_has_an_import_circle_between_its_rooms() {
    let circles: Vec<String> = CRATES
        .iter()
        .filter_map(|krate| {
            circle(&room_edges(&graph(&crate_files(krate))))
                .map(|found| format!("{krate}: {found:?}"))
        })
        .collect();
    assert!(circles.is_empty(), "circles between rooms: {circles:#?}");
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let circles: Vec<String> = CRATES
        .iter()
        .filter_map(|krate| {
            circle(&graph(&crate_files(krate))).map(|found| format!("{krate}: {found:?}"))
        })
        .collect();
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

#[test]
fn a_file_reaching_into_a_room_above_its_own_is_a_circle_between_rooms() {
    // `session` uses the orchestrator; the orchestrator's policy reads the session's settings.
    // No file-level loop: settings uses nothing back.
    let files = planted(&[
        ("", "mod session; mod orchestrator;"),
        ("session", "mod settings; mod actor;"),
        ("session::settings", "pub struct Settings;"),
        (
            "session::actor",
            "use crate::orchestrator::Orchestrator; pub struct Actor;",
        ),
        ("orchestrator", "mod policy; pub struct Orchestrator;"),
        (
            "orchestrator::policy",
            "use crate::session::settings::Settings; pub fn allowed() {}",
        ),
    ]);
    assert_eq!(circle(&graph(&files)), None, "no loop between files");
    let found = circle(&room_edges(&graph(&files))).expect("session ↔ orchestrator");
    assert!(found.contains(&vec!["session".to_string()]), "{found:?}");
    // The vocabulary in a leaf below both rooms: no circle.
    let files = planted(&[
        ("", "mod session; mod orchestrator; mod settings;"),
        ("settings", "pub struct Settings;"),
        ("session", "mod actor;"),
        (
            "session::actor",
            "use crate::orchestrator::Orchestrator; use crate::settings::Settings;",
        ),
        ("orchestrator", "mod policy; pub struct Orchestrator;"),
        (
            "orchestrator::policy",
            "use crate::settings::Settings; pub fn allowed() {}",
        ),
    ]);
    assert_eq!(circle(&room_edges(&graph(&files))), None);
    // Rooms nested deeper are compared with their siblings only.
    let files = planted(&[
        ("", "mod session;"),
        ("session", "mod a; mod b;"),
        ("session::a", "mod inner; pub struct A;"),
        (
            "session::a::inner",
            "use crate::session::b::B; pub struct Inner;",
        ),
        ("session::b", "use super::a::A; pub struct B;"),
    ]);
    let found = circle(&room_edges(&graph(&files))).expect("a ↔ b below session");
    assert!(
        found.contains(&vec!["session".to_string(), "b".to_string()]),
        "{found:?}"
    );
}

/// The tools crate's modules in layers, from the ground up. A module imports only modules of
/// layers below its own, and never through the crate root (`lib.rs` stands above them all: it
/// assembles the built-in registry and names the crate's public surface).
const TOOLS_LAYERS: &[&[&str]] = &[
    // Facts that need nothing of the crate: diffs, which paths hold secrets.
    &["diff", "sensitive"],
    // Files: the one way to the user's files, and the editor's buffers.
    &["fs"],
    // Why a tool's step failed.
    &["error"],
    // What a tool's context offers (questions, progress, background processes).
    &["interfaces"],
    // Commands: parsing, classification, launch.
    &["shell"],
    // What a tool is; argument schemas; the session's background processes.
    &["tool", "schema", "session_state"],
    // The registry: definitions and dispatch.
    &["registry"],
    // The tools others build on (a patch writes as write_file does; a search reads as
    // read_file does).
    &["read_file", "write_file"],
    // The other tools.
    &[
        "clarify",
        "patch",
        "process",
        "search_files",
        "terminal",
        "todo",
    ],
];

/// The modules whose production code names an item of the crate root (`crate::Name`).
fn through_the_root(files: &BTreeMap<ModulePath, String>) -> BTreeSet<ModulePath> {
    let mut found = BTreeSet::new();
    for (module, text) in files.iter().filter(|(module, _)| !module.is_empty()) {
        let Ok(parsed) = syn::parse_file(text) else {
            panic!("{module:?} does not parse");
        };
        let mut paths = Paths::default();
        paths.visit_file(&parsed);
        let to_root = paths.found.iter().any(|path| {
            resolve(module, path, files).is_some_and(|absolute| {
                !absolute.is_empty() && !files.contains_key(&absolute[..1].to_vec())
            })
        });
        if to_root {
            found.insert(module.clone());
        }
    }
    found
}

/// Each edge between top-level modules that does not run down the layers, and each module
/// that imports through the root.
fn against_the_layers(files: &BTreeMap<ModulePath, String>, layers: &[&[&str]]) -> Vec<String> {
    let layer_of = |module: &ModulePath| {
        module.first().and_then(|top| {
            layers
                .iter()
                .position(|layer| layer.contains(&top.as_str()))
        })
    };
    let mut wrong: Vec<String> = through_the_root(files)
        .into_iter()
        .map(|module| format!("{module:?} imports through the crate root"))
        .collect();
    for (from, targets) in graph(files) {
        for to in targets {
            if from.first() == to.first() || from.is_empty() {
                continue;
            }
            match (layer_of(&from), layer_of(&to)) {
                (Some(a), Some(b)) if b < a => {}
                (a, b) => wrong.push(format!("{from:?} (layer {a:?}) -> {to:?} (layer {b:?})")),
            }
        }
    }
    wrong
}

#[test]
fn the_tools_crates_modules_import_only_down_its_layers() {
    let files = crate_files("server/crates/tools/src");
    // Every module has its layer.
    let unplaced: Vec<&String> = files
        .keys()
        .filter_map(|module| module.first())
        .filter(|top| {
            !TOOLS_LAYERS
                .iter()
                .any(|layer| layer.contains(&top.as_str()))
        })
        .collect();
    assert!(unplaced.is_empty(), "modules with no layer: {unplaced:?}");
    let wrong = against_the_layers(&files, TOOLS_LAYERS);
    assert!(wrong.is_empty(), "arrows up the tools crate: {wrong:#?}");
}

#[test]
fn an_arrow_up_the_layers_or_through_the_root_is_found() {
    let layers: &[&[&str]] = &[&["error"], &["tool"], &["read_file"]];
    let root = "mod error; mod tool; mod read_file; pub use error::ToolError;";
    let files = planted(&[
        ("", root),
        ("error", "pub struct ToolError;"),
        ("tool", "use crate::error::ToolError; pub struct Tool;"),
        ("read_file", "use crate::tool::Tool; pub struct ReadFile;"),
    ]);
    assert_eq!(against_the_layers(&files, layers), Vec::<String>::new());
    // Through the root, and upward (a test module's import is left out).
    let files = planted(&[
        ("", root),
        ("error", "pub struct ToolError;"),
        ("tool", "use crate::ToolError; pub struct Tool;"),
        (
            "read_file",
            "pub struct ReadFile;\n#[cfg(test)] mod tests { use crate::ToolError; }",
        ),
    ]);
    assert_eq!(
        against_the_layers(&files, layers),
        vec!["[\"tool\"] imports through the crate root".to_string()]
    );
    let files = planted(&[
        ("", root),
        ("error", "pub fn of(_: crate::tool::Tool) {}"),
        ("tool", "pub struct Tool;"),
        ("read_file", "pub struct ReadFile;"),
    ]);
    assert_eq!(against_the_layers(&files, layers).len(), 1);
}
