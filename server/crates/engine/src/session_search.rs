//! `session_search {query?, limit?, session_id?, around_message_id?, window?}`: full-text
//! search (FTS5, BM25) over this user's past sessions, so the model can recall earlier work.
//! A query gives ranked hits, each with a snippet and the messages around it; no query lists
//! recent sessions; a session id and message id scroll around that message.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use talaria_record::{Entry, EntryBody, UserPart};
use talaria_store::{SearchHit, SessionStore};
use talaria_tools::parse_args;
use talaria_tools::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolKind, ToolOutcome,
};

/// Characters of one message shown around a hit.
const MESSAGE_CHARS: usize = 400;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "session_search".into(),
    toolset: "session_search".into(),
    description: "Search past conversations with this user (all sessions, this one too) to \
        recall earlier work, decisions and fixes. With `query`: ranked matches, each with the \
        messages around it. Without a query: the most recent sessions. With `session_id` and \
        `around_message_id` (from a result): the messages around that one."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Most results (default 5)."},
            "session_id": {"type": "string", "description": "A session to read (with around_message_id)."},
            "around_message_id": {"type": "integer", "minimum": 0, "description": "The message to read around."},
            "window": {"type": "integer", "minimum": 0, "maximum": 20, "description": "Messages before and after (default 2)."}
        }
    }),
    kind: ToolKind::Search,
    approval: ApprovalNeed::ReadOnly,
    concurrency: Concurrency::ReadOnly,
    max_result_chars: None,
    effects: Effects::reads(&[]),
});

#[derive(Debug, Deserialize)]
struct Args {
    query: Option<String>,
    limit: Option<usize>,
    session_id: Option<String>,
    around_message_id: Option<u64>,
    window: Option<usize>,
}

impl Args {
    /// The most results shown.
    fn most(&self) -> usize {
        self.limit.unwrap_or(5).clamp(1, 20)
    }
}

/// The tool, over a store.
pub struct SessionSearch {
    /// Searches run through the journal: bounded in time, and possible once the store opens.
    journal: crate::journal::Journal,
}

impl SessionSearch {
    pub fn new(journal: crate::journal::Journal) -> Self {
        Self { journal }
    }
}

fn clip(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match talaria_util::head(&flat, MESSAGE_CHARS) {
        Some((kept, _)) => format!("{kept}…"),
        None => flat,
    }
}

/// One message as a line: `#id role: text`.
fn line(entry: &Entry) -> Option<String> {
    let (role, text) = match &entry.body {
        EntryBody::User { model_view, .. } => ("user", UserPart::joined_text(model_view, " ")),
        EntryBody::Assistant(assistant) if !assistant.text.is_empty() => {
            ("assistant", assistant.text.clone())
        }
        EntryBody::ToolResult(result) => (
            "tool",
            format!("{} → {}", result.display.title, result.model_text),
        ),
        EntryBody::Summary { text, .. } => ("summary", text.clone()),
        _ => return None,
    };
    Some(format!("  #{} {role}: {}", entry.id, clip(&text)))
}

/// What of the sessions searched still waits for the store (a turn it has not committed):
/// searched and read beside the store's own entries.
#[derive(Default)]
struct Waiting {
    hits: Vec<SearchHit>,
    /// The waiting entries of the sessions read, by session.
    entries: HashMap<String, Vec<Entry>>,
}

impl Waiting {
    fn of(journal: &crate::journal::Journal, args: &Args) -> Self {
        let query = args.query.as_deref().map(str::trim).unwrap_or("");
        let hits = journal.search_waiting(query, args.most());
        let mut sessions: Vec<&str> = hits.iter().map(|h| h.session_id.as_str()).collect();
        sessions.extend(args.session_id.as_deref());
        let mut entries = HashMap::new();
        for session in sessions {
            if entries.contains_key(session) {
                continue;
            }
            let decoded: Vec<Entry> = journal
                .waiting(session)
                .entries
                .iter()
                .filter_map(|e| e.decoded().ok())
                .collect();
            entries.insert(session.to_string(), decoded);
        }
        Self { hits, entries }
    }

    /// The stored entries around `id` with the waiting ones laid over them, `before` and
    /// `after` it by position.
    fn around(
        &self,
        store: &dyn SessionStore,
        session: &str,
        id: u64,
        before: usize,
        after: usize,
    ) -> Result<Vec<Entry>, talaria_store::StoreError> {
        let stored = store.entries_around(session, id, before, after)?;
        let Some(waiting) = self.entries.get(session).filter(|w| !w.is_empty()) else {
            return Ok(stored);
        };
        let mut merged: BTreeMap<u64, Entry> = stored.into_iter().map(|e| (e.id, e)).collect();
        merged.extend(waiting.iter().map(|e| (e.id, e.clone())));
        let all: Vec<Entry> = merged.into_values().collect();
        let at = all.partition_point(|e| e.id < id);
        let start = at.saturating_sub(before);
        let end = (at + after + 1).min(all.len());
        Ok(all[start..end].to_vec())
    }
}

fn run(
    store: &dyn SessionStore,
    args: &Args,
    waiting: &Waiting,
) -> Result<String, talaria_store::StoreError> {
    let limit = args.most();
    let window = args.window.unwrap_or(2).min(20);
    if let (Some(session), Some(around)) = (&args.session_id, args.around_message_id) {
        let entries = waiting.around(store, session, around, window, window)?;
        let lines: Vec<String> = entries.iter().filter_map(line).collect();
        if lines.is_empty() {
            return Ok(format!(
                "No messages around #{around} in session {session}."
            ));
        }
        return Ok(format!(
            "Session {session}, around #{around}:\n{}",
            lines.join("\n")
        ));
    }
    let query = args.query.as_deref().map(str::trim).unwrap_or("");
    if query.is_empty() {
        let page = store.list(None, None, limit)?;
        if page.sessions.is_empty() {
            return Ok("No past sessions.".into());
        }
        let lines: Vec<String> = page
            .sessions
            .iter()
            .map(|s| {
                format!(
                    "- {} \"{}\" in {} (updated {})",
                    s.id,
                    s.title.as_deref().unwrap_or("untitled"),
                    s.cwd,
                    chrono::DateTime::from_timestamp_millis(s.updated_at)
                        .map_or_else(String::new, |t| t.format("%Y-%m-%d %H:%M").to_string())
                )
            })
            .collect();
        return Ok(format!("Recent sessions:\n{}", lines.join("\n")));
    }
    // What waits for the store is the newest: it comes first, then the store's hits.
    let mut hits = waiting.hits.clone();
    for hit in store.search(query, limit)? {
        if !hits
            .iter()
            .any(|h| h.session_id == hit.session_id && h.entry_id == hit.entry_id)
        {
            hits.push(hit);
        }
    }
    hits.truncate(limit);
    if hits.is_empty() {
        return Ok(format!("No past messages match {query:?}."));
    }
    let mut out = format!("{} matches for {query:?} (best first):\n", hits.len());
    for hit in &hits {
        out.push_str(&format!(
            "\n- session {} \"{}\", message #{}: {}\n",
            hit.session_id,
            hit.session_title.as_deref().unwrap_or("untitled"),
            hit.entry_id,
            hit.snippet
        ));
        if let Ok(around) = waiting.around(store, &hit.session_id, hit.entry_id, 1, 1) {
            for text in around.iter().filter_map(line) {
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    out.push_str("\n(Read more of one with session_id and around_message_id.)");
    Ok(out)
}

impl Tool for SessionSearch {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        let title = match args.get("query").and_then(Value::as_str) {
            Some(query) if !query.trim().is_empty() => {
                format!("Search past sessions for `{query}`")
            }
            _ => "Look through past sessions".to_string(),
        };
        CallDescription {
            title,
            read_only: true,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            let waiting = Waiting::of(&self.journal, &args);
            match self
                .journal
                .call(move |store| run(store, &args, &waiting))
                .await
            {
                Ok(text) => ToolOutcome::completed(text),
                Err(why) => ToolOutcome::failed(format!("session search failed: {why}")),
            }
        })
    }
}
