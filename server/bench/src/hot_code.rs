//! How much of `server/hot-code/functions.txt` the measured binary carries in its
//! `.text.hot` section, where `server/build.rs` has the linker gather those functions. Names
//! change as code and dependencies change, and a function can sit in a section the linker
//! script does not name: either shows here before it shows in the RSS figure.

use std::collections::HashSet;
use std::path::Path;

/// Listed functions in `.text.hot`, listed functions in the binary at all, and the list's
/// length.
pub struct Coverage {
    pub in_hot_section: usize,
    pub in_binary: usize,
    pub listed: usize,
}

/// `None` when the list or the binary cannot be read, or the binary is not a 64-bit
/// little-endian ELF file with a symbol table.
pub fn coverage(agent: &Path) -> Option<Coverage> {
    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hot-code/functions.txt");
    let list = std::fs::read_to_string(list_path).ok()?;
    let listed: HashSet<&str> = list.lines().filter(|line| !line.is_empty()).collect();
    let binary = std::fs::read(agent).ok()?;
    let elf = Elf { bytes: &binary };
    let sections = elf.sections()?;
    let hot = sections.iter().find(|s| s.name == ".text.hot");
    let symbols = sections.iter().find(|s| s.kind == SHT_SYMTAB)?;
    let names = sections.get(usize::try_from(symbols.link).ok()?)?;
    let (mut in_binary, mut in_hot_section) = (0, 0);
    for at in (symbols.offset..symbols.offset + symbols.size).step_by(24) {
        let name = elf.c_str(names.offset + usize::try_from(elf.u32(at)?).ok()?)?;
        if !listed.contains(name) {
            continue;
        }
        in_binary += 1;
        let value = elf.u64(at + 8)?;
        if hot.is_some_and(|hot| (hot.addr..hot.addr + hot.size as u64).contains(&value)) {
            in_hot_section += 1;
        }
    }
    Some(Coverage {
        in_hot_section,
        in_binary,
        listed: listed.len(),
    })
}

const SHT_SYMTAB: u32 = 2;

struct Section<'a> {
    name: &'a str,
    kind: u32,
    addr: u64,
    offset: usize,
    size: usize,
    link: u32,
}

struct Elf<'a> {
    bytes: &'a [u8],
}

impl<'a> Elf<'a> {
    fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(
            self.bytes.get(at..at + 2)?.try_into().ok()?,
        ))
    }

    fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(
            self.bytes.get(at..at + 4)?.try_into().ok()?,
        ))
    }

    fn u64(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(
            self.bytes.get(at..at + 8)?.try_into().ok()?,
        ))
    }

    fn usize(&self, at: usize) -> Option<usize> {
        usize::try_from(self.u64(at)?).ok()
    }

    fn c_str(&self, at: usize) -> Option<&'a str> {
        let rest = self.bytes.get(at..)?;
        let end = rest.iter().position(|byte| *byte == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    }

    /// The section headers, named.
    fn sections(&self) -> Option<Vec<Section<'a>>> {
        if self.bytes.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let table = self.usize(0x28)?;
        let entry = usize::from(self.u16(0x3a)?);
        let count = usize::from(self.u16(0x3c)?);
        let names_index = usize::from(self.u16(0x3e)?);
        let header = |index: usize| table + index * entry;
        let names_offset = self.usize(header(names_index) + 24)?;
        (0..count)
            .map(|index| {
                let at = header(index);
                Some(Section {
                    name: self.c_str(names_offset + usize::try_from(self.u32(at)?).ok()?)?,
                    kind: self.u32(at + 4)?,
                    addr: self.u64(at + 16)?,
                    offset: self.usize(at + 24)?,
                    size: self.usize(at + 32)?,
                    link: self.u32(at + 40)?,
                })
            })
            .collect()
    }
}
