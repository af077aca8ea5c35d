//! The invariants checked after every crash and every simulation step, on the same home:
//!
//! 1. **Answered is recorded**: every promise a client was given ([`Fact`]) holds in the
//!    record after a restart — in the load's replay (what the next process shows) and in the
//!    store once that process ended cleanly (spools written, none left).
//! 2. **Bystanders untouched**: sessions the operation did not name have exactly the entries
//!    they had before it.
//! 3. **The record validates**: every session in the store loads, starts with its system
//!    prompt, and its model view validates (every tool result has its call); the next model
//!    request of each session is sent and the mock's pairing check takes it.
//! 4. **Rewinds finish, nothing temporary is left**: no `.NAME.talaria-restore` in the
//!    workspace (an operation's own file check says what its files must be).
//! 5. **A fork is whole or absent**: an answered fork holds its parent's conversation; no
//!    session in the store is empty.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockLlm, MockReply};
use talaria_record::{EntryBody, InputBlock, Transcript, UserPart};
use talaria_store::{SessionStore, StoreError};

use crate::home::{Faults, Home};
use crate::ledger::{Fact, on_path};

/// How long a restarted process may answer `-32010` (its store still opening) before a load
/// counts as failed.
const STORE_OPENS_WITHIN: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(20);

/// Every session's entries as the store holds them (JSON per entry, on the path and off it).
pub type Snapshot = BTreeMap<String, Vec<String>>;

/// The entries of `sessions` now (read off the async runtime: PostgreSQL's client blocks).
pub async fn snapshot(home: &Home, sessions: &[String]) -> anyhow::Result<Snapshot> {
    let store = open_store(home).await?;
    let sessions = sessions.to_vec();
    let taken = tokio::task::spawn_blocking(move || {
        let mut taken = Snapshot::new();
        for session in sessions {
            let (_, transcript) = store.load(&session)?;
            taken.insert(session, entries_json(&transcript));
        }
        Ok::<_, StoreError>(taken)
    })
    .await??;
    Ok(taken)
}

async fn open_store(home: &Home) -> anyhow::Result<std::sync::Arc<dyn SessionStore>> {
    let kind = home.store.clone();
    let path = home.sqlite_path();
    let store = tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
        Ok(match kind {
            crate::home::StoreKind::Sqlite => {
                std::sync::Arc::new(talaria_store::SqliteStore::open(&path)?)
                    as std::sync::Arc<dyn SessionStore>
            }
            crate::home::StoreKind::Postgres(url) => {
                std::sync::Arc::new(talaria_store::PgStore::connect(&url)?)
            }
        })
    })
    .await??;
    Ok(store)
}

fn entries_json(transcript: &Transcript) -> Vec<String> {
    transcript
        .all_entries()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect()
}

/// What a check is given besides the home.
pub struct Expected<'a> {
    /// Every promise every client of the run was given.
    pub facts: Vec<Fact>,
    /// Sessions no client touched since this snapshot.
    pub bystanders: &'a Snapshot,
    /// Loads other processes made during the run (a live sibling's), judged like the
    /// restarted process's own.
    pub replays: Vec<Replay>,
}

/// What a load showed of a session: the messages from the load request on.
#[derive(Debug, Clone)]
pub struct Replay {
    pub who: String,
    pub session: String,
    pub messages: Vec<Value>,
    /// What had been promised when it loaded.
    pub promised: Vec<Fact>,
}

/// What the checks found wrong (empty: every invariant holds).
#[derive(Debug, Default)]
pub struct Problems(pub Vec<String>);

impl Problems {
    pub fn say(&mut self, problem: impl Into<String>) {
        self.0.push(problem.into());
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for problem in &self.0 {
            writeln!(f, "- {problem}")?;
        }
        Ok(())
    }
}

/// Restarts an agent on `home` (no faults, a mock of its own: what a cut run left in its
/// script is not the check's), loads and prompts every promised session, ends it cleanly,
/// then reads the store: the invariants above. The home must have no live agent that holds
/// a promised session.
pub async fn check_after_restart(home: &mut Home, expected: &Expected<'_>) -> Problems {
    let mut problems = Problems::default();
    match MockLlm::start(Vec::new()).await {
        Ok(fresh) => {
            let used = std::mem::replace(&mut home.mock, fresh);
            for refused in used.take_problems() {
                problems.say(format!("the mock refused a request of the run: {refused}"));
            }
        }
        Err(e) => problems.say(format!("no mock for the check: {e}")),
    }
    let facts = live_facts(&expected.facts);
    let sessions = sessions_of(&facts);
    let deleted = deleted_sessions(&expected.facts);
    let mut replays = expected.replays.clone();
    let hollow = hollow_sessions(home).await;
    let sessions_and_deleted = (&sessions[..], &deleted);
    restart(
        home,
        expected,
        &facts,
        sessions_and_deleted,
        &mut replays,
        &mut problems,
    )
    .await;
    let loaded_hollow = loads_of(home, &hollow).await;
    for refused in home.mock.take_problems() {
        problems.say(format!("the mock refused a request: {refused}"));
    }
    let stored = check_store(home, expected, &facts, &sessions, &deleted, &mut problems).await;
    for session in loaded_hollow {
        if stored.contains_key(&format!("hollow:{session}")) {
            problems.say(format!(
                "{session} has no entry in the store, not even its system prompt, and loads as a session"
            ));
        }
    }
    for replay in &replays {
        for problem in replay_problems(replay, stored.get(&replay.session)) {
            problems.say(problem);
        }
    }
    for left in home.leftover_temporaries() {
        problems.say(format!(
            "a restore's temporary file is left: {}",
            left.display()
        ));
    }
    problems
}

fn deleted_sessions(facts: &[Fact]) -> HashSet<String> {
    facts
        .iter()
        .filter_map(|f| match f {
            Fact::Deleted { session } => Some(session.clone()),
            _ => None,
        })
        .collect()
}

/// The restarted process: every promised session loads (its replay kept) and, unless it is
/// a bystander, answers a prompt; deleted ones do not load; then it ends at end of input.
async fn restart(
    home: &Home,
    expected: &Expected<'_>,
    facts: &[Fact],
    (sessions, deleted): (&[String], &HashSet<String>),
    replays: &mut Vec<Replay>,
    problems: &mut Problems,
) {
    let mut agent = match home.initialized(&Faults::default()).await {
        Ok(agent) => agent,
        Err(e) => return problems.say(format!("the restarted agent did not start: {e}")),
    };
    for session in sessions {
        // A bystander is loaded, not prompted: its entries are compared below.
        let prompted = !expected.bystanders.contains_key(session);
        if let Some(replay) = check_load(home, &mut agent, session, facts, prompted, problems).await
        {
            replays.push(replay);
        }
    }
    for session in deleted {
        check_gone(home, &mut agent, session, problems).await;
    }
    agent.close_stdin();
    match agent.wait_exit(WAIT).await {
        Ok(status) if status.success() => {}
        other => problems.say(format!(
            "the restarted agent did not exit cleanly: {other:?}\n{}",
            tail(&agent.stderr())
        )),
    }
}

/// Promises about sessions that were not deleted afterwards.
fn live_facts(facts: &[Fact]) -> Vec<Fact> {
    let deleted: HashSet<&str> = facts
        .iter()
        .filter_map(|f| match f {
            Fact::Deleted { session } => Some(session.as_str()),
            _ => None,
        })
        .collect();
    facts
        .iter()
        .filter(|f| !deleted.contains(f.session()))
        .cloned()
        .collect()
}

fn sessions_of(facts: &[Fact]) -> Vec<String> {
    let mut sessions: Vec<String> = Vec::new();
    for fact in facts.iter().filter(|f| f.requires_session()) {
        if !sessions.iter().any(|s| s == fact.session()) {
            sessions.push(fact.session().to_string());
        }
    }
    sessions
}

/// Sends `method` until it is not answered "unavailable, try again" (`-32010`).
async fn request_when_open(agent: &mut AgentProcess, method: &str, params: Value) -> Value {
    let until = Instant::now() + STORE_OPENS_WITHIN;
    loop {
        let answer = match agent.request(method, params.clone()).await {
            Ok(answer) => answer,
            Err(e) => return json!({"error": {"code": 0, "message": e.to_string()}}),
        };
        if answer["error"]["code"] != -32010 || Instant::now() > until {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Loads `session` (what its replay showed is judged once the store is read); then its
/// next prompt is answered (the mock checks the request).
async fn check_load(
    home: &Home,
    agent: &mut AgentProcess,
    session: &str,
    facts: &[Fact],
    prompted: bool,
    problems: &mut Problems,
) -> Option<Replay> {
    let from = agent.transcript.len();
    let params = json!({"sessionId": session, "cwd": home.workspace(), "mcpServers": []});
    let loaded = request_when_open(agent, "session/load", params).await;
    if loaded.get("result").is_none() {
        problems.say(format!(
            "{session} does not load after the restart: {loaded}"
        ));
        return None;
    }
    let replay = Replay {
        who: "the restarted process".into(),
        session: session.to_string(),
        messages: agent.transcript[from..].to_vec(),
        promised: facts.to_vec(),
    };
    if prompted {
        home.mock
            .push(MockReply::text(&["answered after the restart"]));
        let params = json!({"sessionId": session, "prompt": [{"type": "text", "text": "after the restart"}]});
        // A question (a plan-mode session hands its plan over) is declined.
        let declined = |_: &str, _: &Value| Ok(Some(json!({"outcome": {"outcome": "cancelled"}})));
        let answer = match agent.start_request("session/prompt", params).await {
            Ok(id) => agent.drive(id, WAIT, declined).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(answer) if answer["result"]["stopReason"] == "end_turn" => {}
            other => problems.say(format!(
                "{session}: the next prompt after the restart was not answered: {other:?}"
            )),
        }
    }
    Some(replay)
}

/// What a load's replay misses of the answers promised on its session's path. An answer the
/// stored record holds off its path, behind a later rewind marker, was cut by a rewind that
/// was not answered (it may have been made before the crash): not missing.
pub fn replay_problems(replay: &Replay, stored: Option<&Transcript>) -> Vec<String> {
    let session = replay.session.as_str();
    let replayed: Vec<Value> = replay
        .messages
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
        .map(|m| m["params"]["update"].clone())
        .collect();
    let mut problems = Vec::new();
    for fact in on_path(&live_facts(&replay.promised), session) {
        let Fact::Said { message, text, .. } = fact else {
            continue;
        };
        let shown = replayed_text(&replayed, message);
        if shown == *text || stored.is_some_and(|t| cut_by_a_rewind(t, message)) {
            continue;
        }
        problems.push(format!(
            "{}'s load of {session}: answer {message} {text:?} replays as {shown:?}",
            replay.who
        ));
    }
    problems
}

/// Whether the answer streamed as `message` is off `transcript`'s path with a rewind marker
/// after it.
fn cut_by_a_rewind(transcript: &Transcript, message: &str) -> bool {
    let all = transcript.all_entries();
    let Some(id) = answer_entry(&all, message).map(|e| e.id) else {
        return false;
    };
    !transcript.entries().iter().any(|e| e.id == id)
        && all
            .iter()
            .any(|e| e.id > id && matches!(e.body, EntryBody::Rewound { .. }))
}

/// The answer a record keeps under message id `message` (an answer recorded before ids
/// were kept is named after its entry).
fn answer_entry<'a>(
    all: &[&'a talaria_record::Entry],
    message: &str,
) -> Option<&'a talaria_record::Entry> {
    all.iter().copied().find(|e| match &e.body {
        EntryBody::Assistant(answer) => match &answer.message_id {
            Some(id) => id == message,
            None => format!("agent-{}", e.id) == message,
        },
        _ => false,
    })
}

/// The sessions the promises say exist.
pub fn promised_sessions(facts: &[Fact]) -> Vec<String> {
    sessions_of(&live_facts(facts))
}

/// Whether `session`'s stored record has a rewind marker.
pub async fn has_rewind(home: &Home, session: &str) -> bool {
    let Ok(store) = open_store(home).await else {
        return false;
    };
    let session = session.to_string();
    tokio::task::spawn_blocking(move || {
        store.load(&session).is_ok_and(|(_, t)| {
            t.all_entries()
                .iter()
                .any(|e| matches!(e.body, EntryBody::Rewound { .. }))
        })
    })
    .await
    .unwrap_or(false)
}

/// `session`'s path as stored (JSON per entry).
pub async fn path_json(home: &Home, session: &str) -> anyhow::Result<Vec<String>> {
    let store = open_store(home).await?;
    let session = session.to_string();
    let transcript = tokio::task::spawn_blocking(move || store.load(&session))
        .await??
        .1;
    Ok(transcript
        .entries()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect())
}

/// The text an answer's chunks showed in a replay.
fn replayed_text(replayed: &[Value], message_id: &str) -> String {
    replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk" && u["messageId"] == message_id)
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// A deleted session loads no more.
async fn check_gone(home: &Home, agent: &mut AgentProcess, session: &str, problems: &mut Problems) {
    let params = json!({"sessionId": session, "cwd": home.workspace(), "mcpServers": []});
    let loaded = request_when_open(agent, "session/load", params).await;
    if loaded.get("result").is_some() {
        problems.say(format!(
            "{session} was deleted and loads again after the restart"
        ));
    }
}

/// The store, read directly once every agent ended.
async fn check_store(
    home: &Home,
    expected: &Expected<'_>,
    facts: &[Fact],
    sessions: &[String],
    deleted: &HashSet<String>,
    problems: &mut Problems,
) -> HashMap<String, Transcript> {
    let store = match open_store(home).await {
        Ok(store) => store,
        Err(e) => {
            problems.say(format!("the store does not open: {e}"));
            return HashMap::new();
        }
    };
    let facts = facts.to_vec();
    let sessions = sessions.to_vec();
    let deleted = deleted.clone();
    let bystanders = expected.bystanders.clone();
    let found = tokio::task::spawn_blocking(move || {
        let mut problems = Problems::default();
        let stored = read_store(
            store.as_ref(),
            &facts,
            &sessions,
            &deleted,
            &bystanders,
            &mut problems,
        );
        (problems, stored)
    })
    .await;
    let stored = match found {
        Ok((found, stored)) => {
            problems.0.extend(found.0);
            stored
        }
        Err(e) => {
            problems.say(format!("reading the store panicked: {e}"));
            HashMap::new()
        }
    };
    if !home.spooled().is_empty() {
        problems.say(format!(
            "spools are left after a clean exit on a healthy store: {:?}",
            home.spooled()
        ));
    }
    stored
}

fn read_store(
    store: &dyn SessionStore,
    facts: &[Fact],
    sessions: &[String],
    deleted: &HashSet<String>,
    bystanders: &Snapshot,
    problems: &mut Problems,
) -> HashMap<String, Transcript> {
    let mut stored = HashMap::new();
    for session in sessions {
        match store.load(session) {
            Ok((_, transcript)) => {
                for fact in facts.iter().filter(|f| f.session() == session) {
                    if let Err(why) = holds(fact, &transcript) {
                        problems.say(format!("{session}: {why}"));
                    }
                }
                stored.insert(session.clone(), transcript);
            }
            Err(e) => problems.say(format!("{session} is not in the store: {e}")),
        }
    }
    for fact in facts {
        match fact {
            Fact::WholeOrGone {
                session,
                holds: held,
            } => match store.load(session) {
                Err(StoreError::NotFound(_)) => {}
                Ok((_, transcript)) => {
                    for h in held {
                        if let Err(why) = holds(h, &transcript) {
                            problems.say(format!("{session} is there but not whole: {why}"));
                        }
                    }
                }
                Err(e) => problems.say(format!("{session} does not load: {e}")),
            },
            Fact::CopiesOf { parent, path } => copies_whole(store, parent, path, problems),
            _ => {}
        }
    }
    for session in deleted {
        if store.load(session).is_ok() {
            problems.say(format!("{session} was deleted and is in the store again"));
        }
    }
    for (session, before) in bystanders {
        match store.load(session) {
            Ok((_, transcript)) if entries_json(&transcript) == *before => {}
            Ok((_, transcript)) => problems.say(format!(
                "bystander {session} changed: {} entries before, {} now",
                before.len(),
                transcript.all_entries().len()
            )),
            Err(e) => problems.say(format!("bystander {session} is gone: {e}")),
        }
    }
    for session in every_session_whole(store, problems) {
        // Kept as hollow: a load of it must not have succeeded.
        stored.insert(format!("hollow:{session}"), Transcript::new());
    }
    stored
}

/// Every fork of `parent` in the store starts with exactly `path`.
fn copies_whole(store: &dyn SessionStore, parent: &str, path: &[String], problems: &mut Problems) {
    let listed = store
        .list(None, None, 1000)
        .map(|p| p.sessions)
        .unwrap_or_default();
    for fork in listed
        .iter()
        .filter(|m| m.parent_id.as_deref() == Some(parent))
    {
        let Ok((_, transcript)) = store.load(&fork.id) else {
            continue;
        };
        let copied = entries_json(&transcript);
        if copied.len() < path.len() || copied[..path.len()] != *path {
            problems.say(format!(
                "fork {} of {parent} is not a whole copy: {} of its {} entries",
                fork.id,
                copied.iter().zip(path).take_while(|(a, b)| a == b).count(),
                path.len()
            ));
        }
    }
}

/// Every session in the store loads whole and valid (read while agents run: what is
/// committed is always whole).
pub async fn store_whole(home: &Home) -> Problems {
    let mut problems = Problems::default();
    let store = match open_store(home).await {
        Ok(store) => store,
        Err(e) => {
            problems.say(format!("the store does not open: {e}"));
            return problems;
        }
    };
    match tokio::task::spawn_blocking(move || {
        let mut found = Problems::default();
        // A session with no entry yet is one whose first write is on its way.
        every_session_whole(store.as_ref(), &mut found);
        found
    })
    .await
    {
        Ok(found) => found,
        Err(e) => Problems(vec![format!("reading the store panicked: {e}")]),
    }
}

/// Every session in the store loads, starts with its system prompt and validates.
fn every_session_whole(store: &dyn SessionStore, problems: &mut Problems) -> Vec<String> {
    let listed = match store.list(None, None, 1000) {
        Ok(page) => page.sessions,
        Err(e) => {
            problems.say(format!("the store does not list: {e}"));
            return Vec::new();
        }
    };
    let mut hollow = Vec::new();
    for meta in listed {
        match store.load(&meta.id) {
            Ok((_, transcript)) => {
                match transcript.entries().first().map(|e| &e.body) {
                    Some(EntryBody::System { .. }) => {}
                    None => hollow.push(meta.id.clone()),
                    Some(other) => problems.say(format!(
                        "{} (parent {:?}) does not start with its system prompt but {other:?}",
                        meta.id, meta.parent_id
                    )),
                }
                // As a load reads it: a turn cut off by a crash is closed first.
                let mut view = transcript;
                view.close_cut_off_turn();
                if let Err(violations) = view.validate() {
                    problems.say(format!(
                        "{}'s record does not validate: {violations:?}",
                        meta.id
                    ));
                }
            }
            Err(e) => problems.say(format!("{} is listed and does not load: {e}", meta.id)),
        }
    }
    hollow
}

/// Which of `sessions` a fresh process loads.
async fn loads_of(home: &Home, sessions: &[String]) -> Vec<String> {
    let mut loaded = Vec::new();
    if sessions.is_empty() {
        return loaded;
    }
    if let Ok(mut agent) = home.initialized(&Faults::default()).await {
        for session in sessions {
            let params = json!({"sessionId": session, "cwd": home.workspace(), "mcpServers": []});
            let answer = request_when_open(&mut agent, "session/load", params).await;
            if answer.get("result").is_some() {
                loaded.push(session.clone());
            }
        }
        agent.close_stdin();
        let _ = agent.wait_exit(WAIT).await;
    }
    loaded
}

/// The sessions the store lists with no entry at all (a session whose first write has not
/// been made, or never will be).
pub async fn hollow_sessions(home: &Home) -> Vec<String> {
    let Ok(store) = open_store(home).await else {
        return Vec::new();
    };
    tokio::task::spawn_blocking(move || {
        every_session_whole(store.as_ref(), &mut Problems::default())
    })
    .await
    .unwrap_or_default()
}

/// Whether `fact` holds in `transcript` (the session's record), or why not.
fn holds(fact: &Fact, transcript: &Transcript) -> Result<(), String> {
    let all = transcript.all_entries();
    let find = |id: u64| all.iter().find(|e| e.id == id);
    match fact {
        Fact::Said { message, text, .. } => match answer_entry(&all, message).map(|e| &e.body) {
            Some(EntryBody::Assistant(answer)) if answer.text == *text => Ok(()),
            Some(other) => Err(format!(
                "answer {message} {text:?} is {other:?} in the record"
            )),
            None => Err(format!("answer {message} {text:?} is not in the record")),
        },
        Fact::Asked { entry, text, .. } => match find(*entry).map(|e| &e.body) {
            Some(EntryBody::User { input, model_view }) if user_text(input, model_view).contains(text.as_str()) => Ok(()),
            Some(other) => Err(format!("message {entry} {text:?} is {other:?} in the record")),
            None => Err(format!("message {entry} {text:?} is not in the record")),
        },
        Fact::ToolDone { client_id, .. } => all
            .iter()
            .any(|e| matches!(&e.body, EntryBody::ToolResult(r) if r.client_id == *client_id))
            .then_some(())
            .ok_or_else(|| format!("the result of tool call {client_id} is not in the record")),
        Fact::Steered { text, .. } => all
            .iter()
            .any(|e| matches!(&e.body, EntryBody::User { input, model_view } if user_text(input, model_view).contains(text.as_str())))
            .then_some(())
            .ok_or_else(|| format!("the steered message {text:?} is not in the record")),
        Fact::Forked { parent, holds: held, .. } => {
            if !matches!(transcript.entries().first().map(|e| &e.body), Some(EntryBody::System { .. })) {
                return Err(format!("the fork of {parent} has no system prompt"));
            }
            held.iter()
                .try_for_each(|h| holds(h, transcript))
                .map_err(|why| format!("the fork of {parent} is not whole: {why}"))
        }
        Fact::Rewound { .. } => all
            .iter()
            .any(|e| matches!(e.body, EntryBody::Rewound { .. }))
            .then_some(())
            .ok_or_else(|| "an answered rewind is not in the record".to_string()),
        Fact::Compacted { .. } => all
            .iter()
            .any(|e| matches!(e.body, EntryBody::Summary { .. }))
            .then_some(())
            .ok_or_else(|| "an answered compaction has no summary in the record".to_string()),
        Fact::Deleted { .. } | Fact::WholeOrGone { .. } | Fact::CopiesOf { .. } => Ok(()),
    }
}

/// A user entry's text, as received and as the model saw it.
fn user_text(input: &[InputBlock], model_view: &[UserPart]) -> String {
    let mut text = UserPart::joined_text(model_view, "\n");
    for block in input {
        if let InputBlock::Text { text: t } = block {
            text.push('\n');
            text.push_str(t);
        }
    }
    text
}

/// The last lines of a process's log, for a failure's message.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
