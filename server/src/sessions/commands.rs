//! The session's slash commands, as the engine asks for them when a `/name` prompt's turn
//! comes: `/mcp` and `/skills` answer without the model, `/<skill>` loads the skill's
//! instructions, `/mcp:<server>:<prompt>` fetches an MCP server's prompt, anything else is
//! an ordinary prompt. (`/compact` is its own op.) Every turn's input also gets the MCP
//! resources the user linked, read through their servers, and notes of updated ones.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use talaria_engine::{
    Asking, Attached, CommandReply, Expansion, MCP_PROMPT_PREFIX, SlashCommand, SlashCommands,
    ToolsetChange, TypedCommand, UserInput,
};
use talaria_mcp::prompts::{self, PromptPart};
use talaria_record::{InputBlock, UserPart};
use talaria_skills::SkillsContext;
use talaria_tools::FormAnswer;

use super::skills;

/// One session's commands: its skill stores and its MCP servers.
pub struct SessionCommands {
    pub skills: Arc<SkillsContext>,
    pub mcp: Arc<talaria_mcp::Hub>,
    /// The model takes images (a prompt's images reach it as images).
    pub images_allowed: bool,
    /// The client shows forms (a prompt's missing arguments are asked in one).
    pub forms: bool,
    /// Makes new tools the session's (its toolsets kept, its tape wrapped round them).
    pub shape_tools: ToolShaper,
}

/// What a session does to tools before it offers them (see [`SessionCommands::shape_tools`]).
pub type ToolShaper = Arc<dyn Fn(talaria_tools::Registry) -> talaria_tools::Registry + Send + Sync>;

impl std::fmt::Debug for SessionCommands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCommands").finish_non_exhaustive()
    }
}

fn reply(text: String) -> Expansion {
    Expansion::Reply(CommandReply {
        text,
        commands_changed: false,
    })
}

impl SlashCommands for SessionCommands {
    fn expand<'a>(&'a self, command: SlashCommand, asking: Asking) -> BoxFuture<'a, Expansion> {
        Box::pin(async move {
            match &command.command {
                TypedCommand::Mcp { reconnect } => {
                    return self.mcp_command(reconnect.as_ref()).await;
                }
                TypedCommand::McpPrompt {
                    server,
                    prompt,
                    args,
                } => {
                    return self
                        .mcp_prompt(server, prompt, args, &command.typed, &asking)
                        .await;
                }
                _ => {}
            }
            let skills = self.skills.clone();
            // Skills are read from disk: off the runtime's threads.
            let expanded = tokio::task::spawn_blocking(move || skill_command(&skills, command));
            expanded
                .await
                .unwrap_or_else(|e| Expansion::Failed(format!("the command failed: {e}")))
        })
    }

    fn attach(&self, input: UserInput) -> BoxFuture<'_, Attached> {
        Box::pin(async move {
            let commands_changed = self.mcp.refresh_changed().await;
            let toolsets = self
                .mcp
                .take_changed_tools()
                .into_iter()
                .map(|(toolset, tools)| {
                    let mut registry = talaria_tools::Registry::new();
                    for tool in tools {
                        registry.register(tool);
                    }
                    ToolsetChange {
                        toolset,
                        tools: (self.shape_tools)(registry),
                    }
                })
                .collect();
            Attached {
                input: self.with_resources(input).await,
                commands_changed,
                toolsets,
            }
        })
    }
}

/// `/skills …` or `/<skill>`; anything else is the prompt as typed.
fn skill_command(stores: &SkillsContext, command: SlashCommand) -> Expansion {
    let SlashCommand { command, typed } = command;
    let (name, args) = match command {
        TypedCommand::Skills(action) => {
            return Expansion::Reply(skills::skills_command(stores, &action));
        }
        TypedCommand::Named { name, args } => (name, args),
        // The session's other commands are not this room's: the prompt as typed.
        _ => return Expansion::Prompt(typed),
    };
    if !skills::is_skill(stores, &name) {
        return Expansion::Prompt(typed);
    }
    let text = match typed.blocks.first() {
        Some(InputBlock::Text { text }) => text.as_str(),
        _ => "",
    };
    match skills::skill_input(stores, &name, &args, text) {
        Ok(input) => Expansion::Prompt(input),
        Err(why) => Expansion::Failed(why.to_string()),
    }
}

impl SessionCommands {
    /// `/mcp` (the status) or `/mcp reconnect [name]`.
    async fn mcp_command(&self, reconnect: Option<&Option<String>>) -> Expansion {
        let Some(name) = reconnect else {
            return reply(self.mcp.report());
        };
        match self.mcp.reconnect(name.as_deref()).await {
            // Its prompts may have changed with it.
            Ok(report) => Expansion::Reply(CommandReply {
                text: report,
                commands_changed: true,
            }),
            Err(why) => Expansion::Failed(why.to_string()),
        }
    }

    /// `/mcp:<server>:<prompt> arguments`: the prompt fetched with its arguments (the required
    /// ones missing asked in a form) and sent as the user's prompt.
    async fn mcp_prompt(
        &self,
        server: &str,
        prompt: &str,
        args: &str,
        typed: &UserInput,
        asking: &Asking,
    ) -> Expansion {
        let declared = match self.mcp.prompt_arguments(server, prompt).await {
            Ok(declared) => declared,
            Err(why) => return Expansion::Failed(why.to_string()),
        };
        let mut given = prompts::parse_arguments(&declared, args);
        let missing = prompts::missing(&declared, &given);
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|a| a.name.as_str()).collect();
            let message = format!(
                "The MCP prompt {prompt} of {server} needs: {}",
                names.join(", ")
            );
            if !self.forms {
                return Expansion::Failed(format!(
                    "{message}: give them after the command (/{MCP_PROMPT_PREFIX}{server}:{prompt} {})",
                    names.join(" ")
                ));
            }
            let schema = prompts::form_schema(&missing);
            match asking
                .questions
                .ask_form(&message, &schema, &asking.cancel)
                .await
            {
                Ok(FormAnswer::Accepted(answers)) => {
                    for (name, value) in answers.as_object().into_iter().flatten() {
                        let text = value
                            .as_str()
                            .map_or_else(|| value.to_string(), str::to_string);
                        given.insert(name.clone(), serde_json::Value::String(text));
                    }
                }
                Ok(FormAnswer::Declined | FormAnswer::Cancelled) => {
                    return Expansion::Failed(format!(
                        "the prompt was not sent: {} not given",
                        names.join(", ")
                    ));
                }
                Err(_) => {
                    return Expansion::Failed(format!(
                        "{message} (give them after the command: /{MCP_PROMPT_PREFIX}{server}:{prompt} {})",
                        names.join(" ")
                    ));
                }
            }
        }
        match self.mcp.get_prompt(server, prompt, given).await {
            Ok(result) => Expansion::Prompt(self.prompt_input(typed, &result)),
            Err(why) => Expansion::Failed(why.to_string()),
        }
    }

    /// A fetched prompt as the turn's input: what was typed for the record, the prompt's
    /// messages for the model.
    fn prompt_input(&self, typed: &UserInput, result: &serde_json::Value) -> UserInput {
        let model_view = prompts::message_parts(result)
            .into_iter()
            .map(|part| match part {
                PromptPart::Text(text) => UserPart::text(text),
                PromptPart::Image { mime_type, data } if self.images_allowed => {
                    UserPart::Image { mime_type, data }
                }
                PromptPart::Image { mime_type, .. } => UserPart::text(format!(
                    "[The prompt has an image ({mime_type}), but the current model does not accept images.]"
                )),
            })
            .collect();
        UserInput {
            blocks: typed.blocks.clone(),
            model_view,
        }
    }

    /// The input with each linked MCP resource read through its server, and a note for each
    /// resource read earlier that its server says changed.
    async fn with_resources(&self, mut input: UserInput) -> UserInput {
        let links: Vec<String> = input
            .blocks
            .iter()
            .filter_map(|block| match block {
                InputBlock::ResourceLink { uri, .. } if self.mcp.claims(uri) => Some(uri.clone()),
                _ => None,
            })
            .collect();
        for uri in links {
            let part = match self.mcp.read_resource(&uri, None).await {
                Ok((_, contents)) => UserPart::text(resource_context(&uri, &contents)),
                Err(why) => UserPart::text(format!(
                    "[The linked resource {uri} could not be read: {why}]"
                )),
            };
            input.model_view.push(part);
        }
        for (server, uri) in self.mcp.take_updated() {
            input.model_view.push(UserPart::text(format!(
                "[The MCP server {server} says the resource {uri} changed since it was read; read it again before relying on it.]"
            )));
        }
        input
    }
}

/// A linked resource's contents as the model reads an attachment.
fn resource_context(uri: &str, contents: &[serde_json::Value]) -> String {
    let body: Vec<String> = contents
        .iter()
        .map(|content| match content["text"].as_str() {
            Some(text) => text.to_string(),
            None => format!(
                "[binary contents ({}), not shown]",
                content["mimeType"].as_str().unwrap_or("unknown type")
            ),
        })
        .collect();
    format!("<context ref=\"{uri}\">\n{}\n</context>", body.join("\n"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_mcp_prompts_are_named_as_the_table_parses_them() {
        assert_eq!(
            talaria_mcp::prompts::PREFIX,
            talaria_engine::MCP_PROMPT_PREFIX
        );
    }
}
