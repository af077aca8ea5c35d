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
//! 5. **A fork is whole or absent**: an answered fork holds its parent's conversation, and
//!    any fork starts with its parent's whole path; a session with no entry never loads.
//!
//! `store.rs` reads the store, `record.rs` judges one record and one replay.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockLlm, MockReply};

use crate::home::{Faults, Home};
use crate::ledger::Fact;

mod record;
mod store;

pub use record::replay_problems;
use store::check_store;
pub use store::{Snapshot, has_rewind, hollow_sessions, path_json, snapshot, store_whole, stored};

/// How long a restarted process may answer `-32010` (its store still opening) before a load
/// counts as failed.
const STORE_OPENS_WITHIN: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(20);

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
pub(crate) fn live_facts(facts: &[Fact]) -> Vec<Fact> {
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

/// The sessions the promises say exist.
pub fn promised_sessions(facts: &[Fact]) -> Vec<String> {
    sessions_of(&live_facts(facts))
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

/// The last lines of a process's log, for a failure's message.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
