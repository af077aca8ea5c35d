//! ARCHITECTURE.md's table of tasks and threads is the code's: every production file that
//! starts a tokio task or an OS thread is in the table, with its kinds, and every file in the
//! table starts one. Read with `syn` (test code left out), so a new spawn anywhere fails here
//! until the table says what it is and how long it lives.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::{self, Visit};

#[path = "support/production.rs"]
mod production;
use production::{is_test_only, item_is_test_only, production_files};

/// Where production code lives.
const ROOTS: &[&str] = &[
    "server/src",
    "server/crates",
    "protocol/src",
    "clients/batch/src",
];

/// The kinds of spawn one file makes: `task` (tokio) and `thread` (OS).
#[derive(Default)]
struct Spawns {
    kinds: BTreeSet<&'static str>,
}

fn segments(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

/// Whether a method call's receiver chain starts at `thread::Builder::new()`.
fn from_thread_builder(mut receiver: &syn::Expr) -> bool {
    loop {
        match receiver {
            syn::Expr::MethodCall(call) => receiver = &call.receiver,
            syn::Expr::Call(call) => {
                return matches!(&*call.func, syn::Expr::Path(path)
                    if segments(&path.path).ends_with(&["thread".into(), "Builder".into(), "new".into()]));
            }
            _ => return false,
        }
    }
}

impl<'ast> Visit<'ast> for Spawns {
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

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        if let syn::Expr::Path(path) = &*call.func {
            let path = segments(&path.path);
            if path.last().is_some_and(|last| last == "spawn") && path.len() >= 2 {
                if path.iter().any(|s| s == "tokio" || s == "task") {
                    self.kinds.insert("task");
                } else if path.iter().any(|s| s == "thread") {
                    self.kinds.insert("thread");
                }
            }
        }
        visit::visit_expr_call(self, call);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let builder_spawn = call.method == "spawn" || call.method == "spawn_scoped";
        if builder_spawn && from_thread_builder(&call.receiver) {
            self.kinds.insert("thread");
        }
        visit::visit_expr_method_call(self, call);
    }
}

/// The kinds of spawn in one file's production code.
fn spawns_in(text: &str) -> BTreeSet<&'static str> {
    let Ok(file) = syn::parse_file(text) else {
        return BTreeSet::new();
    };
    let mut spawns = Spawns::default();
    spawns.visit_file(&file);
    spawns.kinds
}

/// The table under "### Tasks and threads": file → kinds.
fn documented(architecture: &str) -> BTreeMap<String, BTreeSet<String>> {
    let section = architecture
        .split("### Tasks and threads")
        .nth(1)
        .unwrap_or_default();
    let mut table = BTreeMap::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(file), Some(kinds)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some(file) = file.strip_prefix('`').and_then(|f| f.strip_suffix('`')) else {
            continue;
        };
        let kinds = kinds.split(',').map(|k| k.trim().to_string()).collect();
        table.insert(file.to_string(), kinds);
    }
    table
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_task_and_thread_is_in_the_architectures_table() {
    let root = repository();
    let mut found = BTreeMap::new();
    for dir in ROOTS {
        for (file, text) in production_files(&root.join(dir)) {
            let kinds = spawns_in(&text);
            if !kinds.is_empty() {
                let relative = file.strip_prefix(&root).unwrap_or(&file);
                let kinds: BTreeSet<String> = kinds.iter().map(|k| k.to_string()).collect();
                found.insert(relative.display().to_string(), kinds);
            }
        }
    }
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let table = documented(&architecture);
    assert!(
        !table.is_empty(),
        "no table under \"### Tasks and threads\""
    );
    assert_eq!(
        found, table,
        "the files that start tasks or threads (left) and ARCHITECTURE.md's table (right)"
    );
}

#[test]
fn spawns_are_seen_in_any_form_and_test_code_is_left_out() {
    let text = r#"
        use std::thread;
        fn start() { let _ = thread::Builder::new().name("w".into()).spawn(|| ()); }
        #[cfg(test)]
        mod tests { fn t() { tokio::spawn(async {}); } }
        impl Later {
            #[test]
            fn ignored() { std::thread::spawn(|| ()); }
            fn late(&self) { let _ = tokio::task::spawn(async {}); }
        }
        fn process() { let _ = std::process::Command::new("x").spawn(); }
    "#;
    let kinds: Vec<&str> = spawns_in(text).into_iter().collect();
    assert_eq!(kinds, ["task", "thread"]);
    assert!(spawns_in("fn only_tests() {}\n#[test] fn t() { tokio::spawn(f()); }").is_empty());
    let table = documented(
        "### Tasks and threads\n\n| File | Kinds | What |\n| --- | --- | --- |\n\
         | `a/b.rs` | task, thread | x |\n\nafter",
    );
    assert_eq!(table.len(), 1);
    assert_eq!(table["a/b.rs"].len(), 2);
}
