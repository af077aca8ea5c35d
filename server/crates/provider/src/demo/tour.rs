//! The demo's tour, one answer a step: plan and look (0), read (1), propose an edit (2),
//! complete the plan (3), close. Its words avoid what makes Talaria nudge a model (announcing
//! an action without taking it, telling the user to do the work, naming a file it never
//! touched).

use serde_json::json;

use super::{Conversation, DEMO_FILE, LABEL, Reply, call, excerpt};

/// The plan the tour shows, by item: (id, what).
const PLAN: [(&str, &str); 3] = [
    ("look", "Look at the files in this folder"),
    ("read", "Read one of them"),
    ("edit", "Propose a small edit (Talaria asks you first)"),
];

/// The plan with items before `current` completed, `current` in progress, the rest pending.
fn plan(current: usize) -> serde_json::Value {
    let todos: Vec<serde_json::Value> = PLAN
        .iter()
        .enumerate()
        .map(|(i, (id, content))| {
            let status = match i.cmp(&current) {
                std::cmp::Ordering::Less => "completed",
                std::cmp::Ordering::Equal => "in_progress",
                std::cmp::Ordering::Greater => "pending",
            };
            json!({"id": id, "content": content, "status": status})
        })
        .collect();
    json!({ "todos": todos })
}

/// Step 0: what the demo is, the plan, and a look at the folder.
pub(super) fn start(asked: &str, offered: &[&str]) -> Reply {
    let asked = excerpt(asked);
    let text = format!(
        "{LABEL} · This is Talaria's built-in demo model: a short script, not an AI. It runs \
         inside Talaria, needs no key and sends nothing anywhere.\n\nYou asked: “{asked}”. A \
         real model would work on that. The demo shows what Talaria does with one instead: a \
         plan, a file read, and an edit that asks you before anything is written.\n\n"
    );
    let calls = [
        call(0, 0, "todo", offered, plan(0)),
        call(
            0,
            1,
            "search_files",
            offered,
            json!({"target": "files", "pattern": "*", "limit": 20}),
        ),
    ];
    Reply {
        thought: "Demo script, step 1 of 4: show a plan and list the folder.".into(),
        text,
        calls: calls.into_iter().flatten().collect(),
        ..Reply::default()
    }
}

/// The files `search_files` listed (its footer and "No files found." left out).
fn listed(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('(') && *l != "No files found.")
        .collect()
}

/// The file to read from a listing: a README first, then any Markdown, then the first file
/// (the demo's own file left out).
fn pick_file(listing: &str) -> Option<String> {
    let files: Vec<&str> = listed(listing)
        .into_iter()
        .filter(|f| !f.ends_with(DEMO_FILE))
        .collect();
    let readme = files.iter().find(|f| {
        let name = f.rsplit('/').next().unwrap_or(f).to_ascii_lowercase();
        name.starts_with("readme")
    });
    let markdown = files.iter().find(|f| f.ends_with(".md"));
    readme.or(markdown).or(files.first()).map(|f| f.to_string())
}

/// Step 1: read a file the listing named.
pub(super) fn read(seen: &Conversation, offered: &[&str]) -> Reply {
    let listing = seen.result("search_files").unwrap_or_default();
    let Some(file) = pick_file(listing).filter(|_| offered.contains(&"read_file")) else {
        let mut reply = edit(seen, offered);
        reply.text = format!(
            "There is no file here to read, so the tour goes on to the edit.\n\n{}",
            reply.text
        );
        return reply;
    };
    let count = listed(listing).len();
    let calls = [
        call(
            1,
            0,
            "read_file",
            offered,
            json!({"path": file, "limit": 40}),
        ),
        call(1, 1, "todo", offered, plan(1)),
    ];
    Reply {
        thought: "Demo script, step 2 of 4: read a file.".into(),
        text: format!(
            "The folder holds {count} files; `{file}` is read next (its card shows it).\n\n"
        ),
        calls: calls.into_iter().flatten().collect(),
        ..Reply::default()
    }
}

/// The read file's first line of text and its number of lines, from `read_file`'s numbered
/// lines (`     1|text`).
fn first_line(content: &str) -> (String, usize) {
    let lines: Vec<&str> = content
        .lines()
        .filter_map(|l| l.split_once('|').map(|(_, text)| text))
        .collect();
    let first = lines
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .unwrap_or("");
    (excerpt(first), lines.len())
}

/// Step 2: propose a new file (it asks in the default mode).
pub(super) fn edit(seen: &Conversation, offered: &[&str]) -> Reply {
    let (about, note) = match (seen.read_path.clone(), seen.result("read_file")) {
        (Some(path), Some(content)) if !content.starts_with("File not found") => {
            let (first, lines) = first_line(content);
            (
                format!("`{path}` begins with “{first}” ({lines} lines shown).\n\n"),
                format!("- Read `{path}`; it begins with “{first}”.\n"),
            )
        }
        _ => (String::new(), String::new()),
    };
    let content = format!(
        "# Notes from the Talaria demo\n\n{note}- Written by the built-in demo model, after you \
         allowed it.\n- `/rewind 1 files` takes this file back.\n"
    );
    let calls: Vec<_> = [
        call(
            2,
            0,
            "write_file",
            offered,
            json!({"path": DEMO_FILE, "content": content}),
        ),
        call(2, 1, "todo", offered, plan(2)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let proposal = if calls.iter().any(|c| c.name == "write_file") {
        format!(
            "Now an edit: a new file, `{DEMO_FILE}`. Talaria asks before it writes: answer the \
             question to go on.\n\n"
        )
    } else {
        "This session's mode lets nothing be written, so the tour leaves the edit out.\n\n"
            .to_string()
    };
    Reply {
        thought: "Demo script, step 3 of 4: propose an edit.".into(),
        text: format!("{about}{proposal}"),
        calls,
        ..Reply::default()
    }
}

/// Whether a tool result says the call did not happen (declined, refused, failed).
fn not_done(result: &str) -> bool {
    let result = result.to_lowercase();
    [
        "declined",
        "rejected",
        "denied",
        "refused",
        "not allowed",
        "error",
    ]
    .iter()
    .any(|word| result.contains(word))
}

/// Step 3: say how the edit went and complete the plan.
pub(super) fn edited(seen: &Conversation, offered: &[&str]) -> Reply {
    let text = match seen.result("write_file") {
        Some(result) if not_done(result) => {
            "The edit did not happen (declined or refused): nothing was written.\n\n".to_string()
        }
        Some(_) => format!("Written: `{DEMO_FILE}`.\n\n"),
        None => String::new(),
    };
    let calls: Vec<_> = call(3, 0, "todo", offered, plan(PLAN.len()))
        .into_iter()
        .collect();
    if calls.is_empty() {
        let mut closing = close();
        closing.text = format!("{text}{}", closing.text);
        return closing;
    }
    Reply {
        thought: "Demo script, step 4 of 4: complete the plan.".into(),
        text,
        calls,
        ..Reply::default()
    }
}

/// The closing answer of a tour.
pub(super) fn close() -> Reply {
    Reply {
        text: format!(
            "{LABEL} · That was the tour: a plan, a file read and an edit that waited for your \
             answer, shown as any model's work is shown. With a real model the same cards show \
             real work: `talaria setup` sets one up (a hosted one, or llama.cpp, Ollama or LM \
             Studio on this machine), and `/rewind 1 files` takes the demo's edit back."
        ),
        ..Reply::default()
    }
}

/// A later prompt, after a tour: a short answer.
pub(super) fn later(asked: &str) -> Reply {
    let asked = excerpt(asked);
    Reply {
        text: format!(
            "{LABEL} · The demo model answers from a short script, so “{asked}” is beyond it. \
             It has shown its tour (ask for the tour again to see it once more); \
             `talaria setup` gives Talaria a real model."
        ),
        ..Reply::default()
    }
}
