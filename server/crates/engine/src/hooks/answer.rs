//! What a hook answered, read as Claude Code reads it: exit 2 blocks with stderr as the
//! reason; exit 0 goes on, its stdout JSON (when it is JSON) deciding further; any other end
//! (another exit code, a signal, its timeout, a hook that could not start) is an error that
//! blocks nothing by itself — the caller decides what an error means where it must fail
//! closed.

use serde_json::Value;

use super::HookRun;

/// A `PreToolUse` hook's permission decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Runs without asking (the hard floor still refuses).
    Allow,
    /// Refused, with the reason the model reads.
    Deny,
    /// The user is asked even where the policy would not ask.
    Ask,
}

/// A hook's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookAnswer {
    /// The hook blocks: the reason the model reads (exit 2's stderr, a `deny`, `decision:
    /// "block"`).
    pub blocked: Option<String>,
    pub decision: Option<Decision>,
    /// `permissionDecisionReason` (for `allow` and `ask`).
    pub reason: Option<String>,
    /// `updatedInput`: the tool input to use instead.
    pub updated_input: Option<Value>,
    /// `additionalContext`, or a `SessionStart`/`UserPromptSubmit` hook's plain stdout.
    pub context: Option<String>,
    /// `systemMessage`: shown to the user.
    pub system_message: Option<String>,
    /// `continue: false`: the turn stops (`stopReason`).
    pub stop: Option<String>,
    /// It failed without blocking (another exit code, a signal, its timeout, not started).
    pub error: Option<String>,
}

impl HookAnswer {
    /// Reads a finished run; `plain_context`: a plain-text stdout is context (the events
    /// whose stdout Claude Code adds to the conversation).
    pub fn of(run: &HookRun, plain_context: bool) -> Self {
        let mut answer = Self::default();
        if let Some(why) = &run.start_error {
            answer.error = Some(why.clone());
            return answer;
        }
        if run.timed_out {
            answer.error = Some("it did not finish within its timeout and was ended".into());
            return answer;
        }
        match run.exit_code {
            Some(0) => {}
            Some(2) => {
                let reason = run.stderr.trim();
                answer.blocked = Some(if reason.is_empty() {
                    "blocked by a hook (no reason given)".into()
                } else {
                    reason.to_string()
                });
                return answer;
            }
            Some(code) => {
                answer.error = Some(format!("it exited with {code}: {}", run.stderr.trim()));
                return answer;
            }
            None => {
                answer.error = Some("it was ended by a signal".into());
                return answer;
            }
        }
        let stdout = run.stdout.trim();
        match serde_json::from_str::<Value>(stdout) {
            Ok(json @ Value::Object(_)) => answer.read_json(&json),
            _ if plain_context && !stdout.is_empty() => answer.context = Some(stdout.to_string()),
            _ => {}
        }
        answer
    }

    fn read_json(&mut self, json: &Value) {
        let text = |value: &Value| value.as_str().map(str::to_string);
        let specific = &json["hookSpecificOutput"];
        self.reason = text(&specific["permissionDecisionReason"]).or_else(|| text(&json["reason"]));
        self.decision = match specific["permissionDecision"]
            .as_str()
            .or_else(|| json["decision"].as_str())
        {
            Some("allow" | "approve") => Some(Decision::Allow),
            Some("deny" | "block") => Some(Decision::Deny),
            Some("ask") => Some(Decision::Ask),
            _ => None,
        };
        if self.decision == Some(Decision::Deny) {
            self.blocked = Some(
                self.reason
                    .clone()
                    .unwrap_or_else(|| "blocked by a hook (no reason given)".into()),
            );
        }
        self.updated_input = specific
            .get("updatedInput")
            .filter(|v| v.is_object())
            .cloned();
        self.context = text(&specific["additionalContext"]);
        self.system_message = text(&json["systemMessage"]);
        if json["continue"] == Value::Bool(false) {
            self.stop =
                Some(text(&json["stopReason"]).unwrap_or_else(|| "a hook stopped the turn".into()));
        }
    }
}
