//! The one way Talaria touches the user's files on the agent's behalf: the file tools, the
//! checkpoints and restores of a rewind, the skill and memory stores, a batch's outputs.
//!
//! A sandboxed command may change anything in the places it may write while Talaria, outside
//! the sandbox, works on the same names: swap a file or a folder for a link, plant a name
//! Talaria is about to create. So nothing here follows a path by its name twice:
//!
//! - a [`Root`] is a folder resolved once, when it is chosen, and held open; every path below
//!   it is opened relative to that descriptor in one `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (one component at a time with `O_NOFOLLOW`
//!   on kernels without it): a link anywhere on the way, or a `..` that would climb out, makes
//!   the open fail — it is never followed;
//! - a file is replaced by writing a new file created `O_CREAT | O_EXCL | O_NOFOLLOW` in the
//!   held folder, then `renameat` within that folder: a name planted where the temporary file
//!   goes (a link to Talaria's settings, a pipe) makes the creation fail, never a write there;
//! - every place is judged by [`Places`], the sandbox's own decision of what is hidden: what a
//!   command may not read is not read or written for it either.
//!
//! [`open_resolved`] opens an absolute path that has no link on it (a path already resolved
//! and judged by the caller) the same way, beneath `/`.

mod error;
mod open;
mod places;
mod root;
mod stat;
mod temporary;

pub use error::FileError;
pub use open::open_resolved;
pub use places::{Access, MACHINE_FILES, Places, Unguarded, in_process_table};
pub use root::{Dir, Replace, Root};
pub use stat::{Kind, Stat};
pub use temporary::{TEMPORARY_MARK, is_temporary_of};

#[cfg(test)]
mod tests;
