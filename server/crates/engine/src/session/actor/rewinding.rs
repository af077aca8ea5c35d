//! Rewinding: the conversation moved back to a message a client names (what followed kept
//! in the record, off the path), and on request the files the cut turns changed put back;
//! and `/rewind [N] [files] [force]`, the same from a prompt.

use talaria_checkpoints::RestoreReport;
use talaria_record::{EntryBody, EntryId};

use super::SessionActor;
use crate::events::TurnId;
use crate::rewind::{RewindOutcome, RewindRequest};
use crate::slash::CommandReply;

/// The built-in command's name.
pub const REWIND_COMMAND: &str = "rewind";

/// What `/rewind` was asked: how many prompts back, and whether files go back too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CommandArgs {
    prompts: usize,
    files: bool,
    force: bool,
}

/// A `/rewind` argument that is not a count of prompts.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("/rewind [N] [files] [force]: {0:?} is not a number of prompts (1 or more)")]
struct NotACount(String);

fn parse_args(args: &str) -> Result<CommandArgs, NotACount> {
    let mut parsed = CommandArgs {
        prompts: 1,
        files: false,
        force: false,
    };
    for word in args.split_whitespace() {
        match word {
            "files" | "--files" => parsed.files = true,
            "force" | "--force" => parsed.force = true,
            number => {
                parsed.prompts = number
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| NotACount(number.to_string()))?;
            }
        }
    }
    Ok(parsed)
}

/// What a rewind tells the user.
fn told(target: &str, cut: usize, files: Option<&RestoreReport>) -> String {
    let mut text = format!(
        "Rewound to before your message \"{target}\": {cut} record entries left the \
         conversation (they stay in the record; a later rewind can return to them)."
    );
    let Some(files) = files else {
        return text;
    };
    let list = |paths: &[String]| {
        if paths.is_empty() {
            "none".to_string()
        } else {
            paths.join(", ")
        }
    };
    text.push_str(&format!("\nFiles put back: {}.", list(&files.restored)));
    if !files.skipped.is_empty() {
        text.push_str(&format!(
            "\nLeft as they are (changed since the agent did; `/rewind … files force` puts \
             them back anyway): {}.",
            files.skipped.join(", ")
        ));
    }
    for (path, why) in &files.failed {
        text.push_str(&format!("\nNot put back: {path}: {why}."));
    }
    text
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
        let (_, files) = self
            .rewind_to(head, request.restore_files, request.force)
            .await;
        RewindOutcome::Rewound { files }
    }

    /// `/rewind [N] [files] [force]`: back before the Nth last prompt; answered without the
    /// model (the answer is not recorded).
    pub(super) async fn rewind_command(&mut self, turn: TurnId, args: &str) {
        let args = match parse_args(args) {
            Ok(args) => args,
            Err(why) => return self.fail_prompt(turn, why.to_string()).await,
        };
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
        let (cut, files) = self.rewind_to(head, args.files, args.force).await;
        let shown: String = text.chars().take(80).collect();
        let reply = CommandReply {
            text: told(&shown, cut, files.as_ref()),
            commands_changed: false,
        };
        self.command_reply(turn, reply).await;
    }

    /// Cuts the path after `head`, saves, and puts the files back on request; returns how
    /// many entries left the path and what the files report says.
    async fn rewind_to(
        &mut self,
        head: EntryId,
        restore_files: bool,
        force: bool,
    ) -> (usize, Option<RestoreReport>) {
        let cut = self.history.rewind_to(head);
        // The known messages are rebuilt from the new path.
        self.message_points = (Vec::new(), 0);
        let changes = crate::rewind::changes_of(&self.history, &cut);
        self.commit().await;
        tracing::info!(session = %self.settings.id, head, cut = cut.len(), "rewound");
        let checkpoints = self.settings.checkpoints.clone().filter(|_| restore_files);
        let Some(checkpoints) = checkpoints else {
            return (cut.len(), None);
        };
        let session = self.settings.id.clone();
        let restored =
            tokio::task::spawn_blocking(move || checkpoints.restore(&session, &changes, force))
                .await;
        (cut.len(), Some(restored.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_takes_a_count_and_the_words_files_and_force() {
        assert_eq!(
            parse_args(""),
            Ok(CommandArgs {
                prompts: 1,
                files: false,
                force: false
            })
        );
        assert_eq!(
            parse_args("3 files force"),
            Ok(CommandArgs {
                prompts: 3,
                files: true,
                force: true
            })
        );
        assert!(parse_args("0").is_err());
        assert!(
            parse_args("back")
                .unwrap_err()
                .to_string()
                .contains("not a number")
        );
    }
}
