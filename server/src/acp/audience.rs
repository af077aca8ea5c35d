//! The clients attached to a session as the wire room serves them: what a client attaching
//! is shown (`show_so_far`: the record up to the running turn's prompt, then what that turn
//! has shown, kept by `TurnSoFar`), its joining (`join`: control if it asked, the open
//! questions asked of it), the `_meta` updates that tell every client who is attached and
//! who has control (`talaria/attachment`) and where another client's turn stands
//! (`talaria/turn`), a client leaving, and the refusal of an observer's prompt. The
//! handlers are in `attach.rs`.

use std::sync::Mutex;

use serde_json::{Value, json};
use talaria_protocol::{SerializedNotification, acp};
use talaria_record::EntryId;
use talaria_util::lock;

use super::state::{
    Agent, Attaching, Audience, EdgePayload, EdgeUpdates, Followed, Leaving, LiveSession, MemberId,
    Replay,
};

pub(super) const ATTACH_METHOD: &str = "_session/attach";
pub(super) const DETACH_METHOD: &str = "_session/detach";

/// What `initialize` advertises (`_meta.sessionAttach`).
pub(super) fn advertised() -> Value {
    json!({
        "attach": ATTACH_METHOD,
        "detach": DETACH_METHOD,
        "roles": ["controller", "observer"],
        "historyPolicies": ["full", "pending_only", "none"],
        "rosterMeta": ROSTER_KEY,
        "permissionResolvedMeta": super::questions::RESOLVED_KEY,
    })
}

/// The `_meta` key of the roster (`{clients: [{clientId, name?, role}], controller}`).
pub(super) const ROSTER_KEY: &str = "talaria/attachment";
/// The error an observer gets for what only the controller may do.
const NOT_THE_CONTROLLER: i32 = -32003;

/// What the running turn has shown so far (its updates, a message's chunks joined), for a
/// client attaching during it: the record holds the turn's prompt, not yet its answer.
#[derive(Default)]
pub struct TurnSoFar {
    running: Mutex<Option<Running>>,
    /// Told when the running turn ends (a session handed to another process waits for it).
    idle_waiters: Mutex<Vec<tokio::sync::oneshot::Sender<()>>>,
    /// Kept at all: no client can attach in a process that serves one (stdio).
    off: bool,
}

struct Running {
    prompt: EntryId,
    shown: Vec<acp::SessionUpdate>,
}

impl TurnSoFar {
    /// For a session no other client can attach to: nothing is kept.
    pub fn never() -> Self {
        Self {
            off: true,
            ..Self::default()
        }
    }

    /// Whether what the turn shows is kept.
    pub fn keeps(&self) -> bool {
        !self.off
    }

    /// A turn started with prompt entry `prompt`.
    pub fn started(&self, prompt: EntryId) {
        if self.off {
            return;
        }
        let mut running = lock(&self.running);
        if running.is_none() {
            *running = Some(Running {
                prompt,
                shown: Vec::new(),
            });
        }
    }

    pub fn ended(&self) {
        *lock(&self.running) = None;
        for waiter in std::mem::take(&mut *lock(&self.idle_waiters)) {
            let _ = waiter.send(());
        }
    }

    /// Tells `waiter` once no turn runs (now, when none does).
    pub fn when_idle(&self, waiter: tokio::sync::oneshot::Sender<()>) {
        let running = lock(&self.running);
        if running.is_none() {
            let _ = waiter.send(());
        } else {
            lock(&self.idle_waiters).push(waiter);
        }
    }

    /// Keeps `update` when a turn runs, joined to the chunk before it when it continues it.
    pub fn keep(&self, update: &acp::SessionUpdate) {
        if self.off {
            return;
        }
        let mut running = lock(&self.running);
        let Some(running) = running.as_mut() else {
            return;
        };
        if let Some(last) = running.shown.last_mut()
            && joined(last, update)
        {
            return;
        }
        running.shown.push(update.clone());
    }

    /// Whether a turn runs.
    pub fn is_running(&self) -> bool {
        lock(&self.running).is_some()
    }

    fn snapshot(&self) -> Option<(EntryId, Vec<acp::SessionUpdate>)> {
        lock(&self.running)
            .as_ref()
            .map(|r| (r.prompt, r.shown.clone()))
    }
}

/// Appends `next` to `last` when both are text chunks of the same kind and message.
fn joined(last: &mut acp::SessionUpdate, next: &acp::SessionUpdate) -> bool {
    use acp::SessionUpdate::{AgentMessageChunk, AgentThoughtChunk};
    let (kept, more) = match (last, next) {
        (AgentMessageChunk(kept), AgentMessageChunk(more))
        | (AgentThoughtChunk(kept), AgentThoughtChunk(more)) => (kept, more),
        _ => return false,
    };
    if kept.message_id != more.message_id || kept.meta.is_some() || more.meta.is_some() {
        return false;
    }
    match (&mut kept.content, &more.content) {
        (acp::ContentBlock::Text(kept), acp::ContentBlock::Text(more)) => {
            kept.text.push_str(&more.text);
            true
        }
        _ => false,
    }
}

/// What a client attaching is shown of the session so far: the record up to the running
/// turn's prompt, then what that turn has shown; each made into its message only as it is
/// sent (`catching_up.rs`), so no second copy of the session is held.
pub(super) struct SoFar {
    session_id: acp::SessionId,
    /// `None`: no history asked for.
    replay: Option<Replay>,
    after: Option<EntryId>,
    upto: Option<EntryId>,
    shown: Vec<acp::SessionUpdate>,
    plans: bool,
}

impl SoFar {
    pub(super) fn messages(&self) -> impl Iterator<Item = SerializedNotification> + '_ {
        let record = self
            .replay
            .iter()
            .flat_map(|replay| replay.entries_between(self.after, self.upto))
            .flatten();
        let shown = self.shown.iter().cloned();
        record.chain(shown).filter_map(|update| {
            let update = super::plan_updates::for_client(update, self.plans);
            let notification = acp::SessionNotification::new(self.session_id.clone(), update);
            SerializedNotification::new("session/update", &notification)
        })
    }
}

/// What `attaching`'s client is shown of the session so far: the record read now (what is
/// queued landed first) and what the running turn has shown.
pub(super) async fn so_far(
    session_id: &acp::SessionId,
    journal: Option<talaria_engine::Journal>,
    turn: &TurnSoFar,
    attaching: &Attaching,
) -> Result<SoFar, acp::Error> {
    let member = &attaching.member;
    let mut so_far = SoFar {
        session_id: session_id.clone(),
        replay: None,
        after: attaching.after,
        upto: None,
        shown: Vec::new(),
        plans: member.caps.plans,
    };
    if !attaching.history {
        return Ok(so_far);
    }
    let Some(journal) = journal else {
        return Err(talaria_protocol::errors::unavailable(
            "the session cannot be shown: the session store is not open",
        ));
    };
    let transcript = crate::sessions::record_of_open(journal, &session_id.0).await?;
    so_far.replay = Some(Replay {
        transcript,
        compaction: member.caps.compaction,
        subagents: member.caps.subagents,
        to: Some(member.id),
    });
    if let Some((prompt, shown)) = turn.snapshot() {
        so_far.upto = Some(prompt);
        so_far.shown = shown;
    }
    Ok(so_far)
}

/// `attaching`'s client joins the others, catching up (taking control when it asked to; it
/// is asked the open questions once caught up); the roster now. `None` when it is attaching
/// already.
pub(super) fn join(audience: &Audience, attaching: Attaching) -> Option<Value> {
    let Attaching {
        member, controller, ..
    } = attaching;
    if !audience.join_catching_up(member.clone()) {
        return None;
    }
    let before = if controller {
        audience.take_control(member.id).ok().flatten()
    } else {
        None
    };
    let mut roster = audience.roster();
    if let Some(before) = before {
        roster["previousController"] = format!("client-{before}").into();
    }
    Some(roster)
}

/// The `_meta` key of a turn's state, told to the clients that did not prompt it.
pub(super) const TURN_KEY: &str = "talaria/turn";

/// The update that tells the other clients where `asker`'s turn stands.
pub(super) fn turn_update(asker: MemberId, mut state: Value) -> acp::SessionUpdate {
    state["promptedBy"] = format!("client-{asker}").into();
    let mut meta = acp::Meta::new();
    meta.insert(TURN_KEY.into(), state);
    acp::SessionUpdate::SessionInfoUpdate(acp::SessionInfoUpdate::new().meta(meta))
}

/// Shows a prompt to the clients attached to `session` that did not send it (the one that
/// did shows its own), with the state of its turn.
pub(super) fn show_prompt(
    session: &LiveSession,
    (asker, peer): (MemberId, &talaria_protocol::Peer),
    prompt: &[acp::ContentBlock],
) {
    session.audience.prompted(asker, peer);
    if session.audience.members().len() < 2 {
        return;
    }
    let mut updates: Vec<acp::SessionUpdate> = prompt
        .iter()
        .map(|block| acp::SessionUpdate::UserMessageChunk(acp::ContentChunk::new(block.clone())))
        .collect();
    updates.push(turn_update(asker, json!({"state": "running"})));
    let _ = session.updates.send(EdgeUpdates {
        updates: EdgePayload::ToOthers {
            except: asker,
            updates,
        },
        written: None,
        outcome: None,
    });
}

/// The update that tells every client who is attached and who has control.
pub(super) fn roster_update(roster: Value) -> acp::SessionUpdate {
    let mut meta = acp::Meta::new();
    meta.insert(ROSTER_KEY.into(), roster);
    acp::SessionUpdate::SessionInfoUpdate(acp::SessionInfoUpdate::new().meta(meta))
}

/// This client leaves session `id` when others stay attached (they are told; control
/// passes on if it had it): `true`. `false` when it is the last one (the caller closes it).
pub(super) fn leave(agent: &mut Agent, id: &str) -> bool {
    let Some(session) = agent.sessions.get(id) else {
        return false;
    };
    if moved_away(session) {
        // Handed to another process: this client stops following it there.
        drop(session.audience.stop_following(agent.member));
        agent.sessions.remove(id);
        return true;
    }
    match session.audience.leave_unless_last(agent.member) {
        Leaving::Last => {
            agent.room.live().withdraw(id);
            return false;
        }
        Leaving::Left(Some(to)) => tracing::info!(session = id, client = to, "control passed on"),
        Leaving::Left(None) => {}
    }
    session.write_later(roster_update(session.audience.roster()));
    agent.sessions.remove(id);
    true
}

/// Whether `session` was handed to another process (closed here; its clients follow it
/// there).
pub(super) fn moved_away(session: &LiveSession) -> bool {
    session.audience.has_moved()
}

/// Session `id` as this client held it before it was handed to another process (it follows
/// it there): it leaves it, for its own session; its following.
pub(super) fn left_behind(agent: &mut Agent, id: &str) -> Option<Followed> {
    let session = agent.sessions.get(id).filter(|s| moved_away(s))?;
    let followed = session.audience.stop_following(agent.member);
    agent.sessions.remove(id);
    followed
}

/// This client is no longer attached to session `id` (it fell behind and was detached, or
/// left): it attaches again to be shown the session so far.
pub(super) fn no_longer_attached(id: &str) -> acp::Error {
    acp::Error::new(
        NOT_THE_CONTROLLER,
        format!(
            "this client is no longer attached to session {id} (it fell behind and was \
             detached): attach again with {ATTACH_METHOD}, which shows it the session so far"
        ),
    )
    .data(json!({"talaria": {"detached": true, "attachAgain": ATTACH_METHOD}}))
}

/// Refuses `session/delete` of a session other clients are attached to, whoever asks (its
/// controller, an observer, a client not attached): deleting it would pull it and its record
/// from under them. Attached counts a client whose attach is under way and a client of this
/// process following it where another process runs it. Also refused: a session this client
/// follows in another process, or one being handed to (or handed to) another process.
pub(super) fn refuse_delete_while_shared(agent: &Agent, id: &str) -> Result<(), acp::Error> {
    if agent.following.contains_key(id) && !agent.sessions.contains_key(id) {
        return Err(acp::Error::new(
            NOT_THE_CONTROLLER,
            format!(
                "session {id} runs in another process, where a client has it: close it \
                 there before deleting it"
            ),
        )
        .data(json!({"talaria": {"elsewhere": true}})));
    }
    if let Some(session) = agent.sessions.get(id)
        && (moved_away(session) || session.audience.is_moving())
    {
        return Err(acp::Error::new(
            NOT_THE_CONTROLLER,
            format!(
                "session {id} is being handed to, or runs in, another process: it is not \
                 deleted from here"
            ),
        )
        .data(json!({"talaria": {"elsewhere": true}})));
    }
    let audience = agent
        .sessions
        .get(id)
        .map(|session| session.audience.clone())
        .or_else(|| Some(agent.room.live().find::<LiveSession>(id)?.audience.clone()));
    let attached = audience.map_or(0, |audience| audience.others_than(agent.member));
    let others = attached + agent.room.live().marked_clients(id);
    if others == 0 {
        return Ok(());
    }
    Err(acp::Error::new(
        NOT_THE_CONTROLLER,
        format!(
            "session {id} is not deleted: {others} other client(s) are attached to it; it can \
             be deleted once no other client is (each closes it, or detaches with \
             {DETACH_METHOD})"
        ),
    )
    .data(json!({"talaria": {"othersAttached": others}})))
}

/// Refuses what only the controller of session `id` may do, when this client is attached
/// to it without control.
pub(super) fn only_the_controller(agent: &Agent, id: &str, what: &str) -> Result<(), acp::Error> {
    if agent.following.contains_key(id) && !agent.sessions.contains_key(id) {
        return Err(acp::Error::new(
            NOT_THE_CONTROLLER,
            format!(
                "{what}: this client follows session {id}, which runs in another process: a \
                 client of that process has control (close it there, then session/load it \
                 here to take it over)"
            ),
        )
        .data(json!({"talaria": {"mustTakeControl": true, "elsewhere": true}})));
    }
    let Some(session) = agent.sessions.get(id) else {
        return Ok(());
    };
    // Being handed over: its running turn may still be steered or cancelled, no new one
    // starts; once handed over, nothing is done here.
    let moving = session.audience.is_moving();
    let starts_work = what == "session/prompt" || what == super::run_command::METHOD;
    if moving && (session.audience.has_moved() || starts_work) {
        return Err(acp::Error::new(
            NOT_THE_CONTROLLER,
            format!(
                "{what}: session {id} is being handed to, or runs in, another process whose \
                 client asked for control: take it back with {ATTACH_METHOD} role \
                 \"controller\""
            ),
        )
        .data(json!({"talaria": {"mustTakeControl": true, "elsewhere": true}})));
    }
    if session.audience.is_catching_up(agent.member) {
        return Err(acp::Error::new(
            NOT_THE_CONTROLLER,
            format!(
                "{what}: this client is still being shown session {id} so far: wait for its \
                 {ATTACH_METHOD} answer"
            ),
        )
        .data(json!({"talaria": {"attaching": true}})));
    }
    if session.audience.is_controller(agent.member) {
        return Ok(());
    }
    if !session.audience.holds(agent.member) {
        return Err(no_longer_attached(id));
    }
    let holder = session
        .audience
        .controller()
        .map_or(Value::Null, |c| format!("client-{c}").into());
    Err(acp::Error::new(
        NOT_THE_CONTROLLER,
        format!(
            "{what}: this client observes session {id} and must take control first \
             ({ATTACH_METHOD} with role \"controller\")"
        ),
    )
    .data(json!({"talaria": {"mustTakeControl": true, "controller": holder}})))
}
