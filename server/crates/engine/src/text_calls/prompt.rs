//! A request without native tools, for servers whose tool-call parser rejects the model's own
//! output: the tools are described in the system prompt with the call format the model writes
//! (`<tool_call>{"name": …, "arguments": …}</tool_call>`), and earlier calls and results are
//! written as that text, so the request carries no `tools` field and no tool messages.

use std::collections::HashSet;

use serde_json::Value;
use talaria_provider::ToolSpec;
use talaria_record::{AssistantEntry, Entry, EntryBody, Transcript};

/// How a call is written as text, and what a result looks like.
const CALL_FORMAT: &str = "# Tools\n\nYou can call the tools listed in <tools></tools> below. \
    To call one, write the call and stop there:\n<tool_call>\n{\"name\": \"<tool name>\", \
    \"arguments\": {<the arguments as JSON>}}\n</tool_call>\nMake one call at a time. Its \
    result comes back in <tool_response></tool_response>. When no tool is needed, answer in \
    plain text.\n\n<tools>\n";

/// The tools, described for the system prompt.
pub(crate) fn describe_tools(tools: &[ToolSpec]) -> String {
    let mut text = CALL_FORMAT.to_string();
    for tool in tools {
        // Name first, as models write calls.
        text.push_str(&format!(
            "{{\"name\": {}, \"description\": {}, \"parameters\": {}}}",
            Value::String(tool.name.clone()),
            Value::String(tool.description.clone()),
            tool.parameters
        ));
        text.push('\n');
    }
    text.push_str("</tools>");
    text
}

/// A call as the model writes it in this mode.
fn call_text(name: &str, arguments: &str) -> String {
    let arguments: Value =
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()));
    format!(
        "<tool_call>\n{{\"name\": {}, \"arguments\": {arguments}}}\n</tool_call>",
        Value::String(name.to_string())
    )
}

/// The record as a request without native tools reads it: the tools described at the end of
/// the system prompt, calls as text in the answers that made them, the results of one answer
/// as one user message. Ids and compaction marks are kept, so summaries stay where they are.
pub(crate) fn with_tools_in_prompt(transcript: &Transcript, tools: &[ToolSpec]) -> Transcript {
    let described = describe_tools(tools);
    let mut entries: Vec<Entry> = Vec::with_capacity(transcript.len());
    let mut open: HashSet<String> = HashSet::new();
    // The entry the results of the current answer are gathered in.
    let mut gathering: Option<usize> = None;
    for entry in transcript.entries() {
        let body = match &entry.body {
            EntryBody::System { text, environment } => EntryBody::System {
                text: format!("{}\n\n{described}", text.trim_end()),
                environment: environment.clone(),
            },
            EntryBody::Assistant(assistant) => {
                open = assistant.tool_calls.iter().map(|c| c.id.clone()).collect();
                gathering = None;
                EntryBody::Assistant(AssistantEntry {
                    text: with_calls_as_text(assistant),
                    reasoning: assistant.reasoning.clone(),
                    tool_calls: Vec::new(),
                    model: assistant.model.clone(),
                    message_id: assistant.message_id.clone(),
                })
            }
            EntryBody::ToolResult(result) if open.remove(&result.call_id) => {
                let response = format!(
                    "<tool_response>\n{}\n</tool_response>",
                    result.model_text.trim_end()
                );
                if let Some(index) = gathering
                    && entries[index].compacted == entry.compacted
                    && let EntryBody::Nudge { text } = &mut entries[index].body
                {
                    text.push('\n');
                    text.push_str(&response);
                    // Kept (hidden) so its id still anchors what points at it.
                    entries.push(Entry {
                        compacted: true,
                        body: EntryBody::Nudge {
                            text: String::new(),
                        },
                        ..entry.clone()
                    });
                    continue;
                }
                gathering = Some(entries.len());
                EntryBody::Nudge { text: response }
            }
            // A result without its call is not read by the model either way.
            EntryBody::ToolResult(_) => {
                entries.push(Entry {
                    compacted: true,
                    ..entry.clone()
                });
                continue;
            }
            other => {
                if !matches!(other, EntryBody::Plan { .. } | EntryBody::Notice { .. }) {
                    gathering = None;
                    open.clear();
                }
                other.clone()
            }
        };
        entries.push(Entry {
            body,
            ..entry.clone()
        });
    }
    let mut converted = Transcript::from_entries(entries);
    if !converted
        .entries()
        .iter()
        .any(|e| matches!(e.body, EntryBody::System { .. }))
    {
        converted.set_system_prompt(described);
    }
    converted
}

/// An answer's text with its calls written after it.
fn with_calls_as_text(assistant: &AssistantEntry) -> String {
    let mut text = assistant.text.trim_end().to_string();
    for call in &assistant.tool_calls {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&call_text(&call.name, &call.arguments));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use talaria_record::ModelMessage;
    use talaria_record::testing::{assistant, result, user};

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]
    }

    #[test]
    fn calls_and_results_become_text_and_the_tools_go_in_the_system_prompt() {
        let mut transcript = Transcript::with_system("You help.");
        transcript.push(user("read a and b"));
        transcript.push(assistant(
            "Reading.",
            &[
                ("c1", "read_file", "{\"path\":\"a\"}"),
                ("c2", "read_file", "{\"path\":\"b\"}"),
            ],
        ));
        transcript.push(result("c1", "read_file", "A"));
        transcript.push(result("c2", "read_file", "B"));
        transcript.push(assistant("Both read.", &[]));
        let converted = with_tools_in_prompt(&transcript, &tools());
        let messages = converted.model_messages();
        talaria_record::testing::assert_valid_messages(&messages);
        let ModelMessage::System(system) = &messages[0] else {
            panic!("{messages:?}");
        };
        assert!(system.starts_with("You help.\n\n# Tools"));
        assert!(
            system.contains("{\"name\": \"read_file\", \"description\""),
            "{system}"
        );
        let ModelMessage::Assistant {
            text, tool_calls, ..
        } = &messages[2]
        else {
            panic!("{messages:?}");
        };
        assert!(tool_calls.is_empty());
        assert!(
            text.starts_with(
                "Reading.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\":\"a\"}}\n</tool_call>"
            ),
            "{text}"
        );
        assert_eq!(text.matches("<tool_call>").count(), 2);
        let ModelMessage::User(parts) = &messages[3] else {
            panic!("{messages:?}");
        };
        let talaria_record::UserPart::Text { text } = &parts[0] else {
            panic!("{parts:?}");
        };
        assert_eq!(
            text,
            "<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>"
        );
        assert_eq!(messages.len(), 5, "one user message for both results");
        assert!(
            messages
                .iter()
                .all(|m| !matches!(m, ModelMessage::Tool { .. }))
        );
        // The record itself is untouched, and ids line up.
        assert_eq!(converted.last_id(), transcript.last_id());
        assert!(matches!(
            transcript.model_messages()[3],
            ModelMessage::Tool { .. }
        ));
    }
}
