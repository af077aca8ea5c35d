//! `server/hot-code/functions.txt`, which `server/build.rs` makes a linker script of, keeps
//! its form (sorted, unique symbol names with what varies between builds as `*`, each one a
//! section rule can hold) and still names the code: a listed function the binary no longer
//! has matches nothing in silence, and the release binary slowly returns to the compiler's
//! order (the bench's peak RSS after a turn). This test fails first, on the agent built for
//! the tests: run `server/hot-code/record.sh` then.

use std::collections::HashSet;
use std::path::Path;

// Shared with the bench, which reads the section names.
#[allow(dead_code)]
#[path = "../hot-code/elf.rs"]
mod elf;
#[path = "../hot-code/patterns.rs"]
mod patterns;
#[path = "../hot-code/script.rs"]
mod script;

/// Below this share of the list found in the agent, the list is recorded again (a list just
/// recorded: 98 %).
const LEAST_FOUND: f64 = 0.9;

fn listed() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-code/functions.txt");
    let list = std::fs::read_to_string(&path).unwrap_or_default();
    list.lines().map(str::to_string).collect()
}

/// A name as the list and an unoptimised build both can spell it: LTO's local copies
/// (`.llvm.*`) and GCC's clones (`.isra.*`, `.part.*`, `.cold`) are the same function, and
/// so is a generic instance whatever crate instantiated it (its name's last path: a debug
/// build shares one instance between crates where a release build has a copy in each).
fn comparable(pattern: &str) -> &str {
    let name = pattern.split('.').next().unwrap_or(pattern);
    if let Some(generic) = name.strip_suffix("B*_") {
        return generic;
    }
    if let Some(at) = name.rfind("Cs*_") {
        let crate_name = &name[at + 4..];
        let digits = crate_name.len()
            - crate_name
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        if crate_name[..digits].parse() == Ok(crate_name.len() - digits) {
            return &name[..at];
        }
    }
    name
}

#[test]
fn the_list_is_sorted_unique_symbols_without_their_hashes() {
    let names = listed();
    assert!(names.len() > 1000, "the list has {} names", names.len());
    let bad: Vec<&String> = names
        .iter()
        .filter(|name| {
            patterns::without_hashes(name) != **name
                || !script::hot_code_script(name).contains(name.as_str())
        })
        .take(5)
        .collect();
    assert!(bad.is_empty(), "not in the list's form: {bad:?}");
    assert!(
        names.windows(2).all(|pair| pair[0] < pair[1]),
        "the list is sorted and has no duplicates"
    );
    let v0 = names.iter().filter(|n| n.starts_with("_R")).count();
    assert!(
        v0 * 2 > names.len(),
        "mostly v0 Rust symbols: {v0} of {}",
        names.len()
    );
}

#[test]
fn the_agent_still_has_most_of_the_listed_functions() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_talaria")).unwrap_or_default();
    let functions = elf::Elf::parse(&binary)
        .and_then(|elf| elf.function_names())
        .unwrap_or_default();
    assert!(
        functions.len() > 1000,
        "the agent built for the tests has a symbol table ({} functions read)",
        functions.len()
    );
    let have: HashSet<String> = functions
        .iter()
        .map(|name| comparable(&patterns::without_hashes(name)).to_string())
        .collect();
    let names = listed();
    let missing: Vec<&String> = names
        .iter()
        .filter(|name| !have.contains(comparable(name)))
        .collect();
    let found = 1.0 - missing.len() as f64 / names.len().max(1) as f64;
    assert!(
        found >= LEAST_FOUND,
        "{:.0} % of server/hot-code/functions.txt is still in the agent (at least {:.0} % \
         wanted): run server/hot-code/record.sh. Gone, for example: {:?}",
        found * 100.0,
        LEAST_FOUND * 100.0,
        &missing[..missing.len().min(5)]
    );
}

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
        ("_RNvCs_4core3foo", "_RNvCs*_4core3foo"),
        (
            "_RINvNtCs1a2B_4core3ptr13drop_in_placeNtB4_3FooEB1c_",
            "_RINvNtCs*_4core3ptr13drop_in_placeNtB*_3FooEB*_",
        ),
        ("_RNvCsAB9_3fooCsAB", "_RNvCs*_3fooCsAB"),
        ("codeCompare.isra.0", "codeCompare.isra.*"),
        ("sqlite3_step", "sqlite3_step"),
    ] {
        assert_eq!(patterns::without_hashes(name), pattern, "{name}");
    }
}

#[test]
fn the_script_has_a_rule_per_name_it_can_hold() {
    let text = script::hot_code_script("_RNvCs*_4core3foo\nsqlite3_step\nnot[allowed]\n\n");
    assert!(text.starts_with("SECTIONS {"), "{text}");
    assert!(text.trim_end().ends_with("INSERT BEFORE .text;"), "{text}");
    assert!(text.contains("*(.text._RNvCs*_4core3foo .text.unlikely._RNvCs*_4core3foo "));
    assert!(text.contains(".text.unlikely.sqlite3_step"), "{text}");
    assert!(!text.contains("not[allowed]"), "{text}");
    assert_eq!(text.matches("*(").count(), 2, "{text}");
}
