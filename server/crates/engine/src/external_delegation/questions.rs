//! The agent's permission questions about its own calls, which Talaria cannot see run:
//! answered without asking only where that is plainly safe, else asked of the user on the
//! parent's session with the agent's name, the call's kind and paths.
//!
//! Fails closed: read-only and plan refuse anything but a read or search; a remembered
//! "never" refuses; nothing is allowed unless it names paths, every one of which is really
//! (links resolved) inside the session's folders and none secret or Talaria's own — a read
//! or search in any mode, an edit in accept-edits or yolo. A command, a fetch or anything
//! else is always asked; "allow" is never remembered.

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

/// The mode's answer for a call of `kind` whose paths are all plainly safe (`safe_paths`:
/// named, inside the roots, none secret) or not.
fn by_mode(mode: Mode, kind: ChildCallKind, safe_paths: bool) -> Policy {
    let reads = matches!(kind, ChildCallKind::Read | ChildCallKind::Search);
    match mode {
        Mode::ReadOnly | Mode::Plan if !reads => Policy::Reject,
        _ if reads && safe_paths => Policy::Allow,
        Mode::AcceptEdits | Mode::Yolo if kind.edits() && safe_paths => Policy::Allow,
        _ => Policy::Ask,
    }
}

pub(super) async fn ask(calls: Asker<'_>, question: ChildQuestion) -> ChildAnswer {
    let rule = scope(calls.name, question.kind);
    let approval = &calls.kit.approval;
    let roots = &calls.kit.settings.roots;
    let safe = safe_paths(&question.paths, roots, &calls.kit.settings.secrets).await;
    let policy = if approval.with_rules(|rules| rules.rejects(&rule)) {
        Policy::Reject
    } else {
        by_mode(approval.mode(), question.kind, safe)
    };
    match policy {
        Policy::Allow => pick(&question, true),
        Policy::Reject => pick(&question, false),
        Policy::Ask => ask_user(&calls, &question, rule).await,
    }
}

/// Whether the call names paths and every one is really inside the roots (its links
/// resolved, as far as it exists) and neither secret nor a credential.
async fn safe_paths(
    paths: &[std::path::PathBuf],
    roots: &[std::path::PathBuf],
    secrets: &crate::approval::SecretReads,
) -> bool {
    if paths.is_empty() {
        return false;
    }
    for path in paths {
        if !inside_roots(path, roots) {
            return false;
        }
        let real = real_path(path).await;
        let secrecy = secrets.paths.classify(&real);
        if !inside_roots(&real, roots) || secrecy != talaria_tools::PathSecrecy::Normal {
            return false;
        }
    }
    true
}

/// `path` with its links resolved ([`crate::grounding::real_path`]), off the runtime thread.
pub(super) async fn real_path(path: &std::path::Path) -> std::path::PathBuf {
    let named = path.to_path_buf();
    tokio::task::spawn_blocking(move || crate::grounding::real_path(&named))
        .await
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Whether `path` is named inside one of `roots`: absolute, with no `..` (which would let
/// `/project/../etc` pass for inside) — what cannot be told counts as outside.
pub(super) fn inside_roots(path: &std::path::Path, roots: &[std::path::PathBuf]) -> bool {
    let plain = path.components().all(|c| {
        !matches!(
            c,
            std::path::Component::ParentDir | std::path::Component::CurDir
        )
    });
    path.is_absolute() && plain && roots.iter().any(|r| path.starts_with(r))
}

/// The agent's option that allows once (never its "always": Talaria keeps the decisions)
/// or rejects; none that says so is a cancellation.
fn pick(question: &ChildQuestion, allow: bool) -> ChildAnswer {
    let order: &[ChildOptionKind] = if allow {
        &[ChildOptionKind::AllowOnce]
    } else {
        &[ChildOptionKind::RejectOnce, ChildOptionKind::RejectAlways]
    };
    order
        .iter()
        .find_map(|kind| question.options.iter().find(|o| o.kind == *kind))
        .map_or(ChildAnswer::Cancelled, |o| {
            ChildAnswer::Chosen(o.id.clone())
        })
}

/// Questions asked in this process, for their cards' ids.
static QUESTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What the user reads besides the agent's own title: what kind of call, on which paths.
fn reason(agent: &str, question: &ChildQuestion) -> String {
    let paths: Vec<String> = question
        .paths
        .iter()
        .take(5)
        .map(|p| p.display().to_string())
        .collect();
    let on = if paths.is_empty() {
        "naming no path".to_string()
    } else {
        format!("on {}", paths.join(", "))
    };
    format!(
        "the agent {agent} asks to run a call of kind \"{}\" {on}, with its own tools (Talaria does not see it run)",
        question.kind.id()
    )
}

async fn ask_user(calls: &Asker<'_>, question: &ChildQuestion, rule: Scope) -> ChildAnswer {
    let Some(events) = calls.events.clone() else {
        return ChildAnswer::Cancelled;
    };
    // "Allow" is never remembered: the next call of the same kind may be anything.
    let choices = vec![
        PermissionChoice::AllowOnce,
        PermissionChoice::RejectOnce,
        PermissionChoice::RejectAlways,
    ];
    let number = QUESTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let ask = ClientAsk::Permission(crate::client::PermissionRequest {
        tool_call_id: format!("{}-question-{number}", calls.name.replace(' ', "-")),
        title: question.title.clone(),
        reason: Some(reason(calls.name, question)),
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
    let allow = chosen == PermissionChoice::AllowOnce;
    if chosen == PermissionChoice::RejectAlways {
        calls.kit.approval.remember(vec![rule], false).await;
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
        // A command is never allowed unasked, not even in yolo.
        assert_eq!(by_mode(Mode::Yolo, Execute, true), Policy::Ask);
        assert_eq!(by_mode(Mode::Yolo, Other, true), Policy::Ask);
        assert_eq!(by_mode(Mode::Yolo, Edit, true), Policy::Allow);
        assert_eq!(by_mode(Mode::Yolo, Edit, false), Policy::Ask);
        assert_eq!(by_mode(Mode::ReadOnly, Read, true), Policy::Allow);
        assert_eq!(by_mode(Mode::ReadOnly, Read, false), Policy::Ask);
        assert_eq!(by_mode(Mode::ReadOnly, Think, true), Policy::Reject);
        assert_eq!(by_mode(Mode::Plan, Edit, true), Policy::Reject);
        assert_eq!(by_mode(Mode::Ask, Search, true), Policy::Allow);
        assert_eq!(by_mode(Mode::Ask, Edit, true), Policy::Ask);
        assert_eq!(by_mode(Mode::Ask, Fetch, true), Policy::Ask);
        assert_eq!(by_mode(Mode::AcceptEdits, Edit, true), Policy::Allow);
        assert_eq!(by_mode(Mode::AcceptEdits, Delete, false), Policy::Ask);
        assert_eq!(by_mode(Mode::AcceptEdits, Execute, true), Policy::Ask);
    }

    #[tokio::test]
    async fn only_named_paths_really_inside_and_not_secret_are_safe() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().canonicalize().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        std::os::unix::fs::symlink(outside.path(), root.join("link")).expect("link");
        let secrets = crate::approval::SecretReads::for_home(&root.join(".talaria"), true);
        let roots = [root.clone()];
        assert!(safe_paths(&[root.join("src/new.rs")], &roots, &secrets).await);
        assert!(!safe_paths(&[], &roots, &secrets).await, "no path named");
        assert!(
            !safe_paths(&[root.join("link/x")], &roots, &secrets).await,
            "a link out"
        );
        assert!(
            !safe_paths(&[root.join(".env")], &roots, &secrets).await,
            "a secret"
        );
        let both = [root.join("a"), outside.path().join("b")];
        assert!(
            !safe_paths(&both, &roots, &secrets).await,
            "every path counts"
        );
    }

    #[test]
    fn a_path_is_inside_only_when_it_plainly_is() {
        let roots = [std::path::PathBuf::from("/project")];
        assert!(inside_roots(
            std::path::Path::new("/project/src/a.rs"),
            &roots
        ));
        assert!(!inside_roots(
            std::path::Path::new("/project/../etc/passwd"),
            &roots
        ));
        assert!(!inside_roots(std::path::Path::new("src/a.rs"), &roots));
        assert!(!inside_roots(std::path::Path::new("/projectx/a"), &roots));
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
        let only_always = ChildQuestion {
            options: question.options[..1].to_vec(),
            ..question
        };
        assert_eq!(pick(&only_always, false), ChildAnswer::Cancelled);
        // "Once" never becomes the agent's "always".
        assert_eq!(pick(&only_always, true), ChildAnswer::Cancelled);
    }
}
