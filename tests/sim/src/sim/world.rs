//! A simulation's world while a plan runs: the home, the agent processes in their slots,
//! the sessions made so far, the held store, and every promise made, in the order made.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::client::Client;
use crate::home::{Faults, Home};
use crate::ledger::{Fact, on_path};
use crate::stalls::HeldLock;

/// One agent process in a slot.
pub struct Proc {
    pub client: Client,
    /// How many of its client's promises the world has taken.
    taken: usize,
    /// Its number among the processes started.
    pub number: usize,
    /// It was started to be killed at a failpoint's pass (`TALARIA_CRASH_AT`).
    armed: bool,
}

/// A turn of a session the client saw answered: what a rewind names.
#[derive(Debug, Clone)]
pub struct Turn {
    pub user_id: String,
    pub user_text: String,
    /// The turn's last answer (id and text), if it streamed one.
    pub answer: Option<(String, String)>,
}

/// A session as the driver knows it.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub cwd: PathBuf,
    /// The slot whose process has it open.
    pub holder: Option<u8>,
    /// The process that had it open last (its writes may still wait there while it lives).
    pub last_process: usize,
    pub deleted: bool,
    /// Its answered turns on the path, oldest first.
    pub turns: Vec<Turn>,
}

/// The world of one simulation run.
pub struct World {
    pub home: Home,
    pub slots: Vec<Option<Proc>>,
    /// Faults for the next process started in a slot.
    pub next_faults: Vec<Faults>,
    pub sessions: Vec<Session>,
    pub facts: Vec<Fact>,
    pub held: Option<HeldLock>,
    /// Steps the store stays held for (this one included); given back at 0.
    pub held_for: usize,
    /// Processes started, for the trace files' names.
    started: usize,
    /// What happened, step by step (for a failure's report).
    pub log: Vec<String>,
    /// The logs of the processes gone, by number.
    logs: Vec<(usize, String)>,
}

impl World {
    pub fn new(home: Home) -> World {
        let slots = usize::from(super::plan::SLOTS);
        World {
            home,
            slots: (0..slots).map(|_| None).collect(),
            next_faults: vec![Faults::default(); slots],
            sessions: Vec::new(),
            facts: Vec::new(),
            held: None,
            held_for: 0,
            started: 0,
            log: Vec::new(),
            logs: Vec::new(),
        }
    }

    /// The process in `slot`, started (and initialized) if none runs there.
    pub async fn proc(&mut self, slot: u8) -> anyhow::Result<&mut Client> {
        let at = usize::from(slot);
        if self.slots[at].is_none() {
            let mut faults = std::mem::take(&mut self.next_faults[at]);
            self.started += 1;
            faults.trace = Some(self.home.scratch(&format!("trace-{}", self.started)));
            let agent = self.home.initialized(&faults).await?;
            self.log.push(format!(
                "  started process {} in slot {slot} (pid {:?}, crash {:?}, FAILPOINTS {:?})",
                self.started,
                agent.pid(),
                faults.crash_at.as_ref().map(|p| p.to_string()),
                faults.failpoints
            ));
            let mut client = Client::new(agent);
            // A store held by another program may keep a new process from opening it for a
            // while (its load answers "try again later"): the step goes without it.
            client.load_patience = Duration::from_secs(3);
            self.slots[at] = Some(Proc {
                client,
                taken: 0,
                number: self.started,
                armed: faults.crash_at.is_some(),
            });
        }
        match &mut self.slots[at] {
            Some(proc) => Ok(&mut proc.client),
            None => anyhow::bail!("slot {slot} is empty"),
        }
    }

    /// The live session numbered `index` (modulo the live ones), if any.
    pub fn session(&self, index: u8) -> Option<usize> {
        let live: Vec<usize> = (0..self.sessions.len())
            .filter(|&i| !self.sessions[i].deleted)
            .collect();
        (!live.is_empty()).then(|| live[usize::from(index) % live.len()])
    }

    /// Opens session `at` where it can be worked on: its holder's slot, else loaded into
    /// `slot`. The slot it is open in.
    pub async fn open(&mut self, at: usize, slot: u8) -> anyhow::Result<u8> {
        if let Some(holder) = self.sessions[at].holder
            && self.slots[usize::from(holder)].is_some()
        {
            return Ok(holder);
        }
        let (id, cwd) = (self.sessions[at].id.clone(), self.sessions[at].cwd.clone());
        let client = self.proc(slot).await?;
        let loaded = client.load(&id, &cwd).await?;
        anyhow::ensure!(loaded.get("result").is_some(), "load of {id}: {loaded}");
        self.sessions[at].holder = Some(slot);
        self.sessions[at].last_process = self.process_number(slot);
        Ok(slot)
    }

    /// The number of the process in `slot` (0: none).
    pub fn process_number(&self, slot: u8) -> usize {
        self.slots[usize::from(slot)]
            .as_ref()
            .map_or(0, |p| p.number)
    }

    /// Whether process number `number` still runs.
    pub fn alive(&self, number: usize) -> bool {
        self.slots.iter().flatten().any(|p| p.number == number)
    }

    /// Takes the promises every process made since the last call (in the order of the
    /// steps), notices processes that are gone, and empties the mock's scripts (a turn cut
    /// short leaves its replies).
    pub async fn settle(&mut self) {
        for slot in 0..self.slots.len() {
            let gone = match &mut self.slots[slot] {
                Some(proc) => proc
                    .client
                    .agent
                    .wait_exit(Duration::from_millis(1))
                    .await
                    .is_ok(),
                None => continue,
            };
            if gone && let Some(proc) = &mut self.slots[slot] {
                proc.client.collect().await;
            }
            self.take_promises(slot);
            if gone {
                self.log
                    .push(format!("  the process in slot {slot} is gone"));
                self.retire(slot);
                self.release_sessions(slot);
            }
        }
        self.home.mock.take_scripts();
    }

    fn take_promises(&mut self, slot: usize) {
        let Some(proc) = &mut self.slots[slot] else {
            return;
        };
        let facts = proc.client.ledger().facts;
        let new = facts[proc.taken.min(facts.len())..].to_vec();
        proc.taken = facts.len();
        for fact in new {
            let fact = match fact {
                // A fork holds its parent's path as every process promised it.
                Fact::Forked { parent, fork, .. } => Fact::Forked {
                    holds: on_path(&self.facts, &parent)
                        .into_iter()
                        .map(|f| moved(f, &fork))
                        .collect(),
                    parent,
                    fork,
                },
                other => other,
            };
            self.facts.push(fact);
        }
    }

    /// A step is over: a store held long enough is given back.
    pub fn count_held_step(&mut self) {
        self.held_for = self.held_for.saturating_sub(1);
        if self.held_for == 0 {
            self.held = None;
        }
    }

    /// The process in `slot` is gone: its log kept (for a failure's report), its sessions
    /// open nowhere.
    fn retire(&mut self, slot: usize) {
        if let Some(proc) = self.slots[slot].take() {
            self.logs.push((proc.number, proc.client.agent.stderr()));
        }
    }

    /// Writes every process's log beside the home (a failure's report).
    pub fn keep_logs(&self) {
        let live = self
            .slots
            .iter()
            .flatten()
            .map(|p| (p.number, p.client.agent.stderr()));
        for (number, log) in self.logs.iter().cloned().chain(live) {
            let _ = std::fs::write(self.home.scratch(&format!("process-{number}.log")), log);
        }
    }

    /// The sessions open in `slot` are open nowhere.
    pub fn release_sessions(&mut self, slot: usize) {
        for session in &mut self.sessions {
            if session.holder.map(usize::from) == Some(slot) {
                session.holder = None;
            }
        }
    }

    /// Stops the process in `slot` at end of input (killed if it does not stop in 4 s: a
    /// problem, returned).
    pub async fn stop(&mut self, slot: u8) -> Option<String> {
        let at = usize::from(slot);
        let proc = self.slots[at].as_mut()?;
        proc.client.agent.close_stdin();
        let ended = proc.client.agent.wait_exit(Duration::from_secs(4)).await;
        let problem = match ended {
            Ok(status) if status.success() => None,
            // Its armed point was passed on the way out: the kill the plan asked for (what it
            // left is checked as after any kill).
            Ok(status)
                if proc.armed
                    && std::os::unix::process::ExitStatusExt::signal(&status) == Some(9) =>
            {
                None
            }
            Ok(status) => Some(format!("a process ended with {status:?} at end of input")),
            Err(_) => {
                kill(&proc.client);
                let _ = proc.client.agent.wait_exit(Duration::from_secs(20)).await;
                Some("a process did not stop within 4 s of end of input".to_string())
            }
        };
        let problem = problem.map(|p| {
            format!(
                "{p}\n{}",
                crate::invariants::tail(&proc.client.agent.stderr())
            )
        });
        proc.client.collect().await;
        self.take_promises(at);
        self.retire(at);
        self.release_sessions(at);
        problem
    }

    /// SIGKILL of the process in `slot`.
    pub async fn kill(&mut self, slot: u8) {
        let at = usize::from(slot);
        let Some(proc) = self.slots[at].as_mut() else {
            return;
        };
        kill(&proc.client);
        let _ = proc.client.agent.wait_exit(Duration::from_secs(20)).await;
        proc.client.collect().await;
        self.take_promises(at);
        self.retire(at);
        self.release_sessions(at);
    }

    /// Notes a turn `session` answered, from the answer and what streamed before it.
    pub fn note_turn(&mut self, at: usize, text: &str, answer: &Value, streamed: &[Value]) {
        let Some(user_id) = answer["result"]["_meta"]["userMessageId"].as_str() else {
            return;
        };
        let id = self.sessions[at].id.clone();
        let last = streamed
            .iter()
            .rev()
            .filter(|m| m["params"]["sessionId"] == id.as_str())
            .map(|m| &m["params"]["update"])
            .find(|u| u["sessionUpdate"] == "agent_message_chunk")
            .and_then(|u| u["messageId"].as_str());
        let answer = last.map(|message| {
            let text: String = streamed
                .iter()
                .map(|m| &m["params"]["update"])
                .filter(|u| u["messageId"] == message)
                .filter_map(|u| u["content"]["text"].as_str())
                .collect();
            (message.to_string(), text)
        });
        self.sessions[at].turns.push(Turn {
            user_id: user_id.to_string(),
            user_text: text.to_string(),
            answer,
        });
    }

    /// Scripts a turn of `kind` whose answer says `said`.
    pub fn script_turn(&self, kind: super::plan::TurnKind, said: &str, file: &str) {
        use super::plan::TurnKind;
        let answer = MockReply::text(&[said]);
        let replies = match kind {
            TurnKind::Text => vec![answer],
            TurnKind::Tools => vec![
                MockReply::tool_call(
                    "w",
                    "write_file",
                    json!({"path": file, "content": format!("{said}\n")}),
                ),
                MockReply::tool_call("r", "read_file", json!({"path": file})),
                answer,
            ],
            TurnKind::ProviderError => vec![
                MockReply::Error {
                    status: 500,
                    body: r#"{"error":{"message":"the server had an error"}}"#.into(),
                    headers: Vec::new(),
                },
                answer,
            ],
            TurnKind::Dropped => vec![MockReply::Drop { chunks: Vec::new() }, answer],
        };
        self.home.script(replies);
    }
}

/// A promise about a parent as its fork's.
fn moved(fact: &Fact, fork: &str) -> Fact {
    match fact.clone() {
        Fact::Said {
            entry,
            message,
            text,
            ..
        } => Fact::Said {
            session: fork.to_string(),
            entry,
            message,
            text,
        },
        Fact::Asked { entry, text, .. } => Fact::Asked {
            session: fork.to_string(),
            entry,
            text,
        },
        other => other,
    }
}

pub fn kill(client: &Client) {
    if let Some(pid) = client.agent.pid() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
