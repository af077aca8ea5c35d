//! The slash commands, declared once as a table like tools are: each built-in's name,
//! description, where it runs and how its argument is parsed. [`parse`] is the one parser
//! of a `/name args` prompt: the edge calls it once and hands the engine a typed
//! [`TypedCommand`]; the client's list of commands is read from [`SLASH_COMMANDS`].

/// Where a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandRuns {
    /// At the edge, before the prompt is queued (`/plan` sets the mode first).
    Edge,
    /// In the session when its turn comes, by the engine (`/compact`, `/rewind`).
    Session,
    /// In the session when its turn comes, by the session's commands ([`super::SlashCommands`]:
    /// they hold what it needs — the skill stores, the MCP servers).
    SessionCommands,
}

/// One built-in command.
#[derive(Debug)]
pub struct DeclaredCommand {
    pub name: &'static str,
    /// What the client lists it with.
    pub description: &'static str,
    /// The hint the client shows for its argument.
    pub hint: Option<&'static str>,
    pub runs: CommandRuns,
    /// Offered only when the configuration names other agents (`[agents.<name>]`).
    pub needs_agents: bool,
    /// Its argument (the text after the name, trimmed) as the typed command.
    pub parse: fn(&str) -> Result<TypedCommand, CommandArgError>,
}

/// An argument a command does not take: the prompt is refused with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CommandArgError(pub String);

/// A slash command, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypedCommand {
    /// `/compact [focus]`.
    Compact { focus: Option<String> },
    /// `/plan TASK`.
    Plan { task: String },
    /// `/agent NAME TASK`: the task handed to another agent as the turn.
    Agent { name: String, task: String },
    /// `/rewind [N] [files] [force]`.
    Rewind(RewindArgs),
    /// `/skills [list | show <id> | accept <id> | reject <id>]`.
    Skills(SkillsAction),
    /// `/mcp [status | reconnect [name]]`.
    Mcp { reconnect: Option<Option<String>> },
    /// `/mcp:<server>:<prompt> args`: an MCP server's prompt.
    McpPrompt {
        server: String,
        prompt: String,
        args: String,
    },
    /// `/<name> args`, no built-in: a skill's name, or (when no skill has it) an ordinary
    /// prompt.
    Named { name: String, args: String },
}

/// What `/rewind` goes back over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewindArgs {
    /// How many prompts back (1: before the last).
    pub prompts: usize,
    /// The files the cut turns changed are put back too.
    pub files: bool,
    /// Even files changed since the agent left them.
    pub force: bool,
}

/// What `/skills` does with the background review's proposals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillsAction {
    List,
    Show(String),
    Accept(String),
    Reject(String),
}

/// The built-in commands.
pub const SLASH_COMMANDS: &[DeclaredCommand] = &[
    DeclaredCommand {
        name: "compact",
        description: "Compact the conversation now: old tool output is shortened and earlier turns are summarised, optionally around a focus topic.",
        hint: Some("focus topic (optional)"),
        runs: CommandRuns::Session,
        needs_agents: false,
        parse: |args| {
            Ok(TypedCommand::Compact {
                focus: (!args.is_empty()).then(|| args.to_string()),
            })
        },
    },
    DeclaredCommand {
        name: "skills",
        description: "Skills and memory the agent proposed in the background: list, show <id>, accept <id>, reject <id>.",
        hint: Some("list | show <id> | accept <id> | reject <id>"),
        runs: CommandRuns::SessionCommands,
        needs_agents: false,
        parse: skills_action,
    },
    DeclaredCommand {
        name: "mcp",
        description: "The session's MCP servers: state, tools, resources and prompts, last error; `/mcp reconnect [name]` connects one again.",
        hint: None,
        runs: CommandRuns::SessionCommands,
        needs_agents: false,
        parse: mcp_action,
    },
    DeclaredCommand {
        name: "plan",
        description: "Plan first: switch to plan mode and plan the task; nothing changes until you choose to implement the plan.",
        hint: Some("the task to plan"),
        runs: CommandRuns::Edge,
        needs_agents: false,
        parse: |task| match task {
            "" => Err(CommandArgError(
                "/plan takes the task to plan: /plan TASK".into(),
            )),
            task => Ok(TypedCommand::Plan {
                task: task.to_string(),
            }),
        },
    },
    DeclaredCommand {
        name: "rewind",
        description: "Go back before your last prompt (or the Nth last): the turns after it leave the conversation; with `files`, the files they changed are put back too.",
        hint: Some("[N] [files] [force]"),
        runs: CommandRuns::Session,
        needs_agents: false,
        parse: rewind_args,
    },
    DeclaredCommand {
        name: "agent",
        description: "Hand a task to another agent configured in [agents.<name>] (its answer is the turn's; its work inside Talaria's rules, sandbox and checkpoints).",
        hint: Some("<name> <task>"),
        runs: CommandRuns::Session,
        needs_agents: true,
        parse: agent_args,
    },
];

fn agent_args(args: &str) -> Result<TypedCommand, CommandArgError> {
    let (name, task) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
    let task = task.trim();
    if name.is_empty() || task.is_empty() {
        return Err(CommandArgError(
            "/agent takes an agent's name and the task: /agent NAME TASK".into(),
        ));
    }
    Ok(TypedCommand::Agent {
        name: name.to_string(),
        task: task.to_string(),
    })
}

/// The prefix of an MCP prompt's command name (`mcp:<server>:<prompt>`).
pub const MCP_PROMPT_PREFIX: &str = "mcp:";

/// What a prompt's text means: `None` when it is no slash command (an ordinary prompt);
/// else the command, or why its argument was refused.
pub fn parse_command(text: &str) -> Option<Result<TypedCommand, CommandArgError>> {
    let rest = text.trim_start().strip_prefix('/')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let args = args.trim();
    if let Some(declared) = SLASH_COMMANDS.iter().find(|d| d.name == name) {
        return Some((declared.parse)(args));
    }
    if let Some((server, prompt)) = name
        .strip_prefix(MCP_PROMPT_PREFIX)
        .and_then(|rest| rest.split_once(':'))
        .filter(|(server, prompt)| !server.is_empty() && !prompt.is_empty())
    {
        return Some(Ok(TypedCommand::McpPrompt {
            server: server.to_string(),
            prompt: prompt.to_string(),
            args: args.to_string(),
        }));
    }
    is_command_name(name).then(|| {
        Ok(TypedCommand::Named {
            name: name.to_string(),
            args: args.to_string(),
        })
    })
}

/// Whether `name` can name a command (a skill): a-z, 0-9, `.`, `_` and `-`, starting with a
/// letter or digit. A path (`/usr/bin/ls`) is not one.
fn is_command_name(name: &str) -> bool {
    name.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

fn skills_action(args: &str) -> Result<TypedCommand, CommandArgError> {
    let mut words = args.split_whitespace();
    let verb = words.next().unwrap_or("list");
    let id = words.next().unwrap_or("").to_string();
    let action = match verb {
        "list" => SkillsAction::List,
        "show" => SkillsAction::Show(id),
        "accept" => SkillsAction::Accept(id),
        "reject" => SkillsAction::Reject(id),
        other => {
            return Err(CommandArgError(format!(
                "Unknown /skills action {other:?}: use list, show <id>, accept <id> or reject <id>."
            )));
        }
    };
    Ok(TypedCommand::Skills(action))
}

fn mcp_action(args: &str) -> Result<TypedCommand, CommandArgError> {
    let mut words = args.split_whitespace();
    let reconnect = match words.next() {
        None | Some("status") => None,
        Some("reconnect") => Some(words.next().map(str::to_string)),
        Some(other) => {
            return Err(CommandArgError(format!(
                "/mcp takes `status` or `reconnect [name]`, not {other:?}"
            )));
        }
    };
    Ok(TypedCommand::Mcp { reconnect })
}

fn rewind_args(args: &str) -> Result<TypedCommand, CommandArgError> {
    let mut parsed = RewindArgs {
        prompts: 1,
        files: false,
        force: false,
    };
    for word in args.split_whitespace() {
        match word {
            "files" | "--files" => parsed.files = true,
            "force" | "--force" => parsed.force = true,
            number => {
                parsed.prompts = number.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    CommandArgError(format!(
                        "/rewind [N] [files] [force]: {number:?} is not a number of prompts (1 or more)"
                    ))
                })?;
            }
        }
    }
    Ok(TypedCommand::Rewind(parsed))
}

#[cfg(test)]
mod tests {
    use super::{
        CommandArgError, CommandRuns, RewindArgs, SLASH_COMMANDS, SkillsAction, TypedCommand,
        parse_command,
    };

    fn command(text: &str) -> TypedCommand {
        match parse_command(text) {
            Some(Ok(command)) => command,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn each_built_in_parses_its_argument_into_its_command() {
        assert_eq!(command("/compact"), TypedCommand::Compact { focus: None });
        assert_eq!(
            command("  /compact  the parser \n"),
            TypedCommand::Compact {
                focus: Some("the parser".into())
            }
        );
        assert_eq!(
            command("/plan add a flag"),
            TypedCommand::Plan {
                task: "add a flag".into()
            }
        );
        assert!(matches!(
            parse_command("/plan  "),
            Some(Err(CommandArgError(_)))
        ));
        assert_eq!(
            command("/agent codex  write the tests\nfor parse"),
            TypedCommand::Agent {
                name: "codex".into(),
                task: "write the tests\nfor parse".into()
            }
        );
        for lacking in ["/agent", "/agent codex", "/agent codex   "] {
            assert!(
                matches!(parse_command(lacking), Some(Err(CommandArgError(_)))),
                "{lacking}"
            );
        }
        assert_eq!(
            command("/rewind"),
            TypedCommand::Rewind(RewindArgs {
                prompts: 1,
                files: false,
                force: false
            })
        );
        assert_eq!(
            command("/rewind 3 files force"),
            TypedCommand::Rewind(RewindArgs {
                prompts: 3,
                files: true,
                force: true
            })
        );
        assert!(matches!(parse_command("/rewind 0"), Some(Err(_))));
        assert!(matches!(parse_command("/rewind back"), Some(Err(_))));
        assert_eq!(command("/skills"), TypedCommand::Skills(SkillsAction::List));
        assert_eq!(
            command("/skills accept p-1"),
            TypedCommand::Skills(SkillsAction::Accept("p-1".into()))
        );
        assert!(matches!(parse_command("/skills burn"), Some(Err(_))));
        assert_eq!(command("/mcp"), TypedCommand::Mcp { reconnect: None });
        assert_eq!(
            command("/mcp reconnect fix"),
            TypedCommand::Mcp {
                reconnect: Some(Some("fix".into()))
            }
        );
        assert!(matches!(parse_command("/mcp restart"), Some(Err(_))));
    }

    #[test]
    fn each_built_in_runs_where_its_command_is_routed() {
        // The edge runs `/plan` and queues `/compact` as its own op; the actor runs
        // `/rewind` and `/agent`; the session's commands expand the rest (`PromptInput::Slash`).
        for declared in SLASH_COMMANDS {
            let text = match declared.name {
                "plan" => "/plan a task".to_string(),
                "agent" => "/agent codex a task".to_string(),
                name => format!("/{name}"),
            };
            let routed = match command(&text) {
                TypedCommand::Plan { .. } => CommandRuns::Edge,
                TypedCommand::Compact { .. }
                | TypedCommand::Rewind(_)
                | TypedCommand::Agent { .. } => CommandRuns::Session,
                TypedCommand::Skills(_)
                | TypedCommand::Mcp { .. }
                | TypedCommand::McpPrompt { .. }
                | TypedCommand::Named { .. } => CommandRuns::SessionCommands,
            };
            assert_eq!(declared.runs, routed, "/{}", declared.name);
        }
    }

    #[test]
    fn other_names_are_skills_or_mcp_prompts_and_paths_are_prompts() {
        assert_eq!(
            command("/mcp:fix:review focus=naming"),
            TypedCommand::McpPrompt {
                server: "fix".into(),
                prompt: "review".into(),
                args: "focus=naming".into()
            }
        );
        assert_eq!(
            command("/release-notes v2"),
            TypedCommand::Named {
                name: "release-notes".into(),
                args: "v2".into()
            }
        );
        // A built-in's name must be the whole word.
        assert_eq!(
            command("/compacting now"),
            TypedCommand::Named {
                name: "compacting".into(),
                args: "now".into()
            }
        );
        for prompt in [
            "/usr/bin/ls fails",
            "/Plan x",
            "hello /plan",
            "/",
            "/mcp:fix",
        ] {
            assert_eq!(parse_command(prompt), None, "{prompt}");
        }
        // Every built-in is found by its name.
        for declared in SLASH_COMMANDS {
            let text = format!("/{} x", declared.name);
            assert!(
                !matches!(
                    parse_command(&text),
                    Some(Ok(TypedCommand::Named { .. })) | None
                ),
                "{text}"
            );
        }
    }
}
