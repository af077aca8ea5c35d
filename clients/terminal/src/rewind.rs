//! `/rewind` in talaria-chat: the prompts of the session as the agent named them (live from
//! each prompt's answer, on a load from the replayed user messages), listed newest last, and
//! a rewind to before one of them through `_session/rewind`, files too on request.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A prompt of the conversation, and the answer just before it.
#[derive(Debug, Clone)]
struct Prompt {
    id: String,
    text: String,
    answer_before: Option<(String, String)>,
}

/// What `/rewind` knows of the conversation.
#[derive(Debug, Default)]
pub struct Conversation {
    prompts: Vec<Prompt>,
    /// The answer streaming or last streamed: its id and text so far.
    answer: Option<(String, String)>,
    /// A prompt sent and not answered yet: its text and the answer before it.
    sent: Option<(String, Option<(String, String)>)>,
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
                Some(last) if last.id == id => last.text.push_str(text),
                _ => self.prompts.push(Prompt {
                    id: id.to_string(),
                    text: text.to_string(),
                    answer_before: self.answer.clone(),
                }),
            },
            _ => {}
        }
    }

    /// A prompt is sent.
    pub fn on_sent(&mut self, text: &str) {
        self.sent = Some((text.to_string(), self.answer.clone()));
    }

    /// Its answer names its message.
    pub fn on_answered(&mut self, response: &Value) {
        let Some((text, answer_before)) = self.sent.take() else {
            return;
        };
        if let Some(id) = response["result"]["_meta"]["userMessageId"].as_str() {
            self.prompts.push(Prompt {
                id: id.to_string(),
                text,
                answer_before,
            });
        }
    }

    /// The prompts, newest last, numbered by how far back they are.
    pub fn listing(&self) -> Vec<String> {
        let count = self.prompts.len();
        self.prompts
            .iter()
            .enumerate()
            .map(|(index, prompt)| {
                let shown: String = prompt.text.chars().take(70).collect();
                format!("{:>3}  {shown}", count - index)
            })
            .collect()
    }

    /// The `_session/rewind` params for going back before the `back`th last prompt.
    pub fn request(
        &self,
        session: &str,
        back: usize,
        files: bool,
        force: bool,
    ) -> anyhow::Result<Value> {
        let index = self.prompts.len().checked_sub(back).ok_or_else(|| {
            anyhow::anyhow!("there are {} prompt(s) to go back over", self.prompts.len())
        })?;
        let target = &self.prompts[index];
        let mut params = json!({
            "sessionId": session,
            "beforeMessage": point(&target.id, &target.text),
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
        let keep = self.prompts.len().saturating_sub(back);
        let answer = self.prompts.get(keep).and_then(|p| p.answer_before.clone());
        self.prompts.truncate(keep);
        self.answer = answer;
    }
}

/// What the agent's answer to a rewind says, as lines.
pub fn told(answer: &Value) -> Vec<String> {
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
    let mut lines = vec!["(rewound)".to_string()];
    let list = |key: &str| -> Vec<String> {
        result["files"][key]
            .as_array()
            .map(|paths| {
                paths
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    if result.get("files").is_some() {
        lines.push(format!("  files put back: {}", list("restored").len()));
        for path in list("skipped") {
            lines.push(format!("  left (changed since; add `force`): {path}"));
        }
        for failed in result["files"]["failed"].as_array().into_iter().flatten() {
            lines.push(format!(
                "  not put back: {}: {}",
                failed["path"].as_str().unwrap_or_default(),
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
