//! How much code the measured binary gathers at its front (`.text.hot`, where
//! `server/build.rs` has the linker place the functions `server/hot-code/functions.txt`
//! lists): none means the code sits in the compiler's order, and the peak RSS shows it.

// Shared with `server/tests/hot_code.rs`, which reads the symbols too.
#[allow(dead_code)]
#[path = "../../hot-code/elf.rs"]
mod elf;

/// The size of the binary's `.text.hot` section in bytes (0 without one); `None` when the
/// file cannot be read as an ELF file.
pub fn hot_section_bytes(agent: &std::path::Path) -> Option<usize> {
    let bytes = std::fs::read(agent).ok()?;
    let sections = elf::Elf::parse(&bytes)?.sections()?;
    Some(
        sections
            .iter()
            .find(|section| section.name == ".text.hot")
            .map_or(0, |section| section.size),
    )
}
