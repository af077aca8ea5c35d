//! Which ranges may be released (over made-up images), and a release in this very process.

use super::*;

const PAGE: u64 = 4096;
const BIAS: u64 = 0x5555_0000_0000;

fn segment(kind: u32, flags: u32, vaddr: u64, memsz: u64) -> Segment {
    Segment {
        kind,
        flags,
        vaddr,
        memsz,
    }
}

/// An image as lld lays out an old-glibc PIE: the headers and relocations in a read-only
/// segment, code after, then the RELRO data.
fn image() -> Vec<Segment> {
    vec![
        segment(elf::PT_PHDR, 4, 0x40, 0x2a0),
        segment(elf::PT_LOAD, 4, 0, 0xb5_7d9c),
        segment(elf::PT_LOAD, 4 | elf::PF_X, 0xb5_8da0, 0xca_d780),
        segment(elf::PT_LOAD, 4 | elf::PF_W, 0x180_7520, 0x8_1ae0),
        segment(elf::PT_GNU_RELRO, 4, 0x180_7520, 0x8_1ae0),
    ]
}

#[test]
fn whole_pages_of_a_table_in_the_read_only_segment_are_released() {
    let range = releasable_range(&image(), BIAS, 0x2ce8, 0xb_4360, PAGE);
    assert_eq!(range, Some(BIAS + 0x3000..BIAS + 0xb7000));
}

#[test]
fn an_absolute_address_as_glibc_leaves_it_is_the_same_table() {
    let linked = releasable_range(&image(), BIAS, 0x2ce8, 0xb_4360, PAGE);
    let absolute = releasable_range(&image(), BIAS, BIAS + 0x2ce8, 0xb_4360, PAGE);
    assert_eq!(linked, absolute);
}

#[test]
fn an_absolute_address_at_the_load_bias_itself_is_not_moved_again() {
    assert_eq!(
        releasable_range(&image(), BIAS, BIAS, 0x2000, PAGE),
        Some(BIAS..BIAS + 0x2000)
    );
    // A program not moved at all (bias 0): addresses are the link addresses.
    assert_eq!(
        releasable_range(&image(), 0, 0x2ce8, 0xb_4360, PAGE),
        Some(0x3000..0xb7000)
    );
}

#[test]
fn a_relro_range_starting_right_after_the_released_pages_leaves_them_released() {
    let mut image = image();
    image.push(segment(elf::PT_GNU_RELRO, 4, 0xb7000, 0x1000));
    assert_eq!(
        releasable_range(&image, BIAS, 0x2ce8, 0xb_4360, PAGE),
        Some(BIAS + 0x3000..BIAS + 0xb7000)
    );
    image.pop();
    image.push(segment(elf::PT_GNU_RELRO, 4, 0xb6ff8, 0x1000));
    assert_eq!(releasable_range(&image, BIAS, 0x2ce8, 0xb_4360, PAGE), None);
}

#[test]
fn a_table_under_a_page_releases_nothing() {
    assert_eq!(releasable_range(&image(), BIAS, 0x2ce8, 0x800, PAGE), None);
    assert_eq!(releasable_range(&image(), BIAS, 0x2000, 0, PAGE), None);
    // Exactly one whole page is released.
    assert_eq!(
        releasable_range(&image(), BIAS, 0x2000, PAGE, PAGE),
        Some(BIAS + 0x2000..BIAS + 0x3000)
    );
}

#[test]
fn a_table_in_a_writable_or_executable_segment_is_never_released() {
    let writable = releasable_range(&image(), BIAS, 0x180_8000, 0x4000, PAGE);
    let executable = releasable_range(&image(), BIAS, 0xb6_0000, 0x4000, PAGE);
    assert_eq!((writable, executable), (None, None));
}

#[test]
fn a_table_in_a_writable_segment_outside_relro_is_never_released() {
    let mut image = image();
    image.push(segment(elf::PT_LOAD, 4 | elf::PF_W, 0x190_0000, 0x1_0000));
    assert_eq!(
        releasable_range(&image, BIAS, 0x190_1000, 0x4000, PAGE),
        None
    );
}

#[test]
fn a_table_only_a_segment_other_than_a_load_covers_is_never_released() {
    const PT_NOTE: u32 = 4;
    let mut image = image();
    image.push(segment(PT_NOTE, 4, 0x200_0000, 0x1_0000));
    assert_eq!(
        releasable_range(&image, BIAS, 0x200_1000, 0x4000, PAGE),
        None
    );
}

#[test]
fn a_table_reaching_past_its_segment_or_outside_any_is_never_released() {
    assert_eq!(
        releasable_range(&image(), BIAS, 0xb5_0000, 0x10000, PAGE),
        None
    );
    assert_eq!(
        releasable_range(&image(), BIAS, 0x200_0000, 0x4000, PAGE),
        None
    );
    assert_eq!(
        releasable_range(&image(), BIAS, u64::MAX - 10, 0x4000, PAGE),
        None
    );
}

#[test]
fn pages_a_relro_range_covers_are_never_released_even_in_a_read_only_segment() {
    let mut image = image();
    image.push(segment(elf::PT_GNU_RELRO, 4, 0x5000, 0x1000));
    assert_eq!(releasable_range(&image, BIAS, 0x2ce8, 0xb_4360, PAGE), None);
    // A RELRO range ending inside the table's first page (the page is not released): fine.
    image.pop();
    image.push(segment(elf::PT_GNU_RELRO, 4, 0x1000, 0x2000));
    assert_eq!(
        releasable_range(&image, BIAS, 0x2ce8, 0xb_4360, PAGE),
        Some(BIAS + 0x3000..BIAS + 0xb7000)
    );
}

#[test]
fn a_page_size_that_is_no_power_of_two_releases_nothing() {
    assert_eq!(releasable_range(&image(), BIAS, 0x2ce8, 0xb_4360, 0), None);
    assert_eq!(
        releasable_range(&image(), BIAS, 0x2ce8, 0xb_4360, 3000),
        None
    );
}

#[test]
fn the_tables_are_read_from_the_dynamic_entries_up_to_their_end() {
    let entries = [
        (1, 5),
        (elf::DT_RELASZ, 0x600),
        (elf::DT_RELA, 0x2ce8),
        (0, 0),
    ];
    assert_eq!(relocation_tables(entries), vec![(0x2ce8, 0x600)]);
    let packed = [
        (elf::DT_RELR, 0x3e68),
        (elf::DT_RELA, 0x29c8),
        (elf::DT_RELRSZ, 0xab18),
        (elf::DT_RELASZ, 0x14a0),
    ];
    assert_eq!(
        relocation_tables(packed),
        vec![(0x29c8, 0x14a0), (0x3e68, 0xab18)]
    );
    let after_the_end = [
        (elf::DT_RELA, 0x2ce8),
        (elf::DT_NULL, 0),
        (elf::DT_RELASZ, 0x600),
    ];
    assert_eq!(relocation_tables(after_the_end), vec![]);
    assert_eq!(relocation_tables([(elf::DT_RELRSZ, 0x600)]), vec![]);
}

#[test]
fn a_program_with_text_relocations_releases_nothing() {
    let table = [(elf::DT_RELA, 0x2ce8), (elf::DT_RELASZ, 0xb_4360)];
    let textrel = [(elf::DT_TEXTREL, 0), table[0], table[1]];
    let flagged = [table[0], table[1], (elf::DT_FLAGS, elf::DF_TEXTREL | 8)];
    let bind_now_only = [table[0], table[1], (elf::DT_FLAGS, 8)];
    assert_eq!(relocation_tables(textrel), vec![]);
    assert_eq!(relocation_tables(flagged), vec![]);
    assert_eq!(relocation_tables(bind_now_only), vec![(0x2ce8, 0xb_4360)]);
}

#[test]
fn only_a_private_read_only_mapping_of_a_file_covering_the_range_counts() {
    let maps = "\
5555a000-5556b000 r--p 00000000 08:01 4242 /usr/bin/talaria
5556b000-5557c000 r-xp 00011000 08:01 4242 /usr/bin/talaria
7f000000-7f010000 r--p 00000000 00:00 0
7f010000-7f020000 rw-p 00000000 08:01 4243 /usr/lib/data
7f020000-7f030000 r--s 00000000 08:01 4244 /dev/shm/shared
garbage line
";
    let covers = |from: u64, to: u64| file_mapping_covers(maps, &(from..to));
    assert!(
        covers(0x5555_b000, 0x5556_a000),
        "inside the file's read-only mapping"
    );
    assert!(covers(0x5555_a000, 0x5556_b000), "exactly the mapping");
    assert!(!covers(0x5556_a000, 0x5556_c000), "across two mappings");
    assert!(!covers(0x5556_b000, 0x5556_c000), "an executable mapping");
    assert!(
        !covers(0x7f00_1000, 0x7f00_2000),
        "anonymous memory (a copied image)"
    );
    assert!(!covers(0x7f01_1000, 0x7f01_2000), "a writable mapping");
    assert!(!covers(0x7f02_1000, 0x7f02_2000), "a shared mapping");
    assert!(
        !file_mapping_covers("", &(0x5555_b000..0x5555_c000)),
        "no map"
    );
}

/// Whether each page of `range` is in this process's memory now, from `/proc/self/pagemap`
/// (bit 63 of a page's entry; readable without privileges).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn pages_present(range: &std::ops::Range<u64>, page: u64) -> Vec<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut map) = std::fs::File::open("/proc/self/pagemap") else {
        return Vec::new();
    };
    (range.start..range.end)
        .step_by(page as usize)
        .map(|address| {
            let mut entry = [0u8; 8];
            let read = map
                .seek(SeekFrom::Start(address / page * 8))
                .and_then(|_| map.read_exact(&mut entry));
            read.is_ok() && u64::from_le_bytes(entry) >> 63 == 1
        })
        .collect()
}

/// The sizes of the relocation tables (`.rela.dyn`, `.relr.dyn`) in this test binary's file,
/// read from its section headers (64-bit little-endian ELF): what the loaded program's
/// dynamic section is checked against.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn relocation_sections_in_own_file() -> Vec<u64> {
    let file = std::fs::read("/proc/self/exe").unwrap_or_default();
    let at = |offset: usize, width: usize| -> u64 {
        let mut bytes = [0u8; 8];
        if let Some(field) = file.get(offset..offset + width) {
            bytes[..width].copy_from_slice(field);
        }
        u64::from_le_bytes(bytes)
    };
    let (table, entry) = (at(0x28, 8) as usize, at(0x3a, 2) as usize);
    let (count, names) = (at(0x3c, 2) as usize, at(0x3e, 2) as usize);
    let names_at = at(table + names * entry + 24, 8) as usize;
    (0..count)
        .filter_map(|index| {
            let header = table + index * entry;
            let name_at = names_at + at(header, 4) as usize;
            let name = file.get(name_at..)?.split(|b| *b == 0).next()?;
            let wanted = name == b".rela.dyn" || name == b".relr.dyn";
            wanted.then(|| at(header + 32, 8))
        })
        .collect()
}

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
#[test]
fn this_test_binarys_own_table_is_released_and_the_program_goes_on() {
    let page = linux::page_size();
    let in_file = relocation_sections_in_own_file();
    let (sizes, ranges) = linux::loaded_tables();
    let mut loaded = sizes;
    loaded.sort_unstable();
    let mut expected = in_file.clone();
    expected.sort_unstable();
    assert_eq!(
        loaded, expected,
        "the loaded dynamic section names the file's tables"
    );
    let table = in_file.iter().copied().max().unwrap_or(0);
    let at_least: u64 = in_file
        .iter()
        .map(|size| size.saturating_sub(2 * page))
        .sum();
    let released = release_relocation_table();
    // Linked by cargo's linker without packed relocations, the test binary has a plain
    // `.rela.dyn` of several pages (what the release archives carry).
    assert!(
        table >= 4 * page,
        "this test binary carries a table of {table} bytes"
    );
    assert!(released as u64 >= at_least, "{released} of {in_file:?}");
    // The released pages are out of this process's memory (nothing reads them again).
    for range in &ranges {
        let present = pages_present(range, page);
        assert!(
            !present.is_empty() && present.iter().all(|p| !p),
            "{present:?}"
        );
    }
    // Relocated data (formatting tables, panic locations, vtables) still reads right.
    let caught = std::panic::catch_unwind(|| panic!("{}", format_args!("{:>5}", 42)));
    let message = caught.err().and_then(|e| e.downcast::<String>().ok());
    assert_eq!(message.as_deref().map(String::as_str), Some("   42"));
    assert_eq!(
        release_relocation_table(),
        released,
        "a second call is as harmless"
    );
}
