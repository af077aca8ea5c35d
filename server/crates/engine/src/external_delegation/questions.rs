//! The agent's permission questions: answered by the session's mode and remembered rules
//! where they decide, else asked of the user on the parent's session, with the agent's name.

use crate::approval::{Mode, Scope};
use crate::client::{ClientAnswer, ClientAsk, ClientRequest, PermissionAnswer, PermissionChoice};
use crate::events::EngineEvent;
use crate::external_agents::{ChildAnswer, ChildCallKind, ChildOptionKind, ChildQuestion};

use crate::delegation_kit::SubagentKit;

/// Who asks, and where a question to the user goes.
pub(super) struct Asker<'a> {
    pub name: &'a str,
    pub kit: &'a SubagentKit,
    /// The relay to the parent's session; `None` once the delegation ended.
    pub events: Option<tokio::sync::mpsc::Sender<EngineEvent>>,
    pub cancel: &'a tokio_util::sync::CancellationToken,
}

/// How the session's policy answers, before anyone is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Allow,
    Reject,
    Ask,
}

/// The remembered rule that covers every call of this kind by this agent.
fn scope(agent: &str, kind: ChildCallKind) -> Scope {
    Scope::Tool(format!("agent:{agent}:{}", kind.id()))
}

/// The mode's answer for a call of `kind` touching `paths` (inside the roots or not).
fn by_mode(mode: Mode, kind: ChildCallKind, inside_roots: bool) -> Policy {
    match mode {
        Mode::Yolo => Policy::Allow,
        Mode::ReadOnly | Mode::Plan if kind.changes_nothing() && inside_roots => Policy::Allow,
        Mode::ReadOnly | Mode::Plan => Policy::Reject,
        Mode::AcceptEdits if kind.edits() && inside_roots => Policy::Allow,
        Mode::Ask | Mode::AcceptEdits if kind.changes_nothing() && inside_roots => Policy::Allow,
        Mode::Ask | Mode::AcceptEdits => Policy::Ask,
    }
}

pub(super) async fn ask(calls: Asker<'_>, question: ChildQuestion) -> ChildAnswer {
    let rule = scope(calls.name, question.kind);
    let approval = &calls.kit.approval;
    let roots = &calls.kit.settings.roots;
    let inside = question
        .paths
        .iter()
        .all(|p| p.is_absolute() && roots.iter().any(|r| p.starts_with(r)));
    let policy = if approval.with_rules(|rules| rules.rejects(&rule)) {
        Policy::Reject
    } else if approval.with_rules(|rules| rules.allows(&rule)) {
        Policy::Allow
    } else {
        by_mode(approval.mode(), question.kind, inside)
    };
    match policy {
        Policy::Allow => pick(&question, true),
        Policy::Reject => pick(&question, false),
        Policy::Ask => ask_user(&calls, &question, rule).await,
    }
}

/// The agent's option that allows (once, preferably: Talaria keeps the rule) or rejects.
fn pick(question: &ChildQuestion, allow: bool) -> ChildAnswer {
    let order = if allow {
        [ChildOptionKind::AllowOnce, ChildOptionKind::AllowAlways]
    } else {
        [ChildOptionKind::RejectOnce, ChildOptionKind::RejectAlways]
    };
    order
        .iter()
        .find_map(|kind| question.options.iter().find(|o| o.kind == *kind))
        .map_or(ChildAnswer::Cancelled, |o| {
            ChildAnswer::Chosen(o.id.clone())
        })
}

async fn ask_user(calls: &Asker<'_>, question: &ChildQuestion, rule: Scope) -> ChildAnswer {
    let Some(events) = calls.events.clone() else {
        return ChildAnswer::Cancelled;
    };
    let mut choices = vec![PermissionChoice::AllowOnce, PermissionChoice::AllowAlways];
    choices.extend([PermissionChoice::RejectOnce, PermissionChoice::RejectAlways]);
    let ask = ClientAsk::Permission(crate::client::PermissionRequest {
        tool_call_id: format!("{}-question", calls.name.replace(' ', "-")),
        title: question.title.clone(),
        reason: Some(format!(
            "the agent {} asks to {} with its own tools",
            calls.name,
            question.kind.id()
        )),
        choices,
        server: None,
    });
    let (request, answer) = ClientRequest::new(ask, calls.cancel.clone(), None);
    if events
        .send(EngineEvent::ClientRequest(request))
        .await
        .is_err()
    {
        return ChildAnswer::Cancelled;
    }
    let chosen = match answer.await {
        Ok(ClientAnswer::Permission(PermissionAnswer::Chosen(choice))) => choice,
        _ => return ChildAnswer::Cancelled,
    };
    let allow = matches!(
        chosen,
        PermissionChoice::AllowOnce | PermissionChoice::AllowAlways
    );
    if matches!(
        chosen,
        PermissionChoice::AllowAlways | PermissionChoice::RejectAlways
    ) {
        calls.kit.approval.remember(vec![rule], allow).await;
    }
    pick(question, allow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::external_agents::ChildOption;

    #[test]
    fn the_mode_answers_what_it_decides_and_asks_the_rest() {
        use ChildCallKind::*;
        assert_eq!(by_mode(Mode::Yolo, Execute, false), Policy::Allow);
        assert_eq!(by_mode(Mode::ReadOnly, Read, true), Policy::Allow);
        assert_eq!(by_mode(Mode::ReadOnly, Read, false), Policy::Reject);
        assert_eq!(by_mode(Mode::Plan, Edit, true), Policy::Reject);
        assert_eq!(by_mode(Mode::Ask, Search, true), Policy::Allow);
        assert_eq!(by_mode(Mode::Ask, Edit, true), Policy::Ask);
        assert_eq!(by_mode(Mode::Ask, Fetch, true), Policy::Ask);
        assert_eq!(by_mode(Mode::AcceptEdits, Edit, true), Policy::Allow);
        assert_eq!(by_mode(Mode::AcceptEdits, Edit, false), Policy::Ask);
        assert_eq!(by_mode(Mode::AcceptEdits, Execute, true), Policy::Ask);
    }

    #[test]
    fn an_answer_picks_the_agents_option_of_that_kind() {
        let question = ChildQuestion {
            title: "t".into(),
            kind: ChildCallKind::Edit,
            paths: Vec::new(),
            options: vec![
                ChildOption {
                    id: "always".into(),
                    kind: ChildOptionKind::AllowAlways,
                },
                ChildOption {
                    id: "once".into(),
                    kind: ChildOptionKind::AllowOnce,
                },
                ChildOption {
                    id: "no".into(),
                    kind: ChildOptionKind::RejectOnce,
                },
            ],
        };
        assert_eq!(pick(&question, true), ChildAnswer::Chosen("once".into()));
        assert_eq!(pick(&question, false), ChildAnswer::Chosen("no".into()));
        let only_allow = ChildQuestion {
            options: question.options[..1].to_vec(),
            ..question
        };
        assert_eq!(pick(&only_allow, false), ChildAnswer::Cancelled);
    }
}
