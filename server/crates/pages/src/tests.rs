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

/// The resident size of this process's mappings of its own binary, from `smaps`.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn resident_kb_of_own_binary() -> u64 {
    let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut in_binary = false;
    let mut total = 0;
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("Rss:") {
            if in_binary {
                total += rest
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        } else if line.contains('-') && line.split_whitespace().count() >= 5 {
            in_binary = line.ends_with(exe.to_string_lossy().as_ref());
        }
    }
    total
}

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
#[test]
fn this_test_binarys_own_table_is_released_and_the_program_goes_on() {
    let sizes = linux::loaded_table_sizes();
    let table = sizes.iter().copied().max().unwrap_or(0);
    let before = resident_kb_of_own_binary();
    let released = release_relocation_table();
    let after = resident_kb_of_own_binary();
    if table >= 4 * PAGE {
        assert!(released as u64 >= table - 2 * PAGE, "{released} of {table}");
        assert!(
            after < before,
            "resident {before} kB before, {after} kB after"
        );
    } else {
        assert_eq!(released, 0);
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
