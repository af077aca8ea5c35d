//! Reporting a finished call: its plan and its card to the client, its entry in the record
//! (the text the model reads fitted to the budget, images when the model takes them).

use super::{
    DisplayContent, EngineEvent, Orchestrator, Prepared, RecordLocation, ResultStatus, ToolDisplay,
    ToolEffect, ToolOutcome, ToolResultEntry, ToolStatus, UserPart,
};
impl Orchestrator<'_> {
    /// Reports a finished call (its plan, then its card) and returns what the card shows.
    pub(super) async fn finish(&self, call: &Prepared, outcome: &ToolOutcome) -> ToolDisplay {
        if let Some(items) = outcome.effects.iter().find_map(|e| match e {
            ToolEffect::Plan(items) => Some(items.clone()),
            _ => None,
        }) {
            self.emit(EngineEvent::Plan(items)).await;
        }
        let mut skills_changed = false;
        for effect in &outcome.effects {
            if let ToolEffect::Kept(kept) = effect {
                skills_changed |= matches!(kept, talaria_tools::Kept::Skill { live: true });
            }
        }
        let mut display = display_of(call, outcome);
        if let Some(notes) = self.hook_notes(call) {
            display
                .content
                .insert(0, DisplayContent::Text { text: notes });
        }
        self.emit(EngineEvent::ToolCallFinished {
            id: call.id.clone(),
            status: outcome.status,
            display: display.clone(),
            raw_output: outcome.raw_output.clone(),
            skills_changed,
        })
        .await;
        display
    }

    /// A call's entry in the record: the text the model reads fitted to the budget, its
    /// images when the model takes them.
    pub(super) async fn result_entry(
        &mut self,
        call: Prepared,
        outcome: ToolOutcome,
        display: ToolDisplay,
    ) -> ToolResultEntry {
        let text = match outcome.status {
            ToolStatus::Completed => outcome.content,
            ToolStatus::Failed => format!("Error: {}", outcome.content),
        };
        let model_text = self
            .budget
            .apply(call.max_result_chars, &call.id, text)
            .await;
        let images = if self.images {
            outcome
                .images
                .into_iter()
                .map(|image| UserPart::Image {
                    mime_type: image.mime_type,
                    data: image.data,
                })
                .collect()
        } else {
            Vec::new()
        };
        let changes = talaria_util::lock(&self.changes)
            .remove(&call.id)
            .unwrap_or_default();
        ToolResultEntry {
            call_id: call.model_id,
            client_id: call.id,
            tool: call.name,
            status: result_status(outcome.status),
            display,
            raw_input: call.raw_input,
            raw_output: outcome.raw_output,
            model_text,
            images,
            effects: Some(call.effects),
            changes,
        }
    }
}

pub(super) fn result_status(status: ToolStatus) -> ResultStatus {
    match status {
        ToolStatus::Completed => ResultStatus::Completed,
        ToolStatus::Failed => ResultStatus::Failed,
    }
}

/// What the client's card shows for a finished call: the call's diffs and terminal, then the
/// result text (unless the output lives in a terminal and the call succeeded); the places it
/// acted (the outcome's, else the description's).
pub(super) fn display_of(call: &Prepared, outcome: &ToolOutcome) -> ToolDisplay {
    let mut content: Vec<DisplayContent> = outcome
        .effects
        .iter()
        .filter_map(|effect| match effect {
            ToolEffect::Diff {
                path,
                old_text,
                new_text,
            } => Some(DisplayContent::Diff {
                path: path.display().to_string(),
                old_text: old_text.clone(),
                new_text: new_text.clone(),
            }),
            ToolEffect::Terminal { terminal_id } => Some(DisplayContent::Terminal {
                terminal_id: terminal_id.clone(),
            }),
            ToolEffect::Plan(_) | ToolEffect::SandboxDenied { .. } | ToolEffect::Kept(_) => None,
        })
        .collect();
    let in_terminal = content
        .iter()
        .any(|c| matches!(c, DisplayContent::Terminal { .. }));
    if !in_terminal || outcome.status == ToolStatus::Failed {
        content.push(DisplayContent::Text {
            text: outcome.content.clone(),
        });
    }
    // Images reach the client as images, whatever the model is shown of them.
    content.extend(outcome.images.iter().map(|image| DisplayContent::Image {
        mime_type: image.mime_type.clone(),
        data: image.data.clone(),
    }));
    let locations = if outcome.locations.is_empty() {
        &call.description.locations
    } else {
        &outcome.locations
    };
    ToolDisplay {
        title: call.description.title.clone(),
        kind: call.kind,
        locations: locations
            .iter()
            .map(|l| RecordLocation {
                path: l.path.display().to_string(),
                line: l.line,
            })
            .collect(),
        content,
    }
}

pub(super) fn trim_front(text: &mut String, max_chars: usize) {
    let count = text.chars().count();
    if count > max_chars {
        let cut = text
            .char_indices()
            .nth(count - max_chars)
            .map_or(0, |(i, _)| i);
        text.drain(..cut);
    }
}
