//! Workspace trust at the edge: the question a session's start asks (a form tied to the
//! `session/new` request, to a client that shows forms), the state its answer reports
//! (`_meta.workspaceTrust`, in the ACP workspace-trust draft's shape) and the one notice
//! that says what the session left out. A client that cannot answer, an answer that cannot
//! be read, or a decision that cannot be saved leaves the folder untrusted (fail closed).

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use serde_json::{Value, json};
use talaria_engine::{TrustAssessment, TrustDecision, TrustStatus};
use talaria_protocol::Peer;
use talaria_protocol::acp::{self, RequestId};
use tokio_util::sync::CancellationToken;

use super::state::Agent;
use crate::sessions::{StartContext, TrustQuestion};

/// What a session's start needs from the room, with the trust question tied to `request`
/// (the start being answered).
pub(super) fn start_context(agent: &Agent, request: &RequestId) -> StartContext {
    let forms = agent.client_caps.elicitation_form;
    let mut context = agent.room.start_context(forms);
    context.trust = Some(Arc::new(
        TrustAsk::new(agent.peer.clone(), forms).during(request),
    ));
    context
}

impl TrustQuestion for TrustAsk {
    fn settle<'a>(
        &'a self,
        home: &'a Path,
        assessment: TrustAssessment,
    ) -> BoxFuture<'a, TrustAssessment> {
        Box::pin(self.answered(home, assessment))
    }
}

/// Who can be asked about a folder's trust during a session's start.
#[derive(Clone)]
pub(super) struct TrustAsk {
    peer: Peer,
    /// The client shows forms (`elicitation/create`).
    forms: bool,
    /// The request the question is tied to; none: nobody is asked.
    request: Option<RequestId>,
}

impl TrustAsk {
    pub(super) fn new(peer: Peer, forms: bool) -> Self {
        Self {
            peer,
            forms,
            request: None,
        }
    }

    /// Questions are tied to `request` (the start being answered).
    pub(super) fn during(mut self, request: &RequestId) -> Self {
        self.request = Some(request.clone());
        self
    }

    /// Asks the user when the assessment is worth a question and someone can answer, and
    /// applies the answer (written off the runtime thread).
    async fn answered(&self, home: &Path, assessment: TrustAssessment) -> TrustAssessment {
        let Some(request) = self.request.clone().filter(|_| self.forms) else {
            return assessment;
        };
        if !assessment.worth_asking() {
            return assessment;
        }
        let changed = assessment.status.is_trusted();
        let (message, schema) = if changed {
            change_question(&assessment)
        } else {
            trust_question(&assessment)
        };
        let Some(choice) = self.ask(request, message, schema).await else {
            return assessment;
        };
        let home = home.to_path_buf();
        let settled = tokio::task::spawn_blocking(move || {
            let mut assessment = assessment;
            let outcome = match (changed, TrustDecision::named(&choice)) {
                (true, _) if choice == "use" => assessment.accept_changes(&home),
                (false, Some(decision)) => assessment.decide(&home, decision),
                _ => Ok(()),
            };
            if let Err(e) = outcome {
                tracing::warn!("the trust decision was not applied: {e}");
                assessment.problem = Some(format!("the trust decision was not applied: {e}"));
            }
            assessment
        })
        .await;
        match settled {
            Ok(assessment) => assessment,
            Err(e) => {
                tracing::error!("applying a trust decision failed: {e}");
                // The assessment went with the task: nothing is trusted.
                untrusted_after_failure()
            }
        }
    }

    /// The chosen option of a one-field form, or `None` (declined, cancelled, unreadable).
    async fn ask(&self, request: RequestId, message: String, schema: Value) -> Option<String> {
        let schema: acp::ElicitationSchema = serde_json::from_value(schema)
            .map_err(|e| tracing::error!("the trust question cannot be asked: {e}"))
            .ok()?;
        let params = acp::CreateElicitationRequest::new(
            acp::ElicitationFormMode::new(acp::ElicitationRequestScope::new(request), schema),
            message,
        );
        let cancel = CancellationToken::new();
        let answer: Result<acp::CreateElicitationResponse, _> =
            self.peer.call("elicitation/create", &params, &cancel).await;
        match answer {
            Ok(response) => match response.action {
                acp::ElicitationAction::Accept(accepted) => {
                    let content =
                        serde_json::to_value(accepted.content.unwrap_or_default()).ok()?;
                    content["decision"].as_str().map(str::to_string)
                }
                _ => None,
            },
            Err(e) => {
                tracing::warn!("the trust question was not answered: {}", e.message);
                None
            }
        }
    }
}

/// An assessment that trusts nothing (when the real one was lost).
fn untrusted_after_failure() -> TrustAssessment {
    TrustAssessment {
        cwd: Default::default(),
        resolved: None,
        repo_root: None,
        status: TrustStatus::Untrusted,
        through: None,
        declined: false,
        sensitive: Vec::new(),
        instructions: Vec::new(),
        changed: Vec::new(),
        problem: Some("the trust decision was not applied".into()),
        pinned: false,
        identity: None,
        repo_identity: None,
    }
}

/// The question for an untrusted folder: what it holds, and the decisions on offer.
fn trust_question(assessment: &TrustAssessment) -> (String, Value) {
    let cwd = assessment.cwd.display();
    let mut message = format!(
        "Trust {cwd}? It holds files that change how the agent works, which are not loaded \
         until you trust the folder: {}.",
        listed(&assessment.left_out())
    );
    for file in &assessment.instructions {
        message.push_str(&shown(file.name, &file.text, "as it is now"));
    }
    let options: Vec<Value> = assessment
        .decisions()
        .into_iter()
        .map(|decision| {
            let title = match decision {
                TrustDecision::TrustRepo => format!(
                    "Trust the repository {}",
                    assessment
                        .repo_root
                        .as_deref()
                        .unwrap_or(Path::new(""))
                        .display()
                ),
                TrustDecision::TrustCwd => format!("Trust {cwd} and its subfolders"),
                TrustDecision::TrustSession => "Trust it for this session only".into(),
                TrustDecision::Decline => "Do not trust it (not asked again)".into(),
            };
            json!({"const": decision.as_str(), "title": title})
        })
        .collect();
    (message, one_choice("Workspace trust", options))
}

/// The question for a trusted folder whose instruction files changed: each shown whole.
fn change_question(assessment: &TrustAssessment) -> (String, Value) {
    let folder = assessment.through.as_deref().unwrap_or(&assessment.cwd);
    let mut message = format!(
        "These instruction files changed since you trusted {} (or are new); they are not \
         used until you accept them:",
        folder.display()
    );
    for file in assessment.changed_files() {
        message.push_str(&shown(file.name, &file.text, "now"));
    }
    let options = vec![
        json!({"const": "use", "title": "Use them"}),
        json!({"const": "leave_out", "title": "Leave them out of this session"}),
    ];
    (message, one_choice("Changed instructions", options))
}

fn one_choice(title: &str, options: Vec<Value>) -> Value {
    json!({
        "type": "object",
        "properties": {"decision": {"type": "string", "title": title, "oneOf": options}},
        "required": ["decision"],
    })
}

/// A file as a question shows it: whole, exactly what trusting it loads (the read that
/// made the assessment capped it as the prompt's read does, and nothing else is read later).
fn shown(name: &str, text: &str, when: &str) -> String {
    format!("\n\n--- {name} ({when}) ---\n{text}")
}

fn listed(paths: &[std::path::PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The draft's `WorkspaceTrustState` for a session's answer.
pub(super) fn workspace_trust(assessment: &TrustAssessment) -> Value {
    let mut state = json!({"status": assessment.status.as_str()});
    let decisions = assessment.decisions();
    let left_out = assessment.left_out();
    if !decisions.is_empty() && !left_out.is_empty() {
        let mut details = json!({
            "cwd": assessment.cwd,
            "ignoredPaths": left_out,
            "availableDecisions": decisions.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
        });
        if let Some(root) = assessment
            .repo_root
            .as_ref()
            .filter(|_| decisions.contains(&TrustDecision::TrustRepo))
        {
            details["repoRoot"] = json!(root);
        }
        state["details"] = details;
    }
    state
}
