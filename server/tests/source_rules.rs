//! Rules the code keeps that a compiler does not check, checked by parsing the sources with
//! `syn` (whole files, every item, signatures over any number of lines; only test code —
//! `#[cfg(test)]` items and `#[test]` functions — is left out): no production signature
//! returns `Result<_, String>` (errors are typed), and the server's async code (async fns and
//! async blocks) never waits on the disk (it uses `tokio::fs` or the blocking pool); no doc
//! comment holds a Rust code block (a doctest: CI's test command runs none).

use std::collections::HashSet;
use std::path::Path;

use syn::visit::{self, Visit};

#[path = "support/production.rs"]
mod production;
use production::{is_test_only, item_is_test_only, production_files};

/// What the rules found in one file.
#[derive(Default)]
struct Findings {
    string_errors: Vec<String>,
    disk_waits: Vec<String>,
}

/// Walks one file's production code.
struct Rules<'a> {
    label: &'a str,
    findings: Findings,
    /// The function being read (for messages).
    function: String,
    /// Inside an async fn or block, and not inside `spawn_blocking(…)`.
    in_async: bool,
    /// Names `use std::fs…` brought in (`fs`, or `read_to_string`…).
    fs_names: HashSet<String>,
}

impl Rules<'_> {
    fn check_signature(&mut self, signature: &syn::Signature) {
        if let syn::ReturnType::Type(_, output) = &signature.output
            && returns_string_error(output)
        {
            self.findings.string_errors.push(format!(
                "{}: fn {} returns Result<_, String>",
                self.label, signature.ident
            ));
        }
    }

    fn in_function(&mut self, signature: &syn::Signature, body: &syn::Block) {
        self.check_signature(signature);
        let (function, in_async) = (self.function.clone(), self.in_async);
        self.function = signature.ident.to_string();
        self.in_async = signature.asyncness.is_some();
        self.visit_block(body);
        (self.function, self.in_async) = (function, in_async);
    }

    fn disk_wait(&mut self, what: &str) {
        if self.in_async {
            self.findings.disk_waits.push(format!(
                "{}: {what} in async code (fn {})",
                self.label, self.function
            ));
        }
    }
}

/// `Result<_, String>` (any path ending in `Result`, its error `String`).
fn returns_string_error(ty: &syn::Type) -> bool {
    let syn::Type::Path(path) = ty else {
        return false;
    };
    let Some(last) = path.path.segments.last() else {
        return false;
    };
    let syn::PathArguments::AngleBracketed(arguments) = &last.arguments else {
        return false;
    };
    let types: Vec<&syn::Type> = arguments
        .args
        .iter()
        .filter_map(|a| match a {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    last.ident == "Result"
        && types.len() == 2
        && matches!(types[1], syn::Type::Path(p) if p.path.is_ident("String"))
}

impl<'ast> Visit<'ast> for Rules<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !item_is_test_only(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        fn names(tree: &syn::UseTree, out: &mut HashSet<String>, path: &[String]) {
            match tree {
                syn::UseTree::Path(p) => {
                    let mut next = path.to_vec();
                    next.push(p.ident.to_string());
                    names(&p.tree, out, &next);
                }
                syn::UseTree::Name(n) => {
                    let full = [path, &[n.ident.to_string()]].concat();
                    if full.first().is_some_and(|s| s == "std")
                        && full.get(1).is_some_and(|s| s == "fs")
                    {
                        out.insert(n.ident.to_string());
                    }
                }
                syn::UseTree::Rename(r) => {
                    if path.first().is_some_and(|s| s == "std")
                        && path.get(1).is_some_and(|s| s == "fs")
                        || path == ["std"] && r.ident == "fs"
                    {
                        out.insert(r.rename.to_string());
                    }
                }
                syn::UseTree::Group(g) => {
                    for tree in &g.items {
                        names(tree, out, path);
                    }
                }
                syn::UseTree::Glob(_) => {}
            }
        }
        names(&item.tree, &mut self.fs_names, &[]);
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            self.in_function(&item.sig, &item.block);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            self.in_function(&item.sig, &item.block);
        }
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if is_test_only(&item.attrs) {
            return;
        }
        match &item.default {
            Some(body) => self.in_function(&item.sig, body),
            None => self.check_signature(&item.sig),
        }
    }

    fn visit_expr_async(&mut self, block: &'ast syn::ExprAsync) {
        let in_async = std::mem::replace(&mut self.in_async, true);
        visit::visit_expr_async(self, block);
        self.in_async = in_async;
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        let to_the_pool = matches!(&*call.func, syn::Expr::Path(p)
            if p.path.segments.last().is_some_and(|s| s.ident == "spawn_blocking"));
        if to_the_pool {
            let in_async = std::mem::replace(&mut self.in_async, false);
            visit::visit_expr_call(self, call);
            self.in_async = in_async;
        } else {
            visit::visit_expr_call(self, call);
        }
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        if call.method == "exists" && call.args.is_empty() {
            self.disk_wait(".exists()");
        }
        visit::visit_expr_method_call(self, call);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let std_fs = segments.len() > 2 && segments[0] == "std" && segments[1] == "fs";
        let imported = segments.len() <= 2 && self.fs_names.contains(&segments[0]);
        if std_fs || imported {
            self.disk_wait(&format!("{}::…", segments.join("::")));
        }
        visit::visit_path(self, path);
    }
}

/// The rules' findings in one source text.
fn findings_in(text: &str, label: &str) -> Findings {
    let Ok(file) = syn::parse_file(text) else {
        return Findings {
            string_errors: vec![format!("{label}: does not parse")],
            disk_waits: Vec::new(),
        };
    };
    let mut rules = Rules {
        label,
        findings: Findings::default(),
        function: String::new(),
        in_async: false,
        fs_names: HashSet::new(),
    };
    rules.visit_file(&file);
    rules.findings
}

fn findings_of((path, text): &(std::path::PathBuf, String)) -> Findings {
    findings_in(text, &path.display().to_string())
}

#[test]
fn no_production_signature_returns_a_string_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files: Vec<_> = ["server", "protocol", "clients"]
        .iter()
        .flat_map(|dir| production_files(&root.join(dir)))
        .collect();
    assert!(
        files.len() > 100,
        "the sources were not found: {}",
        files.len()
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| findings_of(f).string_errors)
        .collect();
    assert!(
        found.is_empty(),
        "errors are typed (thiserror), not strings:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_servers_async_code_never_waits_on_disk() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = production_files(root);
    // `talaria doctor` is a one-shot command, not the server's runtime.
    files.retain(|(f, _)| {
        !f.ends_with("doctor.rs") && !f.components().any(|c| c.as_os_str() == "bench")
    });
    assert!(
        files.len() > 50,
        "the sources were not found: {}",
        files.len()
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| findings_of(f).disk_waits)
        .collect();
    assert!(
        found.is_empty(),
        "async code reads the disk on the runtime thread (use tokio::fs or spawn_blocking):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_see_past_test_modules_and_across_lines() {
    let text = r#"
use std::fs;
use std::fs::read_to_string as slurp;

#[cfg(test)]
mod tests {
    fn helper() -> Result<(), String> { Ok(()) }
    async fn reads(path: &Path) { std::fs::read(path); }
}

impl Thing {
    pub fn spread(
        &self,
        input: &str,
    ) -> Result<
        Vec<u8>,
        String,
    > {
        Ok(Vec::new())
    }

    async fn bad(path: &Path) -> String {
        if path.exists() { format!("{path:?}") } else { fs::read_to_string(path).unwrap_or_default() }
    }

    async fn good(path: PathBuf) -> String {
        tokio::task::spawn_blocking(move || std::fs::read_to_string(&path)).await.ok().and_then(Result::ok).unwrap_or_default()
    }

    fn blocks(&self) -> impl Future<Output = ()> {
        async move { let _ = slurp("x"); }
    }

    fn sync_is_fine(path: &Path) -> bool { path.exists() }
}

#[test]
fn a_test() -> Result<(), String> { Ok(()) }
"#;
    let found = findings_in(text, "sample");
    assert_eq!(
        found.string_errors,
        ["sample: fn spread returns Result<_, String>"]
    );
    assert_eq!(found.disk_waits.len(), 3, "{:?}", found.disk_waits);
    assert!(
        found
            .disk_waits
            .iter()
            .filter(|f| f.ends_with("(fn bad)"))
            .count()
            == 2
    );
    assert!(found.disk_waits.iter().any(|f| f.ends_with("(fn blocks)")));
}

/// Whether a `use` tree is `super::*` (what a module uses is then named nowhere).
fn is_super_glob(tree: &syn::UseTree) -> bool {
    matches!(tree, syn::UseTree::Path(p) if p.ident == "super" && matches!(*p.tree, syn::UseTree::Glob(_)))
}

#[test]
fn production_modules_name_what_they_use_from_their_parent() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for (path, text) in ["server", "protocol", "clients"]
        .iter()
        .flat_map(|dir| production_files(&root.join(dir)))
    {
        let Ok(file) = syn::parse_file(&text) else {
            continue;
        };
        for item in &file.items {
            if let syn::Item::Use(used) = item
                && !item_is_test_only(item)
                && is_super_glob(&used.tree)
            {
                found.push(path.display().to_string());
            }
        }
    }
    assert!(
        found.is_empty(),
        "`use super::*` in production code (name the items):\n{}",
        found.join("\n")
    );
}

/// Where production code builds a value of the struct `name` (`Name { … }`), by file.
struct Builds<'a> {
    name: &'a str,
    found: usize,
}

impl<'ast> Visit<'ast> for Builds<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !item_is_test_only(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_expr_struct(&mut self, expr: &'ast syn::ExprStruct) {
        if expr
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == self.name)
        {
            self.found += 1;
        }
        visit::visit_expr_struct(self, expr);
    }
}

/// The production files (below `dir`) that build a `name { … }`.
fn files_building(dir: &Path, name: &str) -> Vec<String> {
    production_files(dir)
        .into_iter()
        .filter(|(_, text)| {
            let Ok(file) = syn::parse_file(text) else {
                return false;
            };
            let mut builds = Builds { name, found: 0 };
            builds.visit_file(&file);
            builds.found > 0
        })
        .map(|(path, _)| path.display().to_string())
        .collect()
}

#[test]
fn one_agent_loop_builds_the_orchestrator() {
    // A turn, a subagent and the background review all run as a `Turn`: the orchestrator is
    // built in one place, so every tool call of every loop goes through the same policy.
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/engine/src");
    let builders = files_building(&engine, "Orchestrator");
    assert_eq!(builders.len(), 1, "{builders:#?}");
    assert!(builders[0].ends_with("turn.rs"), "{builders:#?}");
    // And the check sees a second builder.
    let planted = "struct Orchestrator { a: u8 }\n\
                   fn one() -> Orchestrator { Orchestrator { a: 1 } }\n\
                   #[cfg(test)] mod tests { fn t() { let _ = super::Orchestrator { a: 2 }; } }";
    let Ok(file) = syn::parse_file(planted) else {
        panic!("the planted file parses");
    };
    let mut builds = Builds {
        name: "Orchestrator",
        found: 0,
    };
    builds.visit_file(&file);
    assert_eq!(builds.found, 1, "test code is left out");
}

#[test]
fn one_turn_constructor() {
    // The prompt's turn, a subagent's and the review's differ only in their `TurnSpec`:
    // `Turn::new` in `turn/spec.rs` is the one place that fills a `Turn` in.
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/engine/src");
    let builders = files_building(&engine, "Turn");
    assert_eq!(
        builders.len(),
        1,
        "`Turn {{ … }}` built outside Turn::new: {builders:#?}"
    );
    assert!(
        Path::new(&builders[0]).ends_with("turn/spec.rs"),
        "{builders:#?}"
    );
}

/// Counts the production calls that take a `/` off the front of a text (`strip_prefix('/')`,
/// `strip_prefix("/")`): how a `/name` prompt is parsed.
#[derive(Default)]
struct SlashParses {
    found: usize,
}

impl<'ast> Visit<'ast> for SlashParses {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !item_is_test_only(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let slash = |arg: &syn::Expr| match arg {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Char(c),
                ..
            }) => c.value() == '/',
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => s.value() == "/",
            _ => false,
        };
        if call.method == "strip_prefix" && call.args.iter().any(slash) {
            self.found += 1;
        }
        visit::visit_expr_method_call(self, call);
    }
}

fn slash_parses(text: &str) -> usize {
    let Ok(file) = syn::parse_file(text) else {
        return 0;
    };
    let mut parses = SlashParses::default();
    parses.visit_file(&file);
    parses.found
}

#[test]
fn no_slash_command_is_parsed_outside_the_table() {
    // The edge parses a prompt's `/name args` once, with the engine's declared table
    // (`slash/table.rs`), into a typed command; nothing else in the edge or the engine takes
    // a prompt apart at its `/`.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = production_files(&root.join("src"));
    files.extend(production_files(&root.join("crates/engine/src")));
    assert!(files.len() > 50, "the sources were not found");
    let parsers: Vec<String> = files
        .iter()
        .filter(|(_, text)| slash_parses(text) > 0)
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert_eq!(
        parsers.len(),
        1,
        "slash commands parsed outside the table: {parsers:#?}"
    );
    assert!(
        Path::new(&parsers[0]).ends_with("engine/src/slash/table.rs"),
        "{parsers:#?}"
    );
    // The check sees both spellings, and leaves test code out.
    let planted = "fn a(t: &str) -> Option<&str> { t.trim().strip_prefix('/') }\n\
                   fn b(t: &str) -> Option<&str> { t.strip_prefix(\"/\") }\n\
                   fn c(t: &str) -> Option<&str> { t.strip_prefix(\"//\") }\n\
                   #[cfg(test)] mod tests { fn t(x: &str) { let _ = x.strip_prefix('/'); } }";
    assert_eq!(slash_parses(planted), 2);
}

/// The `pub mod` declarations of a crate root's production code.
fn public_modules(root_text: &str) -> Vec<String> {
    let Ok(file) = syn::parse_file(root_text) else {
        return vec!["(the file does not parse)".into()];
    };
    file.items
        .iter()
        .filter(|item| !item_is_test_only(item))
        .filter_map(|item| match item {
            syn::Item::Mod(module) if matches!(module.vis, syn::Visibility::Public(_)) => {
                Some(module.ident.to_string())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn the_engine_has_one_front_door() {
    // Every module of the engine is private: the edge uses what `lib.rs` re-exports, so a
    // path into a module (`talaria_engine::journal::…`) does not compile.
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/engine/src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap_or_default();
    assert!(text.contains("pub use journal::"), "read {}", lib.display());
    assert_eq!(public_modules(&text), Vec::<String>::new());
    // The check sees a public module (planted).
    assert_eq!(
        public_modules("pub mod config;\nmod inner;\n#[cfg(test)]\npub mod testkit;\n"),
        ["config"]
    );
}

/// The files that touch the user's files on the agent's behalf (file tools, checkpoints and
/// rewinds, skill and memory writes, batch outputs and the trajectory the agent keeps for
/// them): they go through the one way (`talaria-files`), never another file API.
const ONE_WAY_FILES: &[&str] = &[
    "server/crates/tools/src/fs/mod.rs",
    "server/crates/tools/src/fs/pinned.rs",
    "server/crates/tools/src/fs/places.rs",
    "server/crates/tools/src/fs/hidden_files.rs",
    "server/crates/tools/src/read_file.rs",
    "server/crates/tools/src/write_file.rs",
    "server/crates/tools/src/search_files.rs",
    "server/crates/tools/src/patch/mod.rs",
    "server/crates/tools/src/patch/replace.rs",
    "server/crates/tools/src/patch/v4a.rs",
    "server/crates/checkpoints/src/lib.rs",
    "server/crates/checkpoints/src/restore.rs",
    "server/crates/checkpoints/src/walk.rs",
    "server/crates/checkpoints/src/workspace.rs",
    "server/crates/engine/src/checkpointing.rs",
    "server/crates/engine/src/rewind.rs",
    "server/crates/engine/src/session/actor/rewinding.rs",
    "server/crates/skills/src/manage.rs",
    "server/crates/skills/src/catalog.rs",
    "server/crates/skills/src/skill.rs",
    "server/crates/skills/src/tools.rs",
    "server/crates/engine/src/system_prompt.rs",
    "server/crates/engine/src/verify.rs",
    "server/src/sessions/skills.rs",
    "server/crates/skills/src/memory.rs",
    "server/crates/skills/src/provenance.rs",
    "server/crates/provider/src/trajectory.rs",
    "clients/batch/src/outputs.rs",
    "clients/batch/src/run.rs",
];

/// What of `std::fs` opens, reads, writes, makes, removes, renames or lists by path (judging
/// a path — `canonicalize`, `metadata`, `symlink_metadata` — and `File` as a type stay).
const PATH_FILE_CALLS: &[&str] = &[
    "read",
    "read_to_string",
    "write",
    "OpenOptions",
    "create_dir",
    "create_dir_all",
    "remove_file",
    "remove_dir",
    "remove_dir_all",
    "rename",
    "hard_link",
    "copy",
    "read_dir",
    "set_permissions",
    "read_link",
    "soft_link",
];

/// Finds the other file APIs in one file's production code.
#[derive(Default)]
struct OtherFileApis {
    found: Vec<String>,
    /// Names `use std::fs…` brought in, and whether `fs` itself was.
    imported: HashSet<String>,
    fs_imported: bool,
}

impl OtherFileApis {
    fn check(&mut self, segments: &[String]) {
        let strs: Vec<&str> = segments.iter().map(String::as_str).collect();
        let bad = match strs.as_slice() {
            ["tokio", "fs", ..] => true,
            ["std", "fs", name, rest @ ..] | ["fs", name, rest @ ..]
                if strs[0] == "std" || self.fs_imported =>
            {
                PATH_FILE_CALLS.contains(name)
                    || (*name == "File"
                        && rest
                            .first()
                            .is_some_and(|m| matches!(*m, "open" | "create" | "options")))
            }
            ["File", method, ..] => matches!(*method, "open" | "create" | "options"),
            ["OpenOptions", ..] => true,
            [name] => self.imported.contains(*name),
            _ => false,
        };
        if bad {
            self.found.push(strs.join("::"));
        }
    }
}

impl<'ast> Visit<'ast> for OtherFileApis {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !item_is_test_only(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            visit::visit_item_fn(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        fn walk(tree: &syn::UseTree, path: &mut Vec<String>, apis: &mut OtherFileApis) {
            match tree {
                syn::UseTree::Path(p) => {
                    path.push(p.ident.to_string());
                    walk(&p.tree, path, apis);
                    path.pop();
                }
                syn::UseTree::Name(n) => {
                    let mut full = path.clone();
                    full.push(n.ident.to_string());
                    if full == ["std", "fs"] {
                        apis.fs_imported = true;
                    } else if full.len() == 3 && full[..2] == ["std", "fs"] {
                        if PATH_FILE_CALLS.contains(&full[2].as_str()) {
                            apis.imported.insert(full[2].clone());
                        }
                    } else {
                        apis.check(&full);
                    }
                }
                syn::UseTree::Rename(r) => {
                    let mut full = path.clone();
                    full.push(r.ident.to_string());
                    apis.check(&full);
                }
                syn::UseTree::Group(g) => {
                    for tree in &g.items {
                        walk(tree, path, apis);
                    }
                }
                syn::UseTree::Glob(_) => {
                    if path.as_slice() == ["std", "fs"] || path.as_slice() == ["tokio", "fs"] {
                        apis.found.push(format!("{}::*", path.join("::")));
                    }
                }
            }
        }
        walk(&item.tree, &mut Vec::new(), self);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.check(&segments);
        visit::visit_path(self, path);
    }
}

fn other_file_apis(text: &str) -> Vec<String> {
    let Ok(file) = syn::parse_file(text) else {
        return vec!["does not parse".into()];
    };
    let mut apis = OtherFileApis::default();
    apis.visit_file(&file);
    apis.found
}

#[test]
fn the_users_files_are_touched_only_through_the_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for file in ONE_WAY_FILES {
        let path = root.join(file);
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        found.extend(
            other_file_apis(&text)
                .into_iter()
                .map(|api| format!("{file}: {api}")),
        );
    }
    let checked = ONE_WAY_FILES
        .iter()
        .filter(|f| root.join(f).exists())
        .count();
    assert!(checked >= 28, "the sources were not found: {checked}");
    assert!(
        found.is_empty(),
        "the user's files are reached through talaria-files (a held root, no link \
         followed), not:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_one_way_rule_sees_every_other_file_api() {
    let planted = r#"
        use std::fs;
        use std::fs::read_to_string;
        fn a() { let _ = std::fs::write("x", "y"); }
        fn b() { let _ = fs::remove_file("x"); }
        fn c() { let _ = read_to_string("x"); }
        async fn d() { let _ = tokio::fs::read("x").await; }
        fn e() { let _ = std::fs::File::create("x"); }
        fn f() { let _ = File::open("x"); }
        fn g() { let _ = std::fs::OpenOptions::new(); }
        fn ok(fd: std::os::fd::OwnedFd) { let _ = std::fs::File::from(fd); let _ = std::fs::canonicalize("x"); }
        #[cfg(test)]
        mod tests { fn t() { let _ = std::fs::write("x", "y"); } }
    "#;
    let found = other_file_apis(planted);
    assert_eq!(found.len(), 7, "{found:#?}");
}

/// The opening fences of Rust code blocks in `text`'s doc comments: rustdoc would run each
/// as a doctest, and CI's test command runs none (`tests/run-all.sh`).
fn doctests_in(text: &str) -> Vec<usize> {
    let mut open = false;
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_start();
        let Some(doc) = line
            .strip_prefix("///")
            .or_else(|| line.strip_prefix("//!"))
        else {
            continue;
        };
        let Some(label) = doc.trim().strip_prefix("```") else {
            continue;
        };
        if !open && (label.is_empty() || label.split(',').any(|tag| tag.trim() == "rust")) {
            found.push(number + 1);
        }
        open = !open;
    }
    found
}

#[test]
fn no_doc_comment_holds_a_doctest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let found: Vec<String> = ["server", "protocol", "clients"]
        .iter()
        .flat_map(|dir| production_files(&root.join(dir)))
        .flat_map(|(path, text)| {
            doctests_in(&text)
                .into_iter()
                .map(move |line| format!("{}:{line}", path.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "a doc example is a doctest, and CI runs none: label the block (```text, ```toml) \
         or make it a unit test:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_doctest_rule_tells_a_rust_block_from_a_labelled_one() {
    let text = "/// ```text\n/// a\n/// ```\n//! ```\n//! let a = 1;\n//! ```\n/// ```rust,no_run\n/// ```\n";
    assert_eq!(doctests_in(text), vec![4, 7]);
}

/// The crates whose manifests allow unsafe code (every other one inherits the workspace's
/// `forbid`): ARCHITECTURE.md names exactly these.
fn crates_allowing_unsafe(root: &Path) -> Vec<String> {
    let members = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let mut found: Vec<String> = members
        .lines()
        .filter_map(|line| {
            line.trim()
                .strip_prefix('"')?
                .strip_suffix("\",")
                .map(str::to_string)
        })
        .filter(|member| {
            let manifest = std::fs::read_to_string(root.join(member).join("Cargo.toml"));
            manifest.is_ok_and(|m| m.contains("unsafe_code = \"allow\""))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn unsafe_code_is_allowed_only_in_the_two_crates_the_map_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    assert_eq!(
        crates_allowing_unsafe(&root),
        ["server/crates/pages", "server/crates/unotify"]
    );
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    assert!(map.contains("Unsafe code only there\nand in `talaria-unotify`"));
    assert!(map.contains("(`talaria-pages`). Unsafe code only there"));
}
