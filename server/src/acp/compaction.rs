//! Compactions as the client sees them: `compaction_update` (in progress → completed or
//! failed, with the summary) when the client advertised `session.compaction`, otherwise a short
//! notice. (`/compact [focus]` is declared in the engine's table of slash commands.)

use talaria_engine::{CompactionStatus, CompactionView, NoticeLevel};
use talaria_protocol::acp::{self, ContentBlock, SessionUpdate, TextContent};

use super::updates::notice_update;

/// The update for a compaction event.
pub fn update(view: CompactionView, compaction: bool, notices: bool) -> Option<SessionUpdate> {
    if compaction {
        let status = match view.status {
            CompactionStatus::InProgress => acp::CompactionStatus::InProgress,
            CompactionStatus::Completed => acp::CompactionStatus::Completed,
            CompactionStatus::Failed => acp::CompactionStatus::Failed,
        };
        let mut update = acp::CompactionUpdate::new(view.id, status);
        if let Some(summary) = view.summary {
            update = update.summary(vec![ContentBlock::Text(TextContent::new(summary))]);
        }
        if let Some(error) = view.error {
            update = update.error(error);
        }
        return Some(SessionUpdate::CompactionUpdate(update));
    }
    // Without the capability: one short notice at the end (the start says nothing useful).
    let (level, message) = match view.status {
        CompactionStatus::InProgress => return None,
        CompactionStatus::Completed => {
            let first = view
                .summary
                .as_deref()
                .and_then(|s| s.lines().next())
                .unwrap_or("Context compacted.")
                .to_string();
            match view.error {
                Some(error) => (NoticeLevel::Warning, format!("{first} Note: {error}.")),
                None => (NoticeLevel::Info, first),
            }
        }
        CompactionStatus::Failed => (
            NoticeLevel::Warning,
            format!(
                "Context compaction failed: {}",
                view.error.unwrap_or_else(|| "unknown error".into())
            ),
        ),
    };
    Some(notice_update(level, message, notices))
}
