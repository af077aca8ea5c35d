//! Rewinding: the conversation moved back to a message a client names (what followed kept
//! in the record, off the path), and on request the files the cut turns changed put back;
//! and `/rewind [N] [files] [force]`, the same from a prompt.

use talaria_checkpoints::RestoreReport;
use talaria_record::{EntryBody, EntryId, RestoreIntent};

use super::SessionActor;
use crate::events::TurnId;
use crate::rewind::{RewindOutcome, RewindRequest};
use crate::slash::{CommandReply, RewindArgs};

/// What a rewind did: how many turns left the conversation, and what the files report says
/// (with the files put back: this rewind's and those an earlier one cut off left).
struct Done {
    turns: usize,
    files: Option<RestoreReport>,
}

/// "1 turn", "3 files".
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// What a rewind tells the user: what they see (turns and files), not the record's entries.
fn told(target: &str, done: &Done) -> String {
    let mut text = format!(
        "Rewound to before your message \"{target}\": {} left the conversation (kept in the \
         session's history; a later rewind can return to them).",
        count(done.turns, "turn")
    );
    let Some(files) = &done.files else {
        return text;
    };
    if files.restored.is_empty() && files.skipped.is_empty() && files.failed.is_empty() {
        text.push_str("\nNo file needed putting back.");
        return text;
    }
    if !files.restored.is_empty() {
        text.push_str(&format!(
            "\n{} put back: {}.",
            count(files.restored.len(), "file"),
            files.restored.join(", ")
        ));
    }
    if !files.skipped.is_empty() {
        text.push_str(&format!(
            "\n{} left as they are (changed since the agent did; `/rewind … files force` puts \
             them back anyway): {}.",
            count(files.skipped.len(), "file"),
            files.skipped.join(", ")
        ));
    }
    if !files.failed.is_empty() {
        text.push_str(&format!(
            "\n{} not put back (the next rewind tries again):",
            count(files.failed.len(), "file")
        ));
        for (path, why) in &files.failed {
            text.push_str(&format!("\n- {path}: {why}"));
        }
    }
    text
}

/// `into` with `more` added (a path reported once, by its latest outcome).
fn merge(into: &mut RestoreReport, more: RestoreReport) {
    for path in more
        .restored
        .iter()
        .chain(&more.skipped)
        .chain(more.failed.iter().map(|(p, _)| p))
    {
        into.restored.retain(|p| p != path);
        into.skipped.retain(|p| p != path);
        into.failed.retain(|(p, _)| p != path);
    }
    into.restored.extend(more.restored);
    into.skipped.extend(more.skipped);
    into.failed.extend(more.failed);
}

impl SessionActor {
    /// Rewinds an idle session. Nothing changes unless the request names a message of this
    /// session rightly.
    pub(super) async fn rewind(&mut self, request: RewindRequest) -> RewindOutcome {
        let head = match crate::rewind::resolve(&self.history, &request) {
            Ok(head) => head,
            Err(why) => return RewindOutcome::Invalid(why.to_string()),
        };
        if request.restore_files && self.settings.checkpoints.is_none() {
            return RewindOutcome::Refused(
                "files_unavailable: this session keeps no checkpoints".into(),
            );
        }
        let done = self
            .rewind_to(head, request.restore_files, request.force)
            .await;
        RewindOutcome::Rewound { files: done.files }
    }

    /// `/rewind [N] [files] [force]`: back before the Nth last prompt; answered without the
    /// model (the answer is not recorded).
    pub(super) async fn rewind_command(&mut self, turn: TurnId, args: RewindArgs) {
        let prompts: Vec<(EntryId, String)> = self
            .history
            .entries()
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::User { input, .. } => Some((e.id, crate::rewind::text_of(input))),
                _ => None,
            })
            .collect();
        let Some(index) = prompts.len().checked_sub(args.prompts) else {
            let why = format!(
                "/rewind {}: the conversation has {} prompt(s) to go back over",
                args.prompts,
                prompts.len()
            );
            return self.fail_prompt(turn, why).await;
        };
        if args.files && self.settings.checkpoints.is_none() {
            let why = "/rewind files: this session keeps no checkpoints".to_string();
            return self.fail_prompt(turn, why).await;
        }
        let (target, text) = &prompts[index];
        let head = self.history.parent_of(*target).unwrap_or(0);
        let done = self.rewind_to(head, args.files, args.force).await;
        let shown: String = text.chars().take(80).collect();
        let reply = CommandReply {
            text: told(&shown, &done),
            commands_changed: false,
        };
        self.command_reply(turn, reply).await;
    }

    /// Cuts the path after `head`; with `restore_files`, the files the cut turns changed are
    /// put back. The marker holds that list and is saved before any file is touched, and
    /// the end of the restore is recorded after it: what a crash cuts off, the next load or
    /// rewind finishes (a rewind first finishes what earlier ones left).
    async fn rewind_to(&mut self, head: EntryId, restore_files: bool, force: bool) -> Done {
        let mut files = None;
        if restore_files {
            files = self.finish_restores(true).await;
        }
        let cut = self.history.cut_by(head);
        let leaving: std::collections::HashSet<EntryId> = cut.iter().copied().collect();
        let turns = self
            .history
            .entries()
            .iter()
            .filter(|e| leaving.contains(&e.id) && matches!(e.body, EntryBody::User { .. }))
            .count();
        let intent = restore_files.then(|| RestoreIntent {
            changes: crate::rewind::changes_of(&self.history, &cut),
            force,
        });
        talaria_util::failpoint::step("rewind::marker::before");
        let cut = self.history.rewind_with(head, intent.clone());
        let marker = self.history.last_id();
        // The known messages are rebuilt from the new path.
        self.message_points = (Vec::new(), 0);
        let durable = self.commit().await;
        talaria_util::failpoint::step("rewind::marker::after");
        tracing::info!(session = %self.settings.id, head, cut = cut.len(), "rewound");
        if let Some(intent) = intent
            && let Some(report) = self.finish_restore(marker, intent, durable).await
        {
            merge(files.get_or_insert_with(RestoreReport::default), report);
        }
        Done { turns, files }
    }

    /// Finishes the restores earlier rewinds left (cut off by a crash; with `with_failed`,
    /// also the files whose last attempt failed); `None` when there were none (or no
    /// checkpoints to finish them with).
    pub(super) async fn finish_restores(&mut self, with_failed: bool) -> Option<RestoreReport> {
        let open = self.history.open_restores(with_failed);
        if open.is_empty() || self.settings.checkpoints.is_none() {
            return None;
        }
        // The markers first: a file is put back only once its marker survives a kill.
        let durable = self.commit().await;
        let mut report = RestoreReport::default();
        for (marker, intent) in open {
            if let Some(done) = self.finish_restore(marker, intent, durable).await {
                merge(&mut report, done);
            }
        }
        Some(report)
    }

    /// Puts back the files of the rewind whose marker is `marker`, then records that it did
    /// (the files that failed are tried again by the next rewind). With the marker neither
    /// committed nor spooled (`durable` false: a full disk) no file is touched — after a kill
    /// the record would not say they were put back — and each is reported not put back;
    /// the next rewind, or the next load once the marker is saved, puts them back.
    async fn finish_restore(
        &mut self,
        marker: EntryId,
        intent: RestoreIntent,
        durable: bool,
    ) -> Option<RestoreReport> {
        let checkpoints = self.settings.checkpoints.clone()?;
        if !durable {
            const WHY: &str = "not put back: the rewind could not be saved (the disk is full, \
                               or the home cannot be written); rewind again once it can";
            tracing::warn!(session = %self.settings.id, marker, "{WHY}");
            let failed = intent
                .changes
                .iter()
                .map(|change| (change.path.clone(), WHY.to_string()))
                .collect();
            return Some(RestoreReport {
                failed,
                ..RestoreReport::default()
            });
        }
        let session = self.settings.id.clone();
        let restored = tokio::task::spawn_blocking(move || {
            checkpoints.restore(&session, &intent.changes, intent.force)
        })
        .await
        .unwrap_or_default();
        talaria_util::failpoint::step("rewind::finish::before");
        self.history.push(EntryBody::FilesRestored {
            rewind: marker,
            restored: restored.restored.len(),
            skipped: restored.skipped.clone(),
            failed: restored.failed.iter().map(|(p, _)| p.clone()).collect(),
        });
        self.commit().await;
        talaria_util::failpoint::step("rewind::finish::after");
        Some(restored)
    }

    /// At a load: finishes what a rewind cut off by a crash left (its files put back, the
    /// temporary names it left swept), before the session serves anything.
    pub(super) async fn finish_cut_off_restores(&mut self) {
        let Some(report) = self.finish_restores(false).await else {
            return;
        };
        let text = format!(
            "A rewind stopped before all its files were back; finished now: {} put back, {} \
             left as they were changed since, {} not put back{}.",
            count(report.restored.len(), "file"),
            report.skipped.len(),
            report.failed.len(),
            if report.failed.is_empty() {
                ""
            } else {
                " (the next rewind tries again)"
            }
        );
        tracing::info!(session = %self.settings.id, "{text}");
        self.history.push(EntryBody::Notice {
            level: talaria_record::NoticeLevel::Info,
            text,
        });
        self.commit().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(restored: &[&str], skipped: &[&str], failed: &[&str]) -> RestoreReport {
        RestoreReport {
            restored: restored.iter().map(|p| p.to_string()).collect(),
            skipped: skipped.iter().map(|p| p.to_string()).collect(),
            failed: failed
                .iter()
                .map(|p| (p.to_string(), "disk full".to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_reply_says_turns_and_files_as_the_user_sees_them() {
        let conversation_only = told(
            "fix it",
            &Done {
                turns: 1,
                files: None,
            },
        );
        assert_eq!(
            conversation_only,
            "Rewound to before your message \"fix it\": 1 turn left the conversation (kept in \
             the session's history; a later rewind can return to them)."
        );
        let nothing = told(
            "fix it",
            &Done {
                turns: 3,
                files: Some(RestoreReport::default()),
            },
        );
        assert!(nothing.contains("3 turns left"), "{nothing}");
        assert!(
            nothing.ends_with("\nNo file needed putting back."),
            "{nothing}"
        );
        let all = told(
            "fix it",
            &Done {
                turns: 2,
                files: Some(report(&["a", "b"], &["c"], &["d"])),
            },
        );
        assert!(all.contains("\n2 files put back: a, b."), "{all}");
        assert!(all.contains("\n1 file left as they are"), "{all}");
        assert!(all.contains(": c."), "{all}");
        assert!(
            all.contains("\n1 file not put back (the next rewind tries again):\n- d: disk full"),
            "{all}"
        );
        assert!(!all.contains("record entries"), "{all}");
    }

    #[test]
    fn a_merged_report_names_each_path_once_by_its_latest_outcome() {
        let mut into = report(&["a"], &["b"], &["c"]);
        merge(&mut into, report(&["c"], &["a"], &[]));
        assert_eq!(into, report(&["c"], &["b", "a"], &[]));
        merge(&mut into, report(&[], &[], &["b"]));
        assert_eq!(into, report(&["c"], &["a"], &["b"]));
    }
}
