//! `/rewind` in talaria-chat: the prompts of the session as the agent named them (live from
//! each prompt's answer, on a load from the replayed user messages), listed newest last in
//! the record's order — a prompt takes its place when sent, so a steer that entered its turn
//! comes after it, where the agent recorded it — and a rewind to before one of them through
//! `_session/rewind`, files too on request, told with what went back.

use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A prompt of the conversation (or a steer), and the answer just before it.
#[derive(Debug, Clone)]
struct Prompt {
    /// The agent's id for it; `None` while the prompt is sent and not answered yet.
    id: Option<String>,
    text: String,
    answer_before: Option<(String, String)>,
}

/// What `/rewind` knows of the conversation.
#[derive(Debug, Default)]
pub struct Conversation {
    prompts: Vec<Prompt>,
    /// The answer streaming or last streamed: its id and text so far.
    answer: Option<(String, String)>,
}

/// What a `/rewind` line asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// `/rewind` alone: list the prompts.
    List,
    /// `/rewind N [files] [force]`.
    Rewind {
        back: usize,
        files: bool,
        force: bool,
    },
}

/// Reads a `/rewind …` line.
pub fn parse(line: &str) -> anyhow::Result<Asked> {
    let args = line.strip_prefix("/rewind").unwrap_or_default();
    if args.trim().is_empty() {
        return Ok(Asked::List);
    }
    let (mut back, mut files, mut force) = (None, false, false);
    for word in args.split_whitespace() {
        match word {
            "files" => files = true,
            "force" => force = true,
            n => {
                let count = n.parse::<usize>().ok().filter(|n| *n > 0);
                back = Some(count.ok_or_else(|| {
                    anyhow::anyhow!(
                        "usage: /rewind [N] [files] [force] (N: how many prompts back, 1 = the last)"
                    )
                })?);
            }
        }
    }
    Ok(Asked::Rewind {
        back: back.unwrap_or(1),
        files,
        force,
    })
}

fn fingerprint(text: &str) -> String {
    let hex: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn point(id: &str, text: &str) -> Value {
    json!({"messageId": id, "messageFingerprint": fingerprint(text), "messageOccurrence": 1})
}

impl Conversation {
    /// Follows a `session/update`: answers as they stream, user messages a load replays.
    pub fn on_update(&mut self, update: &Value) {
        let id = update["messageId"].as_str().unwrap_or_default();
        let text = update["content"]["text"].as_str().unwrap_or_default();
        match update["sessionUpdate"].as_str() {
            Some("agent_message_chunk") if !id.is_empty() => match &mut self.answer {
                Some((current, so_far)) if current == id => so_far.push_str(text),
                _ => self.answer = Some((id.to_string(), text.to_string())),
            },
            Some("user_message_chunk") if !id.is_empty() => match self.prompts.last_mut() {
                Some(last) if last.id.as_deref() == Some(id) => last.text.push_str(text),
                _ => self.prompts.push(Prompt {
                    id: Some(id.to_string()),
                    text: text.to_string(),
                    answer_before: self.answer.clone(),
                }),
            },
            _ => {}
        }
    }

    /// A prompt is sent: it enters the record before anything said during its turn.
    pub fn on_sent(&mut self, text: &str) {
        self.prompts.push(Prompt {
            id: None,
            text: text.to_string(),
            answer_before: self.answer.clone(),
        });
    }

    /// Its answer names its message (one the agent does not name cannot be rewound to).
    pub fn on_answered(&mut self, response: &Value) {
        let Some(index) = self.prompts.iter().rposition(|p| p.id.is_none()) else {
            return;
        };
        match response["result"]["_meta"]["userMessageId"].as_str() {
            Some(id) => self.prompts[index].id = Some(id.to_string()),
            None => {
                self.prompts.remove(index);
            }
        }
    }

    /// The prompts the agent named, oldest first.
    fn named(&self) -> Vec<&Prompt> {
        self.prompts.iter().filter(|p| p.id.is_some()).collect()
    }

    /// The prompts, newest last, numbered by how far back they are.
    pub fn listing(&self) -> Vec<String> {
        let named = self.named();
        let count = named.len();
        named
            .iter()
            .enumerate()
            .map(|(index, prompt)| {
                let shown: String = prompt.text.chars().take(70).collect();
                format!("{:>3}  {shown}", count - index)
            })
            .collect()
    }

    /// What a rewind to before the `back`th last prompt takes back: the prompts' texts.
    pub fn taken(&self, back: usize) -> Vec<String> {
        let named = self.named();
        let from = named.len().saturating_sub(back);
        named[from..].iter().map(|p| p.text.clone()).collect()
    }

    /// The `_session/rewind` params for going back before the `back`th last prompt.
    pub fn request(
        &self,
        session: &str,
        back: usize,
        files: bool,
        force: bool,
    ) -> anyhow::Result<Value> {
        let named = self.named();
        let index = named.len().checked_sub(back).ok_or_else(|| {
            anyhow::anyhow!("there are {} prompt(s) to go back over", named.len())
        })?;
        let target = named[index];
        let mut params = json!({
            "sessionId": session,
            "beforeMessage": point(target.id.as_deref().unwrap_or_default(), &target.text),
            "restoreFiles": files,
            "force": force,
        });
        if let Some((id, text)) = &target.answer_before {
            params["resumeAtMessage"] = point(id, text);
        }
        Ok(params)
    }

    /// The rewind to before the `back`th last prompt was done.
    pub fn rewound(&mut self, back: usize) {
        self.prompts.retain(|p| p.id.is_some());
        let keep = self.prompts.len().saturating_sub(back);
        let answer = self.prompts.get(keep).and_then(|p| p.answer_before.clone());
        self.prompts.truncate(keep);
        self.answer = answer;
    }
}

/// A prompt's text as a rewind's answer names it: its first line, cut short.
fn quoted(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut shown: String = line.chars().take(40).collect();
    if shown.len() < line.len() {
        shown.push('…');
    }
    format!("\"{shown}\"")
}

/// A path as the user sees it: inside the session's folder, relative to it.
fn shown_path(path: &str, cwd: &Path) -> String {
    match Path::new(path).strip_prefix(cwd) {
        Ok(inside) if !inside.as_os_str().is_empty() => inside.display().to_string(),
        _ => path.to_string(),
    }
}

/// The files a rewind put back, some of them named.
fn files_line(paths: &[String]) -> String {
    const SHOWN: usize = 6;
    let mut named: Vec<&str> = paths.iter().take(SHOWN).map(String::as_str).collect();
    let more = paths.len().saturating_sub(SHOWN);
    let rest = format!("… {more} more");
    if more > 0 {
        named.push(&rest);
    }
    if named.is_empty() {
        return "  files put back: 0".into();
    }
    format!("  files put back: {} ({})", paths.len(), named.join(", "))
}

/// What the agent's answer to a rewind says, as lines: the prompts that went back (`taken`,
/// oldest first), and the files (relative to the session's folder, `cwd`).
pub fn told(answer: &Value, taken: &[String], cwd: &Path) -> Vec<String> {
    if let Some(error) = answer["error"]["message"].as_str() {
        return vec![format!("(rewind refused: {error})")];
    }
    let result = &answer["result"];
    if result["rewound"] != true {
        return vec![format!(
            "(not rewound: {})",
            result["reason"].as_str().unwrap_or("no reason given")
        )];
    }
    let prompts: Vec<String> = taken.iter().map(|t| quoted(t)).collect();
    let mut lines = vec![match prompts.len() {
        0 => "(rewound)".to_string(),
        1 => format!("(rewound: the prompt {} went back)", prompts[0]),
        n => format!("(rewound: {n} prompts went back: {})", prompts.join(", ")),
    }];
    let list = |key: &str| -> Vec<String> {
        result["files"][key]
            .as_array()
            .map(|paths| {
                paths
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|path| shown_path(path, cwd))
                    .collect()
            })
            .unwrap_or_default()
    };
    if result.get("files").is_none() {
        lines.push("  files: left as they are (`/rewind N files` puts them back too)".into());
    } else {
        lines.push(files_line(&list("restored")));
        for path in list("skipped") {
            lines.push(format!("  left (changed since; add `force`): {path}"));
        }
        for failed in result["files"]["failed"].as_array().into_iter().flatten() {
            lines.push(format!(
                "  not put back: {}: {}",
                shown_path(failed["path"].as_str().unwrap_or_default(), cwd),
                failed["error"].as_str().unwrap_or_default()
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(kind: &str, id: &str, text: &str) -> Value {
        json!({"sessionUpdate": kind, "messageId": id, "content": {"type": "text", "text": text}})
    }

    #[test]
    fn the_prompts_are_named_as_the_agent_named_them_and_a_rewind_guards_with_the_answer_before() {
        let mut conversation = Conversation::default();
        conversation.on_update(&chunk("user_message_chunk", "user-2", "first"));
        conversation.on_update(&chunk("agent_message_chunk", "agent-3", "one "));
        conversation.on_update(&chunk("agent_message_chunk", "agent-3", "answer"));
        conversation.on_sent("second");
        conversation.on_answered(&json!({"result": {"_meta": {"userMessageId": "user-4"}}}));
        assert_eq!(conversation.listing(), ["  2  first", "  1  second"]);
        let params = conversation.request("s", 1, true, false).expect("params");
        assert_eq!(params["beforeMessage"]["messageId"], "user-4");
        assert_eq!(params["resumeAtMessage"]["messageId"], "agent-3");
        assert_eq!(
            params["resumeAtMessage"]["messageFingerprint"],
            fingerprint("one answer")
        );
        assert_eq!(params["restoreFiles"], true);
        let first = conversation.request("s", 2, false, false).expect("params");
        assert!(first.get("resumeAtMessage").is_none());
        assert!(conversation.request("s", 3, false, false).is_err());
        conversation.rewound(1);
        assert_eq!(conversation.listing(), ["  1  first"]);
    }

    #[test]
    fn a_steer_comes_after_the_prompt_it_steered_as_in_the_record() {
        let mut conversation = Conversation::default();
        conversation.on_sent("first");
        conversation.on_update(&chunk("agent_message_chunk", "agent-2", "so far"));
        let mut steer = chunk("user_message_chunk", "user-3", "use tabs");
        steer["_meta"] = json!({"talaria": {"steered": true}});
        conversation.on_update(&steer);
        conversation.on_answered(&json!({"result": {"_meta": {"userMessageId": "user-1"}}}));
        assert_eq!(conversation.listing(), ["  2  first", "  1  use tabs"]);
        assert_eq!(conversation.taken(1), ["use tabs"]);
        let params = conversation.request("s", 1, false, false).expect("params");
        assert_eq!(params["beforeMessage"]["messageId"], "user-3");
        assert_eq!(params["resumeAtMessage"]["messageId"], "agent-2");
        // A prompt the agent did not name (its turn failed) is not listed.
        conversation.on_sent("failed");
        conversation.on_answered(&json!({"error": {"message": "no"}}));
        assert_eq!(conversation.listing().len(), 2);
        conversation.rewound(1);
        assert_eq!(conversation.listing(), ["  1  first"]);
    }

    #[test]
    fn a_rewinds_answer_says_which_prompts_and_files_went_back() {
        let answer = json!({"result": {"rewound": true, "files": {
            "restored": ["/w/a.txt", "/w/b.txt"], "skipped": ["/elsewhere/c.txt"], "failed": []}}});
        let taken = ["change things".to_string(), "and more\nlines".to_string()];
        assert_eq!(
            told(&answer, &taken, Path::new("/w")),
            [
                "(rewound: 2 prompts went back: \"change things\", \"and more\")",
                "  files put back: 2 (a.txt, b.txt)",
                "  left (changed since; add `force`): /elsewhere/c.txt",
            ]
        );
        let without_files = json!({"result": {"rewound": true}});
        assert_eq!(
            told(&without_files, &taken[..1], Path::new("/w")),
            [
                "(rewound: the prompt \"change things\" went back)",
                "  files: left as they are (`/rewind N files` puts them back too)",
            ]
        );
    }

    #[test]
    fn the_line_takes_a_count_files_and_force() {
        assert_eq!(parse("/rewind").expect("parses"), Asked::List);
        assert_eq!(
            parse("/rewind 2 files").expect("parses"),
            Asked::Rewind {
                back: 2,
                files: true,
                force: false
            }
        );
        assert!(parse("/rewind x").is_err());
    }
}
