//! The raw part on Linux: the loaded program's headers (from the auxiliary vector), its
//! dynamic section, and the `madvise` that drops the pages.

use crate::{Segment, elf, file_mapping_covers, releasable_range, relocation_tables};

/// One dynamic section entry (`Elf64_Dyn`).
#[repr(C)]
#[derive(Clone, Copy)]
struct DynamicEntry {
    tag: u64,
    value: u64,
}

pub(crate) fn release_relocation_table() -> usize {
    let Some((segments, bias)) = loaded_segments() else {
        return 0;
    };
    let Some(dynamic) = segments.iter().find(|s| s.kind == elf::PT_DYNAMIC) else {
        return 0;
    };
    let page = page_size();
    let ranges: Vec<std::ops::Range<u64>> = relocation_tables(dynamic_entries(bias, dynamic))
        .into_iter()
        .filter_map(|(table, size)| releasable_range(&segments, bias, table, size, page))
        .collect();
    if ranges.is_empty() {
        return 0;
    }
    // Read only when there is something to release (a start's one extra file read).
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    ranges
        .into_iter()
        .filter(|range| file_mapping_covers(&maps, range))
        .map(release)
        .sum()
}

/// The system's page size.
pub(crate) fn page_size() -> u64 {
    // SAFETY: `getauxval` reads the process's auxiliary vector; any type is a valid query.
    unsafe { libc::getauxval(libc::AT_PAGESZ) }
}

/// Drops the pages of `range` from this process; the bytes released.
fn release(range: std::ops::Range<u64>) -> usize {
    let length = (range.end - range.start) as usize;
    // SAFETY: the range is whole pages of a relocation table in the image's read-only,
    // non-executable, non-RELRO segment (`releasable_range`), mapped privately from a file
    // (`file_mapping_covers`): clean copies of the file nothing in this process can have
    // written, so dropping them changes no byte anyone reads later (a read faults the same
    // file bytes back in). No Rust reference points into them.
    let released = unsafe {
        libc::madvise(
            range.start as usize as *mut libc::c_void,
            length,
            libc::MADV_DONTNEED,
        )
    };
    if released == 0 { length } else { 0 }
}

/// The relocation tables' sizes as loaded, and the ranges that may be released, for tests.
#[cfg(test)]
pub(crate) fn loaded_tables() -> (Vec<u64>, Vec<std::ops::Range<u64>>) {
    let Some((segments, bias)) = loaded_segments() else {
        return (Vec::new(), Vec::new());
    };
    let Some(dynamic) = segments.iter().find(|s| s.kind == elf::PT_DYNAMIC) else {
        return (Vec::new(), Vec::new());
    };
    let tables = relocation_tables(dynamic_entries(bias, dynamic));
    let ranges = tables
        .iter()
        .filter_map(|(table, size)| releasable_range(&segments, bias, *table, *size, page_size()))
        .collect();
    (tables.into_iter().map(|(_, size)| size).collect(), ranges)
}

/// The program's segments as loaded and its load bias (from its `PT_PHDR`).
fn loaded_segments() -> Option<(Vec<Segment>, u64)> {
    // SAFETY: reading the auxiliary vector, as above.
    let (headers, count, entry_size) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR),
            libc::getauxval(libc::AT_PHNUM),
            libc::getauxval(libc::AT_PHENT),
        )
    };
    if headers == 0 || entry_size as usize != size_of::<libc::Elf64_Phdr>() {
        return None;
    }
    // SAFETY: the kernel puts in AT_PHDR the address of the program's program headers,
    // `AT_PHNUM` entries of the size checked above, mapped for the process's life and
    // never written after load.
    let loaded =
        unsafe { std::slice::from_raw_parts(headers as *const libc::Elf64_Phdr, count as usize) };
    let segments: Vec<Segment> = loaded
        .iter()
        .map(|h| Segment {
            kind: h.p_type,
            flags: h.p_flags,
            vaddr: h.p_vaddr,
            memsz: h.p_memsz,
        })
        .collect();
    let own = segments.iter().find(|s| s.kind == elf::PT_PHDR)?;
    let bias = headers.checked_sub(own.vaddr)?;
    Some((segments, bias))
}

/// The dynamic section's entries, as loaded.
fn dynamic_entries(bias: u64, dynamic: &Segment) -> Vec<(u64, u64)> {
    let count = dynamic.memsz as usize / size_of::<DynamicEntry>();
    let start = bias.wrapping_add(dynamic.vaddr) as usize as *const DynamicEntry;
    if start.is_null() || !start.is_aligned() {
        return Vec::new();
    }
    // SAFETY: `PT_DYNAMIC` of the loaded program names its dynamic section, `memsz` bytes
    // mapped for the process's life; the loader finished writing it before `main`.
    let entries = unsafe { std::slice::from_raw_parts(start, count) };
    entries.iter().map(|e| (e.tag, e.value)).collect()
}
