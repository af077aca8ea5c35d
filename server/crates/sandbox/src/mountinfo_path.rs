//! A path as the mount table (`/proc/self/mountinfo`) writes it, read back: a leaf the
//! readers of the table share.

use std::path::PathBuf;

/// A path as `/proc/self/mountinfo` writes it (`\040`-style escapes), as a path.
pub(crate) fn mountinfo_path(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = field
                .get(i + 1..i + 4)
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(String::from_utf8_lossy(&out).into_owned())
}
