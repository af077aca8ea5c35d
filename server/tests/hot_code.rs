//! `server/hot-code/functions.txt` is a list `server/build.rs` can make a linker script of:
//! one mangled symbol name a line, sorted and unique. The script names each function's
//! section exactly, and a name that matches no section matches nothing in silence, so a list
//! of demangled or otherwise mangled-up names would leave the binary in the compiler's order
//! without any error (the bench's "hot code linked first" line measures the rest).

use std::path::Path;

fn is_mangled_symbol(name: &str) -> bool {
    let legacy = name.starts_with("_ZN") && without_local_suffix(name).ends_with('E');
    let v0 = name.starts_with("_R");
    // C functions (SQLite's, the C library's), with GCC's `.part.0` / `.isra.0` clones.
    let c_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    !name.is_empty() && !name.contains(char::is_whitespace) && (legacy || v0 || c_name)
}

/// `_ZN…E.llvm.123` or `_ZN…E.123` (names LTO gives local copies) → `_ZN…E`.
fn without_local_suffix(name: &str) -> &str {
    let Some((base, number)) = name.rsplit_once('.') else {
        return name;
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return name;
    }
    base.strip_suffix(".llvm").unwrap_or(base)
}

#[test]
fn the_hot_code_list_is_sorted_unique_mangled_names() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-code/functions.txt");
    let list = std::fs::read_to_string(&path).unwrap_or_default();
    let names: Vec<&str> = list.lines().collect();
    assert!(
        names.len() > 1000,
        "{} lists {} names",
        path.display(),
        names.len()
    );
    let bad: Vec<&&str> = names
        .iter()
        .filter(|n| !is_mangled_symbol(n))
        .take(5)
        .collect();
    assert!(bad.is_empty(), "not mangled symbol names: {bad:?}");
    assert!(
        names.windows(2).all(|pair| pair[0] < pair[1]),
        "the list is sorted and has no duplicates"
    );
    let rust = names
        .iter()
        .filter(|n| n.starts_with("_ZN") || n.starts_with("_R"))
        .count();
    assert!(
        rust * 2 > names.len(),
        "mostly Rust functions: {rust} of {}",
        names.len()
    );
}

#[test]
fn demangled_or_decorated_names_are_not_taken_for_symbols() {
    assert!(is_mangled_symbol(
        "_ZN12talaria_util4lock17h0973d3e2f20c723cE"
    ));
    assert!(is_mangled_symbol(
        "_ZN4core3fmt5write17h0123456789abcdefE.llvm.42"
    ));
    assert!(is_mangled_symbol("_RNvCs1234_4core3foo"));
    assert!(is_mangled_symbol("sqlite3_step"));
    assert!(is_mangled_symbol("codeCompare.isra.0"));
    assert!(!is_mangled_symbol("talaria_util::lock"));
    assert!(!is_mangled_symbol("core::fmt::write::h0123456789abcdef"));
    assert!(!is_mangled_symbol("_ZN4core3fmt5write17h0123'2"));
    assert!(!is_mangled_symbol(""));
}

#[path = "../hot-code/script.rs"]
mod script;

#[test]
fn what_varies_between_builds_becomes_a_wildcard() {
    for (name, pattern) in [
        (
            "_ZN12talaria_util4lock17h0973d3e2f20c723cE",
            "_ZN12talaria_util4lock17h*E",
        ),
        (
            "_ZN4core3fmt5write17h0123456789abcdefE.llvm.42",
            "_ZN4core3fmt5write17h*E.llvm.*",
        ),
        (
            "_RNvMNtCsgEmfK2I1SDS_4core3stre20eq_ignore_ascii_case",
            "_RNvMNtCs*_4core3stre20eq_ignore_ascii_case",
        ),
        ("codeCompare.isra.0", "codeCompare.isra.*"),
        ("sqlite3_step", "sqlite3_step"),
    ] {
        assert_eq!(script::without_hashes(name), pattern, "{name}");
    }
}

#[test]
fn the_script_places_exact_names_first_then_their_wildcards() {
    let text = script::hot_code_script(
        "_ZN12talaria_util4lock17h0973d3e2f20c723cE\nsqlite3_step\nnot*allowed\n",
    );
    assert!(text.starts_with("SECTIONS {"), "{text}");
    assert!(text.trim_end().ends_with("INSERT BEFORE .text;"), "{text}");
    let exact = text
        .find("*(.text._ZN12talaria_util4lock17h0973d3e2f20c723cE ")
        .expect("the exact name");
    let wildcard = text
        .find("*(.text._ZN12talaria_util4lock17h*E ")
        .expect("its wildcard");
    assert!(exact < wildcard, "{text}");
    assert!(text.contains(".text.unlikely.sqlite3_step"), "{text}");
    assert!(
        !text.contains("not*allowed"),
        "a listed name with a wildcard is left out"
    );
}
