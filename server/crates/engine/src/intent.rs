//! Answers that announce an action instead of taking it ("I'll read the file…", "Let me run
//! the tests…"), tell the user how to do the work ("Open util.py in your editor…"), or
//! describe a project file the model never read — small models often stop there. The turn
//! nudges the model once to act.

use std::path::Path;

use talaria_record::{EntryBody, Transcript, UserPart};

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
    // Only the tail is lowercased: an answer of any size costs a few hundred bytes here.
    let start = text
        .char_indices()
        .rev()
        .nth(TAIL_CHARS)
        .map_or(0, |(i, _)| i);
    let tail = text[start..].to_lowercase().replace('’', "'");
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

/// Phrases of step-by-step instructions for the user to do the work by hand.
const USER_INSTRUCTIONS: &[&str] = &[
    "in your preferred text editor",
    "in your text editor",
    "in your editor",
    "in your favorite editor",
    "in your favourite editor",
    "open the terminal",
    "open a terminal",
    "open your terminal",
    "save the file",
    "save the changes",
    "navigate to the",
];

/// Verbs that open a step the user is told to take by hand.
const STEP_VERBS: &[&str] = &[
    "open", "add", "save", "run", "navigate", "create", "edit", "replace", "type", "copy", "paste",
    "insert", "install", "go", "click", "change", "modify", "update", "write", "use", "execute",
    "launch", "enter", "append", "remove", "delete", "rename", "move", "locate", "find", "press",
    "restart", "start", "make", "put", "define", "place", "import", "call", "ensure", "verify",
    "check", "test",
];
/// Steps of that shape that make a how-to.
const HOW_TO_STEPS: usize = 3;

/// Whether `text` tells the user how to do the work by hand: by its shape (three or more
/// list steps opening with an imperative verb, the user's editor or terminal named), or by
/// two of the usual phrases.
pub(crate) fn instructs_user(text: &str) -> bool {
    how_to_by_shape(text) || how_to_by_phrases(text)
}

/// Three or more list steps (`1.`, `-`, `*`, `Step 2:`) that open with an imperative verb,
/// in an answer that sends the user to an editor, a terminal or a file (`your editor`,
/// `in a terminal`, a path) — a plan of the agent's own is written in the first person.
fn how_to_by_shape(text: &str) -> bool {
    // A how-to is short; a long report's lists are its own business.
    if text.len() > 16 * 1024 {
        return false;
    }
    let steps = text
        .lines()
        .filter_map(step_of)
        .filter(|step| {
            let first = step
                .trim_start_matches(['*', '_', '`'])
                .split(|c: char| !c.is_alphabetic())
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            STEP_VERBS.contains(&first.as_str())
        })
        .count();
    let lower = text.to_ascii_lowercase();
    let sends_the_user = [
        "your editor",
        "text editor",
        "your terminal",
        "a terminal",
        "the terminal",
        "command line",
        "your ide",
        "your project",
        "your file",
    ]
    .iter()
    .any(|place| lower.contains(place))
        || lower.contains(".py")
        || lower.contains(".rs")
        || lower.contains(".js")
        || lower.contains(".ts");
    (steps >= HOW_TO_STEPS && sends_the_user)
        || lower.contains("use your favorite text editor")
        || lower.contains("use your favourite text editor")
        || lower.contains("using your favorite")
        || lower.contains("using your favourite")
}

/// A list item's text (`1. Open`, `- Add`, `Step 2: Run`), without its marker.
fn step_of(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let without_number = line.trim_start_matches(|c: char| c.is_ascii_digit());
    if without_number.len() < line.len() {
        return without_number.strip_prefix(['.', ')']).map(str::trim_start);
    }
    if let Some(rest) = line.strip_prefix(['-', '*', '•']) {
        return rest.starts_with(' ').then(|| rest.trim_start());
    }
    let rest = line.strip_prefix("Step ")?;
    let (_, after) = rest.split_once(':')?;
    Some(after.trim_start())
}

/// Two or more of the usual phrases of instructions.
fn how_to_by_phrases(text: &str) -> bool {
    let mut found = vec![false; USER_INSTRUCTIONS.len()];
    // Lowercased a window at a time (each overlapping the last by the longest phrase): an
    // answer of any size is never copied whole.
    let overlap = USER_INSTRUCTIONS.iter().map(|p| p.len()).max().unwrap_or(0);
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut window = Vec::with_capacity(WINDOW + overlap);
    while start < bytes.len() {
        let end = (start + WINDOW + overlap).min(bytes.len());
        window.clear();
        window.extend(bytes[start..end].iter().map(u8::to_ascii_lowercase));
        for (phrase, seen) in USER_INSTRUCTIONS.iter().zip(found.iter_mut()) {
            *seen = *seen || memchr::memmem::find(&window, phrase.as_bytes()).is_some();
        }
        start += WINDOW;
    }
    found.iter().filter(|seen| **seen).count() >= 2
}

/// How much of an answer is lowercased at once when looking for instructions.
const WINDOW: usize = 64 * 1024;

/// What the model is told when it told the user how to do the work instead of doing it.
pub(crate) const DO_IT_NUDGE: &str = "Do not tell the user how to do it: do it yourself with \
    your tools. Read files with read_file, change them with patch or write_file, and run \
    commands with terminal. Call the first tool now.";

/// What the model is told when it announced an action without taking it.
pub(crate) const NUDGE: &str = "You said what you would do, but you did not call a tool. Call \
    the tool now instead of describing it; do not state results you have not seen.";

/// What the model is told when it described a file it has not read.
pub(crate) fn unread_nudge(file: &str) -> String {
    format!(
        "You described {file} without reading it. Read it with read_file (or run it) before \
         answering; do not state what you have not seen."
    )
}

/// Words of `text` that look like file names (`main.py`, `src/util.rs`).
fn mentioned_files(text: &str) -> Vec<&str> {
    let mut found: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')))
        .map(|word| word.trim_matches(|c: char| c == '.' || c == '/'))
        .filter(|word| {
            let Some((stem, extension)) = word.rsplit_once('.') else {
                return false;
            };
            !stem.is_empty()
                && (1..=5).contains(&extension.len())
                && extension.chars().all(|c| c.is_ascii_alphanumeric())
                && extension.chars().any(|c| c.is_ascii_alphabetic())
                && !word.contains("..")
        })
        .collect();
    found.dedup();
    found
}

/// Whether the session has seen `file`: a tool call named it (read, ran, patched, searched
/// for it), or the user attached it.
fn has_seen(history: &Transcript, file: &str) -> bool {
    let name = Path::new(file)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(file);
    history.entries().iter().any(|entry| match &entry.body {
        EntryBody::Assistant(answer) => answer
            .tool_calls
            .iter()
            .any(|call| call.arguments.contains(name)),
        EntryBody::User { model_view, .. } => model_view.iter().any(|part| match part {
            UserPart::Text { text } => text
                .lines()
                .any(|line| line.starts_with("<context ref=") && line.contains(name)),
            UserPart::Image { .. } => false,
        }),
        _ => false,
    })
}

/// A file of the project (under `cwd`) that `answer` names but the session never read.
pub(crate) async fn unread_file(answer: &str, history: &Transcript, cwd: &Path) -> Option<String> {
    for file in mentioned_files(answer) {
        if Path::new(file).is_absolute() || has_seen(history, file) {
            continue;
        }
        let is_file = tokio::fs::metadata(cwd.join(file))
            .await
            .is_ok_and(|m| m.is_file());
        if is_file {
            return Some(file.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_picked_out_of_prose() {
        let text = "main.py prints a greeting; see src/util.rs. Version 1.5 of e.g. the \
                    tool, at https://example.com/a.html.";
        let found = mentioned_files(text);
        assert!(found.contains(&"main.py"), "{found:?}");
        assert!(found.contains(&"src/util.rs"), "{found:?}");
        assert!(!found.contains(&"1.5"), "{found:?}");
    }

    #[tokio::test]
    async fn a_described_file_is_suspect_until_a_tool_call_names_it() {
        use talaria_record::{AssistantEntry, ToolCallRequest};
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("main.py"), "print('hi')").expect("write");
        let mut history = Transcript::new();
        history.push(EntryBody::User {
            input: Vec::new(),
            model_view: vec![UserPart::text("What does main.py do?")],
        });
        let answer = "main.py starts a web server on port 8080.";
        assert_eq!(
            unread_file(answer, &history, dir.path()).await.as_deref(),
            Some("main.py"),
            "asked about, never read"
        );
        assert_eq!(
            unread_file("other.py does nothing.", &history, dir.path()).await,
            None,
            "not a file of the project"
        );
        history.push(EntryBody::Assistant(AssistantEntry {
            tool_calls: vec![ToolCallRequest {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"main.py"}"#.into(),
            }],
            ..AssistantEntry::default()
        }));
        assert_eq!(
            unread_file(answer, &history, dir.path()).await,
            None,
            "read"
        );
    }

    #[tokio::test]
    async fn an_attached_file_counts_as_read() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("main.py"), "print('hi')").expect("write");
        let mut history = Transcript::new();
        history.push(EntryBody::User {
            input: Vec::new(),
            model_view: vec![
                UserPart::text("What does it do?"),
                UserPart::text("<context ref=\"file:///w/main.py\">\nprint('hi')\n</context>"),
            ],
        });
        assert_eq!(
            unread_file("main.py prints hi.", &history, dir.path()).await,
            None
        );
    }

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

    #[test]
    fn instructions_for_the_user_to_do_the_work_are_recognised() {
        let how_to = "1. **Add the function:**\n   - Open `util.py` in your preferred text \
            editor.\n   - Add `def add(a, b)`.\n2. **Save the changes.**\n3. Open the terminal \
            and run `python -m unittest`.";
        assert!(instructs_user(how_to));
        assert!(!instructs_user(
            "I added add(a, b) to util.py and saved the file."
        ));
        assert!(!instructs_user("The tests pass: 2 passed."));
    }

    #[test]
    fn instructions_are_found_in_any_case_across_window_edges_of_a_long_answer() {
        // The first phrase straddles the first window's edge.
        let mut text = "x".repeat(WINDOW - 5);
        text.push_str("IN YOUR EDITOR, then ");
        text.push_str(&"é".repeat(WINDOW));
        text.push_str(" Save The File.");
        assert!(instructs_user(&text));
        let one_phrase = "x".repeat(3 * WINDOW) + " open a terminal";
        assert!(!instructs_user(&one_phrase));
    }

    #[test]
    fn a_how_to_is_recognised_by_its_shape() {
        let how_tos = [
            "1. Open `calc.py`.\n2. Add a function `mul(a, b)`.\n3. Run the tests with `python3 -m unittest`.",
            "To do this:\n- **Create** a file named test_calc.py\n- **Write** a test for add\n- **Run** pytest in your terminal",
            "Step 1: Navigate to the src folder\nStep 2: Edit main.rs\nStep 3: Save and run cargo build",
            "Use your favorite text editor to change the port to 8080.",
            "1) Locate the config file in your project\n2) Change `timeout` to 30\n3) Restart the server",
        ];
        for text in how_tos {
            assert!(instructs_user(text), "{text}");
        }
        let not = [
            "I changed calc.py:\n1. I added mul(a, b).\n2. I ran the tests: 3 passed.",
            "The file has three parts:\n- imports\n- the `add` function\n- a main block",
            "1. Open question: should the cache expire?\nNothing else was needed.",
            "Done. The tests pass.",
        ];
        for text in not {
            assert!(!instructs_user(text), "{text}");
        }
    }
}
