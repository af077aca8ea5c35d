//! What a place is to the sandbox: the one decision of what is hidden, asked by every
//! operation here (the sandbox's policy answers it; without a sandbox nothing is hidden),
//! with two rules that hold whoever answers: other processes' entries in the process table
//! (`/proc`) are never read for the agent, and a file opened is judged by what it is as well
//! as by where it was reached (a second name, a hard link, of a hidden file is hidden).

use std::path::Path;

use crate::Stat;

/// What a sandboxed command may do at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Nothing: not even read (credential stores, `TALARIA_HOME`, other sessions' temporary
    /// folders, `[sandbox] hidden`).
    Hidden,
    /// Read, not write.
    ReadOnly,
    /// Read and write (the workspace, the session's temporary folder, `[sandbox] writable`).
    Writable,
}

/// The decision of what a place is, for a path that holds no link.
pub trait Places: Send + Sync + std::fmt::Debug {
    /// What a command may do at `path` (absolute, resolved).
    fn access(&self, path: &Path) -> Access;

    /// Whether the regular file `file` (opened, with more than one link) is also a file in a
    /// hidden place under another name; what cannot be told counts as hidden. Blocking.
    fn is_hidden_file(&self, _file: &Stat) -> bool {
        false
    }
}

/// No sandbox: nothing is hidden, everything is the user's to write.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unguarded;

impl Places for Unguarded {
    fn access(&self, _path: &Path) -> Access {
        Access::Writable
    }
}

/// Where the process table is mounted on every Linux system.
const PROCESS_TABLE: &str = "/proc";

/// The files of the process table that describe the machine, not a process: read as any
/// other file. Everything else there (each process's `environ`, `mem`, `cmdline`, `maps`,
/// `fd/`…, and `self`) is hidden.
pub const MACHINE_FILES: &[&str] = &[
    "cpuinfo",
    "meminfo",
    "version",
    "loadavg",
    "uptime",
    "stat",
    "filesystems",
    "swaps",
    "partitions",
];

/// Whether `path` is in the process table and not one of its [`MACHINE_FILES`] (the table's
/// own folder is not: it is listed, showing only those).
pub fn in_process_table(path: &Path) -> bool {
    let Ok(inside) = path.strip_prefix(PROCESS_TABLE) else {
        return false;
    };
    let mut names = inside.iter();
    match (names.next(), names.next()) {
        (None, _) => false,
        (Some(name), None) => !MACHINE_FILES.iter().any(|file| name == *file),
        _ => true,
    }
}

/// What `places` says of `path`, with the process table's rule first.
pub(crate) fn access_of(places: &dyn Places, path: &Path) -> Access {
    if in_process_table(path) {
        Access::Hidden
    } else {
        places.access(path)
    }
}
