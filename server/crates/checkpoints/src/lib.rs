//! Checkpoints: before a call changes the workspace, what it is about to change is kept, so a
//! rewind can put the files back.
//!
//! - [`BlobStore`]: contents kept once by hash under `$TALARIA_HOME/checkpoints`, held per
//!   session by hard links and pruned with the session.
//! - [`Workspace`]: a file-tool call names its files, read before and after; a command is
//!   seen by a stat walk of the roots (what `.gitignore` ignores, every `.git` and what the
//!   sandbox hides left out) before and after it, reading only files whose stat moved. No
//!   content is kept that would leave the store's disk under the session store's reserve.
//! - [`Workspace::restore`]: undoes recorded [`talaria_record::FileChange`]s, each file back
//!   to before its first change, leaving a file changed since the agent last did unless
//!   forced; run again, it finishes what a crash cut off.
//!
//! Every file of the user's is reached through `talaria-files`: below the workspace's roots,
//! held since the workspace was first used, with no link followed.
//!
//! Knows nothing of sessions' records or of ACP: callers store the changes it returns.

mod blobs;
mod restore;
mod walk;
mod workspace;

pub use blobs::{BlobStore, HASH_PREFIX, hash_of, prune_session};
pub use restore::RestoreReport;
pub use workspace::{Bounds, Capture, FilesBefore, Workspace};

#[cfg(test)]
mod tests;
