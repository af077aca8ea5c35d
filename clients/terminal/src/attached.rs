//! `talaria-chat --attach URL`: following or running a session of a `talaria serve` beside
//! its other clients (docs/http.md, "Many clients on one session"). The session so far is
//! shown, then everything live; who is attached and who has control is told whenever it
//! changes; `/control` takes control, `/detach` (or quitting) leaves; a question another
//! client answered first is withdrawn here, with who answered it. One that fell behind
//! catches up (`catch_up`).

use std::collections::HashMap;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use talaria_harness::AgentProcess;
use talaria_harness::websocket::LINK_STATE;

use crate::catch_up::{CatchingUp, Printed};
use crate::input::Mode;
use crate::link::Target;
use crate::{Chat, answer_of};

/// This client's place in the session.
#[derive(Debug, Default)]
pub struct Attachment {
    /// Where the server is (for messages).
    pub socket: String,
    /// This client's id in the session's roster.
    pub client_id: String,
    pub controller: bool,
    /// Client names by id, from the last roster.
    names: HashMap<String, String>,
    /// The roster as last shown.
    shown: String,
    /// Whether a turn runs (whoever prompted it).
    pub turn_running: bool,
    /// The `/control` request waiting for its answer.
    taking: Option<i64>,
    pub detached: bool,
    /// The session ended where it ran (deleted) while this client followed it from another
    /// process: said once.
    pub ended: bool,
    /// Attaching again after falling behind, until answered.
    pub catching_up: Option<CatchingUp>,
    /// What this terminal printed of the session.
    pub printed: Printed,
    /// The last prompt this client sent.
    pub sent: Option<String>,
}

/// Connects to the target, initializes and attaches (as controller with `control`); the
/// agent, its `initialize` answer and the attach answer. The session so far waits in the
/// agent's backlog, in order, for the chat's loop.
pub async fn open(
    target: &Target,
    control: bool,
    initialize: Value,
) -> anyhow::Result<(AgentProcess, Value, Value)> {
    let token = match &target.token {
        Some(token) => token.clone(),
        None => crate::link::token_file().await?,
    };
    let mut agent = AgentProcess::connect_websocket(&target.socket, &token).await?;
    let initialized = answer_of(
        agent.request("initialize", initialize).await?,
        "the server did not start the connection",
    )?;
    if initialized["_meta"]["sessionAttach"].is_null() {
        bail!("{} does not take _session/attach", target.socket);
    }
    let role = if control { "controller" } else { "observer" };
    let attach = json!({"sessionId": target.session, "role": role, "historyPolicy": "full"});
    let id = agent.start_request("_session/attach", attach).await?;
    // The session so far comes first; a long one takes a while.
    let answer = agent
        .wait_response(id, std::time::Duration::from_secs(300))
        .await?;
    let attached = answer_of(answer, &format!("could not attach to {}", target.session))?;
    Ok((agent, initialized, attached))
}

impl Attachment {
    /// The attachment the attach answer describes.
    pub fn new(socket: &str, attached: &Value) -> anyhow::Result<Self> {
        let client_id = attached["clientId"]
            .as_str()
            .context("the attach answer names no clientId")?;
        Ok(Self {
            socket: socket.to_string(),
            client_id: client_id.to_string(),
            controller: attached["role"] == "controller",
            ..Self::default()
        })
    }

    /// Who is attached, one line (`None` when it is what was shown last).
    pub fn roster(&mut self, roster: &Value) -> Option<String> {
        let clients = roster["clients"].as_array()?;
        self.names = clients
            .iter()
            .filter_map(|c| Some((c["clientId"].as_str()?.into(), c["name"].as_str()?.into())))
            .collect();
        let listed: Vec<String> = clients
            .iter()
            .map(|c| {
                let id = c["clientId"].as_str().unwrap_or_default();
                let name = c["name"].as_str().unwrap_or(id);
                let mut entry = name.to_string();
                if id == self.client_id {
                    entry.push_str(" (you)");
                }
                if roster["controller"] == id {
                    entry.push_str(" [control]");
                }
                entry
            })
            .collect();
        let line = format!("attached: {}", listed.join(", "));
        (line != self.shown).then(|| {
            self.shown = line.clone();
            line
        })
    }

    /// A new roster: who is attached (when that changed), and whether this client gained
    /// or lost control.
    pub fn roster_changed(&mut self, roster: &Value) -> Vec<String> {
        if let Some(ended) = roster.get("ended").filter(|e| e.is_object()) {
            if std::mem::replace(&mut self.ended, true) {
                return Vec::new();
            }
            let said = ended["message"].as_str().unwrap_or("this session ended");
            return vec![format!("({said})")];
        }
        let was = self.controller;
        self.controller = roster["controller"] == self.client_id.as_str();
        let mut lines: Vec<String> = self.roster(roster).into_iter().collect();
        match (was, self.controller) {
            (true, false) => {
                lines.push("(you no longer have control: /control takes it back)".into())
            }
            (false, true) => lines.push("(you have control)".into()),
            _ => {}
        }
        lines
    }

    /// Attached again (after falling behind): this client's id, and who is attached now.
    pub fn rejoined(&mut self, attached: &Value) -> Vec<String> {
        if let Some(id) = attached["clientId"].as_str() {
            self.client_id = id.to_string();
        }
        match attached["_meta"].get("talaria/attachment") {
            Some(roster) => self.roster_changed(roster),
            None => Vec::new(),
        }
    }

    /// A turn started or ended (`talaria/turn`): the line for one another client's turn that
    /// ended.
    pub fn turn(&mut self, turn: &Value) -> Option<String> {
        self.turn_running = turn["state"] == "running";
        let by = self.name(turn["promptedBy"].as_str().unwrap_or_default());
        let reason = turn["stopReason"].as_str().unwrap_or("ended");
        (!self.turn_running && by != "you")
            .then(|| format!("(the turn {by} prompted ended: {reason})"))
    }

    /// Who answered the question about `title`, and how (`talaria/permissionResolved`).
    pub fn resolved(&self, resolved: &Value, title: &str) -> String {
        let id = resolved["by"]["clientId"].as_str().unwrap_or_default();
        let by = match self.name(id) {
            you if you == "you" => you,
            other => resolved["by"]["name"]
                .as_str()
                .unwrap_or(&other)
                .to_string(),
        };
        let outcome = resolved["outcome"]["optionId"]
            .as_str()
            .or(resolved["outcome"]["outcome"].as_str())
            .unwrap_or("answered");
        format!("(the question about {title} was answered by {by}: {outcome})")
    }

    /// A client's name (`you` for this one).
    pub fn name(&self, id: &str) -> String {
        if id == self.client_id {
            return "you".into();
        }
        self.names
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }
}

impl Chat {
    /// An update of an attached session, beyond what the renderer shows: prompts (this
    /// client's and the others'), who is attached and has control, turns, answered questions.
    pub(crate) fn attached_update(&mut self, update: &Value) {
        let Some(attachment) = self.attach.as_mut() else {
            return;
        };
        let meta = &update["_meta"];
        let mut lines = Vec::new();
        if update["sessionUpdate"] == "user_message_chunk" && meta["talaria"]["steered"].is_null() {
            let text = update["content"]["text"].as_str().unwrap_or_default();
            lines.push(format!("> {text}"));
        }
        if let Some(roster) = meta.get("talaria/attachment") {
            lines.extend(attachment.roster_changed(roster));
        }
        let turn = meta.get("talaria/turn");
        let ended = turn.and_then(|t| attachment.turn(t));
        let others_started = turn.is_some() && attachment.turn_running;
        if let Some(ended) = &ended {
            self.renderer.line_break();
            lines.push(ended.clone());
        }
        if let Some(resolved) = meta.get("talaria/permissionResolved") {
            let title = self
                .renderer
                .title_of(update["toolCallId"].as_str().unwrap_or_default());
            lines.push(attachment.resolved(resolved, &title));
        }
        for line in lines {
            self.renderer.status(&line);
        }
        // While another client's turn runs the prompt steps aside (typed lines still count).
        if self.running.is_none() && self.pending.is_none() && !self.one_shot {
            if others_started {
                self.input.set(Mode::Busy);
            } else if ended.is_some() {
                self.idle_prompt();
            }
        }
    }

    /// The session so far (what attaching replayed, waiting in order), then the prompt,
    /// unless a question or another client's turn waits.
    pub(crate) async fn show_history(&mut self) -> anyhow::Result<()> {
        for message in self.agent.drain_backlog() {
            self.on_message(message).await?;
        }
        let others_running = self.attach.as_ref().is_some_and(|a| a.turn_running);
        if self.pending.is_none() && !others_running && !self.one_shot {
            self.idle_prompt();
        }
        Ok(())
    }

    /// Local and attach-only messages: the link's state, a withdrawn question, the answer to
    /// `/control`. True when the message was one of them.
    pub(crate) fn attached_message(&mut self, message: &Value) -> bool {
        if self.attach.is_none() {
            return false;
        }
        if message["method"] == LINK_STATE {
            let detail = message["params"]["detail"].as_str().unwrap_or_default();
            self.renderer.status(&format!("! {detail}"));
            return true;
        }
        if message["method"] == "$/cancel_request" {
            let withdrawn = message["params"]["requestId"].clone();
            if self
                .pending
                .as_ref()
                .is_some_and(|q| q.request == withdrawn)
            {
                self.pending = None;
                self.renderer
                    .status("(the question was answered by another client)");
                self.after_question();
            }
            return true;
        }
        let taking = self.attach.as_ref().and_then(|a| a.taking);
        if message.get("method").is_none() && taking.is_some_and(|id| message["id"] == id) {
            self.control_answered(message);
            return true;
        }
        false
    }

    /// The input after a question went: busy while this client's turn runs, else the prompt.
    fn after_question(&mut self) {
        if self.running.is_some() {
            self.input.set(Mode::Busy);
        } else {
            self.idle_prompt();
        }
    }

    /// Whether the session was deleted where it ran (this client followed it): then `what`
    /// is said instead of sending anything.
    pub(crate) fn refused_as_deleted(&mut self, what: &str) -> bool {
        if !self.attach.as_ref().is_some_and(|a| a.ended) {
            return false;
        }
        self.renderer
            .status(&format!("(this session was deleted: {what})"));
        self.idle_prompt();
        true
    }

    /// `/control`: asks to take control of the session.
    pub(crate) async fn take_control(&mut self) -> anyhow::Result<()> {
        if self.refused_as_deleted("there is no control to take") {
            return Ok(());
        }
        let session = self.session.clone();
        let params = json!({"sessionId": session, "role": "controller", "historyPolicy": "none"});
        let id = self.agent.start_request("_session/attach", params).await?;
        if let Some(attachment) = self.attach.as_mut() {
            attachment.taking = Some(id);
        }
        Ok(())
    }

    fn control_answered(&mut self, message: &Value) {
        if let Some(attachment) = self.attach.as_mut() {
            attachment.taking = None;
            if message["result"]["role"] == "controller" {
                attachment.controller = true;
                self.renderer.status("(you have control)");
            }
        }
        if let Some(error) = message["error"]["message"].as_str() {
            self.renderer
                .error(&format!("could not take control: {error}"));
        }
        self.idle_prompt();
    }

    /// Leaves the session (`/detach`, or quitting), once.
    pub(crate) async fn detach(&mut self) -> anyhow::Result<()> {
        let Some(attachment) = self.attach.as_mut().filter(|a| !a.detached) else {
            return Ok(());
        };
        attachment.detached = true;
        let params = json!({"sessionId": self.session});
        let id = self.agent.start_request("_session/detach", params).await?;
        let answer = self
            .agent
            .wait_response(id, std::time::Duration::from_secs(5))
            .await;
        match answer.map(|a| answer_of(a, "could not detach")) {
            Ok(Ok(_)) => self
                .renderer
                .status(&format!("(detached from {})", self.session)),
            Ok(Err(e)) | Err(e) => self.renderer.error(&format!("{e:#}")),
        }
        Ok(())
    }

    /// A prompt's error while attached: the server's words, and what to type when it was
    /// refused because this client observes.
    pub(crate) fn refused_hint(&self, error: &Value) -> Option<&'static str> {
        let observing = self.attach.as_ref().is_some_and(|a| !a.controller);
        (observing && error["data"]["talaria"]["mustTakeControl"] == true)
            .then_some("(type /control to take control of the session)")
    }
}

/// What the banner adds when attached: where, as what, and how to change it.
pub fn banner(renderer: &mut crate::render::Renderer, attachment: &Attachment, attached: &Value) {
    let role = if attachment.controller {
        "in control"
    } else {
        "observing (/control takes control)"
    };
    renderer.status(&format!(
        "attached to {} over {}, {role}; /detach leaves",
        attached["sessionId"].as_str().unwrap_or("the session"),
        attachment.socket
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attached_as(role: &str) -> Attachment {
        let answer = json!({"clientId": "client-2", "role": role});
        Attachment::new("ws://h:1/acp", &answer).expect("an attachment")
    }

    fn roster(controller: &str) -> Value {
        json!({"clients": [
            {"clientId": "client-1", "name": "editor", "role": "observer"},
            {"clientId": "client-2", "name": "talaria-chat", "role": "controller"},
        ], "controller": controller})
    }

    #[test]
    fn who_is_attached_is_told_when_it_changes_and_so_is_control() {
        let mut attachment = attached_as("observer");
        assert_eq!(
            attachment.roster_changed(&roster("client-1")),
            ["attached: editor [control], talaria-chat (you)"]
        );
        assert!(
            attachment.roster_changed(&roster("client-1")).is_empty(),
            "told once"
        );
        assert_eq!(
            attachment.roster_changed(&roster("client-2")),
            [
                "attached: editor, talaria-chat (you) [control]",
                "(you have control)"
            ]
        );
        let lost = attachment.roster_changed(&roster("client-1"));
        assert_eq!(
            lost[1],
            "(you no longer have control: /control takes it back)"
        );
    }

    #[test]
    fn a_session_deleted_where_it_ran_is_said_once_and_no_empty_roster_shown() {
        let mut attachment = attached_as("observer");
        attachment.roster_changed(&roster("client-1"));
        let ended = json!({"elsewhere": true, "controller": null, "clients": [],
            "ended": {"reason": "deleted", "message": "this session was deleted"}});
        assert_eq!(
            attachment.roster_changed(&ended),
            ["(this session was deleted)"]
        );
        assert!(attachment.roster_changed(&ended).is_empty(), "said once");
        assert!(attachment.ended);
        let plain = json!({"clients": [], "controller": null, "ended": null});
        let mut other = attached_as("observer");
        assert_eq!(other.roster_changed(&plain), ["attached: "]);
        assert!(!other.ended, "a roster without an end ends nothing");
    }

    #[test]
    fn another_clients_turn_and_answer_are_told_by_name() {
        let mut attachment = attached_as("controller");
        attachment.roster_changed(&roster("client-2"));
        let running = json!({"state": "running", "promptedBy": "client-1"});
        assert_eq!(attachment.turn(&running), None);
        assert!(attachment.turn_running);
        let ended = json!({"state": "idle", "stopReason": "end_turn", "promptedBy": "client-1"});
        assert_eq!(
            attachment.turn(&ended).as_deref(),
            Some("(the turn editor prompted ended: end_turn)")
        );
        let mine = json!({"state": "idle", "stopReason": "end_turn", "promptedBy": "client-2"});
        assert_eq!(
            attachment.turn(&mine),
            None,
            "this client's own turn ends as always"
        );
        let by_editor = json!({"by": {"clientId": "client-1", "name": "editor"}, "outcome": {"outcome": "selected", "optionId": "allow_once"}});
        assert_eq!(
            attachment.resolved(&by_editor, "Write a.txt"),
            "(the question about Write a.txt was answered by editor: allow_once)"
        );
        let by_me = json!({"by": {"clientId": "client-2", "name": "talaria-chat"}, "outcome": {"outcome": "cancelled"}});
        assert!(
            attachment
                .resolved(&by_me, "x")
                .ends_with("answered by you: cancelled)")
        );
    }
}
