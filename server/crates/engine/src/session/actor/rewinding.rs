//! Rewinding: the conversation moved back to a message a client names (what followed kept
//! in the record, off the path), and on request the files the cut turns changed put back.

use super::SessionActor;
use crate::rewind::{RewindOutcome, RewindRequest};

impl SessionActor {
    /// Rewinds an idle session. Nothing changes unless the request names a message of this
    /// session rightly; files are put back after the record is cut, newest change first.
    pub(super) async fn rewind(&mut self, request: RewindRequest) -> RewindOutcome {
        let head = match crate::rewind::resolve(&self.history, &request) {
            Ok(head) => head,
            Err(why) => return RewindOutcome::Invalid(why),
        };
        let checkpoints = self.settings.checkpoints.clone();
        if request.restore_files && checkpoints.is_none() {
            return RewindOutcome::Refused(
                "files_unavailable: this session keeps no checkpoints".into(),
            );
        }
        let cut = self.history.rewind_to(head);
        let changes = crate::rewind::changes_of(&self.history, &cut);
        self.commit().await;
        tracing::info!(session = %self.settings.id, head, cut = cut.len(), "rewound");
        let files = match checkpoints.filter(|_| request.restore_files) {
            Some(checkpoints) => {
                let session = self.settings.id.clone();
                let force = request.force;
                let restored = tokio::task::spawn_blocking(move || {
                    checkpoints.restore(&session, &changes, force)
                })
                .await;
                Some(restored.unwrap_or_default())
            }
            None => None,
        };
        RewindOutcome::Rewound { files }
    }
}
