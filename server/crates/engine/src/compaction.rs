//! The compression hook called on context overflow. This is the cheap first pass of a
//! compressor: old tool outputs (before the latest user message) are replaced by a one-line
//! marker, which keeps every tool call/result pair valid. The full summarising compressor is a
//! later milestone; when nothing is left to prune, the hook says so and the turn fails clearly.

use talaria_record::{EntryBody, Transcript};

/// Tool outputs shorter than this are left alone.
pub const PRUNE_MIN_CHARS: usize = 200;

/// What the hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pruned {
    pub results: usize,
    pub chars: usize,
}

/// Prunes old tool outputs (what the model reads; the client's copy stays) in place. `Err`
/// explains why nothing could be freed.
pub fn prune_old_tool_output(transcript: &mut Transcript) -> Result<Pruned, String> {
    let mut rewritten = Vec::new();
    let entries = transcript.entries_mut();
    let last_user = entries
        .iter()
        .rposition(|e| matches!(e.body, EntryBody::User { .. }))
        .unwrap_or(0);
    let mut pruned = Pruned {
        results: 0,
        chars: 0,
    };
    for entry in &mut entries[..last_user] {
        if let EntryBody::ToolResult(result) = &mut entry.body
            && result.model_text.chars().count() > PRUNE_MIN_CHARS
            && !result.model_text.starts_with("[Old tool output cleared")
        {
            let size = result.model_text.chars().count();
            result.model_text =
                format!("[Old tool output cleared to save context space: {size} characters]");
            rewritten.push(entry.id);
            pruned.results += 1;
            pruned.chars += size;
        }
    }
    for id in rewritten {
        transcript.mark_rewritten(id);
    }
    if pruned.results == 0 {
        return Err("the conversation does not fit the model's context window, and there are no old tool outputs left to clear (the full compressor is not available yet); start a new session or use a model with a larger context window".into());
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_record::ModelMessage;
    use talaria_record::testing::{assert_valid, assistant, result, user};

    #[test]
    fn prunes_only_old_long_tool_outputs_and_keeps_pairs() {
        let long = "x".repeat(1000);
        let mut transcript = Transcript::with_system("s");
        transcript.push(user("q1"));
        transcript.push(assistant(
            "",
            &[("c", "read_file", "{}"), ("d", "read_file", "{}")],
        ));
        transcript.push(result("c", "read_file", &long));
        transcript.push(result("d", "read_file", "short"));
        transcript.push(user("q2"));
        transcript.push(assistant("", &[("e", "read_file", "{}")]));
        transcript.push(result("e", "read_file", &long));
        let pruned = prune_old_tool_output(&mut transcript).expect("pruned");
        assert_eq!(
            pruned,
            Pruned {
                results: 1,
                chars: 1000
            }
        );
        let messages = transcript.model_messages();
        assert!(
            matches!(&messages[3], ModelMessage::Tool { call_id: "c", content } if content.contains("1000 characters"))
        );
        assert!(matches!(&messages[4], ModelMessage::Tool { content, .. } if content == "short"));
        assert!(
            matches!(&messages[7], ModelMessage::Tool { content, .. } if content.len() == 1000)
        );
        assert_valid(&transcript);
        let rewritten = transcript.take_rewritten();
        assert_eq!(
            rewritten.len(),
            1,
            "the journal saves the pruned entry again"
        );
        assert!(prune_old_tool_output(&mut transcript).is_err());
    }
}
