//! Checkpoints: before a call changes the workspace, what it is about to change is kept, so a
//! rewind can put the files back.
//!
//! - [`BlobStore`]: contents kept once by hash under `$TALARIA_HOME/checkpoints`, held per
//!   session by hard links and pruned with the session.
//! - [`Workspace`]: a file-tool call names its files, read before and after; a command is
//!   seen by a stat walk of the roots (what `.gitignore` ignores and every `.git` left out)
//!   before and after it, reading only files whose stat moved.
//! - [`restore`]: undoes recorded [`talaria_record::FileChange`]s newest first, leaving a file
//!   changed since the agent last did unless forced.
//!
//! Knows nothing of sessions' records or of ACP: callers store the changes it returns.

mod blobs;
mod restore;
mod walk;
mod workspace;

pub use blobs::{BlobStore, HASH_PREFIX, hash_of, prune_session};
pub use restore::{RestoreReport, restore};
pub use workspace::{Bounds, Capture, FilesBefore, Workspace, files_after, files_before};

#[cfg(test)]
mod tests;
