//! The edge's two rooms keep to their jobs (ARCHITECTURE.md, "The edge: a wire room and a
//! session room"), checked by parsing the sources with `syn` (test code left out):
//! - the wire room (`server/src/acp/`) only translates: it names no assembly — no MCP or
//!   skills crate, no cassettes, no tool registry, router or actor built, no store opened;
//! - its shared state (`acp/state.rs`) is a leaf that imports none of its siblings, and
//!   `acp/mod.rs` only declares and re-exports;
//! - the session room (`server/src/sessions/`) never reaches the wire room, and of ACP it
//!   names only the few types that cross (its `mod.rs` says why).

use std::path::{Path, PathBuf};

use syn::visit::{self, Visit};

#[path = "support/production.rs"]
mod production;
use production::{item_is_test_only, production_files};

/// Every path one file's production code names: `use` trees spelled out whole, and the
/// paths of expressions, types and patterns; and the modules it declares.
#[derive(Default)]
struct Named {
    paths: Vec<Vec<String>>,
    modules: Vec<String>,
}

impl Named {
    fn of(text: &str) -> Self {
        let mut named = Named::default();
        if let Ok(file) = syn::parse_file(text) {
            named.visit_file(&file);
        } else {
            named.paths.push(vec!["(the file does not parse)".into()]);
        }
        named
    }
}

fn spell_out(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            spell_out(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let mut whole = prefix.clone();
            whole.push(name.ident.to_string());
            out.push(whole);
        }
        syn::UseTree::Rename(rename) => {
            let mut whole = prefix.clone();
            whole.push(rename.ident.to_string());
            out.push(whole);
        }
        syn::UseTree::Glob(_) => {
            let mut whole = prefix.clone();
            whole.push("*".into());
            out.push(whole);
        }
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                spell_out(tree, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Named {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !item_is_test_only(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        self.modules.push(module.ident.to_string());
        visit::visit_item_mod(self, module);
    }

    fn visit_item_use(&mut self, used: &'ast syn::ItemUse) {
        spell_out(&used.tree, &mut Vec::new(), &mut self.paths);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.paths
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        visit::visit_path(self, path);
    }
}

fn server_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The production files below `dir`, with what each names.
fn named_in(dir: &Path) -> Vec<(String, Named)> {
    production_files(dir)
        .into_iter()
        .map(|(path, text)| (path.display().to_string(), Named::of(&text)))
        .collect()
}

/// The crates that assemble sessions: the wire room names none of them.
const ASSEMBLY_CRATES: &[&str] = &["talaria_mcp", "talaria_skills"];

/// What builds a session's parts: the wire room names none of it (the session room does).
const ASSEMBLY_NAMES: &[&str] = &[
    "cassettes",
    "builtin_registry",
    "Registry",
    "spawn_session",
    "spawn_session_with",
    "build_router",
    "build_router_through",
    "opening_spooled",
    "checkpoints_for",
    "sandboxed_shell",
    "session_prompt",
    "SessionSettings",
];

/// The session room's modules: none is declared in the wire room.
const SESSION_ROOM_MODULES: &[&str] = &[
    "cassettes",
    "commands",
    "fork",
    "launch",
    "mcp",
    "process_shared",
    "server_window",
    "skills",
];

/// What of assembly a wire-room file names (a path of one segment is a local name).
fn assembly_named(named: &Named) -> Vec<String> {
    let mut found = Vec::new();
    for path in &named.paths {
        let first = path.first().map(String::as_str).unwrap_or("");
        let opens_the_store = path.len() >= 2 && path[0] == "crate" && path[1] == "store";
        if ASSEMBLY_CRATES.contains(&first)
            || opens_the_store
            || (path.len() > 1 && path.iter().any(|s| ASSEMBLY_NAMES.contains(&s.as_str())))
        {
            found.push(path.join("::"));
        }
    }
    for module in &named.modules {
        if SESSION_ROOM_MODULES.contains(&module.as_str()) {
            found.push(format!("mod {module}"));
        }
    }
    found
}

#[test]
fn the_wire_room_assembles_nothing() {
    let found: Vec<String> = named_in(&server_src().join("acp"))
        .iter()
        .flat_map(|(path, named)| {
            assembly_named(named)
                .into_iter()
                .map(move |what| format!("{path}: {what}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "the wire room (server/src/acp) names assembly; it belongs to the session room \
         (server/src/sessions):\n{}",
        found.join("\n")
    );
    // The check sees assembly however it is named.
    let planted = Named::of(
        "mod launch;\n\
         use talaria_skills::SkillsContext;\n\
         fn a() { let _ = talaria_tools::builtin_registry(); }\n\
         fn b(c: &super::cassettes::Cassettes) {}\n\
         fn d() { crate::store::open(); }\n\
         #[cfg(test)] mod tests { use talaria_mcp::Hub; }",
    );
    assert_eq!(
        assembly_named(&planted),
        [
            "talaria_skills::SkillsContext",
            "talaria_tools::builtin_registry",
            "super::cassettes::Cassettes",
            "crate::store::open",
            "mod launch",
        ]
    );
}

/// What of its own room a file names: a sibling or child (`super::…`, `self::…`,
/// `crate::acp::…`) or a module it declares.
fn siblings_named(named: &Named) -> Vec<String> {
    let mut found: Vec<String> = named
        .paths
        .iter()
        .filter(|path| {
            let first = path.first().map(String::as_str).unwrap_or("");
            // `self` alone is a receiver, not a module.
            first == "super"
                || (first == "self" && path.len() > 1)
                || (first == "crate" && path.get(1).is_some_and(|s| s == "acp"))
        })
        .map(|path| path.join("::"))
        .collect();
    found.extend(named.modules.iter().map(|m| format!("mod {m}")));
    found
}

/// The state's child modules (`acp/state/<name>.rs`): each name and text.
fn state_children(acp: &std::path::Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(acp.join("state")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let name = path.file_stem()?.to_str()?.to_string();
            Some((name, std::fs::read_to_string(&path).ok()?))
        })
        .collect()
}

#[test]
fn the_wire_rooms_state_is_a_leaf_and_its_front_only_declares() {
    let acp = server_src().join("acp");
    let state = std::fs::read_to_string(acp.join("state.rs")).unwrap_or_default();
    assert!(
        state.contains("pub struct Agent"),
        "the edge's shared state (the agent) lives in server/src/acp/state.rs"
    );
    // Its own children (`acp/state/*.rs`) it may declare; they import no sibling either
    // (their `super` is the state itself).
    let children = state_children(&acp);
    let found: Vec<String> = siblings_named(&Named::of(&state))
        .into_iter()
        .filter(|m| !children.iter().any(|(name, _)| *m == format!("mod {name}")))
        .collect();
    assert!(
        found.is_empty(),
        "acp/state.rs imports its siblings: {found:?}"
    );
    for (name, text) in &children {
        let found: Vec<String> = siblings_named(&Named::of(text))
            .into_iter()
            .filter(|path| !path.starts_with("super::") && !path.starts_with("crate::acp::state"))
            .collect();
        assert!(
            found.is_empty(),
            "acp/state/{name}.rs imports the state's siblings: {found:?}"
        );
    }
    // `acp/mod.rs` declares modules and re-exports; it holds no state and no handler.
    let front = std::fs::read_to_string(acp.join("mod.rs")).unwrap_or_default();
    let kept = front_items(&front);
    assert!(
        kept.is_empty(),
        "acp/mod.rs holds more than its front: {kept:?}"
    );
    // The checks see a sibling and a front's item.
    let planted = Named::of("use super::forwarder::EdgeUpdates;\nuse crate::acp::quota;\n");
    assert_eq!(
        siblings_named(&planted),
        ["super::forwarder::EdgeUpdates", "crate::acp::quota"]
    );
    assert_eq!(
        front_items("mod a;\npub use a::b;\nstruct Agent;\n"),
        ["struct"]
    );
}

/// The items of a module's production code other than `mod` and `use`.
fn front_items(text: &str) -> Vec<&'static str> {
    let Ok(file) = syn::parse_file(text) else {
        return vec!["(the file does not parse)"];
    };
    file.items
        .iter()
        .filter(|item| !item_is_test_only(item))
        .filter_map(|item| match item {
            syn::Item::Mod(_) | syn::Item::Use(_) => None,
            syn::Item::Struct(_) => Some("struct"),
            syn::Item::Enum(_) => Some("enum"),
            syn::Item::Impl(_) => Some("impl"),
            syn::Item::Fn(_) => Some("fn"),
            _ => Some("other item"),
        })
        .collect()
}

/// The ACP types the session room may name (see `sessions/mod.rs`): the MCP servers a
/// client sends, the slash commands' list, a prompt's content.
const ACP_TYPES_THAT_CROSS: &[&str] = &[
    "self",
    "McpServer",
    "HttpHeader",
    "SessionUpdate",
    "AvailableCommand",
    "AvailableCommandInput",
    "AvailableCommandsUpdate",
    "UnstructuredCommandInput",
    "ContentBlock",
];

/// What of the wire a session-room file names: the wire room, or an ACP item beyond those
/// that cross (JSON-RPC errors, the peer).
fn wire_named(named: &Named) -> Vec<String> {
    named
        .paths
        .iter()
        .filter(|path| {
            let first = path.first().map(String::as_str).unwrap_or("");
            let reaches_the_wire_room =
                matches!(first, "crate" | "super") && path.iter().any(|s| s == "acp" || s == "web");
            let protocol_beyond_acp =
                first == "talaria_protocol" && path.get(1).is_none_or(|s| s != "acp");
            let acp_item_beyond = path
                .iter()
                .position(|s| s == "acp")
                .and_then(|at| path.get(at + 1))
                .is_some_and(|item| !ACP_TYPES_THAT_CROSS.contains(&item.as_str()));
            reaches_the_wire_room || protocol_beyond_acp || acp_item_beyond
        })
        .map(|path| path.join("::"))
        .collect()
}

#[test]
fn the_session_room_knows_no_wire() {
    let found: Vec<String> = named_in(&server_src().join("sessions"))
        .iter()
        .flat_map(|(path, named)| {
            wire_named(named)
                .into_iter()
                .map(move |what| format!("{path}: {what}"))
        })
        .collect();
    let room = server_src().join("sessions/mod.rs");
    assert!(room.exists(), "the session room is server/src/sessions");
    assert!(
        found.is_empty(),
        "the session room names the wire (its errors are typed: SessionError):\n{}",
        found.join("\n")
    );
    let planted = Named::of(
        "use talaria_protocol::errors;\n\
         use talaria_protocol::acp::{self, McpServer};\n\
         fn a(e: acp::Error) {}\n\
         fn b() { let _ = crate::acp::state::Agent; }",
    );
    assert_eq!(
        wire_named(&planted),
        [
            "talaria_protocol::errors",
            "acp::Error",
            "crate::acp::state::Agent"
        ]
    );
}

/// The files whose production code implements `Agent` (`impl Agent { … }`).
fn implements_agent(text: &str) -> bool {
    let Ok(file) = syn::parse_file(text) else {
        return false;
    };
    file.items.iter().any(|item| match item {
        syn::Item::Impl(block) if !item_is_test_only(item) => matches!(
            &*block.self_ty,
            syn::Type::Path(ty) if ty.path.segments.last().is_some_and(|s| s.ident == "Agent")
        ),
        _ => false,
    })
}

#[test]
fn the_agent_is_implemented_in_one_place_and_handlers_are_free_functions() {
    let implementing: Vec<String> = production_files(&server_src().join("acp"))
        .into_iter()
        .filter(|(_, text)| implements_agent(text))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(
        implementing.len() == 1 && implementing[0].ends_with("acp/dispatch.rs"),
        "`impl Agent` outside the dispatch loop (handlers are free functions over the \
         agent): {implementing:#?}"
    );
    assert!(implements_agent(
        "struct Agent;\nimpl Agent { fn a(&self) {} }"
    ));
    assert!(!implements_agent(
        "fn a(agent: &mut Agent) {}\n#[cfg(test)] impl Agent {}"
    ));
}
