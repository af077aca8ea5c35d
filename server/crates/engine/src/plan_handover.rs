//! The end of a turn in plan mode: the plan the model gave is handed to the user on a card of
//! its own with one question — implement it (asking, or accepting edits) or keep planning.
//! On an implement choice the session's mode switches (through its actor, the one writer of
//! its settings) and the turn goes on with the plan as the task.

use talaria_record::{DisplayContent, ToolDisplay};
use talaria_tools::{ToolKind, ToolStatus};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approval::Mode;
use crate::client::{
    ClientAnswer, ClientAsk, PermissionAnswer, PermissionChoice, PermissionRequest,
};
use crate::events::{EngineEvent, ToolCallView};
use crate::session_state::ApprovalState;

/// The card's title (and the question's).
const TITLE: &str = "Implement this plan?";

/// What the plan's card and question need.
pub(crate) struct Handover<'a> {
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub cancel: &'a CancellationToken,
    pub approval: &'a ApprovalState,
    /// The card's id, unique in the session.
    pub id: String,
}

impl Handover<'_> {
    /// Shows `plan` and asks; the mode the session switched to when the user chose to
    /// implement it, `None` to keep planning (or when nobody answered).
    pub(crate) async fn ask(&self, plan: &str) -> Option<Mode> {
        let card = ToolCallView {
            announced: false,
            id: self.id.clone(),
            name: "plan".into(),
            title: TITLE.into(),
            kind: ToolKind::Think,
            locations: Vec::new(),
            raw_input: serde_json::json!({ "plan": plan }),
            preview: Vec::new(),
        };
        let _ = self.events.send(EngineEvent::ToolCallPending(card)).await;
        let request = PermissionRequest {
            tool_call_id: self.id.clone(),
            title: TITLE.into(),
            reason: None,
            choices: vec![
                PermissionChoice::ImplementAsking,
                PermissionChoice::ImplementAcceptingEdits,
                PermissionChoice::KeepPlanning,
            ],
            server: None,
        };
        let asked = crate::client_access::ask(
            self.events,
            ClientAsk::Permission(request),
            self.cancel.clone(),
            None,
        )
        .await;
        let mode = match asked {
            Some(ClientAnswer::Permission(PermissionAnswer::Chosen(
                PermissionChoice::ImplementAsking,
            ))) => Some(Mode::Ask),
            Some(ClientAnswer::Permission(PermissionAnswer::Chosen(
                PermissionChoice::ImplementAcceptingEdits,
            ))) => Some(Mode::AcceptEdits),
            _ => None,
        };
        let switched = match mode {
            Some(mode) if self.approval.switch_mode(mode).await => {
                let _ = self
                    .events
                    .send(EngineEvent::ModeSwitched(mode.id().to_string()))
                    .await;
                Some(mode)
            }
            _ => None,
        };
        self.close(plan, switched).await;
        switched
    }

    async fn close(&self, plan: &str, switched: Option<Mode>) {
        let outcome = match switched {
            Some(mode) => format!("Implementing, in {} mode.", mode.id()),
            None => "Still planning.".to_string(),
        };
        let display = ToolDisplay {
            title: TITLE.into(),
            kind: ToolKind::Think,
            locations: Vec::new(),
            content: vec![DisplayContent::Text {
                text: format!("{plan}\n\n{outcome}"),
            }],
        };
        let _ = self
            .events
            .send(EngineEvent::ToolCallFinished {
                id: self.id.clone(),
                status: ToolStatus::Completed,
                display,
                raw_output: None,
                skills_changed: false,
            })
            .await;
    }
}
