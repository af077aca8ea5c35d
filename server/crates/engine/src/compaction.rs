//! The compression hook called on context overflow. This is the cheap first pass of a
//! compressor: old tool outputs (before the latest user message) are replaced by a one-line
//! marker, which keeps every tool call/result pair valid. The full summarising compressor is a
//! later milestone; when nothing is left to prune, the hook says so and the turn fails clearly.

use talaria_provider::ChatMessage;

/// Tool outputs shorter than this are left alone.
pub const PRUNE_MIN_CHARS: usize = 200;

/// What the hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pruned {
    pub results: usize,
    pub chars: usize,
}

/// Prunes old tool outputs in place. `Err` explains why nothing could be freed.
pub fn prune_old_tool_output(history: &mut [ChatMessage]) -> Result<Pruned, String> {
    let last_user = history
        .iter()
        .rposition(|m| matches!(m, ChatMessage::User(_)))
        .unwrap_or(0);
    let mut pruned = Pruned {
        results: 0,
        chars: 0,
    };
    for message in &mut history[..last_user] {
        if let ChatMessage::Tool { content, .. } = message
            && content.chars().count() > PRUNE_MIN_CHARS
            && !content.starts_with("[Old tool output cleared")
        {
            let size = content.chars().count();
            *content =
                format!("[Old tool output cleared to save context space: {size} characters]");
            pruned.results += 1;
            pruned.chars += size;
        }
    }
    if pruned.results == 0 {
        return Err("the conversation does not fit the model's context window, and there are no old tool outputs left to clear (the full compressor is not available yet); start a new session or use a model with a larger context window".into());
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_provider::{ToolCallRequest, UserPart};

    #[test]
    fn prunes_only_old_long_tool_outputs_and_keeps_pairs() {
        let call = ToolCallRequest {
            id: "c".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        };
        let mut history = vec![
            ChatMessage::System("s".into()),
            ChatMessage::User(vec![UserPart::Text("q1".into())]),
            ChatMessage::Assistant {
                text: "".into(),
                reasoning: None,
                reasoning_signature: None,
                tool_calls: vec![call.clone()],
            },
            ChatMessage::Tool {
                call_id: "c".into(),
                content: "x".repeat(1000),
            },
            ChatMessage::Tool {
                call_id: "d".into(),
                content: "short".into(),
            },
            ChatMessage::User(vec![UserPart::Text("q2".into())]),
            ChatMessage::Tool {
                call_id: "e".into(),
                content: "y".repeat(1000),
            },
        ];
        let pruned = prune_old_tool_output(&mut history).expect("pruned");
        assert_eq!(
            pruned,
            Pruned {
                results: 1,
                chars: 1000
            }
        );
        assert!(
            matches!(&history[3], ChatMessage::Tool { call_id, content } if call_id == "c" && content.contains("1000 characters"))
        );
        assert!(matches!(&history[4], ChatMessage::Tool { content, .. } if content == "short"));
        assert!(
            matches!(&history[6], ChatMessage::Tool { content, .. } if content.len() == 1000),
            "the latest ask is kept"
        );
        assert!(
            prune_old_tool_output(&mut history).is_err(),
            "nothing left: a clear error"
        );
    }
}
