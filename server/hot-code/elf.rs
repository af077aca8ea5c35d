//! Just enough of a 64-bit little-endian ELF file to find a section, read the function
//! symbols and the dynamic tags (shared by `server/tests/hot_code.rs`,
//! `server/tests/packed_relocations.rs` and the bench's hot-code line).

/// One section header, named.
pub struct Section<'a> {
    pub name: &'a str,
    pub kind: u32,
    pub offset: usize,
    pub size: usize,
    pub link: u32,
}

/// The symbol table's section kind.
const SHT_SYMTAB: u32 = 2;
/// A symbol's type: a function.
const STT_FUNC: u8 = 2;

/// An ELF file's bytes.
pub struct Elf<'a> {
    bytes: &'a [u8],
}

impl<'a> Elf<'a> {
    /// `None` unless the bytes start as a 64-bit little-endian ELF file does.
    pub fn parse(bytes: &'a [u8]) -> Option<Self> {
        (bytes.get(..6)? == b"\x7fELF\x02\x01").then_some(Self { bytes })
    }

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
    pub fn sections(&self) -> Option<Vec<Section<'a>>> {
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
                    offset: self.usize(at + 24)?,
                    size: self.usize(at + 32)?,
                    link: self.u32(at + 40)?,
                })
            })
            .collect()
    }

    /// The tags of the dynamic section's entries, up to `DT_NULL` (`PT_DYNAMIC`'s segment).
    pub fn dynamic_tags(&self) -> Option<Vec<u64>> {
        const PT_DYNAMIC: u32 = 2;
        let table = self.usize(0x20)?;
        let entry = usize::from(self.u16(0x36)?);
        let count = usize::from(self.u16(0x38)?);
        let mut tags = Vec::new();
        for header in (0..count).map(|index| table + index * entry) {
            if self.u32(header)? != PT_DYNAMIC {
                continue;
            }
            let start = self.usize(header + 8)?;
            let size = self.usize(header + 32)?;
            for at in (start..start + size).step_by(16) {
                match self.u64(at)? {
                    0 => break,
                    tag => tags.push(tag),
                }
            }
        }
        Some(tags)
    }

    /// The names of the functions in the symbol table; `None` for a stripped file.
    pub fn function_names(&self) -> Option<Vec<&'a str>> {
        let sections = self.sections()?;
        let symbols = sections.iter().find(|s| s.kind == SHT_SYMTAB)?;
        let names = sections.get(usize::try_from(symbols.link).ok()?)?;
        let mut functions = Vec::new();
        for at in (symbols.offset..symbols.offset + symbols.size).step_by(24) {
            if self
                .bytes
                .get(at + 4)
                .is_some_and(|info| info & 0xf == STT_FUNC)
            {
                functions.push(self.c_str(names.offset + usize::try_from(self.u32(at)?).ok()?)?);
            }
        }
        Some(functions)
    }
}
