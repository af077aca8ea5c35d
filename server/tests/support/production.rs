//! Shared by the source checks (`source_rules`, `module_graph`, `task_list`): which files are
//! production code, and which items are test code.

use std::path::{Path, PathBuf};

/// Whether the attributes make an item test-only (`#[test]`, `#[tokio::test]`,
/// `#[cfg(test)]`).
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        path.is_ident("test")
            || path.segments.last().is_some_and(|s| s.ident == "test")
            || (path.is_ident("cfg")
                && attr
                    .parse_args::<syn::Meta>()
                    .is_ok_and(|meta| cfg_means_test(&meta)))
    })
}

/// `test`, or `all(test, …)`: compiled for tests only.
fn cfg_means_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(path) => path.is_ident("test"),
        syn::Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|all| all.iter().any(cfg_means_test)),
        _ => false,
    }
}

/// Whether an item is test-only (by its attributes; items without attributes are not).
pub fn item_is_test_only(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Mod(item) => &item.attrs,
        syn::Item::Fn(item) => &item.attrs,
        syn::Item::Impl(item) => &item.attrs,
        syn::Item::Use(item) => &item.attrs,
        syn::Item::Struct(item) => &item.attrs,
        syn::Item::Enum(item) => &item.attrs,
        syn::Item::Const(item) => &item.attrs,
        syn::Item::Static(item) => &item.attrs,
        syn::Item::Trait(item) => &item.attrs,
        _ => return false,
    };
    is_test_only(attrs)
}

/// Whether a `cfg` attribute names `test` anywhere (`cfg(test)`, `cfg(any(test, feature =
/// "test-support"))`): the module it declares is test support.
fn is_test_support(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| match &attr.meta {
        syn::Meta::List(list) if list.path.is_ident("cfg") => list
            .tokens
            .to_string()
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == "test"),
        _ => false,
    })
}

/// The files of the modules `file` declares for tests only.
fn test_modules(file: &Path, text: &str) -> Vec<PathBuf> {
    let Ok(parsed) = syn::parse_file(text) else {
        return Vec::new();
    };
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let parent = file.parent().unwrap_or(Path::new("."));
    let dir = if matches!(stem.as_str(), "mod" | "lib" | "main") {
        parent.to_path_buf()
    } else {
        parent.join(&stem)
    };
    parsed
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(module)
                if module.content.is_none() && is_test_support(&module.attrs) =>
            {
                Some(module)
            }
            _ => None,
        })
        .flat_map(|module| {
            // `#[path = "…"]` names the file, relative to this file's folder.
            if let Some(named) = path_attribute(&module.attrs) {
                return vec![parent.join(named)];
            }
            let name = module.ident.to_string();
            vec![
                dir.join(format!("{name}.rs")),
                dir.join(&name).join("mod.rs"),
            ]
        })
        .collect()
}

/// The file a `#[path = "…"]` attribute names, if there is one.
fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(pair) if pair.path.is_ident("path") => match &pair.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) => Some(text.value()),
            _ => None,
        },
        _ => None,
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "tests" | "benches" | "target" | "node_modules" | "fuzz"
            ) {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Every production `.rs` file below `dir` with its text: test crates, benches and build
/// output left out, and the files of modules declared for tests only.
pub fn production_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    rust_files(dir, &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            (path, text)
        })
        .collect();
    let support: Vec<PathBuf> = files
        .iter()
        .flat_map(|(path, text)| test_modules(path, text))
        .collect();
    files
        .into_iter()
        .filter(|(path, _)| !support.contains(path))
        .collect()
}
