//! How session updates look in a terminal: the answer on stdout (its Markdown styled when
//! stdout is a terminal, as it is written otherwise); thoughts (dimmed), tool cards, plans,
//! notices and questions on stderr. Colours and styles only on a terminal, and never with
//! `NO_COLOR`.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use serde_json::Value;

/// The most diff lines shown in a permission question.
const DIFF_LINES: usize = 40;

/// Where the last output went, so a switch starts on a new line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Start,
    Answer,
    Thought,
    Other,
}

/// The renderer's state for one session.
pub struct Renderer {
    color: bool,
    /// The answer's Markdown, styled (stdout is a terminal).
    markdown: Option<crate::markdown::AnswerStream>,
    last: Stream,
    /// Tool-call titles and their latest content, by id.
    titles: HashMap<String, String>,
    contents: HashMap<String, Value>,
    /// The agent's slash commands: name and description.
    pub commands: Vec<(String, String)>,
    /// The last error notice shown, so the prompt's error that says the same is not shown
    /// again.
    told_error: Option<String>,
}

/// At most `max` characters, cut at a word with an ellipsis when cut at all.
fn shorten(text: &str, max: usize) -> String {
    let text = first_line(text);
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    let at_word = match cut.rfind(char::is_whitespace) {
        Some(space) if space > max / 2 => cut[..space].trim_end(),
        _ => cut.as_str(),
    };
    format!("{at_word}…")
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

impl Renderer {
    pub fn new() -> Self {
        Self {
            color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            markdown: (std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none())
                .then(crate::markdown::AnswerStream::default),
            last: Stream::Start,
            titles: HashMap::new(),
            contents: HashMap::new(),
            commands: Vec::new(),
            told_error: None,
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Moves to a new line when the output switches streams.
    fn switch(&mut self, to: Stream) {
        if self.last != to && matches!(self.last, Stream::Answer | Stream::Thought) {
            if self.last == Stream::Answer {
                if let Some(markdown) = &mut self.markdown {
                    markdown.finish(&mut std::io::stdout());
                }
                println!();
                let _ = std::io::stdout().flush();
            } else {
                eprintln!();
            }
        }
        self.last = to;
    }

    /// Ends the current line before a prompt or a status line.
    pub fn line_break(&mut self) {
        self.switch(Stream::Other);
    }

    /// A status line on stderr.
    pub fn status(&mut self, text: &str) {
        self.switch(Stream::Other);
        eprintln!("{text}");
    }

    /// An error as one readable line (unless an error notice already said it).
    pub fn error(&mut self, text: &str) {
        if self
            .told_error
            .take()
            .is_some_and(|told| told.contains(first_line(text)))
        {
            return;
        }
        self.switch(Stream::Other);
        let line = text.lines().next().unwrap_or(text);
        eprintln!("{}", self.paint("31", &format!("! {line}")));
    }

    /// The session banner; `sandbox` is what the agent says of its OS sandbox, if anything.
    pub fn banner(
        &mut self,
        model: &str,
        mode: &str,
        cwd: &str,
        session: &str,
        sandbox: Option<&str>,
    ) {
        let sandbox = match sandbox {
            Some("enforced") => " · sandboxed",
            Some("off") => " · SANDBOX OFF",
            Some("unavailable") => " · NO SANDBOX on this machine",
            _ => "",
        };
        let text = format!(
            "talaria-chat · model {model} · mode {mode}{sandbox} · {cwd}\nsession {session} · /help for commands, Ctrl-C cancels, Ctrl-C twice quits"
        );
        eprintln!("{}", self.paint("2", &text));
    }

    fn card_result(&self, update: &Value) -> Option<String> {
        let text = update["content"]
            .as_array()?
            .iter()
            .filter_map(|c| c["content"]["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        if text.trim().is_empty() {
            return None;
        }
        let lines = text.lines().count();
        Some(if lines > 1 {
            format!("{lines} lines")
        } else {
            first_line(&text).chars().take(80).collect()
        })
    }

    /// Prints one `session/update`.
    pub fn update(&mut self, update: &Value) {
        let text = update["content"]["text"].as_str().unwrap_or_default();
        let id = update["toolCallId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match update["sessionUpdate"].as_str().unwrap_or_default() {
            "user_message_chunk" if update["_meta"]["talaria"]["steered"] == Value::Bool(true) => {
                self.switch(Stream::Other);
                eprintln!("{}", self.paint("2", &format!("» steered: {text}")));
            }
            "agent_message_chunk" => {
                self.switch(Stream::Answer);
                match &mut self.markdown {
                    Some(markdown) => markdown.push(text, &mut std::io::stdout()),
                    None => {
                        print!("{text}");
                        let _ = std::io::stdout().flush();
                    }
                }
            }
            "agent_thought_chunk" => {
                self.switch(Stream::Thought);
                eprint!("{}", self.paint("2;3", text));
            }
            "tool_call" => {
                if let Some(title) = update["title"].as_str() {
                    self.titles.insert(id.clone(), title.to_string());
                }
                if update.get("content").is_some() {
                    self.contents.insert(id, update["content"].clone());
                }
            }
            "tool_call_update" => self.card_update(update, id),
            "plan" => {
                self.switch(Stream::Other);
                eprintln!("plan:");
                for entry in update["entries"].as_array().into_iter().flatten() {
                    let mark = match entry["status"].as_str() {
                        Some("completed") => "[x]",
                        Some("in_progress") => "[>]",
                        _ => "[ ]",
                    };
                    eprintln!("  {mark} {}", entry["content"].as_str().unwrap_or_default());
                }
            }
            "notice" => self.notice(update),
            "available_commands_update" => {
                self.commands = update["availableCommands"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| {
                        Some((
                            c["name"].as_str()?.to_string(),
                            c["description"].as_str().unwrap_or_default().to_string(),
                        ))
                    })
                    .collect();
            }
            _ => {}
        }
    }

    /// A card changed: its title and content kept; a finished card is told in one line.
    fn card_update(&mut self, update: &Value, id: String) {
        if let Some(title) = update["title"].as_str() {
            self.titles.insert(id.clone(), title.to_string());
        }
        if update.get("content").is_some_and(|c| !c.is_null()) {
            self.contents.insert(id.clone(), update["content"].clone());
        }
        let title = self
            .titles
            .get(&id)
            .cloned()
            .unwrap_or_else(|| "tool call".into());
        match update["status"].as_str() {
            Some("completed") => {
                let result = self
                    .card_result(update)
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                let line = format!("{} {title}{result}", self.paint("32", "✓"));
                self.status(&line);
            }
            Some("failed") => {
                let why = update["content"][0]["content"]["text"]
                    .as_str()
                    .map(first_line)
                    .unwrap_or("failed")
                    .chars()
                    .take(160)
                    .collect::<String>();
                let line = format!("{} {title}: {why}", self.paint("31", "✗"));
                self.status(&line);
            }
            _ => {}
        }
    }

    /// A notice, coloured by its severity (an error is remembered: the prompt's error then
    /// says nothing new).
    fn notice(&mut self, update: &Value) {
        let severity = update["severity"].as_str().unwrap_or("info");
        if severity == "error" {
            self.told_error = update["title"].as_str().map(str::to_string);
        }
        let code = match severity {
            "error" => "31",
            "warning" => "33",
            _ => "36",
        };
        let line = self.paint(
            code,
            &format!(
                "[{severity}] {}",
                update["title"].as_str().unwrap_or_default()
            ),
        );
        self.status(&line);
    }

    /// The diff (coloured, trimmed) of the call a permission question is about.
    pub fn question_diff(&self, params: &Value) -> Option<String> {
        let id = params["toolCall"]["toolCallId"].as_str()?;
        let content = params["toolCall"]
            .get("content")
            .filter(|c| c.is_array())
            .or_else(|| self.contents.get(id))?;
        let mut lines = Vec::new();
        for item in content.as_array()? {
            if item["type"] != "diff" {
                continue;
            }
            let path = item["path"].as_str().unwrap_or("?");
            let old = item["oldText"].as_str().unwrap_or("");
            let new = item["newText"].as_str().unwrap_or("");
            lines.push(self.paint("1", &format!("--- {path}")));
            let diff = similar::TextDiff::from_lines(old, new);
            for change in diff.unified_diff().context_radius(2).iter_hunks() {
                for line in change.to_string().lines() {
                    let painted = match line.chars().next() {
                        Some('+') => self.paint("32", line),
                        Some('-') => self.paint("31", line),
                        Some('@') => self.paint("36", line),
                        _ => line.to_string(),
                    };
                    lines.push(painted);
                }
            }
        }
        if lines.is_empty() {
            return None;
        }
        let cut = lines.len().saturating_sub(DIFF_LINES);
        lines.truncate(DIFF_LINES);
        if cut > 0 {
            lines.push(format!("… {cut} more lines"));
        }
        Some(lines.join("\n"))
    }

    /// The title of tool call `id` as last told.
    pub fn title_of(&self, id: &str) -> String {
        self.titles
            .get(id)
            .cloned()
            .unwrap_or_else(|| "a tool call".into())
    }

    /// The title of the call a permission question is about.
    pub fn question_title(&self, params: &Value) -> String {
        params["toolCall"]["title"]
            .as_str()
            .map(str::to_string)
            .or_else(|| {
                params["toolCall"]["toolCallId"]
                    .as_str()
                    .and_then(|id| self.titles.get(id).cloned())
            })
            .unwrap_or_else(|| "a tool call".into())
    }

    /// `/help` (with `/control` and `/detach` when `attached`).
    pub fn help(&mut self, attached: bool) {
        self.switch(Stream::Other);
        eprintln!("Commands:");
        if attached {
            eprintln!(
                "  {:<14} take control of the session (prompt, steer, cancel)",
                "/control"
            );
            eprintln!("  {:<14} leave the session (so does /quit)", "/detach");
        }
        for (name, what) in [
            (
                "/mode ID",
                "switch the approval mode (read-only, plan, ask, accept-edits, yolo)",
            ),
            ("/model NAME", "switch the model"),
            ("/cancel", "cancel the running turn (or press Ctrl-C)"),
            (
                "/queue TEXT",
                "while a turn runs: send TEXT after it (a line typed alone steers the turn)",
            ),
            (
                "/rewind [N]",
                "list the prompts, or go back before the Nth last (`files`: put files back too)",
            ),
            ("/help", "this list"),
            (
                "//TEXT",
                "send /TEXT as it is (a line starting with an unknown /command is not sent)",
            ),
            ("/quit", "leave (or press Ctrl-C twice, or Ctrl-D)"),
        ] {
            eprintln!("  {name:<14} {what}");
        }
        if !self.commands.is_empty() {
            eprintln!("The agent's commands:");
            for (name, what) in &self.commands {
                eprintln!("  /{name:<13} {}", shorten(what, 70));
            }
        }
    }
}

/// Reports the outcome of a command like `/mode` as one line.
pub fn reply_status(renderer: &mut Renderer, reply: &Value) {
    match reply.get("error") {
        Some(error) => renderer.error(error["message"].as_str().unwrap_or("failed")),
        None => renderer.status("ok"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_descriptions_are_cut_at_a_word_with_an_ellipsis() {
        let long = "Load the skill named deploy and follow its steps to ship the service to production safely";
        let short = shorten(long, 40);
        assert!(short.ends_with('…'), "{short}");
        assert!(short.chars().count() <= 40, "{short}");
        assert!(long.starts_with(short.trim_end_matches('…')), "{short}");
        assert!(
            short.trim_end_matches('…').ends_with("follow"),
            "cut at a word: {short}"
        );
        assert_eq!(shorten("fits", 40), "fits");
    }
}
