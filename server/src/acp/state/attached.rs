//! Who is attached to a session (`Audience`): its clients in the order they attached, the
//! one with control, the questions open now, and for each client what waits for it (the
//! delivery the session's writer follows, the catch-up of a client that fell behind). A
//! child of the leaf `state.rs`: it imports nothing of the wire room.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use talaria_protocol::Peer;
use talaria_util::lock;

use super::clients::{Followed, Member, MemberId};

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
    /// Whether client `id` follows this session where it was handed, and it was deleted
    /// there.
    pub fn follows_a_deleted(&self, id: MemberId) -> bool {
        lock(&self.attached)
            .followers
            .get(&id)
            .is_some_and(Followed::has_ended)
    }

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
