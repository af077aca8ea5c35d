//! The words of a delegation to another agent (`[agents.<name>]`), shared by the engine and
//! the edge: the edge starts and speaks to the agent ([`ExternalAgents`]); the engine serves
//! what the agent asks of its client ([`ExternalHost`]) — see `external_delegation` for how.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// Why the host did not serve a request: what the agent reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The session's tool refused or failed (its text, as the model would read it).
    #[error("{0}")]
    Refused(String),
    #[error("no terminal {0}")]
    NoTerminal(String),
    #[error("the delegation has ended")]
    Ended,
}

/// The agents the user configured, started and spoken to by the edge.
pub trait ExternalAgents: Send + Sync {
    /// The configured names.
    fn names(&self) -> Vec<String>;
    /// Runs `run.task` on agent `run.agent` to its end.
    fn run<'a>(&'a self, run: ExternalRun) -> BoxFuture<'a, Result<ExternalReport, String>>;
}

/// The configured agents as a session holds them, with what their delegations used (added
/// to the session's usage after each batch of calls) and the delegations a steer reaches.
#[derive(Clone)]
pub struct AgentSet {
    pub agents: Arc<dyn ExternalAgents>,
    used: Arc<Mutex<UsedByAgents>>,
    running: Arc<Mutex<HashMap<u64, Steers>>>,
}

/// What the agents used since the turn last took it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct UsedByAgents {
    pub tokens: crate::events::TurnUsage,
    /// Their cost in US dollars, when they reported it.
    pub cost: Option<f64>,
}

/// A delegation's turns as steers cut them: the token that ends the agent's current turn (a
/// steer, or the delegation's end), and the words of the steers it has not been given yet.
#[derive(Clone, Debug)]
pub struct Steers {
    state: Arc<Mutex<SteerState>>,
    /// The delegation's cancel: every turn's token is its child.
    delegation: CancellationToken,
}

#[derive(Debug)]
struct SteerState {
    turn: CancellationToken,
    words: Vec<String>,
    steered: bool,
}

impl Steers {
    pub fn new(delegation: &CancellationToken) -> Self {
        let state = SteerState {
            turn: delegation.child_token(),
            words: Vec::new(),
            steered: false,
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            delegation: delegation.clone(),
        }
    }

    /// Ends the agent's current turn (a steer or the delegation's end cancels it).
    pub fn turn(&self) -> CancellationToken {
        talaria_util::lock(&self.state).turn.clone()
    }

    /// The words of the steers that came since the last time, taken, and a new turn armed
    /// for them; none when no steer came (or the delegation is cancelled).
    pub fn next_turn(&self) -> Option<String> {
        let mut state = talaria_util::lock(&self.state);
        if state.words.is_empty() || self.delegation.is_cancelled() {
            return None;
        }
        state.turn = self.delegation.child_token();
        Some(std::mem::take(&mut state.words).join("\n\n"))
    }

    /// A steer with `words` arrived: the agent's current turn is interrupted for it (a
    /// steer without words, an image only, interrupts it and is the parent turn's alone).
    pub(crate) fn steer(&self, words: &str) {
        let mut state = talaria_util::lock(&self.state);
        if !words.trim().is_empty() {
            state.words.push(words.to_string());
        }
        state.steered = true;
        state.turn.cancel();
    }

    /// Whether a steer reached the delegation.
    pub(crate) fn steered(&self) -> bool {
        talaria_util::lock(&self.state).steered
    }
}

/// A delegation's place among those a steer reaches; leaves it when dropped.
pub(crate) struct Steerable {
    running: Arc<Mutex<HashMap<u64, Steers>>>,
    number: u64,
}

impl Drop for Steerable {
    fn drop(&mut self) {
        talaria_util::lock(&self.running).remove(&self.number);
    }
}

static DELEGATIONS: AtomicU64 = AtomicU64::new(0);

impl AgentSet {
    pub fn new(agents: Arc<dyn ExternalAgents>) -> Self {
        Self {
            agents,
            used: Arc::default(),
            running: Arc::default(),
        }
    }

    /// Adds what one delegation used.
    pub(crate) fn add_used(&self, report: &ExternalReport) {
        let mut used = talaria_util::lock(&self.used);
        if let Some((input, output)) = report.tokens {
            used.tokens.input += input;
            used.tokens.output += output;
        }
        if let Some(cost) = report.cost {
            used.cost = Some(used.cost.unwrap_or(0.0) + cost);
        }
    }

    /// What the agents used since the last time, taken out.
    pub(crate) fn take_used(&self) -> UsedByAgents {
        std::mem::take(&mut *talaria_util::lock(&self.used))
    }

    /// Registers a delegation a steer reaches through `steers`.
    pub(crate) fn steerable(&self, steers: &Steers) -> Steerable {
        let number = DELEGATIONS.fetch_add(1, Ordering::Relaxed);
        talaria_util::lock(&self.running).insert(number, steers.clone());
        Steerable {
            running: self.running.clone(),
            number,
        }
    }

    /// A steer with the user's `words` arrived while calls run: each running delegation's
    /// turn is interrupted (the agent gets `session/cancel`) and the words are its next
    /// prompt; the turn takes the steer too once the calls have answered.
    pub(crate) fn steer(&self, words: &str) {
        for steers in talaria_util::lock(&self.running).values() {
            steers.steer(words);
        }
    }
}

impl std::fmt::Debug for AgentSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AgentSet")
            .field(&self.agents.names())
            .finish()
    }
}

/// One delegation.
pub struct ExternalRun {
    pub agent: String,
    pub cwd: PathBuf,
    pub task: String,
    /// Serves what the agent asks of its client.
    pub host: Arc<dyn ExternalHost>,
    /// The delegation's cancel (the user's, or its end).
    pub cancel: CancellationToken,
    /// Its turns as steers cut them: each turn is prompted with [`Steers::turn`] as its
    /// cancel, and a turn a steer cut is followed by a prompt of the steer's words.
    pub steers: Steers,
}

/// How a delegation ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExternalReport {
    pub answer: String,
    pub cancelled: bool,
    pub refused: bool,
    /// The agent's tokens (input, output), when it reported them.
    pub tokens: Option<(u64, u64)>,
    /// What the delegation cost in US dollars, when the agent reported it.
    pub cost: Option<f64>,
    /// The steers that reached it while it worked, when one did.
    pub steered: Option<SteeredReport>,
}

/// What became of the steers that reached a delegation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SteeredReport {
    /// The words it was prompted with after its turn was interrupted, in order.
    pub words: Vec<String>,
    /// What it had said before the first steer.
    pub before: String,
    /// Why it could not take a steer's prompt (then the report is of the cut turn).
    pub failed: Option<String>,
}

/// What the agent may ask of its client, in the engine's terms.
pub trait ExternalHost: Send + Sync {
    /// A line of the agent's progress for the card (its words, its own tool calls).
    fn step(&self, line: String);
    /// The agent's words as they stream (shown on its own session to a client that shows
    /// subagents).
    fn said<'a>(&'a self, text: String) -> BoxFuture<'a, ()>;
    /// The agent's thoughts as they stream (likewise).
    fn thought<'a>(&'a self, text: String) -> BoxFuture<'a, ()>;
    /// The agent started one of its own tool calls (shown as a call of its session to a
    /// client that shows subagents).
    fn call_started<'a>(&'a self, call: ChildCall) -> BoxFuture<'a, ()>;
    /// One of its own calls ended: `failed` or not, with what it showed.
    fn call_ended<'a>(&'a self, ended: ChildCallEnd) -> BoxFuture<'a, ()>;
    fn read_text<'a>(
        &'a self,
        path: PathBuf,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> BoxFuture<'a, Result<String, HostError>>;
    fn write_text<'a>(
        &'a self,
        path: PathBuf,
        text: String,
    ) -> BoxFuture<'a, Result<(), HostError>>;
    fn ask<'a>(&'a self, question: ChildQuestion) -> BoxFuture<'a, ChildAnswer>;
    /// The agent's form for the user (`elicitation/create`), shown with its name on it; no
    /// one to ask declines it.
    fn ask_form<'a>(
        &'a self,
        message: String,
        schema: serde_json::Value,
    ) -> BoxFuture<'a, Result<talaria_tools::FormAnswer, HostError>>;
    fn start_command<'a>(
        &'a self,
        command: ChildCommand,
    ) -> BoxFuture<'a, Result<String, HostError>>;
    fn command_output(&self, terminal: &str) -> Result<ChildOutput, HostError>;
    fn wait_command<'a>(&'a self, terminal: &'a str)
    -> BoxFuture<'a, Result<ChildExit, HostError>>;
    fn kill_command(&self, terminal: &str) -> Result<(), HostError>;
    fn release_command(&self, terminal: &str) -> Result<(), HostError>;
}

/// What the agent's call would do, as it says (ACP's tool kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildCallKind {
    Read,
    Search,
    Think,
    Fetch,
    Edit,
    Delete,
    Move,
    Execute,
    Other,
}

/// One answer the agent offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildOption {
    pub id: String,
    pub kind: ChildOptionKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildOptionKind {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

/// One of the agent's own tool calls, as it announced it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildCall {
    /// The agent's id for it.
    pub id: String,
    pub title: String,
    pub kind: ChildCallKind,
    pub paths: Vec<std::path::PathBuf>,
    pub raw_input: serde_json::Value,
}

/// How one of the agent's own calls ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildCallEnd {
    pub id: String,
    pub failed: bool,
    /// Its title when the agent changed it at the end.
    pub title: Option<String>,
    /// What it showed (its text content).
    pub text: String,
}

/// The agent's question about one of its own calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildQuestion {
    pub title: String,
    pub kind: ChildCallKind,
    /// The paths the call names.
    pub paths: Vec<std::path::PathBuf>,
    pub options: Vec<ChildOption>,
}

/// The answer: one of the agent's options, or none (cancelled or unanswerable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildAnswer {
    Chosen(String),
    Cancelled,
}

impl ChildCallKind {
    /// The kind as Talaria's own calls name it.
    pub fn tool_kind(self) -> talaria_record::ToolKind {
        use talaria_record::ToolKind;
        match self {
            Self::Read => ToolKind::Read,
            Self::Search => ToolKind::Search,
            Self::Think => ToolKind::Think,
            Self::Fetch => ToolKind::Fetch,
            Self::Edit => ToolKind::Edit,
            Self::Delete => ToolKind::Delete,
            Self::Move => ToolKind::Move,
            Self::Execute => ToolKind::Execute,
            Self::Other => ToolKind::Other,
        }
    }

    pub fn changes_nothing(self) -> bool {
        matches!(self, Self::Read | Self::Search | Self::Think)
    }

    pub fn edits(self) -> bool {
        matches!(self, Self::Edit | Self::Delete | Self::Move)
    }

    pub fn id(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Search => "search",
            Self::Think => "think",
            Self::Fetch => "fetch",
            Self::Edit => "edit",
            Self::Delete => "delete",
            Self::Move => "move",
            Self::Execute => "execute",
            Self::Other => "other",
        }
    }
}

/// A command the agent asks to run in a terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildCommand {
    pub command: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// The most bytes of output kept (the start is dropped first).
    pub output_limit: Option<u64>,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChildExit {
    pub code: Option<i32>,
    pub signal: Option<String>,
}

/// A terminal's output so far.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChildOutput {
    pub output: String,
    pub truncated: bool,
    pub exit: Option<ChildExit>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steer_cuts_the_current_turn_and_its_words_arm_the_next_one_once() {
        let delegation = CancellationToken::new();
        let steers = Steers::new(&delegation);
        let first = steers.turn();
        assert_eq!(steers.next_turn(), None, "no steer, no next turn");
        steers.steer("use B");
        steers.steer("  ");
        steers.steer("and C");
        assert!(first.is_cancelled() && steers.steered());
        assert_eq!(steers.next_turn().as_deref(), Some("use B\n\nand C"));
        let second = steers.turn();
        assert!(!second.is_cancelled(), "the next turn runs");
        assert_eq!(steers.next_turn(), None, "its words were given once");
        steers.steer("again");
        delegation.cancel();
        assert!(second.is_cancelled());
        assert_eq!(
            steers.next_turn(),
            None,
            "a cancelled delegation takes no steer"
        );
    }
}
