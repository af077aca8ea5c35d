//! Prompts as the actor serves them: a slash command expanded, the turn run and committed
//! before it is answered, commands answered without the model, `/compact`.

use talaria_record::EntryBody;

use super::SessionActor;
use crate::events::{EngineEvent, StopReason, TurnError, TurnId, TurnUsage};
use crate::model_call::ModelCaller;
use crate::session::ops::{OpInbox, Ticket};
use crate::settings::UserInput;
use crate::slash::{Asking, CommandReply, Expansion, PromptInput, SlashCommand, TypedCommand};

/// Why `/agent` cannot run in a session.
#[derive(Debug, thiserror::Error)]
enum AgentCommandError {
    #[error(
        "No other agent is configured: /agent hands a task to an agent named in an \
         [agents.<name>] table of config.toml."
    )]
    NoAgents,
    #[error(
        "Delegation is off in this session ([delegation] max_concurrent is 0, or the \
         delegation toolset is left out), so /agent cannot run."
    )]
    NoDelegation,
}

impl SessionActor {
    /// A prompt's turn: a slash command is expanded first (unless cancelled while queued).
    pub(super) async fn prompt_op(
        &mut self,
        turn: TurnId,
        input: PromptInput,
        ticket: Ticket,
        receiver: &mut OpInbox,
    ) {
        let input = match input {
            PromptInput::Typed(input) => input,
            PromptInput::Slash(_) if ticket.is_cancelled() => {
                return self
                    .finish_without_model(turn, Ok(StopReason::Cancelled))
                    .await;
            }
            PromptInput::Slash(SlashCommand {
                command: TypedCommand::Rewind(args),
                ..
            }) => {
                return self.rewind_command(turn, args).await;
            }
            PromptInput::Slash(SlashCommand {
                command: TypedCommand::Agent { name, task },
                typed,
            }) => match self.agent_call(&name, &task) {
                Ok(call) => {
                    self.opening = Some(call);
                    typed
                }
                Err(why) => return self.fail_prompt(turn, why.to_string()).await,
            },
            PromptInput::Slash(command) => match self.expand(command, &ticket).await {
                Expansion::Prompt(input) => input,
                Expansion::Reply(reply) => return self.command_reply(turn, reply).await,
                Expansion::Failed(why) => return self.fail_prompt(turn, why).await,
            },
        };
        let input = self.attached(input).await;
        self.prompt(turn, input, ticket, receiver).await;
    }

    /// `/agent NAME TASK` as the `delegate_task` call its turn opens with, or why it cannot.
    fn agent_call(
        &self,
        name: &str,
        task: &str,
    ) -> Result<talaria_provider::ToolCallRequest, AgentCommandError> {
        if self.settings.agents.is_none() {
            return Err(AgentCommandError::NoAgents);
        }
        if self.registry.definition(crate::subagent::NAME).is_none() {
            return Err(AgentCommandError::NoDelegation);
        }
        Ok(talaria_provider::ToolCallRequest {
            id: "agent-command".into(),
            name: crate::subagent::NAME.into(),
            arguments: serde_json::json!({"goal": task, "agent": name}).to_string(),
        })
    }

    /// What a slash command means, asked of the edge's commands (which may ask the user).
    pub(super) async fn expand(&self, command: SlashCommand, ticket: &Ticket) -> Expansion {
        let Some(commands) = self.commands.clone() else {
            return Expansion::Prompt(command.typed);
        };
        let Some(work) = ticket.start() else {
            return Expansion::Failed("the prompt was cancelled".into());
        };
        let asking = Asking {
            questions: std::sync::Arc::new(crate::client_access::ClientQuestions {
                events: self.events.clone(),
            }),
            cancel: work.token.clone(),
        };
        work.follow(commands.expand(command, asking)).await
    }

    /// The input with what the edge attaches to it (see [`SlashCommands::attach`]); the
    /// client is sent its commands again when they changed.
    async fn attached(&mut self, input: UserInput) -> UserInput {
        let Some(commands) = self.commands.clone() else {
            return input;
        };
        let attached = commands.attach(input).await;
        if attached.commands_changed {
            let _ = self.events.send(EngineEvent::CommandsChanged).await;
        }
        for change in attached.toolsets {
            self.registry
                .replace_toolset(&change.toolset, &change.tools);
        }
        attached.input
    }

    pub(super) async fn prompt(
        &mut self,
        turn: TurnId,
        input: UserInput,
        ticket: Ticket,
        receiver: &mut OpInbox,
    ) {
        self.give_way();
        let before = self.history.last_id();
        let (outcome, usage, kept) = match ticket.start() {
            None => (Ok(StopReason::Cancelled), TurnUsage::default(), Vec::new()),
            Some(work) => match self.submitted(input).await {
                Err(outcome) => (outcome, TurnUsage::default(), Vec::new()),
                Ok(input) => {
                    let end = work
                        .follow(self.run_turn_with_stop_hooks(input, &work, receiver))
                        .await;
                    (end.outcome, end.usage, end.kept)
                }
            },
        };
        let ran = !matches!(outcome, Ok(StopReason::Cancelled)) || self.history.last_id() > before;
        self.answer(turn, outcome, usage).await;
        if ran {
            self.count_learning(before, &kept);
            self.maybe_review().await;
        }
        if self.titles.title.is_none() {
            self.start_title().await;
        }
    }

    /// Answers a prompt that could not be prepared with an error.
    pub(super) async fn fail_prompt(&mut self, turn: TurnId, why: String) {
        self.finish_without_model(turn, Err(TurnError::Command(why)))
            .await;
    }

    /// Ends a turn that made no model call of its own (a command, a failure to start).
    pub(super) async fn finish_without_model(
        &mut self,
        turn: TurnId,
        outcome: Result<StopReason, TurnError>,
    ) {
        self.answer(turn, outcome, TurnUsage::default()).await;
    }

    /// Answers a prompt: durable before answered (committed, or the journal's deadline
    /// passed), then its `TurnFinished`.
    async fn answer(
        &mut self,
        turn: TurnId,
        outcome: Result<StopReason, TurnError>,
        usage: TurnUsage,
    ) {
        self.commit().await;
        let _ = self
            .events
            .send(EngineEvent::TurnFinished {
                turn,
                outcome,
                usage,
            })
            .await;
    }

    /// A command answered without the model: its reply as the agent's message.
    pub(super) async fn command_reply(&mut self, turn: TurnId, reply: CommandReply) {
        let _ = self.events.send(EngineEvent::AgentText(reply.text)).await;
        if reply.commands_changed {
            let _ = self.events.send(EngineEvent::CommandsChanged).await;
        }
        self.finish_without_model(turn, Ok(StopReason::EndTurn))
            .await;
    }

    /// `/compact [focus]`: compacts the record now, through the session's model chain, with
    /// the compaction's progress streamed to the chat; answered like a prompt.
    pub(super) async fn compact(&mut self, turn: TurnId, focus: Option<String>, ticket: Ticket) {
        let outcome = match ticket.start() {
            None => Ok(StopReason::Cancelled),
            Some(work) => {
                let token = work.token.clone();
                let tools = crate::turn::tool_specs(&self.registry);
                let tools = crate::context::tools_text(&tools);
                let mut caller = ModelCaller::new(
                    self.router.as_ref(),
                    self.router.chain(&self.model),
                    self.settings.retry,
                    &token,
                    &mut self.context,
                    &mut self.usage,
                );
                caller.hooks = Some((self.settings.hook_scope(), &self.events));
                let mut sink = crate::model_call::ChatSink {
                    events: &self.events,
                    session_id: &self.settings.id,
                    registry: &self.registry,
                    used_ids: &mut self.used_tool_ids,
                    announced: Vec::new(),
                    notices: Vec::new(),
                    hold: None,
                };
                let trigger = crate::model_call::compaction::Trigger::Manual { focus };
                let result = work
                    .follow(caller.compact(&mut self.history, &tools, trigger, &mut sink))
                    .await;
                let cancelled = token.is_cancelled();
                let notices = std::mem::take(&mut sink.notices);
                drop(work);
                for (_, text) in notices {
                    self.history.push(EntryBody::Notice {
                        level: talaria_record::NoticeLevel::Warning,
                        text,
                    });
                }
                if let Err(why) = &result {
                    self.history.push(EntryBody::Notice {
                        level: talaria_record::NoticeLevel::Warning,
                        text: format!("/compact did not compact the conversation: {why}"),
                    });
                }
                self.save();
                if cancelled {
                    Ok(StopReason::Cancelled)
                } else {
                    Ok(StopReason::EndTurn)
                }
            }
        };
        self.finish_without_model(turn, outcome).await;
    }
}
