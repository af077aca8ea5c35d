//! Answers that announce an action instead of taking it ("I'll read the file…", "Let me run
//! the tests…") — small models often stop there. The turn nudges the model once to act.

/// Verbs of actions a tool would take.
const ACTIONS: &[&str] = &[
    "read", "open", "check", "look", "run", "execute", "search", "inspect", "examine", "list",
    "view", "find", "grep", "analyze", "analyse", "test", "verify", "create", "write", "edit",
    "modify", "update", "fix", "install", "build", "compile", "start", "call", "use",
];
/// Phrases that announce what comes next.
const ANNOUNCEMENTS: &[&str] = &[
    "i'll ",
    "i will ",
    "let me ",
    "i'm going to ",
    "i am going to ",
    "i need to ",
    "i'll now ",
];
/// Only the end of an answer is looked at: a long report may mention plans in passing.
const TAIL_CHARS: usize = 300;

/// Whether `text` ends by announcing a tool-like action.
pub(crate) fn announces_action(text: &str) -> bool {
    let lower = text.to_lowercase().replace('’', "'");
    let start = lower
        .char_indices()
        .rev()
        .nth(TAIL_CHARS)
        .map_or(0, |(i, _)| i);
    let tail = &lower[start..];
    ANNOUNCEMENTS.iter().any(|announcement| {
        tail.match_indices(announcement).any(|(at, _)| {
            tail[at + announcement.len()..]
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .take(3)
                .any(|word| ACTIONS.contains(&word))
        })
    })
}

/// What the model is told when it announced an action without taking it.
pub(crate) const NUDGE: &str = "You said what you would do, but you did not call a tool. Call \
    the tool now instead of describing it; do not state results you have not seen.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_of_actions_are_recognised() {
        for text in [
            "To analyze what main.py does, I'll read its source code.",
            "Let me run the tests.",
            "I will now check the configuration file.",
            "Sure! I’m going to open util.py and add the function.",
        ] {
            assert!(announces_action(text), "{text}");
        }
        for text in [
            "main.py prints hello.",
            "Let me know if you need anything else.",
            "I'll be happy to help further.",
            "The tests pass: 12 passed, 0 failed.",
        ] {
            assert!(!announces_action(text), "{text}");
        }
        let long_report = format!("Earlier I said I'll read the file. {}", "Done. ".repeat(80));
        assert!(!announces_action(&long_report));
    }
}
