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
