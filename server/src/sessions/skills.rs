//! Skills and memory at the edge: each session's stores and tools, what the system prompt
//! carries (the skill index and the frozen memory snapshot), the slash commands (the engine's
//! declared built-ins, and one per skill), and the background review's staged tools.
//!
//! Every function here that touches the disk runs on the blocking pool (callers see to it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_engine::{CommandReply, Config, SkillsAction, UserInput};
use talaria_engine::{ReviewFactory, ReviewKit};
use talaria_protocol::acp::{self, SessionUpdate};
use talaria_record::{InputBlock, UserPart};
use talaria_skills::proposals::Change;
use talaria_skills::{Catalog, MemoryStore, Roots, SkillError, SkillsContext, WriteMode};

fn user_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The workspace's skill files as the user accepted them (trust's pin, to the skills crate).
#[derive(Debug)]
struct AsAccepted(talaria_engine::PinnedSkillFiles);

impl talaria_skills::ContentPin for AsAccepted {
    fn admits(&self, relative: &Path, bytes: &[u8]) -> bool {
        self.0.admits(relative, bytes)
    }
}

/// A session's skill and memory stores, writing live; the skills in the workspace are read
/// as its sandbox's `places` let them be, and only once its folder is `trust`ed.
pub fn context(
    config: &Config,
    cwd: &Path,
    session: &str,
    places: Arc<dyn talaria_files::Places>,
    trust: &talaria_engine::TrustAssessment,
) -> Arc<SkillsContext> {
    let mut roots = Roots::for_session(&config.home, cwd, user_home().as_deref());
    if !trust.loads_project_skills() {
        roots = roots.without_workspace();
    }
    if let Some(pinned) = trust.pinned_skill_files() {
        roots = roots.with_pin(Arc::new(AsAccepted(pinned)));
    }
    Arc::new(SkillsContext::new(
        roots.with_places(places),
        MemoryStore::new(
            config.home.join("memories"),
            config.memory_chars.0,
            config.memory_chars.1,
        ),
        config.home.join("proposals"),
        session,
        WriteMode::Live,
    ))
}

/// What the system prompt carries: the skill index and the memory snapshot (frozen now),
/// each empty or starting with a blank line.
pub fn prompt_additions(context: &SkillsContext, catalog: &Catalog) -> (String, String) {
    for invalid in &catalog.invalid {
        tracing::warn!(path = %invalid.path.display(), "invalid skill: {}", invalid.why);
    }
    let index = catalog
        .index()
        .map(|index| format!("\n\n{index}"))
        .unwrap_or_default();
    let memory = context
        .memory
        .snapshot()
        .map(|memory| format!("\n\n{memory}"))
        .unwrap_or_default();
    (index, memory)
}

/// The slash commands: the engine's declared built-ins (`/agent` only when `agents` are
/// configured), then one per skill.
pub fn commands(catalog: &Catalog, agents: bool) -> SessionUpdate {
    let mut commands: Vec<acp::AvailableCommand> = talaria_engine::SLASH_COMMANDS
        .iter()
        .filter(|declared| agents || !declared.needs_agents)
        .map(|declared| {
            let command = acp::AvailableCommand::new(declared.name, declared.description);
            match declared.hint {
                Some(hint) => command.input(acp::AvailableCommandInput::Unstructured(
                    acp::UnstructuredCommandInput::new(hint),
                )),
                None => command,
            }
        })
        .collect();
    let reserved = |name: &str| {
        talaria_engine::SLASH_COMMANDS
            .iter()
            .any(|d| d.name == name)
    };
    for found in &catalog.skills {
        if reserved(&found.name) {
            continue;
        }
        commands.push(
            acp::AvailableCommand::new(
                found.name.clone(),
                talaria_skills::catalog::one_line(&found.description),
            )
            .input(acp::AvailableCommandInput::Unstructured(
                acp::UnstructuredCommandInput::new("what to use the skill for (optional)"),
            )),
        );
    }
    SessionUpdate::AvailableCommandsUpdate(acp::AvailableCommandsUpdate::new(commands))
}

/// The commands with the MCP servers' prompts added (`/mcp:<server>:<prompt>`).
pub fn with_prompts(
    update: SessionUpdate,
    prompts: &[talaria_mcp::prompts::PromptCommand],
) -> SessionUpdate {
    let SessionUpdate::AvailableCommandsUpdate(update) = update else {
        return update;
    };
    let mut commands = update.available_commands;
    for prompt in prompts {
        let mut command =
            acp::AvailableCommand::new(prompt.name.clone(), prompt.description.clone());
        if let Some(hint) = &prompt.hint {
            command = command.input(acp::AvailableCommandInput::Unstructured(
                acp::UnstructuredCommandInput::new(hint.clone()),
            ));
        }
        commands.push(command);
    }
    SessionUpdate::AvailableCommandsUpdate(acp::AvailableCommandsUpdate::new(commands))
}

/// The input of `/name args`: the skill's instructions, then the user's words.
pub fn skill_input(
    context: &SkillsContext,
    name: &str,
    args: &str,
    typed: &str,
) -> Result<UserInput, SkillError> {
    let catalog = context.catalog();
    let found = catalog.get(name).ok_or_else(|| {
        SkillError::NotFound(format!("there is no skill or command named /{name}"))
    })?;
    let file = found.dir.join(talaria_skills::skill::SKILL_FILE);
    let dir = context
        .roots
        .skill_dir(found)
        .map_err(|e| SkillError::io("open", &file)(e.into()))?;
    let text = talaria_skills::skill::read_text(
        &context.roots,
        &dir,
        talaria_skills::skill::SKILL_FILE,
        talaria_skills::skill::MAX_SKILL_BYTES,
    )?;
    context.note_viewed(name);
    let request = if args.is_empty() {
        "Apply this skill to the current work.".to_string()
    } else {
        args.to_string()
    };
    let loaded = format!(
        "[The user loaded the skill `{name}` with /{name}. Its instructions follow.]\n\n{text}\n\n[End of skill `{name}`.]\n\n{request}"
    );
    Ok(UserInput {
        blocks: vec![InputBlock::Text {
            text: typed.to_string(),
        }],
        model_view: vec![UserPart::text(loaded)],
    })
}

/// Whether a name is a skill of the session (a disk read: off the runtime thread).
pub fn is_skill(context: &SkillsContext, name: &str) -> bool {
    context.catalog().get(name).is_some()
}

/// `/skills [list | show <id> | accept <id> | reject <id>]`.
pub fn skills_command(context: &SkillsContext, action: &SkillsAction) -> CommandReply {
    let proposals = &context.proposals;
    let live_dir = |id: &str| -> Option<PathBuf> {
        let proposal = proposals.list().into_iter().find(|p| p.id == id)?;
        match proposal.change {
            Change::Skill { name, .. } => context.catalog().get(&name).map(|s| s.dir.clone()),
            Change::Memory { .. } => None,
        }
    };
    let reply = |text: String, changed: bool| CommandReply {
        text,
        commands_changed: changed,
    };
    match action {
        SkillsAction::List => {
            let list = proposals.list();
            if list.is_empty() {
                return reply("No proposals are waiting.".into(), false);
            }
            let lines: Vec<String> = list
                .iter()
                .map(|p| format!("- {}: {}", p.id, p.summary))
                .collect();
            reply(
                format!(
                    "Proposals from the background review:\n{}\n\nUse /skills show <id>, /skills accept <id> or /skills reject <id>.",
                    lines.join("\n")
                ),
                false,
            )
        }
        SkillsAction::Show(id) => match proposals.show(id, live_dir(id).as_deref()) {
            Ok(text) => reply(format!("```diff\n{text}```"), false),
            Err(why) => reply(why.to_string(), false),
        },
        SkillsAction::Accept(id) => {
            let Some(root) = context.roots.writable() else {
                return reply("There is no writable skill folder.".into(), false);
            };
            match proposals.accept(
                id,
                root,
                live_dir(id).as_deref(),
                &context.memory,
                &context.session,
            ) {
                Ok(text) => reply(text, true),
                Err(why) => reply(format!("Not accepted: {why}"), false),
            }
        }
        SkillsAction::Reject(id) => match proposals.reject(id) {
            Ok(text) => reply(text, false),
            Err(why) => reply(why.to_string(), false),
        },
    }
}

/// The review's tools: staged (default) or live, recorded as the review's.
pub fn review_factory(context: Arc<SkillsContext>, staged: bool) -> ReviewFactory {
    ReviewFactory(Arc::new(move |review: &str| {
        let review_context = Arc::new(if staged {
            context.staged(review)
        } else {
            context.live_review()
        });
        let tools = talaria_skills::tools::tools(review_context.clone());
        let listed = review_context.clone();
        ReviewKit {
            tools,
            staged: Arc::new(move || {
                let proposals = listed.proposals.list();
                listed
                    .staged_ids()
                    .iter()
                    .map(|id| match proposals.iter().find(|p| &p.id == id) {
                        Some(p) => match &p.change {
                            Change::Skill { .. } => format!("a skill: {} ({})", p.summary, p.id),
                            Change::Memory { .. } => format!("{} ({})", p.summary, p.id),
                        },
                        None => id.clone(),
                    })
                    .collect()
            }),
        }
    }))
}
