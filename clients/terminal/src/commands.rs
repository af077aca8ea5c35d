//! Slash commands: talaria-chat's own, the agent's (from its `available_commands_update`,
//! sent as prompts), and a line naming neither — told as unknown with the list of known ones,
//! never sent to the model. A line whose first word is a path (`/etc/hosts is wrong`) is a
//! prompt; `//text` sends `/text` as it is.

use crate::Chat;

/// talaria-chat's own commands (with `/exit`, the same as `/quit`).
pub const OWN: [&str; 7] = ["cancel", "help", "mode", "model", "queue", "quit", "rewind"];

/// What a line typed at the prompt is.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// Text for the agent (a prompt, or one of the agent's commands).
    Prompt(&'a str),
    /// A command nobody here knows: its name.
    Unknown(&'a str),
}

/// The command a line names, if it names one: `/name …` where the name holds no `/`.
pub fn command_name(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('/')?;
    let name = rest.split_whitespace().next().unwrap_or_default();
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// Sorts a line that is not one of talaria-chat's own commands: `agent` lists the agent's.
pub fn classify<'a>(line: &'a str, agent: &[(String, String)]) -> Line<'a> {
    if let Some(escaped) = line.strip_prefix("//") {
        return Line::Prompt(&line[line.len() - escaped.len() - 1..]);
    }
    match command_name(line) {
        Some(name) if !agent.iter().any(|(known, _)| known == name) => Line::Unknown(name),
        _ => Line::Prompt(line),
    }
}

/// The known commands, for the unknown command's message.
pub fn known(rewinding: bool, agent: &[(String, String)]) -> String {
    let own: Vec<String> = OWN
        .iter()
        .filter(|name| rewinding || **name != "rewind")
        .map(|name| format!("/{name}"))
        .collect();
    let mut text = format!("talaria-chat's: {}", own.join(" "));
    let theirs: Vec<String> = agent
        .iter()
        .filter(|(name, _)| !OWN.contains(&name.as_str()) || !rewinding)
        .map(|(name, _)| format!("/{name}"))
        .collect();
    if !theirs.is_empty() {
        text.push_str(&format!("; the agent's: {}", theirs.join(" ")));
    }
    text
}

impl Chat {
    /// A line at the prompt that is not one of the commands `on_line` serves itself.
    pub(crate) async fn other_line(&mut self, line: &str) -> anyhow::Result<()> {
        if let Some(text) = line.strip_prefix("/queue ") {
            // Nothing runs: what would wait goes now.
            return self.send_prompt(text.trim()).await;
        }
        if line == "/mode" || line == "/model" {
            self.list_choices(&line[1..]);
            self.idle_prompt();
            return Ok(());
        }
        match classify(line, &self.renderer.commands) {
            Line::Prompt(text) => self.send_prompt(text).await,
            Line::Unknown(name) => {
                self.tell_unknown(name);
                self.idle_prompt();
                Ok(())
            }
        }
    }

    /// Whether a line typed during a turn is an unknown command (then told, not queued).
    pub(crate) fn unknown_while_running(&mut self, line: &str) -> bool {
        let own = command_name(line).is_some_and(|name| OWN.contains(&name) || name == "exit");
        if own {
            return false;
        }
        match classify(line, &self.renderer.commands) {
            Line::Unknown(name) => {
                self.tell_unknown(name);
                true
            }
            Line::Prompt(_) => false,
        }
    }

    fn tell_unknown(&mut self, name: &str) {
        let known = known(self.rewinding, &self.renderer.commands);
        self.renderer.status(&format!(
            "(unknown command /{name}: not sent. Commands: {known}; /help says what they do, \
             and a line starting with // is sent as it is)"
        ));
    }

    /// `/mode` or `/model` alone: the choices (from the session's completions).
    fn list_choices(&mut self, command: &str) {
        let prefix = format!("{command} ");
        let choices: Vec<&str> = self
            .built_in
            .iter()
            .filter_map(|c| c.strip_prefix(&prefix))
            .collect();
        let text = if choices.is_empty() {
            format!("(usage: /{command} NAME)")
        } else {
            format!("(usage: /{command} NAME; one of: {})", choices.join(", "))
        };
        self.renderer.status(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> Vec<(String, String)> {
        vec![
            ("compact".into(), String::new()),
            ("plan".into(), String::new()),
        ]
    }

    #[test]
    fn lines_are_prompts_the_agents_commands_or_unknown() {
        assert_eq!(
            classify("/plan do it", &agent()),
            Line::Prompt("/plan do it")
        );
        assert_eq!(classify("/plna do it", &agent()), Line::Unknown("plna"));
        assert_eq!(
            classify("/etc/hosts is wrong", &agent()),
            Line::Prompt("/etc/hosts is wrong")
        );
        assert_eq!(classify("//plna", &agent()), Line::Prompt("/plna"));
        assert_eq!(classify("just text", &agent()), Line::Prompt("just text"));
        assert_eq!(classify("/", &agent()), Line::Prompt("/"));
    }

    #[test]
    fn the_known_commands_are_listed_each_once() {
        let mut theirs = agent();
        theirs.push(("rewind".into(), String::new()));
        assert_eq!(
            known(true, &theirs),
            "talaria-chat's: /cancel /help /mode /model /queue /quit /rewind; \
             the agent's: /compact /plan"
        );
        assert_eq!(
            known(false, &theirs),
            "talaria-chat's: /cancel /help /mode /model /queue /quit; \
             the agent's: /compact /plan /rewind"
        );
    }
}
