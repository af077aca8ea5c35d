//! The client's checkpoints around every call (the ACP tool-interception draft), where the
//! hooks run: `before` after the `PreToolUse` hooks and before the call is approved (a
//! replaced input is checked against the tool's schema and approved like the model's, so
//! interception never weakens the policy), `after` once the call ran and its `PostToolUse`
//! hooks spoke, before the model reads its result. A client that errs, answers unreadably or
//! not in time decides nothing: the call does not run, or its result is withheld (fail
//! closed), and the model reads why. Each decision is written on the call's card.

use super::hooked::HookStance;
use super::{Orchestrator, Prepared, ToolOutcome, ToolStatus};
use crate::client::{
    ClientAnswer, ClientAsk, InterceptDecision, InterceptError, InterceptPhase, InterceptedCall,
};

/// What the model reads for the calls of a batch the client stopped.
pub const STOPPED_RESULT: &str = "Not run: the client stopped this turn.";

impl Orchestrator<'_> {
    /// Asks the client at the `before` checkpoint (when it intercepts it); `Err` carries the
    /// result of a call that must not run (stopped, replaced by a result, undecided).
    pub(super) async fn intercept_before(
        &self,
        call: &mut Prepared,
        mut stance: HookStance,
    ) -> Result<HookStance, ToolOutcome> {
        if !self.hooks.interception.before || call.args.is_err() {
            return Ok(stance);
        }
        match self.intercept(call, InterceptPhase::Before, None).await {
            // No client intercepts any more (the one that did has left the session).
            Ok(None) => Ok(stance),
            Ok(Some(InterceptDecision::Allow)) => {
                self.note(call, "The client allowed the call.".into());
                Ok(stance)
            }
            Ok(Some(InterceptDecision::ReplaceResult { failed, text })) => {
                self.note(
                    call,
                    "The client answered for the call; it did not run.".into(),
                );
                Err(replaced(failed, text))
            }
            Ok(Some(InterceptDecision::ReplaceInput(input))) => match self
                .replace_input(call, input)
            {
                Ok(()) => {
                    let said = format!("The client replaced the input with {}.", call.raw_input);
                    self.note(call, said);
                    // The user's `PreToolUse` hooks judge the new input afresh: what they
                    // allowed of the model's input does not carry over to it.
                    stance = self.pre_tool_hooks(call).await?;
                    stance.rewritten = true;
                    Ok(stance)
                }
                Err(why) => {
                    self.note(call, format!("The client gave an unusable input: {why}"));
                    Err(ToolOutcome::failed(format!(
                        "Not run: the client replaced the input with one that is not valid \
                         for {}: {why}",
                        call.name
                    )))
                }
            },
            Ok(Some(InterceptDecision::Stop(reason))) => {
                Err(self.stop(call, reason, "did not run"))
            }
            Err(error) => {
                self.note(
                    call,
                    format!("The client could not decide, so the call did not run: {error}"),
                );
                Err(ToolOutcome::failed(format!(
                    "Not run: the client's tool interception could not decide on this call \
                     ({error})."
                )))
            }
        }
    }

    /// Asks the client at the `after` checkpoint (when it intercepts it): the result it
    /// allows, its replacement, or a result withheld.
    pub(super) async fn intercept_after(&self, call: &Prepared, outcome: &mut ToolOutcome) {
        if !self.hooks.interception.after || call.args.is_err() {
            return;
        }
        let result = (
            outcome.status == ToolStatus::Failed,
            outcome.content.clone(),
        );
        let decided = self
            .intercept(call, InterceptPhase::After, Some(result))
            .await;
        let new = match decided {
            Ok(None) => return,
            Ok(Some(InterceptDecision::Allow)) => {
                self.note(call, "The client allowed the result.".into());
                return;
            }
            Ok(Some(InterceptDecision::ReplaceResult { failed, text })) => {
                self.note(call, "The client replaced the result.".into());
                replaced(failed, text)
            }
            Ok(Some(InterceptDecision::ReplaceInput(_))) => {
                self.note(
                    call,
                    "The client's answer cannot apply after the call: its result was withheld."
                        .into(),
                );
                ToolOutcome::failed(
                    "The result was withheld: the client's tool interception answered with an \
                     input after the call ran.",
                )
            }
            Ok(Some(InterceptDecision::Stop(reason))) => {
                self.stop(call, reason, "ran; its result was withheld")
            }
            Err(error) => {
                self.note(
                    call,
                    format!("The client could not check the result, so it was withheld: {error}"),
                );
                ToolOutcome::failed(format!(
                    "The call ran, but its result was withheld: the client's tool interception \
                     could not check it ({error})."
                ))
            }
        };
        // What the call did to files stays on the card (and in the record, for a rewind);
        // what it returned is replaced.
        outcome.status = new.status;
        outcome.content = new.content;
        outcome.raw_output = None;
        outcome.images.clear();
    }

    /// The client stopped the turn at `call`: nothing more of the batch runs.
    fn stop(&self, call: &Prepared, reason: Option<String>, what: &str) -> ToolOutcome {
        let why = reason.unwrap_or_else(|| "no reason given".into());
        self.note(
            call,
            format!("The client stopped the turn: the call {what} ({why})."),
        );
        talaria_util::lock(&self.stopped).get_or_insert_with(|| why.clone());
        ToolOutcome::failed(format!("Stopped by the client: {why}. The turn ends here."))
    }

    /// Sends the call to the client and waits for its decision (`None`: no client intercepts
    /// any more), at most
    /// the interception's timeout (then the request is withdrawn).
    async fn intercept(
        &self,
        call: &Prepared,
        phase: InterceptPhase,
        result: Option<(bool, String)>,
    ) -> Result<Option<InterceptDecision>, InterceptError> {
        let asked = ClientAsk::Intercept(InterceptedCall {
            phase,
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            title: call.description.title.clone(),
            kind: call.kind,
            raw_input: call.raw_input.clone(),
            result,
        });
        let withdraw = self.cancel.child_token();
        let ask = crate::client_access::ask(self.events, asked, withdraw.clone(), None);
        let timeout = self.hooks.interception.timeout;
        let answer = match tokio::time::timeout(timeout, ask).await {
            Ok(answer) => answer,
            Err(_) => {
                withdraw.cancel();
                return Err(InterceptError::TimedOut(timeout.as_secs()));
            }
        };
        match answer {
            Some(ClientAnswer::Intercepted(decided)) => decided.map(Some),
            // The client that intercepts has left the session: as for one that does not.
            Some(ClientAnswer::Local) => Ok(None),
            _ => Err(InterceptError::NoAnswer),
        }
    }

    /// The client stopped the turn during this batch (and why).
    pub(super) fn stopped(&self) -> Option<String> {
        talaria_util::lock(&self.stopped).clone()
    }
}

/// A result the client gave.
fn replaced(failed: bool, text: String) -> ToolOutcome {
    if failed {
        ToolOutcome::failed(text)
    } else {
        ToolOutcome::completed(text)
    }
}
