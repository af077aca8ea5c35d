//! The approval policy: given a call, the session mode and the remembered rules, decide
//! whether it runs, asks the user, or is refused.
//!
//! Order (first match wins): the hard floor (refused in every mode) → read-only mode →
//! remembered "always reject" → remembered "always allow" → the mode's default.

pub mod paths;
pub mod rules;

use std::path::PathBuf;

use talaria_tools::ToolKind;
use talaria_tools::shell::safety::CommandClass;

pub use rules::{RuleStore, Scope};

/// How much the agent may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No writes, no commands.
    ReadOnly,
    /// Reads run; edits and commands ask. The default.
    Ask,
    /// Edits inside the workspace run; commands ask.
    AcceptEdits,
    /// Everything runs except the hard floor.
    Yolo,
}

impl Mode {
    /// Every mode, in the order editors show them.
    pub const ALL: [Mode; 4] = [Mode::ReadOnly, Mode::Ask, Mode::AcceptEdits, Mode::Yolo];

    /// The id used in ACP and configuration.
    pub fn id(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::Yolo => "yolo",
        }
    }

    /// A display name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Read only",
            Mode::Ask => "Ask",
            Mode::AcceptEdits => "Accept edits",
            Mode::Yolo => "Yolo",
        }
    }

    /// A one-line description.
    pub fn description(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Reads and searches only: no edits, no commands.",
            Mode::Ask => "Reads run; every edit and command asks first.",
            Mode::AcceptEdits => {
                "Edits inside the workspace run; commands and sensitive or outside edits ask."
            }
            Mode::Yolo => "Everything runs without asking, except the hard safety floor.",
        }
    }

    /// Parses an id.
    pub fn from_id(id: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.id() == id)
    }
}

/// The facts of one call that the policy looks at.
#[derive(Debug, Clone)]
pub struct CallFacts {
    pub tool: String,
    pub kind: ToolKind,
    /// Paths the call would change.
    pub writes: Vec<PathBuf>,
    /// The classified shell command, for command tools.
    pub command: Option<CommandClass>,
    /// The call only observes (e.g. polling an approved background process).
    pub read_only: bool,
}

/// What the policy decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Ask the user; `always_possible` says whether an "always" answer can be remembered.
    Ask {
        reason: Option<String>,
        always_possible: bool,
    },
    Deny(String),
}

fn is_mutating(kind: ToolKind) -> bool {
    matches!(
        kind,
        ToolKind::Edit | ToolKind::Delete | ToolKind::Move | ToolKind::Execute
    )
}

/// The scopes an "always" answer about this call covers.
pub fn scopes_of(facts: &CallFacts) -> Vec<Scope> {
    if let Some(class) = &facts.command {
        return class
            .scopes
            .iter()
            .map(|s| Scope::Command(s.clone()))
            .collect();
    }
    if !facts.writes.is_empty() {
        return facts
            .writes
            .iter()
            .map(|p| Scope::Edit(p.clone()))
            .collect();
    }
    vec![Scope::Tool(facts.tool.clone())]
}

/// Decides what happens to a call.
pub fn decide(mode: Mode, facts: &CallFacts, rules: &RuleStore, roots: &[PathBuf]) -> Verdict {
    if let Some(why) = facts.command.as_ref().and_then(|c| c.floor.as_ref()) {
        return Verdict::Deny(format!(
            "Refused by the safety floor: {why}. This is never run, in any mode."
        ));
    }
    if !is_mutating(facts.kind) || facts.read_only {
        return Verdict::Allow;
    }
    if mode == Mode::ReadOnly {
        return Verdict::Deny(
            "The session is in read-only mode: edits and commands are not allowed. Ask the user to switch modes if this is needed.".into(),
        );
    }
    let scopes = scopes_of(facts);
    let dynamic = facts.command.as_ref().is_some_and(|c| c.dynamic);
    if let Some(scope) = scopes.iter().find(|s| rules.rejects(s)) {
        return Verdict::Deny(format!(
            "The user chose to always reject {scope} in this project. Do not try it again; ask the user instead."
        ));
    }
    let always_possible = !dynamic && !scopes.is_empty();
    if always_possible && scopes.iter().all(|s| rules.allows(s)) {
        return Verdict::Allow;
    }
    let sensitive = facts.writes.iter().find(|p| paths::is_sensitive(p));
    let outside = facts.writes.iter().find(|p| !paths::inside_any(p, roots));
    match mode {
        Mode::Yolo => Verdict::Allow,
        Mode::AcceptEdits
            if facts.kind != ToolKind::Execute && sensitive.is_none() && outside.is_none() =>
        {
            Verdict::Allow
        }
        _ => {
            let reason = if let Some(path) = sensitive {
                Some(format!("{} is a sensitive path", path.display()))
            } else if let Some(path) = outside {
                Some(format!("{} is outside the workspace", path.display()))
            } else if dynamic {
                Some("the command runs a program only known at run time".into())
            } else {
                None
            };
            Verdict::Ask {
                reason,
                always_possible,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_tools::shell::safety::classify;

    fn edit(path: &str) -> CallFacts {
        CallFacts {
            tool: "write_file".into(),
            kind: ToolKind::Edit,
            writes: vec![PathBuf::from(path)],
            command: None,
            read_only: false,
        }
    }

    fn command(text: &str) -> CallFacts {
        CallFacts {
            tool: "terminal".into(),
            kind: ToolKind::Execute,
            writes: vec![],
            command: Some(classify(text)),
            read_only: false,
        }
    }

    fn read() -> CallFacts {
        CallFacts {
            tool: "read_file".into(),
            kind: ToolKind::Read,
            writes: vec![],
            command: None,
            read_only: false,
        }
    }

    #[test]
    fn modes_decide_as_documented() {
        let rules = RuleStore::in_memory();
        let roots = vec![PathBuf::from("/work/project")];
        let ask = |reason: Option<&str>| Verdict::Ask {
            reason: reason.map(str::to_string),
            always_possible: true,
        };
        assert_eq!(decide(Mode::Ask, &read(), &rules, &roots), Verdict::Allow);
        assert_eq!(
            decide(Mode::Ask, &edit("/work/project/a.rs"), &rules, &roots),
            ask(None)
        );
        assert_eq!(
            decide(
                Mode::AcceptEdits,
                &edit("/work/project/a.rs"),
                &rules,
                &roots
            ),
            Verdict::Allow
        );
        assert_eq!(
            decide(Mode::AcceptEdits, &edit("/etc/hosts"), &rules, &roots),
            ask(Some("/etc/hosts is outside the workspace"))
        );
        assert_eq!(
            decide(
                Mode::AcceptEdits,
                &edit("/work/project/.env.local"),
                &rules,
                &roots
            ),
            ask(Some("/work/project/.env.local is a sensitive path"))
        );
        assert_eq!(
            decide(Mode::AcceptEdits, &command("cargo test"), &rules, &roots),
            ask(None)
        );
        assert_eq!(
            decide(Mode::Yolo, &command("cargo test"), &rules, &roots),
            Verdict::Allow
        );
        assert!(matches!(
            decide(Mode::ReadOnly, &edit("/work/project/a.rs"), &rules, &roots),
            Verdict::Deny(_)
        ));
        assert!(matches!(
            decide(Mode::ReadOnly, &read(), &rules, &roots),
            Verdict::Allow
        ));
        assert!(
            matches!(decide(Mode::Yolo, &command("sudo rm -rf /"), &rules, &roots), Verdict::Deny(m) if m.contains("safety floor"))
        );
        assert_eq!(
            decide(Mode::Ask, &command("$TOOL run"), &rules, &roots),
            Verdict::Ask {
                reason: Some("the command runs a program only known at run time".into()),
                always_possible: false
            }
        );
    }

    #[test]
    fn observing_calls_of_execute_tools_do_not_ask() {
        let rules = RuleStore::in_memory();
        let poll = CallFacts {
            tool: "process".into(),
            kind: ToolKind::Execute,
            writes: vec![],
            command: None,
            read_only: true,
        };
        let kill = CallFacts {
            read_only: false,
            ..poll.clone()
        };
        assert_eq!(decide(Mode::Ask, &poll, &rules, &[]), Verdict::Allow);
        assert!(matches!(
            decide(Mode::Ask, &kill, &rules, &[]),
            Verdict::Ask { .. }
        ));
        assert!(matches!(
            decide(Mode::ReadOnly, &kill, &rules, &[]),
            Verdict::Deny(_)
        ));
    }

    #[test]
    fn remembered_rules_are_narrow() {
        let mut rules = RuleStore::in_memory();
        let roots = vec![PathBuf::from("/p")];
        rules.remember(&[Scope::Command("git status".into())], true);
        assert_eq!(
            decide(Mode::Ask, &command("git status --short"), &rules, &roots),
            Verdict::Allow
        );
        assert!(matches!(
            decide(Mode::Ask, &command("git push"), &rules, &roots),
            Verdict::Ask { .. }
        ));
        assert!(matches!(
            decide(
                Mode::Ask,
                &command("git status && rm -rf build"),
                &rules,
                &roots
            ),
            Verdict::Ask { .. }
        ));
        rules.remember(&[Scope::Edit(PathBuf::from("/p/a.rs"))], false);
        assert!(
            matches!(decide(Mode::Yolo, &edit("/p/a.rs"), &rules, &roots), Verdict::Deny(m) if m.contains("always reject"))
        );
    }
}
