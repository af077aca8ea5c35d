//! The linker script that gathers the functions `functions.txt` lists into `.text.hot`
//! (used by `server/build.rs`, tested by `server/tests/hot_code.rs`).

/// `SECTIONS { .text.hot : { … } } INSERT BEFORE .text;` with one rule per listed name. The
/// names are symbols with what varies between builds as `*` (`patterns.rs`), so one
/// list serves every build of the same code: another target directory or `--target`, the
/// release workflow's zig build, features unified with another package, a dependency's
/// patch release. Only names a linker script can hold as they are (no bracket, quote, space
/// or other wildcard).
pub fn hot_code_script(names: &str) -> String {
    let mut script = String::from("SECTIONS {\n  .text.hot : {\n");
    for name in names
        .lines()
        .map(str::trim)
        .filter(|name| fits_a_script(name))
    {
        script.push_str(&format!(
            "    *(.text.{name} .text.unlikely.{name} .text.startup.{name} .text.hot.{name})\n"
        ));
    }
    script.push_str("  }\n}\nINSERT BEFORE .text;\n");
    script
}

/// A name a section rule can hold as it is.
fn fits_a_script(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && !b"?[]\\\"(){};,=".contains(&byte))
}
