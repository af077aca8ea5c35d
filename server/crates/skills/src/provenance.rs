//! Who wrote what, and when: one JSON line per write in a sidecar next to the skill or memory
//! file (`.provenance.jsonl`).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The sidecar's file name.
pub const SIDECAR: &str = ".provenance.jsonl";

/// Where a write came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The agent, during a user's turn.
    Foreground,
    /// The background review.
    Review,
    /// The user, accepting a review's proposal.
    Accepted,
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub origin: Origin,
    pub session: String,
    pub at_ms: i64,
    pub action: String,
    /// What was written (a skill name, a memory target).
    pub subject: String,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Appends a record to the sidecar in `dir`.
pub fn append(dir: &Path, record: &Record) -> std::io::Result<()> {
    let line = serde_json::to_string(record).map_err(std::io::Error::other)? + "\n";
    let folder =
        talaria_files::Root::open_making(dir, std::sync::Arc::new(talaria_files::Unguarded))?;
    folder
        .as_dir()
        .append(SIDECAR.as_ref(), line.as_bytes())
        .map_err(Into::into)
}

/// The records in `dir`'s sidecar (unreadable lines skipped).
pub fn read(dir: &Path) -> Vec<Record> {
    crate::manage::read_text(&dir.join(SIDECAR))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
