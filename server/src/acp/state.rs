//! The wire room's shared state: the agent one connection serves (`Agent`), its open
//! sessions, what its client can do, and the values the handlers hand each other (a deferred
//! request's second half, a session's edge updates, the quota board, the clients attached to
//! a session and which of them has control: `Audience`). A leaf: it imports
//! none of its siblings (a source rule checks), so every handler can use it without a
//! circle. What sessions are made from lives in the session room (`crate::sessions`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::LocalBoxFuture;
use serde_json::Value;
use talaria_engine::{Delegation, SessionHandle};
use talaria_protocol::acp::{self, RequestId, SessionNotification};
use talaria_protocol::{Peer, errors};
use talaria_record::{EntryId, Transcript};
use talaria_util::lock;
use tokio::sync::mpsc;

use crate::sessions::{ClientAbilities, SessionRoom};

/// A request's answer: its result, or the JSON-RPC error.
pub type Reply = Result<Value, acp::Error>;

pub fn to_value<T: serde::Serialize>(value: T) -> Reply {
    serde_json::to_value(value).map_err(|e| errors::internal_error(format!("serializing: {e}")))
}

pub fn session_not_found(id: &acp::SessionId) -> acp::Error {
    acp::Error::new(
        acp::ErrorCode::ResourceNotFound.into(),
        format!("Session not found: {id}"),
    )
}

/// The agent of one connection: the dispatch loop's state.
pub struct Agent {
    pub peer: Peer,
    pub client_caps: ClientCaps,
    /// Notifications to send after the current request's answer.
    pub outbox: Vec<SessionNotification>,
    /// What to start after the current request's answer (and its notifications) is sent.
    pub after_answer: Vec<Box<dyn FnOnce() + Send>>,
    pub sessions: HashMap<String, LiveSession>,
    /// What this connection's sessions are made from and kept with.
    pub room: SessionRoom,
    /// Where requests whose slow part ran off the loop come back to be finished.
    pub deferred: mpsc::UnboundedSender<Deferred>,
    /// The requests whose slow part is running (answered when it comes back; at end of
    /// input, waited for).
    pub running_deferred: Vec<(RequestId, String)>,
    /// Set by a request whose answer must follow updates still going out (a load's replay):
    /// fires once they are queued for output. The answer waits for it off the loop.
    pub answer_after: Option<tokio::sync::oneshot::Receiver<()>>,
    /// The sessions' rate-limit snapshots, for `quota/read`.
    pub quotas: Arc<QuotaBoard>,
    /// This connection among the clients attached to a session (process-unique).
    pub member: MemberId,
    /// What its client calls itself (`clientInfo.name` at `initialize`), for the others.
    pub client_name: Option<String>,
    /// Sessions of other processes this client follows (`follow.rs`): each followed until
    /// its guard is dropped.
    pub following: HashMap<String, Followed>,
}

/// A connection of this process, as the clients attached to a session know it.
pub type MemberId = u64;

/// A number no other connection of this process has.
pub fn next_member_id() -> MemberId {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// This connection as one of a session's attached clients.
pub fn member_of(agent: &Agent) -> Member {
    Member {
        id: agent.member,
        name: agent.client_name.clone(),
        peer: agent.peer.clone(),
        caps: agent.client_caps,
    }
}

/// A client attached to a session: where its messages go and what it can show.
#[derive(Clone)]
pub struct Member {
    pub id: MemberId,
    pub name: Option<String>,
    pub peer: Peer,
    pub caps: ClientCaps,
}

impl Member {
    /// How the others are told of it: `{clientId, name?}`.
    pub fn described(&self) -> Value {
        let mut said = serde_json::json!({"clientId": format!("client-{}", self.id)});
        if let Some(name) = &self.name {
            said["name"] = name.clone().into();
        }
        said
    }
}

/// Asks a client that attached while a question was open the same question.
pub type AskAlso = Arc<dyn Fn(&Member) + Send + Sync>;

/// The clients attached to one session, in the order they attached, and the one with
/// control (who prompts, steers, cancels and sets modes); the questions open now, which a
/// client attaching gets too. The session's forwarder writes to every one of them.
#[derive(Default)]
pub struct Audience {
    attached: Mutex<Attached>,
    /// Bumped whenever who is attached or who has control changes: a write waiting for a
    /// client decides again (`delivery.rs`).
    roles: tokio::sync::watch::Sender<u64>,
}

/// How the session's writer hands a message to one client (`Audience::delivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The controller, or the only client: waited for while its output is full.
    Wait,
    /// Another client: handed it only if its output has room, else detached.
    Try,
    /// Not attached (it left, or was detached): nothing more is sent to it.
    Gone,
    /// Attached and being shown the session so far: kept for it until it has caught up.
    Keep,
}

/// What became of a message kept for a client catching up (`Audience::keep_for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Held,
    /// Over [`CATCH_UP_BYTES`]: it was detached, as a client behind is.
    Dropped,
    /// Over [`CATCH_UP_BYTES`], but the only client: the writer waits for it to catch up.
    Wait,
}

/// What a client catching up takes next (`Audience::next_kept`).
pub enum CatchUp {
    More(Vec<talaria_protocol::SerializedNotification>),
    /// Nothing more kept: it is attached as any client from now on, and asked the
    /// questions open now.
    CaughtUp(Vec<AskAlso>),
    /// It was detached meanwhile.
    Gone,
}

/// The most kept for one client while it is shown the session so far.
pub const CATCH_UP_BYTES: usize = 16 << 20;

/// What is kept for a client while it is shown the session so far.
#[derive(Default)]
struct KeptFor {
    messages: Vec<talaria_protocol::SerializedNotification>,
    bytes: usize,
}

/// What a client leaving a session comes to (`Audience::leave_unless_last`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaving {
    /// It left; control passed to this client, if it had control and one is left.
    Left(Option<MemberId>),
    /// No other client is attached: it stays, and the caller closes the session.
    Last,
}

/// The client is not attached to the session (it left, or fell behind and was detached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAttached;

#[derive(Default)]
struct Attached {
    members: Vec<Member>,
    controller: Option<MemberId>,
    questions: Vec<(u64, AskAlso)>,
    next_question: u64,
    /// Another process asked for the session (`handover.rs`): nothing more is prompted
    /// here; once it is handed over, each client left follows it there (its follower's stop).
    /// Who sent the last prompt (the running turn's, while one runs).
    prompted_by: Option<MemberId>,
    moving: bool,
    moved: bool,
    followers: HashMap<MemberId, Followed>,
    /// Clients detached for falling behind, not yet told (`delivery.rs`).
    lagging: Vec<Member>,
    /// The clients whose prompts wait for their answers, and how many each: answered
    /// whether or not they are still attached then.
    askers: HashMap<MemberId, (Peer, usize)>,
    /// Clients being shown the session so far, and what came since, kept for them.
    catching_up: HashMap<MemberId, KeptFor>,
}

impl Attached {
    /// `id`, behind, leaves (kept to be told: `take_lagging`); control, if it had it, passes
    /// to the longest-attached client left.
    fn detach_behind(&mut self, id: MemberId) {
        self.catching_up.remove(&id);
        if let Some(at) = self.members.iter().position(|m| m.id == id) {
            let member = self.members.remove(at);
            self.lagging.push(member);
        }
        if self.controller == Some(id) {
            self.controller = self.members.first().map(|m| m.id);
        }
    }
}

impl Audience {
    /// A session whose first client (`controller`) has control.
    pub fn with_controller(controller: Member) -> Self {
        let audience = Self::default();
        {
            let mut attached = lock(&audience.attached);
            attached.controller = Some(controller.id);
            attached.members.push(controller);
        }
        audience
    }

    pub fn members(&self) -> Vec<Member> {
        lock(&self.attached).members.clone()
    }

    /// How many clients other than `id` are attached, or following the session from here
    /// where it was handed to.
    pub fn others_than(&self, id: MemberId) -> usize {
        let attached = lock(&self.attached);
        let mut others: std::collections::HashSet<MemberId> =
            attached.members.iter().map(|m| m.id).collect();
        others.extend(attached.followers.keys());
        others.remove(&id);
        others.len()
    }

    pub fn member(&self, id: MemberId) -> Option<Member> {
        lock(&self.attached)
            .members
            .iter()
            .find(|m| m.id == id)
            .cloned()
    }

    pub fn holds(&self, id: MemberId) -> bool {
        self.member(id).is_some()
    }

    pub fn controller(&self) -> Option<MemberId> {
        lock(&self.attached).controller
    }

    /// Whether `id` may prompt, steer, cancel and set modes.
    pub fn is_controller(&self, id: MemberId) -> bool {
        self.controller() == Some(id)
    }

    /// `member` attaches, shown nothing (tests).
    #[cfg(test)]
    pub fn join(&self, member: Member) {
        let mut attached = lock(&self.attached);
        attached.members.retain(|m| m.id != member.id);
        attached.members.push(member);
        drop(attached);
        self.roles_changed();
    }

    /// `id`, attached, takes control; the client that had it, if another.
    pub fn take_control(&self, id: MemberId) -> Result<Option<MemberId>, NotAttached> {
        let mut attached = lock(&self.attached);
        if !attached.members.iter().any(|m| m.id == id) {
            return Err(NotAttached);
        }
        let before = attached.controller.replace(id);
        drop(attached);
        self.roles_changed();
        Ok(before.filter(|b| *b != id))
    }

    /// `id` gives control back (the session waits for a client to take it).
    pub fn release_control(&self, id: MemberId) {
        let mut attached = lock(&self.attached);
        if attached.controller == Some(id) {
            attached.controller = None;
        }
        drop(attached);
        self.roles_changed();
    }

    /// `id` leaves unless no other client is attached; control, if it had it, passes to the
    /// longest-attached client left, or the session waits for one to take it.
    pub fn leave_unless_last(&self, id: MemberId) -> Leaving {
        let mut attached = lock(&self.attached);
        if attached.members.iter().all(|m| m.id == id) {
            return Leaving::Last;
        }
        attached.members.retain(|m| m.id != id);
        attached.catching_up.remove(&id);
        let passed = if attached.controller == Some(id) {
            attached.controller = attached.members.first().map(|m| m.id);
            attached.controller
        } else {
            None
        };
        drop(attached);
        self.roles_changed();
        Leaving::Left(passed)
    }

    /// Something to wait on for the next change of who is attached or has control.
    pub fn watch_roles(&self) -> tokio::sync::watch::Receiver<u64> {
        self.roles.subscribe()
    }

    fn roles_changed(&self) {
        self.roles.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// How a message is handed to `id` now.
    pub fn delivery(&self, id: MemberId) -> Delivery {
        let attached = lock(&self.attached);
        if !attached.members.iter().any(|m| m.id == id) {
            Delivery::Gone
        } else if attached.catching_up.contains_key(&id) {
            Delivery::Keep
        } else if attached.controller == Some(id) || attached.members.len() == 1 {
            Delivery::Wait
        } else {
            Delivery::Try
        }
    }

    /// `member` attaches and is shown the session so far: what comes meanwhile is kept for
    /// it (`keep_for`) until it has caught up (`next_kept`). `false` when it is being shown
    /// it already (an attach in flight).
    pub fn join_catching_up(&self, member: Member) -> bool {
        let mut attached = lock(&self.attached);
        if attached.catching_up.contains_key(&member.id) {
            return false;
        }
        attached.catching_up.insert(member.id, KeptFor::default());
        attached.members.retain(|m| m.id != member.id);
        attached.members.push(member);
        drop(attached);
        self.roles_changed();
        true
    }

    /// Keeps `message` for `id`, catching up.
    pub fn keep_for(
        &self,
        id: MemberId,
        message: &talaria_protocol::SerializedNotification,
    ) -> Kept {
        let mut attached = lock(&self.attached);
        let only = attached.members.len() == 1;
        let Some(kept) = attached.catching_up.get_mut(&id) else {
            return Kept::Dropped;
        };
        if kept.bytes + message.len() <= CATCH_UP_BYTES {
            kept.bytes += message.len();
            kept.messages.push(message.clone());
            return Kept::Held;
        }
        if only {
            return Kept::Wait;
        }
        attached.detach_behind(id);
        drop(attached);
        self.roles_changed();
        Kept::Dropped
    }

    /// What was kept for `id` since last asked.
    pub fn next_kept(&self, id: MemberId) -> CatchUp {
        let mut attached = lock(&self.attached);
        let Some(kept) = attached.catching_up.get_mut(&id) else {
            return CatchUp::Gone;
        };
        if !kept.messages.is_empty() {
            kept.bytes = 0;
            return CatchUp::More(std::mem::take(&mut kept.messages));
        }
        attached.catching_up.remove(&id);
        let questions = attached
            .questions
            .iter()
            .map(|(_, ask)| ask.clone())
            .collect();
        drop(attached);
        self.roles_changed();
        CatchUp::CaughtUp(questions)
    }

    /// `id`, whose output is full, leaves unless it is waited for now (`Delivery::Wait`);
    /// it is kept to be told, with the others, by `take_lagging`. Whether it is gone.
    pub fn drop_lagging(&self, id: MemberId) -> bool {
        let mut attached = lock(&self.attached);
        if attached.controller == Some(id) || attached.members.len() == 1 {
            return false;
        }
        if !attached.members.iter().any(|m| m.id == id) {
            return true;
        }
        attached.detach_behind(id);
        drop(attached);
        self.roles_changed();
        true
    }

    /// `id` prompted (its turn is answered through `peer` by `take_asker`, attached or not).
    pub fn prompted(&self, id: MemberId, peer: &Peer) {
        let mut attached = lock(&self.attached);
        attached.prompted_by = Some(id);
        attached
            .askers
            .entry(id)
            .or_insert_with(|| (peer.clone(), 0))
            .1 += 1;
    }

    /// The connection to answer one of `id`'s prompts on.
    pub fn take_asker(&self, id: MemberId) -> Option<Peer> {
        let mut attached = lock(&self.attached);
        let (peer, waiting) = attached.askers.get_mut(&id)?;
        let peer = peer.clone();
        *waiting -= 1;
        if *waiting == 0 {
            attached.askers.remove(&id);
        }
        Some(peer)
    }

    /// The clients detached for falling behind since last asked.
    pub fn take_lagging(&self) -> Vec<Member> {
        std::mem::take(&mut lock(&self.attached).lagging)
    }

    /// A question is open: `ask_also` asks whoever catches up before it is answered. The
    /// number to close it with, and the clients to ask now (not those catching up: they are
    /// asked once they have caught up, after what they are shown).
    pub fn open_question(&self, ask_also: AskAlso) -> (u64, Vec<Member>) {
        let mut attached = lock(&self.attached);
        attached.next_question += 1;
        let number = attached.next_question;
        attached.questions.push((number, ask_also));
        let now = attached
            .members
            .iter()
            .filter(|m| !attached.catching_up.contains_key(&m.id))
            .cloned()
            .collect();
        (number, now)
    }

    /// Whether `id` is being shown the session so far (it may not act on it yet).
    pub fn is_catching_up(&self, id: MemberId) -> bool {
        lock(&self.attached).catching_up.contains_key(&id)
    }

    pub fn close_question(&self, number: u64) {
        lock(&self.attached).questions.retain(|(n, _)| *n != number);
    }

    /// Client `id` sent a prompt.
    /// Who sent the last prompt.
    pub fn prompted_by(&self) -> Option<MemberId> {
        lock(&self.attached).prompted_by
    }

    /// Another process asked for the session: `false` when it is being handed over already.
    pub fn begin_move(&self) -> bool {
        let mut attached = lock(&self.attached);
        !std::mem::replace(&mut attached.moving, true)
    }

    /// The ask was withdrawn before the session was handed over: it goes on here.
    pub fn cancel_move(&self) {
        lock(&self.attached).moving = false;
    }

    /// Whether the session is being, or was, handed to another process.
    pub fn is_moving(&self) -> bool {
        lock(&self.attached).moving
    }

    /// The session was handed to another process (closed here).
    pub fn moved(&self) {
        lock(&self.attached).moved = true;
    }

    /// Whether the session was handed to another process (its clients follow it there).
    pub fn has_moved(&self) -> bool {
        lock(&self.attached).moved
    }

    /// Client `id` follows the session in the process it was handed to.
    pub fn follow_elsewhere(&self, id: MemberId, followed: Followed) {
        lock(&self.attached).followers.insert(id, followed);
    }

    /// Client `id` leaves a session handed to another process: its following, to stop (by
    /// dropping it) or to finish.
    pub fn stop_following(&self, id: MemberId) -> Option<Followed> {
        let mut attached = lock(&self.attached);
        attached.members.retain(|m| m.id != id);
        attached.followers.remove(&id)
    }

    /// Who is attached and who has control, as the clients are told (`_meta`).
    pub fn roster(&self) -> Value {
        let attached = lock(&self.attached);
        let clients: Vec<Value> = attached
            .members
            .iter()
            .map(|m| {
                let mut said = m.described();
                let role = if attached.controller == Some(m.id) {
                    "controller"
                } else {
                    "observer"
                };
                said["role"] = role.into();
                said
            })
            .collect();
        let controller = attached
            .controller
            .map(|c| Value::String(format!("client-{c}")));
        serde_json::json!({"clients": clients, "controller": controller})
    }
}

/// The second half of a request whose slow part ran on a task of its own: it runs on the
/// dispatch loop (it may change the agent's state), and its reply answers the request.
pub type Finish = Box<dyn for<'a> FnOnce(&'a mut Agent) -> LocalBoxFuture<'a, Reply> + Send>;

/// A request whose slow part is done.
pub struct Deferred {
    pub id: RequestId,
    pub method: String,
    pub finish: Finish,
}

/// A client following a session another process runs (`follow.rs`): dropped, the following
/// stops.
pub struct Followed {
    pub _stop: tokio_util::sync::DropGuard,
    /// Counted among the session's followers in this process while it lives.
    pub _counted: crate::sessions::ClientMark,
    pub catch_up: tokio_util::sync::CancellationToken,
    pub caught_up: tokio::sync::oneshot::Receiver<Option<EntryId>>,
}

impl Followed {
    /// Shows the rest of the record (read once more) and stops: the last entry the client
    /// has then seen, for what it is shown next to go on from.
    pub async fn finish(self) -> Option<EntryId> {
        self.catch_up.cancel();
        self.caught_up.await.ok().flatten()
    }
}

/// A session open in this connection (created here or attached to: every connection holding
/// it holds a clone).
#[derive(Clone)]
pub struct LiveSession {
    pub handle: SessionHandle,
    /// The session's one writer of `session/update`s (its forwarder).
    pub updates: mpsc::UnboundedSender<EdgeUpdates>,
    pub images_allowed: bool,
    /// Models offered for switching.
    pub models: Vec<String>,
    /// The client shows boolean config options.
    pub booleans: bool,
    /// What session responses say under `_meta`.
    pub meta: acp::Meta,
    /// How its commands start (sandbox, environment), and where: for `_talaria/run_command`.
    pub shell: Arc<talaria_tools::Shell>,
    pub cwd: std::path::PathBuf,
    /// The clients attached to it, and the one with control.
    pub audience: Arc<Audience>,
    /// The journal it writes through (the room's of the connection that opened it): its
    /// claim is released there when it closes.
    pub journal: Option<talaria_engine::Journal>,
    /// Opened by this connection (not attached to): its room's journal is the session's.
    pub opened_here: bool,
    /// Its folder's trust as assessed and shown when it started (`trust/apply` decides on
    /// exactly these files).
    pub trust: Arc<talaria_engine::TrustAssessment>,
}

impl LiveSession {
    /// Hands updates to the session's writer; the receiver fires once they are queued for
    /// output (so a response sent after it follows them), or is dropped with the writer.
    pub fn write_soon(&self, updates: EdgePayload) -> tokio::sync::oneshot::Receiver<()> {
        let (written, queued) = tokio::sync::oneshot::channel();
        let _ = self.updates.send(EdgeUpdates {
            updates,
            written: Some(written),
            outcome: None,
        });
        queued
    }

    /// Hands an update to the session's writer, to follow whatever it writes now.
    pub fn write_later(&self, update: acp::SessionUpdate) {
        let _ = self.updates.send(EdgeUpdates {
            updates: EdgePayload::Updates(vec![update]),
            written: None,
            outcome: None,
        });
    }
}

/// Updates the edge itself has for a session (a replay, the slash commands, notices at start,
/// the other view of a changed setting): written by the session's forwarder, its one writer,
/// in order with the engine's events; `written` fires once they are queued for output.
pub struct EdgeUpdates {
    pub updates: EdgePayload,
    pub written: Option<tokio::sync::oneshot::Sender<()>>,
    /// An attach's outcome: who is attached now and who has control, or why it failed.
    pub outcome: Option<tokio::sync::oneshot::Sender<Reply>>,
}

/// What the edge hands its writer: updates made, or a stored record the writer turns into
/// updates itself, entry by entry (so a long replay is neither built on the dispatch loop nor
/// held whole in memory).
pub enum EdgePayload {
    Updates(Vec<acp::SessionUpdate>),
    Replay(Box<Replay>),
    /// A client attaches: it is shown the session so far, then joins the others.
    Attach(Box<Attaching>),
    /// Updates for every attached client but one (a prompt, shown to those that did not
    /// send it).
    ToOthers {
        except: MemberId,
        updates: Vec<acp::SessionUpdate>,
    },
    /// Told once no turn runs (after everything queued before it is written).
    WhenIdle(tokio::sync::oneshot::Sender<()>),
}

/// A client attaching to a session, and how its replay is shaped.
pub struct Attaching {
    pub member: Member,
    /// Take control once attached.
    pub controller: bool,
    /// Shown the session so far (`historyPolicy: "full"`), or only what waits for an answer
    /// (`"pending_only"`, `"none"`: the open questions are asked of it either way).
    pub history: bool,
    /// The record was shown up to this entry already (it followed the session from another
    /// process): only what came after it.
    pub after: Option<EntryId>,
}

/// A record to show a client as it saw it live, built entry by entry by the session's writer
/// (never on the dispatch loop, never whole in memory): compaction summaries where they were
/// made when the client shows compactions, subagent cards when it shows subagents.
pub struct Replay {
    pub transcript: Transcript,
    pub compaction: bool,
    pub subagents: bool,
    /// The client that asked for it (a load): the others attached are not shown it again.
    pub to: Option<MemberId>,
}

/// What the client said it can do, from `initialize`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientCaps {
    pub read_text_file: bool,
    pub write_text_file: bool,
    pub terminal: bool,
    /// The client shows `notice` updates.
    pub notices: bool,
    /// The client shows `compaction_update`s.
    pub compaction: bool,
    /// The client shows forms (`elicitation/create` in form mode).
    pub elicitation_form: bool,
    /// The client sends the user to an address (`elicitation/create` in URL mode).
    pub elicitation_url: bool,
    /// The client shows subagents as sessions of their own.
    pub subagents: bool,
    /// The client takes plan operations (`plan_update`, `plan_removed`).
    pub plans: bool,
    /// The client shows boolean config options.
    pub booleans: bool,
    /// The client takes `quota_update`s (the quotas draft's opt-in, read from `initialize`
    /// as it came: see `quota::wants_quota`).
    pub quota: bool,
    /// The checkpoints the client intercepts (the tool-interception draft's opt-in, read
    /// from `initialize` as it came: see `interception::wanted`).
    pub interception: talaria_engine::Interception,
}

impl ClientCaps {
    /// What the engine hands to the client.
    pub fn delegation(self) -> Delegation {
        Delegation {
            read_files: self.read_text_file,
            write_files: self.write_text_file,
            terminal: self.terminal,
            interception: self.interception,
        }
    }

    pub fn from_initialize(caps: &acp::ClientCapabilities) -> Self {
        Self {
            read_text_file: caps.fs.read_text_file,
            write_text_file: caps.fs.write_text_file,
            terminal: caps.terminal,
            notices: caps.session.as_ref().is_some_and(|s| s.notices.is_some()),
            compaction: caps
                .session
                .as_ref()
                .is_some_and(|s| s.compaction.is_some()),
            elicitation_form: caps.elicitation.as_ref().is_some_and(|e| e.form.is_some()),
            elicitation_url: caps.elicitation.as_ref().is_some_and(|e| e.url.is_some()),
            subagents: caps.subagents.is_some(),
            plans: caps.plan.is_some(),
            booleans: caps
                .session
                .as_ref()
                .and_then(|s| s.config_options.as_ref())
                .is_some_and(|c| c.boolean.is_some()),
            quota: false,
            interception: talaria_engine::Interception::default(),
        }
    }
}

impl ClientCaps {
    /// What a session's assembly needs to know of the client.
    pub fn abilities(self) -> ClientAbilities {
        ClientAbilities {
            forms: self.elicitation_form,
            delegation: self.delegation(),
            subagents: self.subagents,
        }
    }
}

/// The snapshots of a connection's sessions, for `quota/read`.
#[derive(Default)]
pub struct QuotaBoard {
    snapshots: Mutex<Board>,
}

#[derive(Default)]
struct Board {
    by_session: HashMap<String, Value>,
    /// The newest snapshot of any session: what a read without a session gets.
    latest: Option<Value>,
}

impl QuotaBoard {
    pub fn publish(&self, session: &str, snapshot: &Value) {
        let mut board = lock(&self.snapshots);
        board
            .by_session
            .insert(session.to_string(), snapshot.clone());
        board.latest = Some(snapshot.clone());
    }

    /// The snapshot that applies to `session` (or, without one, the newest of any session),
    /// when one was reported.
    pub fn snapshot(&self, session: Option<&str>) -> Option<Value> {
        let board = lock(&self.snapshots);
        match session {
            Some(session) => board.by_session.get(session).cloned(),
            None => board.latest.clone(),
        }
    }

    /// Forgets a closed session's snapshot.
    pub fn forget(&self, session: &str) {
        lock(&self.snapshots).by_session.remove(session);
    }
}
