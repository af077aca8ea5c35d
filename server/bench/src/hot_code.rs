//! How much of `server/hot-code/functions.txt` the measured binary carries: the functions
//! `server/build.rs` asks the linker to place first. Names change as code and dependencies
//! change, so a list that has gone stale shows here before it shows in the RSS figure.

use std::collections::HashSet;
use std::path::Path;

/// Listed functions found in the binary, and how many are listed.
pub struct Coverage {
    pub found: usize,
    pub listed: usize,
}

/// Reads the list and the binary's string tables (a symbol name is a NUL-terminated string
/// there); `None` when either cannot be read.
pub fn coverage(agent: &Path) -> Option<Coverage> {
    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hot-code/functions.txt");
    let list = std::fs::read_to_string(list_path).ok()?;
    let binary = std::fs::read(agent).ok()?;
    let strings: HashSet<&[u8]> = binary.split(|byte| *byte == 0).collect();
    let listed: Vec<&str> = list.lines().filter(|line| !line.is_empty()).collect();
    let found = listed
        .iter()
        .filter(|name| strings.contains(name.as_bytes()))
        .count();
    Some(Coverage {
        found,
        listed: listed.len(),
    })
}
