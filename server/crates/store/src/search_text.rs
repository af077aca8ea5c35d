//! What of an entry is searchable and how it is filed, shared by every store, and a user's
//! words as a safe query (no operator they typed can break it).

use talaria_record::{Entry, EntryBody, UserPart};

/// Tool output indexed per entry, at most.
const MAX_INDEXED_CHARS: usize = 8000;
/// Prose (messages, answers, summaries) indexed per entry, at most: a search finds an entry
/// by its opening, and a 50 MB answer costs the index no more than a long letter (a
/// PostgreSQL `tsvector` cannot hold more than 1 MB anyway).
pub(crate) const MAX_INDEXED_BYTES: usize = 64 * 1024;

/// The searchable text of an entry, if it has any (bounded, whatever the entry's size).
pub(crate) fn text_of(entry: &Entry) -> Option<String> {
    let text = match &entry.body {
        EntryBody::User { model_view, .. } => {
            let mut text = String::new();
            for part in model_view {
                if let UserPart::Text { text: part } = part {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(talaria_util::within_bytes(
                        part,
                        MAX_INDEXED_BYTES.saturating_sub(text.len()),
                    ));
                }
            }
            text
        }
        EntryBody::Assistant(assistant) => {
            talaria_util::within_bytes(&assistant.text, MAX_INDEXED_BYTES).to_string()
        }
        EntryBody::ToolResult(result) => {
            let output: String = result.model_text.chars().take(MAX_INDEXED_CHARS).collect();
            format!("{}\n{output}", result.display.title)
        }
        EntryBody::Summary { text, .. } => {
            talaria_util::within_bytes(text, MAX_INDEXED_BYTES).to_string()
        }
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

/// The kind an entry is filed under.
pub(crate) fn kind_of(body: &EntryBody) -> &'static str {
    match body {
        EntryBody::System { .. } => "system",
        EntryBody::User { .. } => "user",
        EntryBody::Assistant(_) => "assistant",
        EntryBody::ToolResult(_) => "tool_result",
        EntryBody::Notice { .. } => "notice",
        EntryBody::ModeChanged { .. } => "mode_changed",
        EntryBody::ModelChanged { .. } => "model_changed",
        EntryBody::Plan { .. } => "plan",
        EntryBody::Summary { .. } => "summary",
        EntryBody::Interrupted { .. } => "interrupted",
        EntryBody::Nudge { .. } => "nudge",
        EntryBody::Rewound { .. } => "rewound",
        EntryBody::FilesRestored { .. } => "files_restored",
        EntryBody::SteerWaiting { .. } => "steer_waiting",
    }
}

/// The words of a query (letters, digits and `_`), at most 32.
pub fn words_of(query: &str) -> Vec<&str> {
    query
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .take(32)
        .collect()
}

/// Words as a PostgreSQL `tsquery` joined with OR (ranking puts entries with every word
/// first); stop words among them are dropped by the server.
#[cfg(feature = "postgres")]
pub(crate) fn tsquery_of(query: &str) -> Option<String> {
    let words = words_of(query);
    (!words.is_empty()).then(|| words.join(" | "))
}

#[cfg(test)]
mod tests {
    use talaria_record::{AssistantEntry, Transcript};

    use super::*;

    #[test]
    fn a_huge_answer_is_indexed_by_its_opening_only() {
        let mut transcript = Transcript::default();
        let text = "é".repeat(MAX_INDEXED_BYTES) + "tail";
        transcript.push(EntryBody::Assistant(AssistantEntry {
            text,
            ..AssistantEntry::default()
        }));
        let indexed = text_of(&transcript.entries()[0]).expect("text");
        assert!(indexed.len() <= MAX_INDEXED_BYTES);
        assert!(indexed.len() > MAX_INDEXED_BYTES - 4);
        assert!(!indexed.contains("tail"));
    }

    #[test]
    fn many_long_user_parts_stay_within_the_bound() {
        let mut transcript = Transcript::default();
        let part = UserPart::Text {
            text: "word ".repeat(MAX_INDEXED_BYTES / 5),
        };
        transcript.push(EntryBody::User {
            input: Vec::new(),
            model_view: vec![part.clone(), part.clone(), part],
        });
        let indexed = text_of(&transcript.entries()[0]).expect("text");
        assert!(indexed.len() <= MAX_INDEXED_BYTES + 2, "{}", indexed.len());
    }
}
