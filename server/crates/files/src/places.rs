//! What a place is to the sandbox: the one decision of what is hidden, asked by every
//! operation here (the sandbox's policy answers it; without a sandbox nothing is hidden).

use std::path::Path;

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
}

/// No sandbox: nothing is hidden, everything is the user's to write.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unguarded;

impl Places for Unguarded {
    fn access(&self, _path: &Path) -> Access {
        Access::Writable
    }
}
