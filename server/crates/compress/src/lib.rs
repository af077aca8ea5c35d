//! The context compressor: real token accounting and a rewrite of the conversation record that
//! fits it back under a budget, following invariants every provider can rely on.
//!
//! Pure: no I/O, no ACP types, no model calls of its own. The engine hands it a transcript, a
//! [`Budget`] and a summariser (or completes a [`Pending`] compaction with the summariser's
//! answer) and gets back a new transcript and a [`Report`].
//!
//! The passes, in order: [`cheap`] (no model call), [`partition`] (head, middle, tail),
//! [`summary`] (what the summariser reads and what the model then reads), `sanitise` (tool
//! pairs), then the record's own `validate`.

mod accounts;
pub mod budget;
pub mod cheap;
mod compress;
mod partition;
pub mod redact;
mod sanitise;
pub mod summary;
pub mod tokens;

pub use accounts::account;
pub use budget::{Budget, Settings};
pub use compress::{
    CompressError, Outcome, Pending, Prepared, Report, Request, Summariser, SummaryInfo, compress,
    prepare,
};
pub use summary::{SummaryFailure, SummaryRequest};
pub use tokens::{Counting, Encoding, TokenAccounting};
