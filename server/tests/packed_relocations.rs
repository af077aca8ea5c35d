//! The agent binary carries packed relative relocations where its build script asked for
//! them (see `server/build.rs`): the relocation table's pages count in the agent's RSS.

// Shared with the hot-code test and the bench, which read its other parts.
#[allow(dead_code)]
#[path = "../hot-code/elf.rs"]
mod elf;

/// Whether the ELF file's dynamic section has a DT_RELR entry (64-bit little-endian only,
/// which is what the build script enables it for).
fn has_dt_relr(binary: &[u8]) -> Option<bool> {
    const DT_RELR: u64 = 36;
    let tags = elf::Elf::parse(binary)?.dynamic_tags()?;
    Some(tags.contains(&DT_RELR))
}

#[test]
fn the_agent_is_linked_with_packed_relative_relocations() {
    if option_env!("TALARIA_PACKED_RELOCS").is_none() {
        // Not a glibc 2.36+ build: linked as before, nothing to check.
        return;
    }
    let binary = std::fs::read(env!("CARGO_BIN_EXE_talaria")).expect("the agent binary");
    assert_eq!(
        has_dt_relr(&binary),
        Some(true),
        "the build script asked for -z pack-relative-relocs but the binary has no DT_RELR"
    );
}

/// The agent's stderr at debug level, from a start with nothing on stdin.
#[cfg(target_os = "linux")]
#[allow(clippy::expect_used)]
fn debug_log_of_a_start() -> String {
    let home = tempfile::tempdir().expect("home");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .env("TALARIA_HOME", home.path())
        .env("TALARIA_LOG", "talaria=debug")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the agent runs");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[cfg(target_os = "linux")]
#[test]
fn the_agent_gives_back_its_relocation_tables_pages_at_start() {
    let page_size = std::process::Command::new("getconf")
        .arg("PAGESIZE")
        .output();
    let page: usize = page_size
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(4096);
    let binary = std::fs::read(env!("CARGO_BIN_EXE_talaria")).expect("the agent binary");
    let sections = elf::Elf::parse(&binary)
        .and_then(|elf| elf.sections())
        .expect("sections");
    let tables: Vec<usize> = sections
        .iter()
        .filter(|s| s.name == ".rela.dyn" || s.name == ".relr.dyn")
        .map(|s| s.size)
        .collect();
    // Each table's whole pages: all but at most the first and last page it touches. (Where
    // the build packs relocations, as on glibc 2.36+, that is mostly `.relr.dyn`; the crate's
    // own tests release a plain `.rela.dyn`.)
    let at_least: usize = tables
        .iter()
        .map(|size| size.saturating_sub(2 * page))
        .sum();
    let log = debug_log_of_a_start();
    let released: usize = log
        .split("relocation_bytes_released=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no release logged:\n{log}"));
    assert!(
        released >= at_least && released <= tables.iter().sum(),
        "released {released} bytes of tables {tables:?}"
    );
    assert!(
        at_least > 0,
        "this build has tables of {tables:?}: nothing to check"
    );
}
