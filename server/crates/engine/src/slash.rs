//! Slash commands in the session's order: the edge parses a `/name args` prompt once, with
//! the declared table ([`table`]), into a typed [`TypedCommand`]; the actor runs `/rewind`, and
//! asks the session's commands ([`SlashCommands`]) for the rest when the prompt's turn comes,
//! so a command sees everything queued before it (a skill accepted one prompt earlier).

use crate::settings::UserInput;

mod table;
pub use table::{
    CommandArgError, CommandRuns, DeclaredCommand, MCP_PROMPT_PREFIX, RewindArgs, SLASH_COMMANDS,
    SkillsAction, TypedCommand, parse_command,
};

/// What the user typed as a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// An ordinary prompt.
    Typed(UserInput),
    /// A slash command that runs in the session: `/rewind` by the actor, the others expanded
    /// by the session's [`SlashCommands`] when its turn comes; without any, or when the name
    /// means nothing, it is an ordinary prompt (`typed`).
    Slash(SlashCommand),
}

impl From<UserInput> for PromptInput {
    fn from(input: UserInput) -> Self {
        Self::Typed(input)
    }
}

/// A prompt that is a slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlashCommand {
    /// The command, as [`parse_command`] read it.
    pub command: TypedCommand,
    /// The prompt as typed, for when the name is not a command.
    pub typed: UserInput,
}

/// What a slash command comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expansion {
    /// Run this as the turn's input.
    Prompt(UserInput),
    /// Answer without the model.
    Reply(CommandReply),
    /// The command could not be prepared: the prompt fails with this message.
    Failed(String),
}

/// What a command answered without the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandReply {
    /// Shown as the agent's message.
    pub text: String,
    /// The client's slash commands may have changed (e.g. a skill was accepted).
    pub commands_changed: bool,
}

/// What a command may use while it is expanded: the user, for a form, until `cancel`.
#[derive(Clone)]
pub struct Asking {
    pub questions: std::sync::Arc<dyn talaria_tools::UserQuestions>,
    pub cancel: tokio_util::sync::CancellationToken,
}

/// The edge's commands, asked when a prompt's turn comes (an implementation moves disk
/// reads to the blocking pool itself).
pub trait SlashCommands: Send + Sync + std::fmt::Debug {
    fn expand<'a>(
        &'a self,
        command: SlashCommand,
        asking: Asking,
    ) -> futures_util::future::BoxFuture<'a, Expansion>;

    /// What the turn's input becomes before the model sees it: attachments the edge can
    /// read (an MCP resource the user linked), notes of what changed since the last turn;
    /// and whether the client's commands changed meanwhile (an MCP server's prompts).
    fn attach(&self, input: UserInput) -> futures_util::future::BoxFuture<'_, Attached> {
        Box::pin(std::future::ready(Attached {
            input,
            commands_changed: false,
            toolsets: Vec::new(),
        }))
    }
}

/// A turn's input with the edge's attachments.
#[derive(Debug, Clone)]
pub struct Attached {
    pub input: UserInput,
    /// The client's slash commands changed: they are listed to it again.
    pub commands_changed: bool,
    /// Toolsets whose tools changed (an MCP server signed in to, reconnected, or whose
    /// tool list changed): each replaces the session's tools of that toolset from this turn.
    pub toolsets: Vec<ToolsetChange>,
}

/// A toolset's tools now.
#[derive(Debug, Clone)]
pub struct ToolsetChange {
    pub toolset: String,
    pub tools: talaria_tools::Registry,
}
