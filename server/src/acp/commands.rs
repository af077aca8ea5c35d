//! The session's slash commands, as the engine asks for them when a `/name` prompt's turn
//! comes: `/mcp` and `/skills` answer without the model, `/<skill>` loads the skill's
//! instructions, anything else is an ordinary prompt. (`/compact` is its own op.)

use std::sync::Arc;

use talaria_engine::{CommandReply, Expansion, SlashCommand, SlashCommands};
use talaria_record::InputBlock;
use talaria_skills::SkillsContext;

use super::skills;

/// One session's commands: its skill stores and its MCP servers.
pub struct SessionCommands {
    pub skills: Arc<SkillsContext>,
    pub mcp: Arc<talaria_mcp::Hub>,
}

impl std::fmt::Debug for SessionCommands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCommands").finish_non_exhaustive()
    }
}

impl SlashCommands for SessionCommands {
    fn expand(&self, command: &SlashCommand) -> Expansion {
        let SlashCommand { name, args, typed } = command;
        if name == skills::MCP_COMMAND {
            return Expansion::Reply(CommandReply {
                text: self.mcp.report(),
                commands_changed: false,
            });
        }
        if name == skills::SKILLS_COMMAND {
            return Expansion::Reply(skills::skills_command(&self.skills, args));
        }
        if !skills::is_skill(&self.skills, name) {
            return Expansion::Prompt(typed.clone());
        }
        let text = match typed.blocks.first() {
            Some(InputBlock::Text { text }) => text.as_str(),
            _ => "",
        };
        match skills::skill_input(&self.skills, name, args, text) {
            Ok(input) => Expansion::Prompt(input),
            Err(why) => Expansion::Failed(why.to_string()),
        }
    }
}
