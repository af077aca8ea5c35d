//! The cheap pass, no model call: outside the protected tail, identical tool outputs are
//! deduplicated, large tool outputs become one-line accounts, long tool-call arguments are
//! truncated inside still-valid JSON, and images are dropped with a note. Only what the model
//! reads changes; what the client was shown stays.

use std::collections::HashMap;

use serde_json::Value;
use talaria_record::{Entry, EntryBody, EntryId, UserPart};

use crate::accounts::account;

/// Tool outputs up to this many characters are left alone.
pub const OUTPUT_KEEP_CHARS: usize = 200;
/// Tool-call arguments up to this many characters are left alone.
pub const ARGUMENTS_KEEP_CHARS: usize = 500;
/// String values in long arguments keep this many characters.
const VALUE_KEEP_CHARS: usize = 200;
/// What a duplicated output becomes.
pub const DUPLICATE_NOTE: &str = "[Duplicate tool output — same content as a more recent call]";
/// What a dropped image becomes.
pub const IMAGE_NOTE: &str = "[image removed to save context]";

/// What the cheap pass changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub deduplicated: usize,
    pub accounted: usize,
    pub arguments: usize,
    pub images: usize,
    /// Entries changed in place.
    pub rewritten: Vec<EntryId>,
}

impl Pruned {
    pub fn is_empty(&self) -> bool {
        self.rewritten.is_empty()
    }

    /// Adds what a later pass changed.
    fn absorb(&mut self, other: Pruned) {
        self.deduplicated += other.deduplicated;
        self.accounted += other.accounted;
        self.arguments += other.arguments;
        self.images += other.images;
        self.rewritten.extend(other.rewritten);
    }
}

/// The pass for a tail that is still too large: large outputs in `from..until` — results
/// the model has already answered (`until` is the latest assistant message) — become
/// one-line accounts. Results after the latest answer, still to be read, stay whole.
pub(crate) fn account_answered(
    entries: &mut [Entry],
    from: usize,
    until: usize,
    pruned: &mut Pruned,
) -> bool {
    let mut more = Pruned::default();
    for entry in entries.iter_mut().take(until).skip(from) {
        if entry.compacted {
            continue;
        }
        if let EntryBody::ToolResult(result) = &mut entry.body
            && result.model_text.chars().count() > OUTPUT_KEEP_CHARS
        {
            result.model_text = account(result);
            more.accounted += 1;
            more.rewritten.push(entry.id);
        }
    }
    let changed = !more.is_empty();
    pruned.absorb(more);
    changed
}

fn truncate_chars(text: &str, keep: usize) -> String {
    match talaria_util::head(text, keep) {
        Some((kept, cut)) => format!("{kept}…[{cut} characters truncated]"),
        None => text.to_string(),
    }
}

/// Shortens long string values of a JSON value, in place.
fn truncate_values(value: &mut Value) {
    match value {
        Value::String(text) if text.chars().count() > VALUE_KEEP_CHARS => {
            *text = truncate_chars(text, VALUE_KEEP_CHARS);
        }
        Value::Array(items) => items.iter_mut().for_each(truncate_values),
        Value::Object(map) => map.values_mut().for_each(truncate_values),
        _ => {}
    }
}

/// Long arguments made short and still valid JSON (an object when they were not JSON).
fn shorten_arguments(arguments: &str) -> String {
    let mut value = serde_json::from_str::<Value>(arguments).unwrap_or_else(|_| {
        serde_json::json!({"_truncated_arguments": truncate_chars(arguments, VALUE_KEEP_CHARS)})
    });
    truncate_values(&mut value);
    value.to_string()
}

/// Drops the images a tool result carried for the model, noting each in its text; returns
/// how many.
fn drop_result_images(result: &mut talaria_record::ToolResultEntry) -> usize {
    let count = result.images.len();
    for _ in 0..count {
        result.model_text.push('\n');
        result.model_text.push_str(IMAGE_NOTE);
    }
    result.images.clear();
    count
}

/// Runs the pass over `entries[..protect_from]`, leaving the system prompt and `pinned` (the
/// latest user message) alone.
pub(crate) fn cheap_pass(
    entries: &mut [Entry],
    protect_from: usize,
    pinned: Option<usize>,
) -> Pruned {
    let mut pruned = Pruned::default();
    // The latest occurrence of each large output (anywhere, the tail included).
    let mut latest: HashMap<&str, usize> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        if let EntryBody::ToolResult(result) = &entry.body
            && !entry.compacted
            && result.model_text.chars().count() > OUTPUT_KEEP_CHARS
        {
            latest.insert(result.model_text.as_str(), index);
        }
    }
    let duplicates: Vec<usize> = entries[..protect_from.min(entries.len())]
        .iter()
        .enumerate()
        .filter_map(|(index, entry)| match &entry.body {
            EntryBody::ToolResult(result) if !entry.compacted => latest
                .get(result.model_text.as_str())
                .filter(|&&last| last != index)
                .map(|_| index),
            _ => None,
        })
        .collect();
    drop(latest);
    for (index, entry) in entries.iter_mut().enumerate().take(protect_from) {
        if entry.compacted || Some(index) == pinned {
            continue;
        }
        let changed = match &mut entry.body {
            EntryBody::ToolResult(result) => {
                let images = drop_result_images(result);
                pruned.images += images;
                let text_changed = if duplicates.contains(&index) {
                    result.model_text = DUPLICATE_NOTE.into();
                    pruned.deduplicated += 1;
                    true
                } else if result.model_text.chars().count() > OUTPUT_KEEP_CHARS {
                    result.model_text = account(result);
                    pruned.accounted += 1;
                    true
                } else {
                    false
                };
                text_changed || images > 0
            }
            EntryBody::Assistant(assistant) => {
                let mut changed = false;
                for call in &mut assistant.tool_calls {
                    if call.arguments.chars().count() > ARGUMENTS_KEEP_CHARS {
                        call.arguments = shorten_arguments(&call.arguments);
                        pruned.arguments += 1;
                        changed = true;
                    }
                }
                changed
            }
            EntryBody::User { model_view, .. } => {
                let mut changed = false;
                for part in model_view.iter_mut() {
                    if matches!(part, UserPart::Image { .. }) {
                        *part = UserPart::text(IMAGE_NOTE);
                        pruned.images += 1;
                        changed = true;
                    }
                }
                changed
            }
            _ => false,
        };
        if changed {
            pruned.rewritten.push(entry.id);
        }
    }
    pruned
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_record::Transcript;
    use talaria_record::testing::{assistant, result, user};

    #[test]
    fn older_copies_of_an_output_are_deduplicated_and_the_tail_is_left_alone() {
        let same = "same output ".repeat(40);
        let mut t = Transcript::with_system("s");
        t.push(user("q"));
        t.push(assistant("", &[("a", "todo", "{}")]));
        t.push(result("a", "todo", &same));
        t.push(assistant("", &[("b", "todo", "{}")]));
        t.push(result("b", "todo", &same));
        t.push(assistant("", &[("c", "todo", "{}")]));
        t.push(result("c", "todo", &same));
        // Protect the last call and its result.
        let pruned = cheap_pass(t.entries_mut(), 6, None);
        assert_eq!((pruned.deduplicated, pruned.accounted), (2, 0));
        let text = |i: usize| match &t.entries()[i].body {
            EntryBody::ToolResult(r) => r.model_text.clone(),
            _ => String::new(),
        };
        assert_eq!(text(3), DUPLICATE_NOTE);
        assert_eq!(text(5), DUPLICATE_NOTE);
        assert_eq!(text(7), same, "the protected tail keeps the latest copy");
    }

    #[test]
    fn old_images_of_tool_results_are_dropped_with_a_note_and_recent_ones_kept() {
        let image = || UserPart::Image {
            mime_type: "image/png".into(),
            data: "AAAA".into(),
        };
        let with_image = |call: &str| {
            let mut body = result(call, "mcp__s__shot", "a shot");
            if let EntryBody::ToolResult(r) = &mut body {
                r.images = vec![image()];
            }
            body
        };
        let mut t = Transcript::with_system("s");
        t.push(user("q"));
        t.push(assistant("", &[("a", "mcp__s__shot", "{}")]));
        t.push(with_image("a"));
        t.push(assistant("", &[("b", "mcp__s__shot", "{}")]));
        t.push(with_image("b"));
        let pruned = cheap_pass(t.entries_mut(), 4, None);
        assert_eq!(pruned.images, 1);
        let EntryBody::ToolResult(old) = &t.entries()[3].body else {
            panic!("a result");
        };
        assert!(old.images.is_empty());
        assert_eq!(old.model_text, format!("a shot\n{IMAGE_NOTE}"));
        let EntryBody::ToolResult(recent) = &t.entries()[5].body else {
            panic!("a result");
        };
        assert_eq!(recent.images, vec![image()], "the tail keeps its image");
        talaria_record::testing::assert_valid(&t);
    }

    #[test]
    fn long_arguments_stay_valid_json() {
        let long = format!(
            r#"{{"path":"a.rs","content":"{}","n":3}}"#,
            "x".repeat(2000)
        );
        let short = shorten_arguments(&long);
        let value: Value = serde_json::from_str(&short).expect("valid JSON");
        assert_eq!(value["path"], "a.rs");
        assert_eq!(value["n"], 3);
        assert!(
            value["content"]
                .as_str()
                .is_some_and(|c| c.ends_with("…[1800 characters truncated]"))
        );
        let broken = shorten_arguments(&"{not json".repeat(100));
        assert!(serde_json::from_str::<Value>(&broken).is_ok(), "{broken}");
    }
}
