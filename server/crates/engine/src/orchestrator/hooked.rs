//! The user's hooks around every call, where every call passes: `PreToolUse` before the call
//! is decided (it may block it — the model reads why —, allow it without a question, ask
//! although the policy would not, or replace its input), `PostToolUse` once it ran and
//! succeeded, `PostToolUseFailure` once it ran and failed (before its changes are
//! checkpointed, so a formatter's edit is the call's). Each hook's decision
//! is written on the call's card. A `PreToolUse` hook that cannot be run or does not answer
//! in time blocks the call (fail closed); one that fails otherwise (exit 1, as a crashed
//! script does) blocks nothing, as in Claude Code.

use serde_json::{Value, json};

use super::{EngineEvent, Orchestrator, Prepared, ToolOutcome, ToolStatus};
use crate::events::NoticeLevel;
use crate::hooks::{
    Decision, Hook, HookAnswer, HookEvent, Hooks, claude_names_of_call, run_hook, typed_command,
};

/// A session's hooks as its calls see them.
#[derive(Clone, Copy)]
pub(crate) struct ToolHooks<'a> {
    pub hooks: &'a Hooks,
    pub session_id: &'a str,
    /// The checkpoints the client intercepts (`intercepted.rs`).
    pub interception: crate::client::Interception,
}

impl<'a> ToolHooks<'a> {
    /// A session's hooks and the checkpoints its client intercepts.
    pub(crate) fn of(settings: &'a crate::settings::SessionSettings) -> Self {
        Self {
            hooks: &settings.hooks,
            session_id: &settings.id,
            interception: settings.delegation.interception,
        }
    }
}

/// What the `PreToolUse` hooks decided for a call that may go on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct HookStance {
    /// A hook allowed it: no question (the policy's refusals still hold).
    pub allow: bool,
    /// A hook asked for the user's answer.
    pub ask: bool,
    /// A hook replaced its input.
    pub rewritten: bool,
}

impl Orchestrator<'_> {
    /// Runs the call's `PreToolUse` hooks in order; `Err` carries the result of a blocked
    /// call. A replaced input is checked against the tool's schema like the model's.
    pub(super) async fn pre_tool_hooks(
        &self,
        call: &mut Prepared,
    ) -> Result<HookStance, ToolOutcome> {
        let mut stance = HookStance::default();
        if call.args.is_err() {
            return Ok(stance);
        }
        let hooks: Vec<Hook> = self
            .hooks
            .hooks
            .for_call(HookEvent::PreToolUse, &call.name, &call.raw_input)
            .cloned()
            .collect();
        for hook in &hooks {
            let payload = self.tool_payload(HookEvent::PreToolUse, call, None);
            let run = run_hook(hook, &payload, &self.ctx.cwd, &self.ctx.shell).await;
            let answer = HookAnswer::of(&run, false);
            self.tell_user(&answer).await;
            let shown = hook.shown();
            if let Some(reason) = answer.blocked.as_ref().or(answer.stop.as_ref()) {
                self.note(call, format!("{shown} blocked the call: {reason}"));
                return Err(ToolOutcome::failed(format!(
                    "Blocked by the user's {shown}: {reason}"
                )));
            }
            if let Some(error) = &answer.error {
                if run.timed_out || run.never_ran() {
                    self.note(
                        call,
                        format!("{shown} failed, so the call did not run: {error}"),
                    );
                    self.warn(format!("The {shown} failed: {error}")).await;
                    return Err(ToolOutcome::failed(format!(
                        "Not run: the user's {shown} could not decide on this call ({error})."
                    )));
                }
                if hook.confined {
                    // What failed may be the sandbox (a guard that logs to the home): the
                    // guard is not taken as silent; the user decides.
                    self.note(
                        call,
                        format!("{shown} failed in the sandbox, so you are asked: {error}"),
                    );
                    stance.ask = true;
                    continue;
                }
                self.note(call, format!("{shown} failed (the call went on): {error}"));
                continue;
            }
            let mut said = match answer.decision {
                Some(Decision::Allow) => "allowed the call".to_string(),
                Some(Decision::Ask) => "asked for your answer".to_string(),
                _ => "let the call go on".to_string(),
            };
            stance.allow |= answer.decision == Some(Decision::Allow);
            stance.ask |= answer.decision == Some(Decision::Ask);
            if let Some(input) = answer.updated_input {
                if let Err(why) = self.replace_input(call, input) {
                    self.note(
                        call,
                        format!("{shown} gave an input that cannot be used: {why}"),
                    );
                    return Err(ToolOutcome::failed(format!(
                        "Not run: the user's {shown} replaced the input with one that is not \
                         valid for {}: {why}",
                        call.name
                    )));
                }
                stance.rewritten = true;
                said.push_str(&format!(" and replaced its input with {}", call.raw_input));
            }
            if let Some(reason) = &answer.reason {
                said.push_str(&format!(" ({reason})"));
            }
            if let Some(context) = answer.context {
                self.add_context(call, context);
            }
            self.note(call, format!("{shown} {said}"));
        }
        // A hook's allow never outweighs another's question.
        stance.allow &= !stance.ask;
        Ok(stance)
    }

    /// Runs the call's `PostToolUse` hooks once it ran and succeeded, its `PostToolUseFailure`
    /// hooks once it ran and failed (as Claude Code does; a call that never ran — refused,
    /// blocked, or with an input its tool's schema refuses — has neither);
    /// what they say for the model (a block's reason, added context) follows the result.
    pub(super) async fn post_tool_hooks(&self, call: &Prepared, outcome: &mut ToolOutcome) {
        // A call whose input is not valid for its tool did not run: its result is the
        // validation's error.
        if call.args.is_err() {
            return;
        }
        let event = match outcome.status {
            ToolStatus::Completed => HookEvent::PostToolUse,
            ToolStatus::Failed => HookEvent::PostToolUseFailure,
        };
        let hooks: Vec<Hook> = self
            .hooks
            .hooks
            .for_call(event, &call.name, &call.raw_input)
            .cloned()
            .collect();
        for hook in &hooks {
            let payload = self.tool_payload(event, call, Some(&*outcome));
            let run = run_hook(hook, &payload, &self.ctx.cwd, &self.ctx.shell).await;
            let answer = HookAnswer::of(&run, false);
            self.tell_user(&answer).await;
            let shown = hook.shown();
            if let Some(reason) = answer.blocked.as_ref().or(answer.stop.as_ref()) {
                self.note(call, format!("{shown} objected: {reason}"));
                self.add_context(call, format!("The user's {shown} says: {reason}"));
            } else if let Some(error) = &answer.error {
                self.note(call, format!("{shown} failed: {error}"));
                if run.timed_out {
                    self.warn(format!("The {shown} failed: {error}")).await;
                }
            } else {
                self.note(call, format!("{shown} ran"));
            }
            if let Some(context) = answer.context {
                self.add_context(call, context);
            }
        }
        let context = talaria_util::lock(&self.hook_context).remove(&call.id);
        if let Some(context) = context {
            outcome
                .content
                .push_str(&format!("\n\n[hooks]\n{}", context.join("\n")));
        }
    }

    /// The event a tool hook reads on stdin: Claude Code's fields, its tool names and input
    /// names (`file_path`, absolute) beside Talaria's.
    fn tool_payload(
        &self,
        event: HookEvent,
        call: &Prepared,
        outcome: Option<&ToolOutcome>,
    ) -> Value {
        let mut input = call.raw_input.clone();
        if let Some(path) = input.get("path").and_then(Value::as_str) {
            let absolute = self.ctx.cwd.join(path);
            input["file_path"] = json!(absolute);
        }
        // What is typed into a running command is shown as the command a `Bash` hook reads.
        if let Some(typed) = typed_command(&call.raw_input) {
            input["command"] = json!(typed);
        }
        let mut payload = json!({
            "session_id": self.hooks.session_id,
            "transcript_path": "",
            "cwd": self.ctx.cwd,
            "permission_mode": self.approval.mode().id(),
            "hook_event_name": event.as_str(),
            "tool_name": claude_names_of_call(&call.name, &call.raw_input)
                .first()
                .copied()
                .unwrap_or(&call.name),
            "talaria_tool_name": call.name,
            "tool_input": input,
            "tool_use_id": call.id,
        });
        if let Some(outcome) = outcome
            && event == HookEvent::PostToolUseFailure
        {
            payload["error"] = json!(outcome.content);
            payload["is_interrupt"] = json!(self.cancel.is_cancelled());
        } else if let Some(outcome) = outcome {
            let success = outcome.status == ToolStatus::Completed;
            let mut response = json!({"output": outcome.content, "success": success});
            if let Some(path) = payload["tool_input"]["file_path"].as_str() {
                response["filePath"] = json!(path);
            }
            payload["tool_response"] = response;
        }
        payload
    }

    /// Uses `input` (Talaria's or Claude Code's names) as the call's arguments.
    pub(super) fn replace_input(
        &self,
        call: &mut Prepared,
        mut input: Value,
    ) -> Result<(), talaria_tools::ToolError> {
        let typing = typed_command(&call.raw_input).is_some();
        if let Some(object) = input.as_object_mut() {
            if let Some(path) = object.remove("file_path") {
                object.insert("path".into(), path);
            }
            // A `Bash` hook rewrites what a `process` call types as its command.
            if typing && let Some(command) = object.remove("command") {
                object.insert("data".into(), command);
            }
        }
        let args = self.registry.parse_args(&call.name, &input.to_string());
        let value = match &args {
            Ok(value) => value.clone(),
            Err(e) => return Err(talaria_tools::ToolError::Rejected(e.to_string())),
        };
        call.description = self.registry.describe(&call.name, &args, &self.ctx);
        call.args = args;
        call.raw_input = value;
        Ok(())
    }

    pub(super) fn note(&self, call: &Prepared, text: String) {
        talaria_util::lock(&self.hook_notes)
            .entry(call.id.clone())
            .or_default()
            .push(text);
    }

    fn add_context(&self, call: &Prepared, text: String) {
        talaria_util::lock(&self.hook_context)
            .entry(call.id.clone())
            .or_default()
            .push(text);
    }

    /// A hook's `systemMessage`, shown to the user.
    async fn tell_user(&self, answer: &HookAnswer) {
        if let Some(message) = &answer.system_message {
            self.emit(EngineEvent::Notice {
                level: NoticeLevel::Info,
                message: message.clone(),
            })
            .await;
        }
    }

    async fn warn(&self, message: String) {
        self.emit(EngineEvent::Notice {
            level: NoticeLevel::Warning,
            message,
        })
        .await;
    }

    /// What the hooks said of a call, for its card.
    pub(super) fn hook_notes(&self, call: &Prepared) -> Option<String> {
        let notes = talaria_util::lock(&self.hook_notes).remove(&call.id)?;
        Some(notes.join("\n"))
    }
}
