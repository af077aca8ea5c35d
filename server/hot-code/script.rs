//! The linker script that gathers the functions `functions.txt` lists into `.text.hot`
//! (used by `server/build.rs`, tested by `server/tests/hot_code.rs`).

/// `SECTIONS { .text.hot : { … } } INSERT BEFORE .text;` with two runs of rules: each
/// listed name exactly (this build's functions, in the list's order), then the same names
/// with their hashes as wildcards. The second run catches the listed functions in a build
/// whose hashes differ (another target directory, `--target`, the release workflow's zig
/// build, a dependency bumped since the list was recorded), with the other instances of the
/// same generic paths; the first rule a section matches places it, so in a build the list
/// was recorded from the exact names come first. Only names a linker script can hold as
/// they are (no wildcard, bracket, quote or space).
pub fn hot_code_script(names: &str) -> String {
    let names: Vec<&str> = names
        .lines()
        .map(str::trim)
        .filter(|name| {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_graphic() && !b"*?[]\\\"(){};,=".contains(&byte))
        })
        .collect();
    let mut script = String::from("SECTIONS {\n  .text.hot : {\n");
    for name in &names {
        script.push_str(&section_rule(name));
    }
    let mut patterns: Vec<String> = names
        .iter()
        .map(|name| without_hashes(name))
        .filter(|pattern| pattern.contains('*'))
        .collect();
    patterns.sort();
    patterns.dedup();
    for pattern in &patterns {
        script.push_str(&section_rule(pattern));
    }
    script.push_str("  }\n}\nINSERT BEFORE .text;\n");
    script
}

/// The rule for one function's section: functions the compiler thought cold sit in
/// `.text.unlikely.<name>` (and GCC's start-up code in `.text.startup.<name>`).
fn section_rule(name: &str) -> String {
    format!("    *(.text.{name} .text.unlikely.{name} .text.startup.{name} .text.hot.{name})\n")
}

/// A symbol name with what varies between builds as `*`: the legacy mangling's hash
/// (`17h0123456789abcdefE` → `17h*E`), v0 crate disambiguators (`Cs1a2B3c_` → `Cs*_`) and
/// the numbers of local copies (`.llvm.123` → `.llvm.*`, GCC's `.isra.0` → `.isra.*`).
pub fn without_hashes(name: &str) -> String {
    let mut name = name.to_string();
    if let Some((base, number)) = name.rsplit_once('.')
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
    {
        name = format!("{base}.*");
    }
    if name.starts_with("_ZN") {
        let bytes = name.as_bytes();
        let mut out = String::with_capacity(name.len());
        let mut at = 0;
        while at < bytes.len() {
            let hash = bytes.get(at..at + 20).is_some_and(|run| {
                run.starts_with(b"17h")
                    && run[3..19].iter().all(u8::is_ascii_hexdigit)
                    && run[19] == b'E'
            });
            if hash {
                out.push_str("17h*E");
                at += 20;
            } else {
                out.push(char::from(bytes[at]));
                at += 1;
            }
        }
        return out;
    }
    if name.starts_with("_R") {
        let mut out = String::with_capacity(name.len());
        let mut rest = name.as_str();
        while let Some(start) = rest.find("Cs") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find(|c: char| !c.is_ascii_alphanumeric());
            match end {
                Some(end) if after[end..].starts_with('_') => {
                    out.push_str("Cs*_");
                    rest = &after[end + 1..];
                }
                _ => {
                    out.push_str("Cs");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        return out;
    }
    name
}
