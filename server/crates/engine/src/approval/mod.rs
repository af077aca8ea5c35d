//! The approval policy: given a call, the session mode and the remembered rules, decide
//! whether it runs, asks the user, or is refused. It asks by default and fails closed.
//!
//! Order (first match wins):
//! 1. the hard floor (a command the classifier refuses; an edit of Talaria's own settings,
//!    rules or store, or of a credential): refused in every mode;
//! 2. read-only mode: refuses every call not declared read-only;
//! 3. a remembered "always reject" covering any scope of the call: refused;
//! 4. a read of a credential store, a private key or Talaria's own configuration (by a file
//!    tool, a search aimed there, or a command naming it): asks in every mode, never
//!    remembered (config `ask_for_credential_reads = false` relaxes it to rule 6);
//! 5. a command whose programs are not all known statically: asks in every mode, never
//!    remembered;
//! 6. a read of an `.env`-style file or (file tools) outside the workspace: asks unless in
//!    `yolo` or remembered;
//! 7. remembered "always allow" covering every scope of the call: runs (never for a command
//!    that changes which program runs, such as `PATH=… cmd`, `git -c`, `sudo`);
//! 8. the mode's default for what the tool declares it needs: read-only tools run; edits ask
//!    (`accept-edits` runs those inside the workspace and not sensitive); commands ask;
//!    undeclared tools and tools from outside ask; `yolo` runs everything that got here,
//!    except edits outside the workspace and, where the machine offers no OS sandbox,
//!    commands not proven read-only.
//!
//! Paths are judged as written and as the real file behind any link; a file with more than
//! one hard link is of unknown origin and counts as possibly secret.
//!
//! If the client cannot be asked, the call is refused with the reason.
pub mod paths;
pub mod rules;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_tools::CommandClass;
use talaria_tools::{ApprovalNeed, PathSecrecy, SensitivePaths};

pub use rules::{RuleStore, Scope};

/// How much the agent may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No writes, no commands.
    ReadOnly,
    /// Explore and plan: what changes nothing runs (reads, searches, commands proven
    /// read-only, the plan, questions); everything that may change something is refused
    /// with a result that tells the model it is planning.
    Plan,
    /// Reads run; edits and commands ask. The default.
    Ask,
    /// Edits inside the workspace run; commands ask.
    AcceptEdits,
    /// Everything runs except the hard floor.
    Yolo,
}

impl Mode {
    /// Every mode, in the order editors show them.
    pub const ALL: [Mode; 5] = [
        Mode::ReadOnly,
        Mode::Plan,
        Mode::Ask,
        Mode::AcceptEdits,
        Mode::Yolo,
    ];

    /// The id used in ACP and configuration.
    pub fn id(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Plan => "plan",
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::Yolo => "yolo",
        }
    }

    /// A display name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Read only",
            Mode::Plan => "Plan",
            Mode::Ask => "Ask",
            Mode::AcceptEdits => "Accept edits",
            Mode::Yolo => "Yolo",
        }
    }

    /// A one-line description.
    pub fn description(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Reads and searches only: no edits, no commands.",
            Mode::Plan => {
                "Explore and write a plan: reads, searches and read-only commands run; nothing \
                 is changed until you switch modes."
            }
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

/// How reads of secret paths are treated.
#[derive(Debug, Clone)]
pub struct SecretReads {
    /// Which paths are secret.
    pub paths: Arc<SensitivePaths>,
    /// Credential reads ask in every mode (`yolo` included).
    pub credentials_always_ask: bool,
}

impl SecretReads {
    /// The rules for a `TALARIA_HOME`, with the user's home from the environment.
    pub fn for_home(talaria_home: &Path, credentials_always_ask: bool) -> Self {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        Self {
            paths: Arc::new(SensitivePaths::new(home, Some(talaria_home.to_path_buf()))),
            credentials_always_ask,
        }
    }
}

/// The facts of one call that the policy looks at.
#[derive(Debug, Clone)]
pub struct CallFacts {
    pub tool: String,
    /// What the tool declares it needs.
    pub need: ApprovalNeed,
    /// Paths the call would change.
    pub writes: Vec<PathBuf>,
    /// Paths the call would read (for commands: the paths the command names).
    pub reads: Vec<PathBuf>,
    /// The classified shell command, for command tools.
    pub command: Option<CommandClass>,
    /// The call only observes (e.g. polling an approved background process).
    pub read_only: bool,
    /// The MCP server the tool belongs to, if any: "always allow" can cover all its tools.
    pub server: Option<String>,
    /// The tool may change something (it writes, runs commands, or declared nothing), by its
    /// declared effects.
    pub may_change: bool,
    /// Regular files among `reads` and `writes` with more than one hard link.
    pub linked: Vec<PathBuf>,
    /// The writes go through the tool's own store inside `TALARIA_HOME` (skills, memory).
    pub own_store: bool,
}

/// What stands between a command and the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandWall {
    /// The OS sandbox.
    Sandbox,
    /// Nothing: the user turned the sandbox off.
    Off,
    /// Nothing: this machine offers no sandbox (`yolo` then asks for what is not proven
    /// read-only).
    Missing,
}

impl CallFacts {
    fn runs_read_only(&self) -> bool {
        self.need == ApprovalNeed::ReadOnly || self.read_only
    }

    /// What plan mode lets run: a tool that changes nothing by what it declares, an
    /// observing call, or a command the analysis proves read-only.
    fn changes_nothing(&self) -> bool {
        match &self.command {
            Some(class) => class.read_only,
            None => !self.may_change || self.read_only,
        }
    }
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
    if facts.runs_read_only() && !facts.reads.is_empty() {
        return facts.reads.iter().map(|p| Scope::Read(p.clone())).collect();
    }
    vec![Scope::Tool(facts.tool.clone())]
}

fn ask(reason: impl Into<String>, always_possible: bool) -> Verdict {
    Verdict::Ask {
        reason: Some(reason.into()),
        always_possible,
    }
}

/// The most secret path a call touches, with its class (a hard-linked file is at least
/// `Secret`: its origin is unknown).
fn most_secret<'a>(facts: &'a CallFacts, secrets: &SecretReads) -> Option<(&'a Path, PathSecrecy)> {
    facts
        .reads
        .iter()
        .chain(&facts.writes)
        .map(|p| {
            let mut secrecy = secrets.paths.classify(p);
            if facts.linked.contains(p) {
                secrecy = secrecy.max(PathSecrecy::Secret);
            }
            (p.as_path(), secrecy)
        })
        .max_by_key(|(_, secrecy)| *secrecy)
        .filter(|(_, secrecy)| *secrecy != PathSecrecy::Normal)
}

/// An edit no tool may make: Talaria's own settings, rules and store, or a credential.
fn forbidden_edit<'a>(facts: &'a CallFacts, secrets: &SecretReads) -> Option<&'a Path> {
    facts.writes.iter().map(PathBuf::as_path).find(|path| {
        secrets.paths.classify(path) == PathSecrecy::Credential
            || (secrets.paths.in_agent_home(path) && !facts.own_store)
    })
}

/// What a call plan mode refuses reads.
pub const PLANNING: &str = "Not run: the session is in plan mode. You are planning, not changing \
anything: read, search and run read-only commands to explore, then give the plan (steps, \
files, risks) in your answer and as a todo list. The user switches modes to implement it.";

/// What the model is told where the session enters or leaves plan mode.
pub fn mode_note(before: Mode, after: Mode) -> Option<String> {
    match (before == Mode::Plan, after == Mode::Plan) {
        (false, true) => Some(
            "[The session is now in plan mode: explore (read, search, run read-only \
             commands) and plan; change nothing. End with the plan: its steps as a todo \
             list and, in your answer, the steps, the files each touches and the risks.]"
                .into(),
        ),
        (true, false) => Some(format!(
            "[Plan mode is over: the session is in {} mode. Implement the plan as agreed.]",
            after.id()
        )),
        _ => None,
    }
}

/// Decides what happens to a call.
pub fn decide(
    mode: Mode,
    facts: &CallFacts,
    rules: &RuleStore,
    roots: &[PathBuf],
    secrets: &SecretReads,
    wall: CommandWall,
) -> Verdict {
    if let Some(why) = facts.command.as_ref().and_then(|c| c.floor.as_ref()) {
        return Verdict::Deny(format!(
            "Refused by the safety floor: {why}. This is never run, in any mode."
        ));
    }
    if let Some(path) = forbidden_edit(facts, secrets) {
        return Verdict::Deny(format!(
            "Refused by the safety floor: {} holds Talaria's own settings or credentials, \
             which no tool edits, in any mode. Ask the user to change it themselves.",
            path.display()
        ));
    }
    if mode == Mode::Plan && !facts.changes_nothing() {
        return Verdict::Deny(PLANNING.into());
    }
    if mode == Mode::ReadOnly && !facts.runs_read_only() {
        return Verdict::Deny(
            "The session is in read-only mode: only reads and searches run. Ask the user to switch modes if this is needed.".into(),
        );
    }
    let scopes = scopes_of(facts);
    if let Some(scope) = scopes.iter().find(|s| rules.rejects(s)) {
        return Verdict::Deny(format!(
            "The user chose to always reject {scope} in this project. Do not try it again; ask the user instead."
        ));
    }
    let secret = most_secret(facts, secrets);
    if let Some((path, PathSecrecy::Credential)) = secret
        && secrets.credentials_always_ask
    {
        return ask(
            format!("{} holds credentials or keys", path.display()),
            false,
        );
    }
    if let Some(why) = facts.command.as_ref().and_then(|c| c.unknown.as_ref()) {
        return ask(format!("it cannot be checked before it runs: {why}"), false);
    }
    let unscoped = facts.command.as_ref().and_then(|c| c.unscoped.as_ref());
    let remembered =
        (unscoped.is_none() && !scopes.is_empty() && scopes.iter().all(|s| rules.allows(s)))
            || facts
                .server
                .as_ref()
                .is_some_and(|server| rules.allows(&Scope::Server(server.clone())));
    let outside_read = facts
        .reads
        .iter()
        .find(|p| facts.command.is_none() && !paths::inside_any(p, roots));
    if mode != Mode::Yolo && !remembered {
        if let Some((path, _)) = secret
            && facts.runs_read_only()
        {
            return ask(format!("{} may hold secrets", path.display()), true);
        }
        if let Some(path) = outside_read
            && facts.runs_read_only()
        {
            return ask(format!("{} is outside the workspace", path.display()), true);
        }
    }
    if remembered {
        return Verdict::Allow;
    }
    mode_default(mode, facts, roots, wall)
}

/// Rule 8: what the mode does with what the tool declares.
fn mode_default(mode: Mode, facts: &CallFacts, roots: &[PathBuf], wall: CommandWall) -> Verdict {
    let always_possible = |facts: &CallFacts| {
        !scopes_of(facts).is_empty() && facts.command.as_ref().is_none_or(|c| c.unscoped.is_none())
    };
    if mode == Mode::Yolo
        && wall == CommandWall::Missing
        && let Some(class) = &facts.command
        && !class.read_only
        && !facts.runs_read_only()
    {
        return Verdict::Ask {
            reason: Some(
                "this machine offers no OS sandbox, so commands not proven read-only ask".into(),
            ),
            always_possible: always_possible(facts),
        };
    }
    // A file tool's edit outside the workspace asks in `yolo` too: commands cannot write
    // there (the sandbox), so neither does the agent's own hand unasked.
    if mode == Mode::Yolo
        && facts.need == ApprovalNeed::Edits
        && !facts.own_store
        && let Some(path) = facts.writes.iter().find(|p| !paths::inside_any(p, roots))
    {
        return Verdict::Ask {
            reason: Some(format!(
                "{} is outside the workspace (edits there ask in every mode)",
                path.display()
            )),
            always_possible: true,
        };
    }
    // What reaches here in plan mode changes nothing (checked first in `decide`).
    if facts.runs_read_only() || mode == Mode::Yolo || mode == Mode::Plan {
        return Verdict::Allow;
    }
    // A file with another name elsewhere (a hard link) changes there too.
    let sensitive = facts
        .writes
        .iter()
        .find(|p| paths::is_sensitive(p) || facts.linked.contains(p));
    let outside = facts.writes.iter().find(|p| !paths::inside_any(p, roots));
    match facts.need {
        ApprovalNeed::Edits if mode == Mode::AcceptEdits => match (sensitive, outside) {
            (Some(path), _) => ask(format!("{} is a sensitive path", path.display()), true),
            (None, Some(path)) => ask(format!("{} is outside the workspace", path.display()), true),
            (None, None) => Verdict::Allow,
        },
        ApprovalNeed::Edits => Verdict::Ask {
            reason: sensitive
                .map(|p| format!("{} is a sensitive path", p.display()))
                .or_else(|| outside.map(|p| format!("{} is outside the workspace", p.display()))),
            always_possible: true,
        },
        ApprovalNeed::RunsCommands => Verdict::Ask {
            reason: facts
                .command
                .as_ref()
                .and_then(|c| c.unscoped.as_ref())
                .map(|why| format!("\"always\" cannot cover it: {why}")),
            always_possible: always_possible(facts),
        },
        ApprovalNeed::ReadOnly | ApprovalNeed::Unknown => Verdict::Ask {
            reason: Some(format!(
                "`{}` does not declare itself read-only",
                facts.tool
            )),
            always_possible: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_tools::{ShellEnv, classify_in};

    fn secrets() -> SecretReads {
        SecretReads {
            paths: Arc::new(SensitivePaths::new(
                Some("/home/dev".into()),
                Some("/home/dev/.talaria".into()),
            )),
            credentials_always_ask: true,
        }
    }

    fn facts(tool: &str, need: ApprovalNeed) -> CallFacts {
        CallFacts {
            tool: tool.into(),
            need,
            writes: vec![],
            reads: vec![],
            command: None,
            read_only: false,
            server: None,
            may_change: need != ApprovalNeed::ReadOnly,
            linked: vec![],
            own_store: false,
        }
    }

    fn edit(path: &str) -> CallFacts {
        CallFacts {
            writes: vec![PathBuf::from(path)],
            ..facts("write_file", ApprovalNeed::Edits)
        }
    }

    fn command(text: &str) -> CallFacts {
        let class = classify_in(
            text,
            &ShellEnv {
                home: Some("/home/dev".into()),
                ..ShellEnv::default()
            },
        );
        CallFacts {
            reads: class.paths.iter().map(PathBuf::from).collect(),
            command: Some(class),
            ..facts("terminal", ApprovalNeed::RunsCommands)
        }
    }

    fn read(path: &str) -> CallFacts {
        CallFacts {
            reads: vec![PathBuf::from(path)],
            ..facts("read_file", ApprovalNeed::ReadOnly)
        }
    }

    fn decide_in(mode: Mode, facts: &CallFacts) -> Verdict {
        decide(
            mode,
            facts,
            &RuleStore::in_memory(),
            &[PathBuf::from("/work/project")],
            &secrets(),
            CommandWall::Sandbox,
        )
    }

    #[test]
    fn a_file_tools_edit_outside_the_workspace_asks_in_yolo_too() {
        let outside = decide_in(Mode::Yolo, &edit("/home/dev/.bashrc"));
        assert!(
            matches!(&outside, Verdict::Ask { reason: Some(why), always_possible: true } if why.contains("outside the workspace")),
            "{outside:?}"
        );
        assert_eq!(
            decide_in(Mode::Yolo, &edit("/work/project/src/a.rs")),
            Verdict::Allow
        );
        // The skill and memory tools write their own store.
        let own = CallFacts {
            own_store: true,
            ..edit("/home/dev/.talaria/skills/x/SKILL.md")
        };
        assert_eq!(decide_in(Mode::Yolo, &own), Verdict::Allow);
        // Remembered as always allowed, it runs.
        let mut rules = RuleStore::in_memory();
        let _ = rules.remember(&scopes_of(&edit("/home/dev/.bashrc")), true);
        let remembered = decide(
            Mode::Yolo,
            &edit("/home/dev/.bashrc"),
            &rules,
            &[PathBuf::from("/work/project")],
            &secrets(),
            CommandWall::Sandbox,
        );
        assert_eq!(remembered, Verdict::Allow);
    }

    fn is_ask(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::Ask { .. })
    }

    #[test]
    fn plan_mode_runs_what_changes_nothing_and_refuses_the_rest_by_what_it_does() {
        let planning = |verdict: Verdict| matches!(verdict, Verdict::Deny(why) if why == PLANNING);
        assert!(planning(decide_in(Mode::Plan, &edit("/work/project/a.rs"))));
        for refused in ["rm -rf build", "sed -i s/a/b/ x.py", "cargo test", "mv a b"] {
            assert!(
                planning(decide_in(Mode::Plan, &command(refused))),
                "{refused}"
            );
        }
        for explores in ["cat README.md", "git status", "rg fn src", "ls -la"] {
            assert_eq!(
                decide_in(Mode::Plan, &command(explores)),
                Verdict::Allow,
                "{explores}"
            );
        }
        assert_eq!(
            decide_in(Mode::Plan, &read("/work/project/a.rs")),
            Verdict::Allow
        );
        // A tool nobody named, judged by its declaration: one that changes nothing (the plan,
        // a question) runs, one that may change anything (a subagent, an MCP tool that says
        // nothing of itself) is refused.
        let declared = |may_change| CallFacts {
            may_change,
            ..facts("some_new_tool", ApprovalNeed::Unknown)
        };
        assert_eq!(decide_in(Mode::Plan, &declared(false)), Verdict::Allow);
        assert!(planning(decide_in(Mode::Plan, &declared(true))));
        // Secrets still ask, and the floor still refuses.
        assert!(is_ask(&decide_in(
            Mode::Plan,
            &read("/home/dev/.ssh/id_ed25519")
        )));
        assert!(matches!(
            decide_in(Mode::Plan, &command("rm -rf /")),
            Verdict::Deny(why) if why.contains("safety floor")
        ));
    }

    #[test]
    fn entering_and_leaving_plan_mode_is_told_to_the_model() {
        assert!(mode_note(Mode::Ask, Mode::Plan).is_some_and(|n| n.contains("plan mode")));
        assert!(
            mode_note(Mode::Plan, Mode::AcceptEdits).is_some_and(|n| n.contains("accept-edits"))
        );
        assert_eq!(mode_note(Mode::Ask, Mode::Yolo), None);
    }

    #[test]
    fn modes_decide_as_documented() {
        let ask = |reason: Option<&str>| Verdict::Ask {
            reason: reason.map(str::to_string),
            always_possible: true,
        };
        assert_eq!(
            decide_in(Mode::Ask, &read("/work/project/a.rs")),
            Verdict::Allow
        );
        assert_eq!(decide_in(Mode::Ask, &edit("/work/project/a.rs")), ask(None));
        assert_eq!(
            decide_in(Mode::AcceptEdits, &edit("/work/project/a.rs")),
            Verdict::Allow
        );
        assert_eq!(
            decide_in(Mode::AcceptEdits, &edit("/etc/hosts")),
            ask(Some("/etc/hosts is outside the workspace"))
        );
        assert_eq!(
            decide_in(Mode::AcceptEdits, &edit("/work/project/.env.local")),
            ask(Some("/work/project/.env.local is a sensitive path"))
        );
        assert_eq!(
            decide_in(Mode::AcceptEdits, &command("cargo test")),
            ask(None)
        );
        assert_eq!(
            decide_in(Mode::Yolo, &command("cargo test")),
            Verdict::Allow
        );
        assert!(matches!(
            decide_in(Mode::ReadOnly, &edit("/work/project/a.rs")),
            Verdict::Deny(_)
        ));
        assert_eq!(
            decide_in(Mode::ReadOnly, &read("/work/project/a.rs")),
            Verdict::Allow
        );
        assert!(
            matches!(decide_in(Mode::Yolo, &command("sudo rm -rf /")), Verdict::Deny(m) if m.contains("safety floor"))
        );
    }

    #[test]
    fn the_floor_never_depends_on_the_mode_or_rules() {
        let mut rules = RuleStore::in_memory();
        let _ = rules.remember(&[Scope::Command("rm".into())], true);
        for mode in Mode::ALL {
            for text in ["for x in 1; do rm -rf /; done", "echo / | xargs rm -rf"] {
                let verdict = decide(
                    mode,
                    &command(text),
                    &rules,
                    &[],
                    &secrets(),
                    CommandWall::Sandbox,
                );
                assert!(
                    matches!(verdict, Verdict::Deny(ref m) if m.contains("safety floor")),
                    "{mode:?} {text}"
                );
            }
        }
    }

    #[test]
    fn unknown_commands_ask_in_every_mode_and_are_never_remembered() {
        for text in [
            "r=touch; $r x",
            "echo 'touch x' | sh",
            "eval \"$(echo touch x)\"",
        ] {
            for mode in [Mode::Ask, Mode::AcceptEdits, Mode::Yolo] {
                match decide_in(mode, &command(text)) {
                    Verdict::Ask {
                        always_possible,
                        reason,
                    } => {
                        assert!(!always_possible, "{text}");
                        assert!(
                            reason.is_some_and(|r| r.contains("cannot be checked")),
                            "{text}"
                        );
                    }
                    other => panic!("{mode:?} {text}: {other:?}"),
                }
            }
            assert!(matches!(
                decide_in(Mode::ReadOnly, &command(text)),
                Verdict::Deny(_)
            ));
        }
    }

    #[test]
    fn undeclared_tools_ask_and_read_only_refuses_them() {
        let mcp = facts("mcp__x__y", ApprovalNeed::Unknown);
        assert!(is_ask(&decide_in(Mode::Ask, &mcp)));
        assert!(is_ask(&decide_in(Mode::AcceptEdits, &mcp)));
        assert_eq!(decide_in(Mode::Yolo, &mcp), Verdict::Allow);
        assert!(matches!(decide_in(Mode::ReadOnly, &mcp), Verdict::Deny(_)));
        // The display kind no longer matters: a "think"-looking tool that edits still asks.
        assert!(is_ask(&decide_in(
            Mode::Ask,
            &facts("other", ApprovalNeed::Edits)
        )));
    }

    #[test]
    fn credential_reads_ask_in_every_mode() {
        for mode in [Mode::ReadOnly, Mode::Ask, Mode::AcceptEdits, Mode::Yolo] {
            for path in [
                "/home/dev/.ssh/id_rsa",
                "/home/dev/.talaria/config.toml",
                "/home/dev/.aws/credentials",
            ] {
                let verdict = decide_in(mode, &read(path));
                assert!(
                    matches!(
                        verdict,
                        Verdict::Ask {
                            always_possible: false,
                            ..
                        }
                    ),
                    "{mode:?} {path}: {verdict:?}"
                );
            }
        }
        // A command that plainly reads a key asks even in yolo, even when `cat` is allowed.
        let mut rules = RuleStore::in_memory();
        let _ = rules.remember(&[Scope::Command("cat".into())], true);
        let verdict = decide(
            Mode::Yolo,
            &command("cat ~/.ssh/id_rsa"),
            &rules,
            &[],
            &secrets(),
            CommandWall::Sandbox,
        );
        assert!(is_ask(&verdict), "{verdict:?}");
        assert_eq!(
            decide(
                Mode::Ask,
                &command("cat README.md"),
                &rules,
                &[],
                &secrets(),
                CommandWall::Sandbox
            ),
            Verdict::Allow
        );
        // The config switch relaxes credentials to the `.env` rule.
        let relaxed = SecretReads {
            credentials_always_ask: false,
            ..secrets()
        };
        let roots = [PathBuf::from("/work/project")];
        let rules = RuleStore::in_memory();
        assert_eq!(
            decide(
                Mode::Yolo,
                &read("/home/dev/.ssh/id_rsa"),
                &rules,
                &roots,
                &relaxed,
                CommandWall::Sandbox
            ),
            Verdict::Allow
        );
        assert!(is_ask(&decide(
            Mode::Ask,
            &read("/home/dev/.ssh/id_rsa"),
            &rules,
            &roots,
            &relaxed,
            CommandWall::Sandbox
        )));
    }

    #[test]
    fn env_files_and_outside_reads_ask_except_in_yolo() {
        for path in ["/work/project/.env", "/etc/hosts"] {
            assert!(is_ask(&decide_in(Mode::Ask, &read(path))), "{path}");
            assert!(is_ask(&decide_in(Mode::AcceptEdits, &read(path))), "{path}");
            assert!(is_ask(&decide_in(Mode::ReadOnly, &read(path))), "{path}");
            assert_eq!(decide_in(Mode::Yolo, &read(path)), Verdict::Allow, "{path}");
        }
        let mut rules = RuleStore::in_memory();
        let _ = rules.remember(&[Scope::Read(PathBuf::from("/etc/hosts"))], true);
        assert_eq!(
            decide(
                Mode::Ask,
                &read("/etc/hosts"),
                &rules,
                &[PathBuf::from("/work/project")],
                &secrets(),
                CommandWall::Sandbox
            ),
            Verdict::Allow
        );
    }

    #[test]
    fn observing_calls_of_command_tools_do_not_ask() {
        let poll = CallFacts {
            read_only: true,
            ..facts("process", ApprovalNeed::RunsCommands)
        };
        let kill = CallFacts {
            read_only: false,
            ..poll.clone()
        };
        assert_eq!(decide_in(Mode::Ask, &poll), Verdict::Allow);
        assert!(is_ask(&decide_in(Mode::Ask, &kill)));
        assert!(matches!(decide_in(Mode::ReadOnly, &kill), Verdict::Deny(_)));
    }

    #[test]
    fn remembered_rules_are_narrow() {
        let mut rules = RuleStore::in_memory();
        let roots = vec![PathBuf::from("/p")];
        let decide_with = |rules: &RuleStore, mode, facts: &CallFacts| {
            decide(mode, facts, rules, &roots, &secrets(), CommandWall::Sandbox)
        };
        let _ = rules.remember(&[Scope::Command("git status".into())], true);
        assert_eq!(
            decide_with(&rules, Mode::Ask, &command("git status --short")),
            Verdict::Allow
        );
        assert!(is_ask(&decide_with(
            &rules,
            Mode::Ask,
            &command("git push")
        )));
        assert!(is_ask(&decide_with(
            &rules,
            Mode::Ask,
            &command("git status && rm -rf build")
        )));
        // "Always" on one loop covers the programs in it, never the keywords.
        let looped = command("for i in 1 2; do echo $i; done");
        assert_eq!(scopes_of(&looped), [Scope::Command("echo".into())]);
        let _ = rules.remember(&scopes_of(&looped), true);
        assert_eq!(decide_with(&rules, Mode::Ask, &looped), Verdict::Allow);
        assert!(is_ask(&decide_with(
            &rules,
            Mode::Ask,
            &command("for i in 1 2; do touch $i; done")
        )));
        let _ = rules.remember(&[Scope::Edit(PathBuf::from("/p/a.rs"))], false);
        assert!(
            matches!(decide_with(&rules, Mode::Yolo, &edit("/p/a.rs")), Verdict::Deny(m) if m.contains("always reject"))
        );
    }

    #[test]
    fn always_allowing_an_mcp_server_covers_its_tools_and_no_other() {
        let mut rules = RuleStore::in_memory();
        let of = |tool: &str, server: &str| CallFacts {
            server: Some(server.into()),
            ..facts(tool, ApprovalNeed::Unknown)
        };
        assert!(is_ask(&decide_in(Mode::Ask, &of("mcp__fs__read", "fs"))));
        let _ = rules.remember(&[Scope::Server("fs".into())], true);
        let decide_with = |facts: &CallFacts| {
            decide(
                Mode::Ask,
                facts,
                &rules,
                &[PathBuf::from("/p")],
                &secrets(),
                CommandWall::Sandbox,
            )
        };
        assert_eq!(decide_with(&of("mcp__fs__read", "fs")), Verdict::Allow);
        assert_eq!(decide_with(&of("mcp__fs__write", "fs")), Verdict::Allow);
        assert!(is_ask(&decide_with(&of("mcp__web__get", "web"))));
        assert!(is_ask(&decide_with(&facts(
            "mcp__fs__x",
            ApprovalNeed::Unknown
        ))));
    }

    #[test]
    fn talarias_files_and_credentials_are_never_edited_except_by_their_own_stores() {
        for path in [
            "/home/dev/.talaria/config.toml",
            "/home/dev/.talaria/permissions.json",
            "/home/dev/.talaria/state.db",
            "/home/dev/.talaria/skills/x/SKILL.md",
            "/home/dev/.ssh/authorized_keys",
            "/work/project/deploy.pem",
        ] {
            for mode in Mode::ALL {
                let verdict = decide_in(mode, &edit(path));
                assert!(
                    matches!(&verdict, Verdict::Deny(m) if m.contains("safety floor")),
                    "{mode:?} {path}: {verdict:?}"
                );
            }
        }
        // The skill and memory tools write their own stores (the mode decides as usual).
        let own = CallFacts {
            own_store: true,
            ..edit("/home/dev/.talaria/skills/x/SKILL.md")
        };
        assert_eq!(decide_in(Mode::Yolo, &own), Verdict::Allow);
        let own_config = CallFacts {
            own_store: true,
            ..edit("/home/dev/.talaria/config.toml")
        };
        assert!(matches!(
            decide_in(Mode::Yolo, &own_config),
            Verdict::Deny(_)
        ));
    }

    #[test]
    fn hard_linked_files_are_of_unknown_origin() {
        let linked = CallFacts {
            linked: vec![PathBuf::from("/work/project/notes.bak")],
            ..read("/work/project/notes.bak")
        };
        assert!(is_ask(&decide_in(Mode::Ask, &linked)));
        assert!(is_ask(&decide_in(Mode::AcceptEdits, &linked)));
        assert_eq!(decide_in(Mode::Yolo, &linked), Verdict::Allow);
        let linked_edit = CallFacts {
            linked: vec![PathBuf::from("/work/project/a.txt")],
            ..edit("/work/project/a.txt")
        };
        assert!(is_ask(&decide_in(Mode::AcceptEdits, &linked_edit)));
    }

    #[test]
    fn commands_that_change_the_program_are_never_remembered() {
        let mut rules = RuleStore::in_memory();
        let _ = rules.remember(&[Scope::Command("cat".into())], true);
        let roots = [PathBuf::from("/work/project")];
        for text in ["PATH=./evil:$PATH cat notes.txt", "sudo cat notes.txt"] {
            let verdict = decide(
                Mode::Ask,
                &command(text),
                &rules,
                &roots,
                &secrets(),
                CommandWall::Sandbox,
            );
            assert!(
                matches!(
                    verdict,
                    Verdict::Ask {
                        always_possible: false,
                        ..
                    }
                ),
                "{text}: {verdict:?}"
            );
        }
        assert_eq!(
            decide(
                Mode::Ask,
                &command("cat notes.txt"),
                &rules,
                &roots,
                &secrets(),
                CommandWall::Sandbox
            ),
            Verdict::Allow
        );
    }

    #[test]
    fn without_a_sandbox_yolo_asks_for_commands_not_proven_read_only() {
        let decide_with = |text: &str, wall| {
            decide(
                Mode::Yolo,
                &command(text),
                &RuleStore::in_memory(),
                &[PathBuf::from("/work/project")],
                &secrets(),
                wall,
            )
        };
        assert!(is_ask(&decide_with("cargo test", CommandWall::Missing)));
        assert!(is_ask(&decide_with("ls > out.txt", CommandWall::Missing)));
        assert_eq!(
            decide_with("ls -la && git status", CommandWall::Missing),
            Verdict::Allow
        );
        assert_eq!(
            decide_with("cargo test", CommandWall::Sandbox),
            Verdict::Allow
        );
        assert_eq!(decide_with("cargo test", CommandWall::Off), Verdict::Allow);
    }
}
