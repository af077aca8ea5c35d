//! Drops the pages of the agent's own relocation tables from its resident memory once the
//! loader has applied them.
//!
//! A position-independent binary linked for a glibc older than 2.36 (the release archives'
//! floor) carries its relative relocations as a plain `.rela.dyn`: 24 bytes each, about
//! 0.7 MB for Talaria, read once by the loader before `main` and then resident for the
//! process's life (clean pages of the binary's first, read-only segment). Newer toolchains
//! pack them (`DT_RELR`) and the table is a few KB; there this finds nothing to release.
//!
//! What makes dropping the pages safe whatever the binary looks like: only whole pages inside
//! the image's read-only, non-writable segment outside any `PT_GNU_RELRO` range are released,
//! and such pages hold the file's bytes unchanged (nothing can have written them), so a later
//! read, by anyone, faults the same bytes back in from the file. Pages of the relocated data
//! (`.data.rel.ro`, the GOT), which differ from the file, are writable or RELRO segments and
//! never qualify; nor does a range the process's memory map does not show as a mapping of a
//! file. Every check failing means nothing is released.
//!
//! What it saves is the agent's resident set (and so its share of a cgroup's and a
//! machine's accounting of it, `VmHWM`, PSS): the pages stay in the page cache, one copy for
//! every process of the binary, which the kernel reclaims as it would any cached file.
//!
//! Why a crate of its own: the workspace forbids unsafe code; reading the program's loaded
//! headers and `madvise` are the two raw operations here, each in one documented block.

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod linux;

/// The program header fields this crate reads (as in `Elf64_Phdr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub kind: u32,
    pub flags: u32,
    pub vaddr: u64,
    pub memsz: u64,
}

/// Segment kinds and flags of the ELF format used here.
pub mod elf {
    pub const PT_LOAD: u32 = 1;
    pub const PT_DYNAMIC: u32 = 2;
    pub const PT_PHDR: u32 = 6;
    pub const PT_GNU_RELRO: u32 = 0x6474_e552;
    pub const PF_X: u32 = 1;
    pub const PF_W: u32 = 2;
    pub const DT_NULL: u64 = 0;
    pub const DT_RELA: u64 = 7;
    pub const DT_RELASZ: u64 = 8;
    pub const DT_TEXTREL: u64 = 22;
    pub const DT_FLAGS: u64 = 30;
    pub const DF_TEXTREL: u64 = 4;
    pub const DT_RELRSZ: u64 = 35;
    pub const DT_RELR: u64 = 36;
}

/// Releases the pages of the loaded program's relocation tables; returns how many bytes were
/// released (0 where there is nothing to release, on other systems, or when a check failed).
pub fn release_relocation_table() -> usize {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        linux::release_relocation_table()
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    {
        0
    }
}

/// The address range (absolute, page-aligned inward) that may be released for a relocation
/// table at `table` of `size` bytes, in an image loaded `bias` bytes above its link
/// addresses with these `segments`; `None` when any check fails.
///
/// `table` may be a link address (as the file has it) or already absolute (glibc rewrites
/// the dynamic section in place): a value below `bias` is taken as a link address.
pub fn releasable_range(
    segments: &[Segment],
    bias: u64,
    table: u64,
    size: u64,
    page: u64,
) -> Option<std::ops::Range<u64>> {
    if size == 0 || !page.is_power_of_two() {
        return None;
    }
    let start = if table < bias {
        table.checked_add(bias)?
    } else {
        table
    };
    let end = start.checked_add(size)?;
    let holding = segments.iter().find(|s| {
        let from = bias.wrapping_add(s.vaddr);
        s.kind == elf::PT_LOAD && from <= start && end <= from.saturating_add(s.memsz)
    })?;
    if holding.flags & (elf::PF_W | elf::PF_X) != 0 {
        return None;
    }
    let first = start.checked_add(page - 1)? & !(page - 1);
    let last = end & !(page - 1);
    let overlaps_relro = segments.iter().any(|s| {
        let from = bias.wrapping_add(s.vaddr);
        let to = from.saturating_add(s.memsz);
        s.kind == elf::PT_GNU_RELRO && from < last && first < to
    });
    (first < last && !overlaps_relro).then_some(first..last)
}

/// Whether `/proc/self/maps` (`maps`) shows `range` inside one private, non-writable mapping
/// of a file (an inode): pages that are the file's bytes, which a read faults back in. A
/// program whose image was copied into anonymous memory (a packer, a remap onto huge pages)
/// is not: dropping its pages would leave zeros.
pub fn file_mapping_covers(maps: &str, range: &std::ops::Range<u64>) -> bool {
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let (Some(span), Some(perms), Some(_offset), Some(_device), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return false;
        };
        let Some((from, to)) = span.split_once('-') else {
            return false;
        };
        let (Ok(from), Ok(to)) = (u64::from_str_radix(from, 16), u64::from_str_radix(to, 16))
        else {
            return false;
        };
        from <= range.start && range.end <= to && perms == "r--p" && inode != "0"
    })
}

/// The relocation tables' addresses and sizes (`DT_RELA`, and `DT_RELR` where relative
/// relocations are packed) from the dynamic section's `(tag, value)` entries, read up to
/// `DT_NULL`. None for a program with text relocations: the loader wrote into its
/// read-only segments, so a page there may differ from the file.
pub fn relocation_tables(dynamic: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let (mut rela, mut rela_size, mut relr, mut relr_size) = (None, None, None, None);
    for (tag, value) in dynamic {
        match tag {
            elf::DT_NULL => break,
            elf::DT_TEXTREL => return Vec::new(),
            elf::DT_FLAGS if value & elf::DF_TEXTREL != 0 => return Vec::new(),
            elf::DT_RELA => rela = Some(value),
            elf::DT_RELASZ => rela_size = Some(value),
            elf::DT_RELR => relr = Some(value),
            elf::DT_RELRSZ => relr_size = Some(value),
            _ => {}
        }
    }
    [rela.zip(rela_size), relr.zip(relr_size)]
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests;
