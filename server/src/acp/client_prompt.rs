//! A client's system prompt (`systemPrompt` on `session/new`, `load`, `resume` and `fork`),
//! checked before anything is created; the session room applies it
//! (`sessions/client_prompt.rs`).

use crate::sessions::{ClientPrompt, PromptMode};
use talaria_protocol::acp::{self, SystemPromptMode};
use talaria_protocol::errors;

/// Checks `prompt`: a mode Talaria offers, at least one block, text blocks only.
pub(super) fn parse(
    prompt: Option<&acp::SystemPrompt>,
) -> Result<Option<ClientPrompt>, acp::Error> {
    let Some(prompt) = prompt else {
        return Ok(None);
    };
    let mode = match &prompt.mode {
        SystemPromptMode::Append => PromptMode::Append,
        SystemPromptMode::Override => PromptMode::Override,
        other => {
            return Err(errors::invalid_params(format!(
                "systemPrompt.mode {other:?} is not offered (offered: \"append\", \"override\")"
            )));
        }
    };
    if prompt.content.is_empty() {
        return Err(errors::invalid_params(
            "systemPrompt.content must hold at least one text block",
        ));
    }
    let mut texts = Vec::with_capacity(prompt.content.len());
    for (index, block) in prompt.content.iter().enumerate() {
        match block {
            acp::ContentBlock::Text(text) => texts.push(text.text.as_str()),
            _ => {
                return Err(errors::invalid_params(format!(
                    "systemPrompt.content[{index}] is not a text block: only text is accepted"
                )));
            }
        }
    }
    Ok(Some(ClientPrompt {
        mode,
        text: texts.join("\n\n"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(mode: SystemPromptMode, blocks: Vec<acp::ContentBlock>) -> acp::SystemPrompt {
        acp::SystemPrompt::new(blocks).mode(mode)
    }

    fn text(t: &str) -> acp::ContentBlock {
        acp::ContentBlock::Text(acp::TextContent::new(t))
    }

    #[test]
    fn append_follows_the_stable_instructions_and_override_replaces_talarias_own() {
        let append = parse(Some(&prompt(
            SystemPromptMode::Append,
            vec![text("a"), text("b")],
        )))
        .expect("valid")
        .expect("some");
        assert_eq!(
            append.apply("T", "\nP"),
            "T\nP\n\n# Instructions from the client\n\na\n\nb"
        );
        let replace = parse(Some(&prompt(
            SystemPromptMode::Override,
            vec![text("only")],
        )))
        .expect("valid")
        .expect("some");
        assert_eq!(replace.apply("T", "\nP"), "only\nP");
        assert_eq!(parse(None).expect("none"), None);
    }

    #[test]
    fn an_empty_prompt_a_non_text_block_or_an_unknown_mode_is_invalid() {
        let empty = parse(Some(&prompt(SystemPromptMode::Append, Vec::new())));
        let image = acp::ContentBlock::Image(acp::ImageContent::new("AAAA", "image/png"));
        let not_text = parse(Some(&prompt(SystemPromptMode::Append, vec![image])));
        let unknown: acp::SystemPrompt = serde_json::from_value(
            serde_json::json!({"mode": "_prepend", "content": [{"type": "text", "text": "x"}]}),
        )
        .expect("unknown modes are kept");
        let unknown = parse(Some(&unknown));
        for result in [empty, not_text, unknown] {
            let error = result.expect_err("refused");
            assert_eq!(i32::from(error.code), -32602, "{}", error.message);
        }
    }
}
