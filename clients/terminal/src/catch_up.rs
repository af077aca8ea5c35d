//! An attached terminal (`--attach`) that fell behind its session: the server detached it,
//! its updates having piled up unread, and told it so (`_meta["talaria/attachment"].detached`
//! naming it). It says so and attaches again as an observer; the server then shows it the
//! session from its start, of which it prints only what it had not printed (a terminal cannot
//! take back what it printed). A prompt, steer or mode change the server refused because it
//! was detached (`-32003`, `data.talaria.detached`) is told, with the line typed, and catches
//! up the same way.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::Chat;

/// How many times a terminal that fell behind attaches again before it gives up.
const TRIES: u32 = 3;

const FELL_BEHIND: &str = "(this terminal fell behind the session: updates came faster than it \
                           read them, so the server stopped sending it any; attaching again to \
                           catch up…)";
const CAUGHT_UP: &str = "(caught up: what this terminal had not shown is above; it follows the \
                         session again)";

/// Attaching again after falling behind: the request, and which try it is.
#[derive(Debug, Clone, Copy)]
pub struct CatchingUp {
    request: i64,
    attempt: u32,
}

/// What this terminal printed of the session, so that the session shown again from its start
/// prints only the rest: each kind of message's text run together, the tool calls whose end
/// was told, the plans and notices told.
#[derive(Debug, Default)]
pub struct Printed {
    texts: HashMap<String, Text>,
    finished: HashSet<String>,
    told: HashSet<String>,
    replaying: bool,
}

/// One kind of message's text as printed, and while the session is shown again, how far into
/// it that has come (`None` once past it).
#[derive(Debug, Default)]
struct Text {
    shown: String,
    replayed: Option<usize>,
}

/// The length in bytes of what `a` and `b` start with alike.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((at, _), _)| at)
}

impl Printed {
    /// `update` as it is to be printed: `None` when the session shown again repeats what was
    /// printed, else with only the text not printed yet. What it prints is kept.
    pub fn unseen(&mut self, update: &Value) -> Option<Value> {
        match update["sessionUpdate"].as_str().unwrap_or_default() {
            kind @ ("user_message_chunk" | "agent_message_chunk" | "agent_thought_chunk") => {
                self.text(kind, update)
            }
            "tool_call_update" => self.tool(update),
            "plan" | "notice" => self.said(update),
            _ => Some(update.clone()),
        }
    }

    fn text(&mut self, kind: &str, update: &Value) -> Option<Value> {
        let Some(text) = update["content"]["text"].as_str() else {
            return Some(update.clone());
        };
        let steered = update["_meta"]["talaria"]["steered"] == true;
        let key = if steered { "steered" } else { kind };
        let entry = self.texts.entry(key.to_string()).or_default();
        let fresh = match entry.replayed {
            Some(at) => {
                let same = common_prefix(&entry.shown[at..], text);
                if same == text.len() {
                    entry.replayed = Some(at + same);
                    return None;
                }
                entry.replayed = None;
                &text[same..]
            }
            None => text,
        };
        entry.shown.push_str(fresh);
        let mut update = update.clone();
        update["content"]["text"] = fresh.into();
        Some(update)
    }

    /// A tool call's end is told once.
    fn tool(&mut self, update: &Value) -> Option<Value> {
        let ended = matches!(update["status"].as_str(), Some("completed" | "failed"));
        let id = update["toolCallId"].as_str().unwrap_or_default();
        let again = ended && !self.finished.insert(id.to_string());
        (!(again && self.replaying)).then(|| update.clone())
    }

    /// A plan or notice shown again is not told again.
    fn said(&mut self, update: &Value) -> Option<Value> {
        let again = !self.told.insert(update.to_string());
        (!(again && self.replaying)).then(|| update.clone())
    }

    /// The session is shown again from its start.
    pub fn replaying(&mut self) {
        self.replaying = true;
        for text in self.texts.values_mut() {
            text.replayed = Some(0);
        }
    }

    /// It has been shown; what comes now is new.
    pub fn replayed(&mut self) {
        self.replaying = false;
        for text in self.texts.values_mut() {
            text.replayed = None;
        }
    }
}

/// Whether `error` is the server's refusal of a client it detached (it fell behind).
pub fn is_detached(error: &Value) -> bool {
    error["code"] == -32003 && error["data"]["talaria"]["detached"] == true
}

/// What is said of `line`, refused because this terminal had been detached.
fn not_sent(line: &str) -> String {
    format!(
        "(not sent: “{line}”: this terminal had fallen behind the session; type it again once \
         it has caught up)"
    )
}

impl Chat {
    /// A session update as this terminal is to print it (see [`Printed::unseen`]).
    pub(crate) fn unseen(&mut self, update: &Value) -> Option<Value> {
        match self.attach.as_mut() {
            Some(attachment) => attachment.printed.unseen(update),
            None => Some(update.clone()),
        }
    }

    /// After an update: one saying the server detached this terminal starts a catch-up (a
    /// notice naming another client only told who is attached).
    pub(crate) async fn after_update(&mut self, update: &Value) -> anyhow::Result<()> {
        let named = &update["_meta"]["talaria/attachment"]["detached"]["clientId"];
        let here = self
            .attach
            .as_ref()
            .is_some_and(|a| named == a.client_id.as_str());
        if here {
            self.catch_up().await?;
        }
        Ok(())
    }

    /// `line` (a prompt, steer or mode change) was refused because the server had detached
    /// this terminal: it is told, and the terminal catches up.
    pub(crate) async fn refused_behind(&mut self, line: &str) -> anyhow::Result<()> {
        self.renderer.status(&not_sent(line));
        self.catch_up().await
    }

    /// Says this terminal fell behind and attaches again (one catch-up at a time).
    async fn catch_up(&mut self) -> anyhow::Result<()> {
        let Some(attachment) = self.attach.as_ref() else {
            return Ok(());
        };
        if attachment.catching_up.is_some() {
            return Ok(());
        }
        self.renderer.status(FELL_BEHIND);
        self.attach_again(1).await
    }

    async fn attach_again(&mut self, attempt: u32) -> anyhow::Result<()> {
        let params =
            json!({"sessionId": self.session, "role": "observer", "historyPolicy": "full"});
        let request = self.agent.start_request("_session/attach", params).await?;
        if let Some(attachment) = self.attach.as_mut() {
            attachment.catching_up = Some(CatchingUp { request, attempt });
            // The session shown again says whether a turn runs.
            attachment.turn_running = false;
            attachment.printed.replaying();
        }
        Ok(())
    }

    /// Whether `message` answers attaching again.
    pub(crate) fn answers_catch_up(&self, message: &Value) -> bool {
        let waiting = self.attach.as_ref().and_then(|a| a.catching_up);
        message.get("method").is_none() && waiting.is_some_and(|c| message["id"] == c.request)
    }

    /// The prompt, unless this terminal's turn, another client's or a question waits.
    fn prompt_unless_busy(&mut self) {
        let others = self.attach.as_ref().is_some_and(|a| a.turn_running);
        if self.pending.is_none() && self.running.is_none() && !others && !self.one_shot {
            self.idle_prompt();
        }
    }

    /// Attaching again was answered: caught up, or another try, or given up (said).
    pub(crate) async fn caught_up(&mut self, message: &Value) -> anyhow::Result<()> {
        let Some(attachment) = self.attach.as_mut() else {
            return Ok(());
        };
        let Some(CatchingUp { attempt, .. }) = attachment.catching_up.take() else {
            return Ok(());
        };
        attachment.printed.replayed();
        if let Some(attached) = message.get("result") {
            for line in attachment.rejoined(attached) {
                self.renderer.status(&line);
            }
            self.renderer.status(CAUGHT_UP);
            self.prompt_unless_busy();
            return Ok(());
        }
        let error = message["error"]["message"].as_str().unwrap_or("no answer");
        if attempt < TRIES {
            self.renderer
                .status(&format!("(attaching again failed: {error}; trying again)"));
            tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            return self.attach_again(attempt + 1).await;
        }
        self.renderer.error(&format!(
            "this terminal fell behind the session and could not attach again ({TRIES} tries: \
             {error}): it no longer follows the session; quit and attach again to follow it"
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(kind: &str, text: &str) -> Value {
        json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
    }

    fn printed(shown: &mut Printed, update: &Value) -> Option<String> {
        let update = shown.unseen(update)?;
        Some(
            update["content"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }

    #[test]
    fn the_session_shown_again_prints_only_what_was_not_printed() {
        let mut shown = Printed::default();
        for (kind, text) in [
            ("user_message_chunk", "one"),
            ("agent_message_chunk", "Before "),
            ("agent_message_chunk", "the fall."),
            ("user_message_chunk", "two"),
            ("agent_thought_chunk", "<0> think"),
            ("agent_message_chunk", "After"),
        ] {
            assert_eq!(
                printed(&mut shown, &chunk(kind, text)).as_deref(),
                Some(text)
            );
        }
        shown.replaying();
        // The replay joins each message's chunks; the answer cut off is finished.
        assert_eq!(
            printed(&mut shown, &chunk("user_message_chunk", "one")),
            None
        );
        let before = chunk("agent_message_chunk", "Before the fall.");
        assert_eq!(printed(&mut shown, &before), None);
        assert_eq!(
            printed(&mut shown, &chunk("user_message_chunk", "two")),
            None
        );
        let thought = chunk("agent_thought_chunk", "<0> think <1> more");
        assert_eq!(printed(&mut shown, &thought).as_deref(), Some(" <1> more"));
        let after = chunk("agent_message_chunk", "After the fall.");
        assert_eq!(printed(&mut shown, &after).as_deref(), Some(" the fall."));
        let third = chunk("user_message_chunk", "three");
        assert_eq!(printed(&mut shown, &third).as_deref(), Some("three"));
        shown.replayed();
        // Live again: a message like one before is printed.
        assert_eq!(
            printed(&mut shown, &before).as_deref(),
            Some("Before the fall.")
        );
    }

    #[test]
    fn a_tool_calls_end_and_a_plan_are_told_once_across_the_replay() {
        let mut shown = Printed::default();
        let done =
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "w1", "status": "completed"});
        let plan =
            json!({"sessionUpdate": "plan", "entries": [{"content": "a", "status": "pending"}]});
        assert!(shown.unseen(&done).is_some());
        assert!(shown.unseen(&plan).is_some());
        shown.replaying();
        assert!(shown.unseen(&done).is_none());
        assert!(shown.unseen(&plan).is_none());
        let other =
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "w2", "status": "failed"});
        assert!(shown.unseen(&other).is_some());
        let roster = json!({"sessionUpdate": "session_info_update", "_meta": {}});
        assert!(shown.unseen(&roster).is_some(), "the rest goes through");
    }

    #[test]
    fn a_refusal_for_being_detached_is_told_with_the_line() {
        let detached = json!({"code": -32003, "message": "no longer attached",
            "data": {"talaria": {"detached": true, "attachAgain": "_session/attach"}}});
        assert!(is_detached(&detached));
        let observer = json!({"code": -32003, "data": {"talaria": {"mustTakeControl": true}}});
        assert!(!is_detached(&observer));
        assert!(
            not_sent("fix it").starts_with("(not sent: “fix it”: this terminal had fallen behind")
        );
    }

    #[test]
    fn what_two_texts_start_with_alike_is_measured_in_whole_characters() {
        assert_eq!(common_prefix("héllo", "héllo world"), "héllo".len());
        assert_eq!(common_prefix("hé", "hè"), 1);
        assert_eq!(common_prefix("", "x"), 0);
    }
}
