//! The form of `functions.txt`'s names: symbols with what varies between builds of the same
//! code as `*` (used by `server/tests/hot_code.rs`; `names.py` writes the same form).

/// A symbol name with what varies between builds of the same code as `*`: v0 crate
/// disambiguators (`Cs1a2B3c_` → `Cs*_`) and back references (`B1c_` → `B*_`: they count
/// bytes, and a disambiguator's length varies from build to build), the legacy mangling's hash
/// (`17h0123456789abcdefE` → `17h*E`) and the numbers of local copies (`.llvm.123` →
/// `.llvm.*`, GCC's `.isra.0` → `.isra.*`). A v0 name spells out a generic function's type
/// arguments, so its pattern still names one instance; a legacy one does not.
pub fn without_hashes(name: &str) -> String {
    let mut name = name.to_string();
    if let Some((base, number)) = name.rsplit_once('.')
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
    {
        name = format!("{base}.*");
    }
    if name.starts_with("_ZN") {
        return without_legacy_hashes(&name);
    }
    if name.starts_with("_R") {
        return wildcard_numbers(&wildcard_numbers(&name, "Cs"), "B");
    }
    name
}

fn without_legacy_hashes(name: &str) -> String {
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
    out
}

/// `<tag><base-62 digits>_` as `<tag>*_`, left to right, as `names.py`'s regular expression
/// `<tag>[0-9A-Za-z]*_` replaces it.
fn wildcard_numbers(name: &str, tag: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(start) = rest.find(tag) {
        out.push_str(&rest[..start]);
        let after = &rest[start + tag.len()..];
        let digits = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphanumeric())
                .len();
        if after[digits..].starts_with('_') {
            out.push_str(tag);
            out.push_str("*_");
            rest = &after[digits + 1..];
        } else {
            out.push_str(&rest[start..=start]);
            rest = &rest[start + 1..];
        }
    }
    out.push_str(rest);
    out
}
