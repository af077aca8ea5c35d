//! The agent binary carries packed relative relocations where its build script asked for
//! them (see `server/build.rs`): the relocation table's pages count in the agent's RSS.

/// Whether the ELF file's dynamic section has a DT_RELR entry (64-bit little-endian only,
/// which is what the build script enables it for).
fn has_dt_relr(elf: &[u8]) -> Option<bool> {
    const PT_DYNAMIC: u32 = 2;
    const DT_NULL: u64 = 0;
    const DT_RELR: u64 = 36;
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    if elf.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let table = usize::try_from(u64_at(0x20)?).ok()?;
    let entry_size = usize::from(u16_at(0x36)?);
    let entries = usize::from(u16_at(0x38)?);
    for index in 0..entries {
        let header = table + index * entry_size;
        if u32_at(header)? != PT_DYNAMIC {
            continue;
        }
        let start = usize::try_from(u64_at(header + 8)?).ok()?;
        let size = usize::try_from(u64_at(header + 32)?).ok()?;
        for entry in (start..start + size).step_by(16) {
            match u64_at(entry)? {
                DT_RELR => return Some(true),
                DT_NULL => break,
                _ => {}
            }
        }
    }
    Some(false)
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
